"""The one way rpl_sql commits to a Delta table (delta-rs): namespaced metadata, app transactions, no cleanup.

Every rpl_sql table keeps its whole log (the history and the positions are read from it), so no commit runs
delta-rs' expired-log cleanup: commits older than `delta.logRetentionDuration` (ten minutes) move out of
`_delta_log` instead (storage/delta/archive.py). Each caller says whether its commits checkpoint and how often they
retry.
A removed file's tombstone stays in the checkpoints for ten minutes only: the service removes a file or more
per batch, and the default week made every checkpoint grow with the run. `rpl-sql upkeep --keep-days`
finds removals in the whole log instead.
An app transaction (`app_id(role, channel)`, version = the writer's last sequence number) makes a writer's
progress part of the same atomic commit as its data.
"""
from __future__ import annotations

from typing import Any

from deltalake import CommitProperties, DeltaTable, PostCommitHookProperties, Transaction, write_deltalake

META_PREFIX = "rpl_sql."  # every key rpl_sql puts in commitInfo; delta-rs owns 'operation', 'timestamp', ...
TABLE_CONFIG = {"delta.enableExpiredLogCleanup": "false",  # of every table rpl_sql creates
                "delta.logRetentionDuration": "interval 10 minutes",
                "delta.deletedFileRetentionDuration": "interval 10 minutes"}
# as written by earlier releases, so existing tables keep resuming where they were
_APP_PREFIXES = {"ingest": "rpl_sql.ingest.", "apply": "rpl_sql.apply/", "replica": "rpl_sql.replica/"}


def app_id(role: str, channel: str) -> str:
    """The app transaction id of `channel`'s writer in `role` ('ingest': the events table, 'apply': the applied
    table, 'replica': the replica tables and their catalog)."""
    return _APP_PREFIXES[role] + channel


def properties(metadata: dict[str, str], app: tuple[str, int] | None = None, retries: int | None = None,
               checkpoint: bool = False) -> dict[str, Any]:
    """The commit_properties and post_commithook_properties keyword arguments of any delta-rs operation."""
    bad = [k for k in metadata if not k.startswith(META_PREFIX)]
    if bad:
        raise ValueError(f"commit metadata keys must start with {META_PREFIX!r}: {bad}")
    kw: dict[str, Any] = {"custom_metadata": metadata}
    if app is not None:
        kw["app_transactions"] = [Transaction(*app)]
    if retries is not None:
        kw["max_commit_retries"] = retries
    return {"commit_properties": CommitProperties(**kw),
            "post_commithook_properties": PostCommitHookProperties(create_checkpoint=checkpoint,
                                                                   cleanup_expired_logs=False)}


def write(target: str | DeltaTable, data: Any, *, mode: str, metadata: dict[str, str],
          app: tuple[str, int] | None = None, retries: int | None = None, checkpoint: bool = False,
          partition_by: list[str] | None = None, create: bool = False, predicate: str | None = None,
          schema_mode: str | None = None, compression: str | None = None,
          configuration: dict[str, str] | None = None, delta_encoded: tuple[str, ...] = ()) -> None:
    """write_deltalake with rpl_sql's commit properties; `create` makes a new table that keeps its log (with
    `configuration` besides rpl_sql's own);
    `predicate` (overwrite) replaces just the rows it matches; `schema_mode` 'overwrite' lets it change columns;
    `compression` a Parquet codec other than delta-rs' default (snappy); `delta_encoded`: `writer_properties`."""
    extra: dict[str, Any] = {"schema_mode": schema_mode} if schema_mode else {}
    if compression or delta_encoded:
        extra["writer_properties"] = writer_properties(delta_encoded, compression)
    write_deltalake(target, data, mode=mode, partition_by=partition_by,
                    configuration={**TABLE_CONFIG, **(configuration or {})} if create else None, predicate=predicate,
                    **properties(metadata, app, retries, checkpoint), **extra)


def writer_properties(delta_encoded: tuple[str, ...] = (), compression: str | None = None):
    """delta-rs' Parquet settings with the integer columns `delta_encoded` (unique or nearly: seqs, positions,
    times) delta-encoded without a dictionary: by default every column gets one, and for the events table's
    seq, binlog_pos and event_time that made the files 44% larger and the write 10-25% slower
    (docs/benchmarks.md, the applier)."""
    from deltalake import ColumnProperties, WriterProperties

    return WriterProperties(compression=compression or "SNAPPY", column_properties={
        c: ColumnProperties(dictionary_enabled=False, encoding="DELTA_BINARY_PACKED") for c in delta_encoded} or None)


def add_missing_columns(dt: DeltaTable, schema: Any) -> bool:
    """Add the (nullable) fields of the pyarrow `schema` that `dt` lacks, in one metadata-only commit: tables
    written by an earlier release read NULL there. Returns whether the table changed."""
    from deltalake import Field

    have = set(dt.schema().to_arrow().names)
    missing = [Field.from_arrow(f) for f in schema if f.name not in have]
    if not missing:
        return False
    dt.alter.add_columns(missing, **properties({"rpl_sql.schema": "add " + ",".join(f.name for f in missing)}))
    return True


def add_files(dt: DeltaTable, actions: list, *, schema: Any, metadata: dict[str, str],
              app: tuple[str, int] | None = None, retries: int | None = None, checkpoint: bool = False) -> None:
    """Commit data files written by someone else (Spark) to `dt` in one append, with rpl_sql's properties."""
    dt.create_write_transaction(actions, mode="append", schema=schema,
                                **properties(metadata, app, retries, checkpoint))
