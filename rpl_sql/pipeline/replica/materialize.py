"""The replica tables: a channel's applied events, in source order, made into typed Delta tables.

    >>> ReplicaTables("/data/wh", "a").catch_up()          # doctest: +SKIP
    MaterializeReport(channel='a', events=1200, rows_changed=3100, tables=4, ddl=2)

Reads the applied events after the catalog's position (`catalog.Catalog.seq`) up to the applier's, then per
table merges its row changes (`merge.apply_changes`) and in between applies DDL to the catalog and the
tables, exactly where it came in the stream. Every table commit and every catalog commit carries the seq it
reflects, so a crash at any point is completed on the next run without applying a change twice: an event is
skipped for a table whose own position is already past it.

Row events name their table after REPLICATE_REWRITE_DB (the applier's `applied_db`). Statements follow
MySQL: unqualified table names resolve to the rewritten default database, qualified ones are taken as
written, CREATE/DROP DATABASE act on the database the statement names. A row event for a table the replica
does not have creates it from the event's table map (a MySQL replica would stop with error 1146; the table
map defines the table exactly); CREATE TABLE in a database the replica never received stops with 1049, as
on MySQL (REPLICATE_REWRITE_DB targets count as existing). Statement-format DML cannot be re-executed
here: it stops the channel (see `StatementDMLError`).
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from rpl_sql.server.applier_state import Stop
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta.scan import read_range
from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import TRANSACTION_CONTROL
from rpl_sql.pipeline.events import ROW_EVENT_TYPES, applied_path
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica.backfill import Backfills, follow_changes, unfollowed_change
from rpl_sql.pipeline.replica.table_statements import TableStatements, in_snapshot, skip_advice
from rpl_sql.storage.replica_catalog import BACKFILLING, UNREPLICATED, Catalog, TableEntry
from rpl_sql.pipeline.replica.merge import Changes, apply_changes, create, reshape, table_seq
from rpl_sql.filters.rules import FilterType, fold
from rpl_sql.filters.state import ServerState, channel_key
from rpl_sql.storage.store import DeltaStore

log = logging.getLogger(__name__)

DML_COMMANDS = frozenset({"INSERT", "INSERT_SELECT", "UPDATE", "UPDATE_MULTI", "DELETE", "DELETE_MULTI", "REPLACE",
                          "REPLACE_SELECT", "LOAD"})
_TEMPORARY = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:CREATE|DROP)\s+TEMPORARY\b", re.I | re.S)
_READ_COLUMNS = ["seq", "event_type", "command", "statement_kind", "default_db", "db_name", "table_name", "tables",
                 "statement", "rows", "applied_db", "columns", "binlog_file", "binlog_pos", "event_time"]


class StatementDMLError(MySQLError):
    """A statement-format DML event would change replica tables: it cannot be re-executed faithfully."""


@dataclass
class MaterializeReport:
    channel: str
    events: int = 0          # applied events read
    rows_changed: int = 0    # rows inserted, updated or deleted in the replica tables
    tables: int = 0          # table merges committed
    ddl: int = 0             # DDL statements applied


class ReplicaTables(TableStatements):
    """One channel's replica tables; `catch_up()` brings them to the applier's position.

    About 290 lines: a catch-up (read the applied events, replay each table's share in source order, one commit
    per table, then the catalog's) shares the open tables, the catalog and the report across its steps; the DDL
    it follows is `table_statements`, the merges `merge`, a filter change `backfill`."""

    def __init__(self, warehouse: str | os.PathLike, channel: str, *, lctn: int = 0, exec_mode: str = "STRICT",
                 backfills: Backfills | None = None):
        """`backfills`: the replica service's, which copy the tables a filter change newly applies (without
        them a filter change is not followed, and a table being backfilled stops the SQL thread)."""
        self.warehouse, self.channel = os.fspath(warehouse), channel_key(channel)
        self.backfills = backfills
        self.lctn = lctn
        if exec_mode.upper() not in ("STRICT", "IDEMPOTENT"):
            raise ValueError("exec_mode must be STRICT or IDEMPOTENT")
        self.strict = exec_mode.upper() == "STRICT"
        # Kept between runs while they succeed (this process is the channel's only writer of its replica):
        # the catalog, each table's merged seq, and the seq through which everything is materialized.
        self.cat: Catalog | None = None
        self.table_seqs: dict[str, int] = {}
        self.done_through = -1
        self.open: dict[str, DeltaTable] = {}  # tables merged into since the last DDL (dropped at any DDL)

    # ------------------------------------------------------------ reading

    def _events(self, after: int, through: int | None) -> pa.Table:
        path = applied_path(self.warehouse)
        try:
            dt = archive.open_table(path)
        except TableNotFoundError:
            return pa.table({c: [] for c in _READ_COLUMNS})
        schema = pa.schema(dt.schema().to_arrow())
        cols = [c for c in _READ_COLUMNS if c in schema.names]
        chan = (ds.field("channel") == self.channel) if self.channel else \
            (ds.field("channel").is_null() | (ds.field("channel") == ""))
        t = read_range(dt, path, schema, {}, "seq", after, through, columns=cols, where=chan)
        return t.sort_by("seq")

    # ------------------------------------------------------------ the run

    def catch_up(self, through: int | None = None, *, handed: tuple[int, pa.Table] | None = None,
                 state: ServerState | None = None, version: int | None = None) -> MaterializeReport:
        """Apply the applied events after the catalog's position (through `through`, default all).

        `handed` = (seq before it, the applier's batch as committed to the applied table): used instead of
        reading the table back when everything through that seq is already materialized. `state`: the
        state the caller just read (for the rewrite targets)."""
        try:
            return self._catch_up(through, handed, state, version)
        except BaseException:
            self.cat, self.table_seqs, self.done_through = None, {}, -1  # read everything again next time
            self.open.clear()
            raise

    def _catch_up(self, through: int | None, handed: tuple[int, pa.Table] | None,
                  state: ServerState | None, version: int | None) -> MaterializeReport:
        self.report = MaterializeReport(self.channel)
        if self.cat is None:
            self.cat = Catalog.load(self.warehouse, self.channel, self.lctn)
            self.done_through = self.cat.seq
        if state is None:
            snap = DeltaStore(self.warehouse).load()
            state, version = snap.state, snap.version
        ch = state.channel(self.channel)
        if ch is not None:  # the tables follow the filters the batch was decided with, or stop
            follow_changes(self, ch, state.matching, version) if self.backfills is not None else \
                unfollowed_change(self, ch)
        # REPLICATE_REWRITE_DB targets exist on the replica: on a MySQL replica the user creates them
        self.rewrite_targets = {self.cat.fold(dst) for _, dst in ch.filters.values(FilterType.REWRITE_DB)} \
            if ch is not None else set()
        if handed is not None and handed[0] == self.done_through:
            events = handed[1].select(_READ_COLUMNS)
        elif handed is not None:  # the batch is not in the applied table yet (the tables go first)
            lo, rows = handed
            rows = rows.select(_READ_COLUMNS).filter(pc.field("seq") > self.cat.seq)
            before = self._events(self.cat.seq, lo) if self.cat.seq < lo else None
            if before is not None and before.num_rows:
                rows = pa.concat_tables([before.select(_READ_COLUMNS).cast(rows.schema), rows])
            events = rows
        else:
            events = self._events(self.cat.seq, through)
        if events.num_rows == 0:
            if through is not None:
                self.done_through = max(self.done_through, through)
            return self.report
        last = self.apply_events(events.to_pylist(), self.cat.seq)
        self.cat.commit(last)
        self.done_through = last if through is None else max(last, through)
        return self.report

    def apply_events(self, events: list[dict], last: int) -> int:
        """Apply applied events in order to the replica tables; the seq of the last (`last` when none)."""
        self.pending: dict[tuple[str, str], Changes] = {}
        seq = last
        try:
            for ev in events:
                self.report.events += 1
                seq = ev["seq"]
                if ev["event_type"] in ROW_EVENT_TYPES:
                    self._row_event(ev)
                elif ev["event_type"] == "query":
                    self._query(ev)
                last = seq
            self._flush_all()
        except MySQLError as e:  # the event that failed: the SQL thread stops before its transaction
            if getattr(e, "seq", None) is None:
                e.seq = seq
            raise
        return last

    def events_between(self, after: int, through: int | None) -> list[dict]:
        """The channel's applied events after seq `after` through `through`, in order."""
        return self._events(after, through).select(_READ_COLUMNS).to_pylist()

    def forget_table(self, path: str) -> None:
        """Drop what this object keeps of a table's data at `path` (a backfill replaced it)."""
        self.table_seqs.pop(path, None)
        self.open.pop(path, None)

    # ------------------------------------------------------------ rows

    def _table_done(self, entry: TableEntry) -> int:
        path = self.cat.data_path(entry)
        if path not in self.table_seqs:
            self.table_seqs[path] = table_seq(path, self.channel)
        return self.table_seqs[path]

    def _row_event(self, ev: dict) -> None:
        db = ev["applied_db"] if ev["applied_db"] is not None else ev["db_name"]
        name = ev["table_name"]
        db, name = fold(db, self.lctn), fold(name, self.lctn)
        cols = json.loads(ev["columns"]) if ev.get("columns") else None
        images = json.loads(ev["rows"] or "[]")
        if cols is None:  # landed without a table map (Debezium, or before rpl_sql recorded table maps)
            cols = [{"name": k, "type": "text"} for k in _image_names(images)]
        entry = self.cat.table(db, name)
        if entry is not None and entry.state is not None:
            if entry.state == BACKFILLING and self.backfills is not None:
                return  # held: replayed onto the copy once it is done
            raise _copy_unfinished(entry, self.channel)
        if entry is not None and in_snapshot(entry, ev):
            return
        if entry is not None:
            cols = C.settle(cols, entry.columns)
        if entry is None:
            entry = self.cat.add_table(db, name, cols)
            log.info("channel %r: %s.%s created from its table map", self.channel, db, name)
        elif entry.columns is None or not C.same_shape(entry.columns, cols):
            self._flush(entry)
            entry = self._evolve(entry, cols, ev["seq"])
        elif [bool(c.get("pk")) for c in entry.columns] != [bool(c.get("pk")) for c in cols] and \
                any(c.get("pk") for c in cols):
            self._flush(entry)
            entry = self.cat.set_columns(entry, cols)
        if ev["seq"] <= self._table_done(entry):
            return
        key = self.cat.key(entry.db, entry.name)
        ch = self.pending.get(key)
        if ch is None:
            ch = self.pending[key] = Changes(entry.columns)
        ch.add(ev["seq"], ev["event_type"], images, lenient=self._in_copy_window(entry, ev))

    def _in_copy_window(self, entry: TableEntry, ev: dict) -> bool:
        """The event ran while a paged copy read the table (see TableEntry.exact_after); the first event past
        that window ends it for good."""
        if entry.exact_after is None or ev.get("binlog_file") is None or ev.get("binlog_pos") is None:
            return False
        if (ev["binlog_file"], int(ev["binlog_pos"])) <= entry.exact_after:
            return True
        self.cat.tables[self.cat.key(entry.db, entry.name)] = replace(entry, exact_after=None)
        return False

    def _evolve(self, entry: TableEntry, cols: list[dict], seq: int) -> TableEntry:
        """The table map differs from what the replica holds (an ALTER it could not read, or none): take it."""
        path = self.cat.data_path(entry)
        if seq > self._table_done(entry):
            renames = {}
            if entry.columns is not None and len(entry.columns) == len(cols):
                renames = {a["name"]: b["name"] for a, b in zip(entry.columns, cols) if a["name"] != b["name"]}
            self.open.pop(path, None)
            reshape(path, entry.columns, cols, self.channel, seq - 1, renames=renames)
            self.table_seqs[path] = seq - 1
        return self.cat.set_columns(entry, cols)

    def _flush(self, entry: TableEntry) -> None:
        key = self.cat.key(entry.db, entry.name)
        ch = self.pending.pop(key, None)
        if ch is None or not len(ch):
            return
        path = self.cat.data_path(entry)
        dt = self.open.get(path)
        if dt is None and entry.columns is not None:
            if not DeltaTable.is_deltatable(path):
                create(path, entry.columns, self.channel, 0)
            dt = self.open[path] = archive.open_table(path)
        label = f"{entry.db}.{entry.name}"
        try:
            n = apply_changes(path, ch, self.channel, strict=self.strict, table_label=label, table=dt)
        except MySQLError:
            self.pending.clear()
            raise
        self.table_seqs[path] = ch.last_seq
        self.report.rows_changed += n
        self.report.tables += 1

    def _flush_all(self) -> None:
        for key in list(self.pending):
            entry = self.cat.tables.get(key)
            if entry is not None:
                self._flush(entry)
        self.pending.clear()

    # ------------------------------------------------------------ statements

    def resolve(self, db: str | None, name: str, ev: dict) -> tuple[str, str]:
        d = db if db is not None else (ev["applied_db"] if ev["applied_db"] is not None else ev["default_db"])
        if d is None:
            raise MySQLError(1046, "3D000", "ER_NO_DB_ERROR",
                             f"No database selected (seq {ev['seq']}: {ev['statement'][:200]})")
        return fold(d, self.lctn), fold(name, self.lctn)

    def _query(self, ev: dict) -> None:
        cmd = ev["command"]
        if cmd in TRANSACTION_CONTROL or cmd in ("XA_START", "XA_END", "XA_COMMIT", "XA_ROLLBACK", "XA_PREPARE",
                                                 "SET_OPTION"):
            return
        if cmd in DML_COMMANDS:
            self._statement_dml(ev)
            return
        handler = {"CREATE_TABLE": self._create_table, "DROP_TABLE": self._drop_table,
                   "RENAME_TABLE": self._rename_table, "TRUNCATE": self._truncate, "ALTER_TABLE": self._alter_table,
                   "CREATE_DB": self._create_db, "DROP_DB": self._drop_db}.get(cmd)
        if handler is None:
            return  # indexes, views, triggers, grants: no effect on the replica tables' rows or columns
        if _TEMPORARY.match(ev["statement"] or ""):
            return
        if cmd != "CREATE_DB" and cmd != "DROP_DB" and self._snapshotted(ev):
            return  # every table it names was copied by a snapshot taken after it
        self._flush_all()
        self.open.clear()  # DDL creates, rewrites, renames and drops tables by path
        handler(ev)
        self.report.ddl += 1
        self.cat.commit(ev["seq"])

    def _snapshotted(self, ev: dict) -> bool:
        refs = ev["tables"] or []
        entries = [self.cat.table(*self.resolve(t["db"], t["name"], ev)) for t in refs]
        held = [e for e in entries if e is not None and e.state is not None]
        if held and self.backfills is not None and len(held) == len(entries) and \
                all(e.state == BACKFILLING for e in held):
            return True  # a statement on tables being backfilled: held, replayed onto their copies
        if held:
            raise _copy_unfinished(held[0], self.channel)
        return bool(entries) and all(e is not None and in_snapshot(e, ev) for e in entries)

    def _statement_dml(self, ev: dict) -> None:
        held = self._touched(ev, set())
        if not held:
            return  # touches no replica table (e.g. a temporary one): nothing to diverge
        self._flush_all()
        self.cat.commit(ev["seq"] - 1)
        raise statement_dml_error(ev, held, self.channel)

    def _touched(self, ev: dict, created: set) -> list[tuple[str, str]]:
        """The replica tables (or tables `created` earlier in the batch) a DML statement updates."""
        tables = [self.resolve(t["db"], t["name"], ev) for t in (ev["tables"] or []) if t.get("updating")]
        return [t for t in tables if self.cat.table(*t) is not None or self.cat.key(*t) in created]

    def statement_conflict(self, events: list[dict]) -> Stop | None:
        """For the applier, before it commits a batch (its applied events, in order): the first statement-format
        DML that would change a replica table, so the batch stops before it and the SQL thread stops on it."""
        if not any(e["event_type"] == "query" and e["command"] in DML_COMMANDS for e in events):
            return None
        if self.cat is None:
            self.cat = Catalog.load(self.warehouse, self.channel, self.lctn)
            self.done_through = self.cat.seq
        created: set = set()
        for ev in events:
            if ev["event_type"] != "query":
                continue
            cmd = ev["command"]
            if cmd in ("CREATE_TABLE", "RENAME_TABLE"):
                refs = [self.resolve(t["db"], t["name"], ev) for t in ev["tables"] or []]
                created.update(self.cat.key(*r) for r in (refs[1::2] if cmd == "RENAME_TABLE" else refs[:1]))
            elif cmd in DML_COMMANDS and not _TEMPORARY.match(ev.get("statement") or ""):
                held = self._touched(ev, created)
                if held:
                    return Stop(ev["seq"], statement_dml_error(ev, held, self.channel))
        return None


def _copy_unfinished(entry: TableEntry, channel: str) -> MySQLError:
    """An event for a table whose copy is unfinished, or that the filters no longer apply: applying it would
    leave the table silently short."""
    if entry.state == BACKFILLING:
        how = "it is being backfilled by `rpl-sql replica`: let the service finish it"
    elif entry.state == UNREPLICATED:
        how = "the channel stopped replicating it: drop it (rpl-sql upkeep --drop-unreplicated) to start over"
    else:
        how = f"run `rpl-sql snapshot --channel {channel}` to complete it before START REPLICA FOR CHANNEL '{channel}'"
    return MySQLError(1105, "HY000", "ER_UNKNOWN_ERROR", f"the copy of {entry.db}.{entry.name} has not finished: "
                      f"{how}" if entry.state != UNREPLICATED else f"{entry.db}.{entry.name}: {how}")


def statement_dml_error(ev: dict, tables: list[tuple[str, str]], channel: str) -> StatementDMLError:
    names = ", ".join(f"{d}.{n}" for d, n in tables)
    return StatementDMLError(
        1105, "HY000", "ER_UNKNOWN_ERROR",
        f"Statement-format DML at seq {ev['seq']} would change the replica table(s) {names}: "
        f"'{(ev.get('statement') or '')[:300]}'. rpl_sql applies row events only: set binlog_format=ROW on the "
        f"source. To go past this transaction: {skip_advice(channel)}")


def _image_names(images: list[dict]) -> list[str]:
    names: list[str] = []
    for im in images:
        for side in ("after", "before"):
            for k in (im.get(side) or {}):
                if k not in names:
                    names.append(k)
    return names


def materialize(warehouse: str | os.PathLike, channel: str, *, through: int | None = None, lctn: int = 0,
                exec_mode: str = "STRICT") -> MaterializeReport:
    """Bring `channel`'s replica tables up to its applied events (through seq `through`)."""
    return ReplicaTables(warehouse, channel, lctn=lctn, exec_mode=exec_mode).catch_up(through)


__all__ = ["ReplicaTables", "MaterializeReport", "StatementDMLError", "materialize"]
