"""A decided batch's applied events written as files for the applied table's commit, by the run's engine:
pyarrow in this process (`arrow_write`) or the Spark session's executors (`spark_write`)."""
from __future__ import annotations

import hashlib
import os
import uuid
from typing import Any, Callable, Sequence

from rpl_sql.pipeline.applier import spark_write
from rpl_sql.pipeline.applier.arrow_write import ReadAhead, add_actions, filesystem, write_applied
from rpl_sql.pipeline.applier.shapes import DATA_DIR, AppliedShapes
from rpl_sql.pipeline.applier.verdicts import Verdicts
from rpl_sql.pipeline.summary import Summary
from rpl_sql.server.applier_state import ApplyError, BatchRecord
from rpl_sql.spark.deltaread import DeltaFile


class BatchFiles:
    """Who writes a batch's files, and where (`<applied table>/data/<channel hash>/<end seq>-<uuid>/`).

    The driver prepares the arrow engine's part while the write stage writes the batch before: the batch's
    first files are read ahead while it is decided, when nothing is being written (`read_ahead`), and its
    verdicts are built before it is handed over (`verdicts`), so the write stage's threads only write."""

    def __init__(self, applied: str, engine: str, spark: Callable[[], Any]):
        self.applied, self.engine, self._spark = applied, engine, spark
        self.threads = min(8, os.cpu_count() or 2)  # the arrow engine's write threads

    def read_ahead(self, files: Sequence[DeltaFile], lo: int, hi: int | None, idle: bool) -> ReadAhead | None:
        """The arrow engine's read-ahead of the batch's files, if the write stage is `idle`."""
        return ReadAhead(files, lo, hi, self.threads) if self.engine == "arrow" and idle else None

    def verdicts(self, applied: AppliedShapes, rollups: Sequence[Summary], rec: BatchRecord) -> Verdicts | None:
        """The arrow engine's verdicts for the batch; None for the spark engine, or when it applies nothing."""
        if self.engine != "arrow" or not rec.applied:
            return None
        return Verdicts(applied, rollups, rec.start, rec.end, rec.channel)

    def write(self, rec: BatchRecord, files: Sequence[DeltaFile], applied: AppliedShapes, found: Verdicts | None,
              ahead: ReadAhead | None, events: Callable[[], Any]) -> list:
        """The batch's files written (the spark engine's from `events()`, the batch's DataFrame); their add actions."""
        if self.engine != "arrow":
            rel_dir, target = self._target(rec)
            return spark_write.write_applied(self._spark(), events(), applied, rec, rel_dir, target)
        try:
            if found is None:
                return []
            rel_dir, target = self._target(rec)
            fs, base = filesystem(target)
            try:
                rows = write_applied(files, found, base, fs, self.threads, ahead)
            except ApplyError:
                fs.delete_dir(base)
                raise
        finally:
            if ahead is not None:
                ahead.close()
        actions, written = add_actions(target, rel_dir, rec.channel)
        if rows != rec.applied or written != rows:
            fs.delete_dir(base)
            raise ApplyError(f"wrote {written} applied events, expected {rec.applied} (batch {rec.start + 1}.."
                             f"{rec.end}); nothing committed", rec.channel)
        return actions

    def _target(self, rec: BatchRecord) -> tuple[str, str]:
        """(directory relative to the applied table, its full path) for a batch's new files."""
        hashed = hashlib.sha1(rec.channel.encode("utf-8")).hexdigest()[:12]
        rel_dir = f"{DATA_DIR}/{hashed}/{rec.end:020d}-{uuid.uuid4().hex[:12]}"
        return rel_dir, f"{self.applied.rstrip('/')}/{rel_dir}"
