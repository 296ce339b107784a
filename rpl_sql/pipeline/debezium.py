"""The Debezium event source: MySQL connector change events into the events table, idempotently.

    >>> ingest_debezium_file("/tmp/wh", "cdc", "inventory.jsonl")     # doctest: +SKIP
    IngestReport(channel='cdc', landed=1042, ...)

Records are dicts or JSON text, with or without the Kafka Connect envelope: change events (c/u/d/r/t), schema
change events, and skipped noise (tombstones, heartbeats, transaction metadata). Idempotent by source
position: each stream (a table, or the schema change topic) keeps a high-water mark in the same Delta commit
as its rows, so a redelivery lands nothing twice. Mapping and limits: docs/design/README.md#rpl_sqlpipelinedebezium.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from rpl_sql.language.quoting import qualified
from rpl_sql.classify import classify
from rpl_sql.storage.delta import archive
from rpl_sql.pipeline.debezium_types import RowDecoder
from rpl_sql.pipeline.canonical_rows import Batch, tables_value
from rpl_sql.pipeline.writer import EventsWriter, IngestReport
from rpl_sql.pipeline.ingest_position import IngestError
from rpl_sql.filters.state import channel_key
from rpl_sql.errors import MySQLError
from rpl_sql.storage.store import DeltaStore

__all__ = ["ingest_debezium", "ingest_debezium_file", "DebeziumRecordError"]

_OPS = {"c": "write_rows", "r": "write_rows", "u": "update_rows", "d": "delete_rows"}
_SNAPSHOT_FLAGS = {"true", "first", "last", "first_in_data_collection", "last_in_data_collection", "incremental"}
DDL_STREAM = ""


class DebeziumRecordError(IngestError):
    """A record is not a Debezium MySQL change or schema change event."""


def _file_key(name: str) -> tuple:
    """Binlog file order: 'mysql-bin.000010' after 'mysql-bin.000009' (numeric suffix), else by name."""
    base, dot, num = (name or "").rpartition(".")
    return (base, int(num), "") if dot and num.isdigit() else (name or "", -1, name or "")


def _key(file: str, pos: int, row: int) -> tuple:
    return (_file_key(file), int(pos), int(row))


def _digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class _Mark:
    file: str
    pos: int
    row: int
    hashes: set

    @property
    def key(self) -> tuple:
        return _key(self.file, self.pos, self.row)


def _payload(record: dict | str | bytes | None) -> tuple[dict | None, dict | None]:
    """(the event, its Kafka Connect schema when the record carries the JSON envelope)."""
    if record is None:
        return None, None
    if isinstance(record, (str, bytes, bytearray)):
        text = record.strip()
        if not text:
            return None, None
        try:
            record = json.loads(text)
        except ValueError as e:
            raise DebeziumRecordError(f"not JSON: {str(text)[:80]!r}") from e
    if record is None:
        return None, None
    if not isinstance(record, dict):
        raise DebeziumRecordError(f"not a JSON object: {str(record)[:80]!r}")
    if "payload" in record and ("schema" in record or len(record) == 1):
        return record["payload"], record.get("schema")  # the Kafka Connect JSON envelope (schemas.enable=true)
    return record, None


def _is_snapshot(p: dict, src: dict) -> bool:
    flag = src.get("snapshot")
    return p.get("op") == "r" or flag is True or (isinstance(flag, str) and flag.lower() in _SNAPSHOT_FLAGS)


class DebeziumIngest:
    """An EventSource: Debezium records in, canonical rows and stream marks out, in atomic commits."""

    def __init__(self, warehouse: str, channel: str, records: Iterable[Any], batch_rows: int = 20_000):
        self.warehouse, self.channel, self.batch_rows = os.fspath(warehouse), channel_key(channel), batch_rows
        self.records = records
        self.report = IngestReport(self.channel)

    def run(self) -> IngestReport:
        records = self.records
        t0 = time.monotonic()
        ch = DeltaStore(self.warehouse).load().state.channel(self.channel)
        if ch is not None and ch.source_side_filters is not None:  # what they drop would land, and diverge
            raise MySQLError.of("ER_WRONG_ARGUMENTS", f"a Debezium feed of channel '{self.channel}': its source-side "
                                "filters (CHANGE REPLICATION SOURCE TO REPLICATE_*) are applied by the relay or the "
                                "binlog ingest only; set them in the connector's include and exclude lists and "
                                "clear them here with REPLICATE_DO_DB = () and so on")
        with EventsWriter(self.warehouse, self.channel) as w:
            self.writer = w
            self._load_marks(w)
            self.batch = Batch(self.channel, "debezium")
            self.group: list | None = None   # the open canonical row of a rows event: [key tuple, images, row]
            for rec in records:
                self.report.events_read += 1
                p, schema = _payload(rec)
                if p is None:
                    continue
                self._record(p, schema)
            self._flush()
        self.report.seconds = time.monotonic() - t0
        self.report.commits, self.report.bytes_written = w.commits, w.bytes_written
        return self.report

    # ---------------------------------------------------------------- marks

    def _load_marks(self, w: EventsWriter) -> None:
        self.marks: dict[str, _Mark] = {}
        self.snapshots: dict[tuple, int] = {}      # (db, table, file, pos) -> snapshot rows landed
        self.snap_seen: dict[tuple, set] = {}      # (db, table, file, pos) -> content hashes (loaded lazily)
        pos = w.position
        if pos is None:
            return
        m = pos.metadata
        if m.get("source") != "debezium":
            raise IngestError(f"channel {self.channel!r} was fed by {m.get('source')!r}, not Debezium")
        if "marks" not in m:
            raise IngestError(f"channel {self.channel!r}: the commit with the Debezium marks is gone from the log")
        for stream, (file, p, row, hashes) in json.loads(m["marks"]).items():
            self.marks[stream] = _Mark(file, int(p), int(row), set(hashes))
        for db, table, file, p, n in json.loads(m.get("snapshots") or "[]"):
            self.snapshots[(db, table, file, int(p))] = int(n)

    def _snapshot_hashes(self, sk: tuple) -> set:
        """Content hashes of the snapshot rows already landed for (db, table, file, pos): read back once."""
        seen = self.snap_seen.get(sk)
        if seen is None:
            seen = set()
            if self.snapshots.get(sk):
                import pyarrow.dataset as ds

                db, table, file, pos = sk
                chan = ds.field("channel").is_null() if self.channel == "" else ds.field("channel") == self.channel
                flt = (chan & (ds.field("table_name") == table) & (ds.field("db_name") == db)
                       & (ds.field("binlog_file") == file) & (ds.field("binlog_pos") == pos)
                       & (ds.field("source") == "debezium") & (ds.field("event_type") == "write_rows"))
                # no thread pool: its threads reading through a Python filesystem abort the process at exit
                dataset = archive.open_table(self.writer.path).to_pyarrow_dataset()
                t = dataset.to_table(filter=flt, columns=["rows"], use_threads=False)
                for text in t.column("rows").to_pylist():
                    for image in json.loads(text):
                        seen.add(_digest(image.get("after")))
            self.snap_seen[sk] = seen
        return seen

    # ---------------------------------------------------------------- records

    def _record(self, p: dict, schema: dict | None = None) -> None:
        src = p.get("source") or {}
        if "ddl" in p:
            return self._ddl(p, src)
        op = p.get("op")
        if op is None:
            return  # heartbeat, transaction metadata (status BEGIN/END), ...
        if op not in _OPS and op != "t":
            raise DebeziumRecordError(f"unknown op {op!r}")
        db, table = src.get("db"), src.get("table")
        if not db or not table:
            raise DebeziumRecordError(f"op {op!r} record without source.db/source.table")
        file, pos, row = src.get("file") or "", int(src.get("pos") or 0), int(src.get("row") or 0)
        us = int(src.get("ts_ms") or p.get("ts_ms") or 0) * 1000
        gtid = src.get("gtid") or None
        before, after = p.get("before"), p.get("after")
        decoder = RowDecoder.of(schema) if op != "t" else None
        images, columns = (before, after), None   # as landed: the canonical values when the schema says
        if decoder is not None:
            images, columns = (decoder.image(before), decoder.image(after)), decoder.columns_json
        etype = _OPS.get(op)
        g = self.group
        snapshot = op != "t" and _is_snapshot(p, src)
        continues = (not snapshot and g is not None and g[0] == (file, pos, db, table, etype) and row == g[2] + 1)
        self._maybe_flush(continues)
        if op == "t":
            if not self._admit(f"{db}.{table}", file, pos, row, _digest("t")):
                return
            stmt = f"TRUNCATE TABLE {qualified(db, table)}"
            info = classify(stmt)
            self._land(gtid, file, pos, "query", info.command, info.kind, db, None, None,
                       tables_value(info.tables), stmt, None, us)
            return
        if snapshot:
            sk = (db, table, file, pos)
            h = _digest(images[1])  # compared with the landed images read back
            seen = self._snapshot_hashes(sk)
            if h in seen:
                self.report.skipped += 1
                return
            seen.add(h)
            self.snapshots[sk] = self.snapshots.get(sk, 0) + 1
            self._land(gtid, file, pos, "write_rows", None, None, None, db, table, None, None,
                       [{"before": None, "after": images[1]}], us, columns=columns)
            return
        if not self._admit(f"{db}.{table}", file, pos, row, _digest(op, before, after)):
            self.report.skipped += 1
            return
        if continues:
            g[1].append({"before": images[0], "after": images[1]})
            g[2] = row
            return
        self._land(gtid, file, pos, etype, None, None, None, db, table, None, None,
                   [{"before": images[0], "after": images[1]}], us, group=(file, pos, db, table, etype), row=row,
                   columns=columns)

    def _ddl(self, p: dict, src: dict) -> None:
        file, pos, row = src.get("file") or "", int(src.get("pos") or 0), int(src.get("row") or 0)
        ddl = p.get("ddl") or ""
        dbname = p.get("databaseName") or src.get("db") or ""
        self._maybe_flush(False)
        if not self._admit(DDL_STREAM, file, pos, row, _digest(dbname, ddl)):
            self.report.skipped += 1
            return
        info = classify(ddl)
        default_db = info.database if info.kind == "DATABASE_DDL" and info.database is not None else dbname
        us = int(src.get("ts_ms") or p.get("ts_ms") or 0) * 1000
        self._land(src.get("gtid") or None, file, pos, "query", info.command, info.kind, default_db, None, None,
                   tables_value(info.tables), ddl, None, us)

    def _maybe_flush(self, continues: bool) -> None:
        """Commit a full batch before a record that starts a new canonical row (never inside a rows event,
        and always before the record's mark moves: a commit's marks cover exactly its rows)."""
        if not continues and len(self.batch) >= self.batch_rows:
            self._flush()

    def _admit(self, stream: str, file: str, pos: int, row: int, h: str) -> bool:
        """Advance the stream's mark; False when the record was landed before (at or below the mark)."""
        m = self.marks.get(stream)
        key = _key(file, pos, row)
        if m is not None:
            if key < m.key or (key == m.key and h in m.hashes):
                return False
            if key == m.key:
                m.hashes.add(h)
                return True
        self.marks[stream] = _Mark(file, pos, row, {h})
        return True

    def _land(self, gtid, file, pos, etype, command, kind, default_db, db, table, tables, stmt, images, us,
              group: tuple | None = None, row: int = 0, columns: str | None = None) -> None:
        """Add a canonical row; a row event's images stay open (`self.group`) for the next rows of its event."""
        self._close_group()
        self.batch.add(gtid, file, pos, etype, command, kind, default_db, db, table, tables, stmt, None, us,
                       columns)
        if images is not None:
            self.group = [group, images, row, len(self.batch) - 1]
        self.last = (file, pos, gtid)

    def _close_group(self) -> None:
        g, self.group = self.group, None
        if g is not None:
            self.batch.cols["rows"][g[3]] = json.dumps(g[1], ensure_ascii=False, separators=(",", ":"),
                                                       default=str)

    def _flush(self) -> None:
        b = self.batch
        if not len(b):
            return
        self._close_group()
        last = self.writer.last_seq
        marks = {s: [m.file, m.pos, m.row, sorted(m.hashes)] for s, m in sorted(self.marks.items())}
        snaps = [[db, t, f, p, n] for (db, t, f, p), n in sorted(self.snapshots.items())]
        file, pos, gtid = getattr(self, "last", ("", 0, None))
        n = len(b)
        self.writer.commit(b.to_table(last + 1), {
            "source": "debezium", "marks": json.dumps(marks, separators=(",", ":"), ensure_ascii=False),
            "snapshots": json.dumps(snaps, separators=(",", ":"), ensure_ascii=False),
            "binlog_file": file, "binlog_pos": str(pos), "gtid": gtid or "", "filter_at_source": "false",
            "dropped": ""})
        r = self.report
        r.first_seq = r.first_seq or last + 1
        r.last_seq = self.writer.last_seq
        r.landed += n
        r.end, r.gtid = (file, pos), gtid
        b.clear()


def ingest_debezium(warehouse: str | os.PathLike, channel: str, records: Iterable[dict | str | bytes | None], *,
                    batch_rows: int = 20_000) -> IngestReport:
    """Land Debezium MySQL change events for `channel`; records already landed are skipped.

    `records` are Debezium values (dicts or JSON text, with or without the schema envelope). Records of one
    table must come in the connector's order (a topic's order); streams may interleave freely. Commits every
    `batch_rows` rows; each commit carries the stream marks, so an interrupted call can simply be repeated.
    """
    return DebeziumIngest(os.fspath(warehouse), channel, records, batch_rows).run()


def _lines(paths: Iterable[str | os.PathLike]) -> Iterator[str]:
    """The non-blank lines of the files in order; `-` is standard input."""
    for path in paths:
        if path == "-":
            yield from (line for line in sys.stdin if line.strip())
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield line


def ingest_debezium_file(warehouse: str | os.PathLike, channel: str,
                         path: str | os.PathLike | Iterable[str | os.PathLike], *,
                         batch_rows: int = 20_000) -> IngestReport:
    """`ingest_debezium` over JSON-lines file(s): one Debezium record per line (e.g. a topic dump); `-` reads
    standard input."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    return ingest_debezium(warehouse, channel, _lines(paths), batch_rows=batch_rows)
