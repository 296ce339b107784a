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

from rpl_sql.language.quoting import mysql_str
from rpl_sql.server.applier_state import Stop
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta.scan import read_range
from rpl_sql.errors import MySQLError
from rpl_sql.filters.evaluate import TRANSACTION_CONTROL
from rpl_sql.pipeline.events import ROW_EVENT_TYPES, applied_path
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica import ddl
from rpl_sql.storage.replica_catalog import COPYING, Catalog, TableEntry
from rpl_sql.pipeline.replica.merge import Changes, apply_changes, create, reshape, table_seq
from rpl_sql.filters.rules import FilterType, fold
from rpl_sql.filters.state import ServerState, channel_key
from rpl_sql.storage.store import DeltaStore

log = logging.getLogger(__name__)

DML_COMMANDS = frozenset({"INSERT", "INSERT_SELECT", "UPDATE", "UPDATE_MULTI", "DELETE", "DELETE_MULTI", "REPLACE",
                          "REPLACE_SELECT", "LOAD"})
_TEMPORARY = re.compile(r"^\s*(?:/\*.*?\*/\s*)*(?:CREATE|DROP)\s+TEMPORARY\b", re.I | re.S)
_DROP_IF_EXISTS = re.compile(r"^\s*(?:/\*.*?\*/\s*)*DROP\s+TABLES?\s+IF\s+EXISTS\b", re.I | re.S)
# partition maintenance that removes or swaps rows: the replica table does not know the source's partitions
_ROW_PARTITION_DDL = re.compile(r"\b(DROP|TRUNCATE|EXCHANGE)\s+PARTITION\b", re.I)
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


class ReplicaTables:
    """One channel's replica tables; `catch_up()` brings them to the applier's position."""

    def __init__(self, warehouse: str | os.PathLike, channel: str, *, lctn: int = 0, exec_mode: str = "STRICT"):
        self.warehouse, self.channel = os.fspath(warehouse), channel_key(channel)
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
                 state: ServerState | None = None) -> MaterializeReport:
        """Apply the applied events after the catalog's position (through `through`, default all).

        `handed` = (seq before it, the applier's batch as committed to the applied table): used instead of
        reading the table back when everything through that seq is already materialized. `state`: the
        state the caller just read (for the rewrite targets)."""
        try:
            return self._catch_up(through, handed, state)
        except BaseException:
            self.cat, self.table_seqs, self.done_through = None, {}, -1  # read everything again next time
            self.open.clear()
            raise

    def _catch_up(self, through: int | None, handed: tuple[int, pa.Table] | None,
                  state: ServerState | None) -> MaterializeReport:
        self.report = MaterializeReport(self.channel)
        if self.cat is None:
            self.cat = Catalog.load(self.warehouse, self.channel, self.lctn)
            self.done_through = self.cat.seq
        ch = (state if state is not None else DeltaStore(self.warehouse).load().state).channel(self.channel)
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
        self.pending: dict[tuple[str, str], Changes] = {}
        last = seq = self.cat.seq
        try:
            for ev in events.to_pylist():
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
        self.cat.commit(last)
        self.done_through = last if through is None else max(last, through)
        return self.report

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
        if entry is not None and entry.state == COPYING:
            raise _copy_unfinished(entry, self.channel)
        if entry is not None and _in_snapshot(entry, ev):
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

    def _resolve(self, db: str | None, name: str, ev: dict) -> tuple[str, str]:
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
        entries = [self.cat.table(*self._resolve(t["db"], t["name"], ev)) for t in refs]
        for e in entries:
            if e is not None and e.state == COPYING:
                raise _copy_unfinished(e, self.channel)
        return bool(entries) and all(e is not None and _in_snapshot(e, ev) for e in entries)

    def _statement_dml(self, ev: dict) -> None:
        held = self._touched(ev, set())
        if not held:
            return  # touches no replica table (e.g. a temporary one): nothing to diverge
        self._flush_all()
        self.cat.commit(ev["seq"] - 1)
        raise statement_dml_error(ev, held, self.channel)

    def _touched(self, ev: dict, created: set) -> list[tuple[str, str]]:
        """The replica tables (or tables `created` earlier in the batch) a DML statement updates."""
        tables = [self._resolve(t["db"], t["name"], ev) for t in (ev["tables"] or []) if t.get("updating")]
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
                refs = [self._resolve(t["db"], t["name"], ev) for t in ev["tables"] or []]
                created.update(self.cat.key(*r) for r in (refs[1::2] if cmd == "RENAME_TABLE" else refs[:1]))
            elif cmd in DML_COMMANDS and not _TEMPORARY.match(ev.get("statement") or ""):
                held = self._touched(ev, created)
                if held:
                    return Stop(ev["seq"], statement_dml_error(ev, held, self.channel))
        return None

    def _target(self, ev: dict, kind: type) -> tuple[object, tuple[str, str] | None]:
        """The statement read by `ddl.parse` (if it is a `kind`) and the table it acts on (sqlglot's reading,
        else the classifier's first table)."""
        stmt = ddl.parse(ev["statement"] or "")
        refs = ev["tables"] or []
        if isinstance(stmt, kind):
            return stmt, self._resolve(stmt.db, stmt.name, ev)
        return None, (self._resolve(refs[0]["db"], refs[0]["name"], ev) if refs else None)

    def _create_table(self, ev: dict) -> None:
        stmt, target = self._target(ev, ddl.CreateTable)
        if target is None:
            return
        db, name = target
        if self.cat.table(db, name) is not None:
            if stmt is not None and stmt.if_not_exists:
                return
            raise MySQLError(1050, "42S01", "ER_TABLE_EXISTS_ERROR", f"Table '{name}' already exists "
                             f"(seq {ev['seq']}); DROP it on the replica side or skip the transaction")
        if not self._database_exists(db):
            raise MySQLError(1049, "42000", "ER_BAD_DB_ERROR",
                             f"Unknown database '{db}' (seq {ev['seq']}: {(ev['statement'] or '')[:200]}). The "
                             "replica never received its CREATE DATABASE: the channel started after it, or the "
                             "filters ignored it (statements are judged by their default database)")
        cols = stmt.columns if stmt is not None else None
        if stmt is not None and stmt.like is not None:
            src = self.cat.table(*self._resolve(stmt.like[0], stmt.like[1], ev))
            cols = [dict(c) for c in src.columns] if src is not None and src.columns is not None else None
        entry = self.cat.add_table(db, name, cols)
        if cols is not None:
            create(self.cat.data_path(entry), cols, self.channel, ev["seq"])

    def _database_exists(self, db: str) -> bool:
        f = self.cat.fold(db)
        if f in self.rewrite_targets:
            self.cat.add_database(db)
        return f in self.cat.databases

    def _missing(self, code: int, ev: dict, db: str, name: str) -> MySQLError:
        """MySQL's error for DDL on a table the replica does not have (the SQL thread stops before it)."""
        text = (ev["statement"] or "")[:300]
        why = (f"(seq {ev['seq']}: '{text}'). A name written as db.table is not rewritten by REPLICATE_REWRITE_DB "
               "(only the default database is): run such DDL after USE, or, if the replica should not have the "
               f"table, {skip_advice(self.channel)}")
        if code == 1051:
            return MySQLError(1051, "42S02", "ER_BAD_TABLE_ERROR", f"Unknown table '{db}.{name}' {why}")
        return MySQLError(1146, "42S02", "ER_NO_SUCH_TABLE", f"Table '{db}.{name}' doesn't exist {why}")

    def _drop_table(self, ev: dict) -> None:
        targets = [self._resolve(t["db"], t["name"], ev) for t in ev["tables"] or []]
        if not _DROP_IF_EXISTS.match(ev["statement"] or ""):
            for db, name in targets:  # MySQL 8.0's DROP TABLE is atomic: one missing table drops none
                if self.cat.table(db, name) is None:
                    raise self._missing(1051, ev, db, name)
        for db, name in targets:
            self.cat.drop_table(db, name)

    def _rename_table(self, ev: dict) -> None:
        refs = [self._resolve(t["db"], t["name"], ev) for t in ev["tables"] or []]
        for old, new in zip(refs[0::2], refs[1::2]):
            self.cat.rename_table(old, new)

    def _truncate(self, ev: dict) -> None:
        for t in ev["tables"] or []:
            target = self._resolve(t["db"], t["name"], ev)
            entry = self.cat.table(*target)
            if entry is None:
                raise self._missing(1146, ev, *target)
            if entry.columns is not None and ev["seq"] > self._table_done(entry):
                create(self.cat.data_path(entry), entry.columns, self.channel, ev["seq"])

    def _alter_table(self, ev: dict) -> None:
        stmt, target = self._target(ev, ddl.AlterTable)
        entry = self.cat.table(*target) if target is not None else None
        if entry is None:
            if target is None:
                raise MySQLError(1105, "HY000", "ER_UNKNOWN_ERROR", f"ALTER TABLE at seq {ev['seq']} names no table "
                                 f"rpl_sql can read: '{(ev['statement'] or '')[:300]}'")
            raise self._missing(1146, ev, *target)
        partition = _ROW_PARTITION_DDL.search(ev["statement"] or "")
        if partition:
            op = partition.group(1).upper()
            raise MySQLError(1105, "HY000", "ER_UNKNOWN_ERROR",
                             f"{op} PARTITION at seq {ev['seq']} would remove or swap rows of the replica table "
                             f"{entry.db}.{entry.name}, which does not know the source's partitions: "
                             f"'{(ev['statement'] or '')[:300]}'. To go past it, make the replica table hold what "
                             "the source's holds after it (delete the partition's rows from it), then "
                             f"{skip_advice(self.channel)}")
        db, name = target
        if entry.columns is None:
            return  # no rows yet: the next table map of the table says what its columns are
        if stmt is None or not stmt.complete:
            clause = ddl.changes_columns(ev["statement"] or "")
            if clause is not None and self._has_rows(entry):
                raise self._inexact_alter(ev, entry, f"rpl_sql cannot read all of it (its {clause} clause among "
                                                     "them), so it cannot know what the rows already there become")
            if stmt is None:
                return  # indexes, options, character sets: no column changes; a table map says if there were
        cols = [dict(c) for c in entry.columns]
        renames: dict[str, str] = {}
        defaults: dict[str, object] = {}
        target = (db, name)

        def find(n: str) -> int:
            low = n.lower()  # column names are case-insensitive in MySQL
            return next((i for i, c in enumerate(cols) if c["name"].lower() == low), -1)

        for a in stmt.actions:
            op = a[0]
            if op == "add":
                c, (has_default, default), after = a[1], a[2], a[3]
                if isinstance(default, (ddl.Now, ddl.Unknown)) and self._has_rows(entry):
                    default = self._computed_default(ev, entry, c, default)
                if c.get("pk"):
                    for x in cols:
                        x.pop("pk", None)
                i = len(cols) if after is None else (0 if after == "" else find(after) + 1)
                cols.insert(i, dict(c))
                if has_default:
                    defaults[c["name"]] = default
            elif op == "drop":
                i = find(a[1])
                if i >= 0:
                    cols.pop(i)
            elif op == "modify":
                i = find(a[1])
                if i >= 0:
                    new = dict(a[2])
                    if cols[i].get("pk"):
                        new["pk"] = True
                    if cols[i]["name"] != new["name"]:
                        renames[cols[i]["name"]] = new["name"]
                    cols[i] = new
            elif op == "rename_column":
                i = find(a[1])
                if i >= 0:
                    renames[cols[i]["name"]] = a[2]
                    cols[i] = dict(cols[i], name=a[2])
            elif op == "rename":
                target = self._resolve(a[1], a[2], ev)
            elif op == "pk":
                low = {n.lower() for n in a[1]}
                for x in cols:
                    x.pop("pk", None)
                    if x["name"].lower() in low:
                        x["pk"] = True
            elif op == "drop_pk":
                for x in cols:
                    x.pop("pk", None)
        old = entry.columns
        if [(c["name"], C.arrow_type(c)) for c in cols] != [(c["name"], C.arrow_type(c)) for c in old] \
                and ev["seq"] > self._table_done(entry):
            reshape(self.cat.data_path(entry), old, cols, self.channel, ev["seq"], renames=renames,
                    defaults=defaults)
        entry = self.cat.set_columns(entry, cols)
        if target != (db, name):
            self.cat.rename_table((db, name), target)

    def _has_rows(self, entry: TableEntry) -> bool:
        """Whether the replica table holds a row (from the Delta log's file statistics; True when unknown)."""
        path = self.cat.data_path(entry)
        if not DeltaTable.is_deltatable(path):
            return False
        actions = archive.open_table(path).get_add_actions(flatten=True)
        if actions.num_rows == 0:
            return False
        counts = actions.column("num_records").to_pylist() if "num_records" in actions.schema.names else [None]
        return any(n is None or n > 0 for n in counts)

    def _computed_default(self, ev: dict, entry: TableEntry, c: dict, default: object) -> object:
        """What a CURRENT_TIMESTAMP default puts in the rows already there: the ALTER's time on the source,
        exact for a TIMESTAMP (UTC) without fractions; any other computed default stops the channel."""
        when = ev.get("event_time")
        if isinstance(default, ddl.Now) and c["type"] == "timestamp" and not c.get("fsp") and when is not None:
            return when.strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(default, ddl.Now):
            why = ("a DATETIME's CURRENT_TIMESTAMP is in the source session's time zone, which the binlog does not "
                   "give" if c["type"] != "timestamp" else "the binlog gives the ALTER's time in whole seconds only")
        else:
            why = f"its value for the rows already there is computed by the source ({default.text})"
        raise self._inexact_alter(ev, entry, f"column {c['name']}: {why}")

    def _inexact_alter(self, ev: dict, entry: TableEntry, why: str) -> MySQLError:
        """ALTER TABLE that rpl_sql cannot apply exactly to a table holding rows: the SQL thread stops before it."""
        return MySQLError(
            1105, "HY000", "ER_UNKNOWN_ERROR",
            f"ALTER TABLE at seq {ev['seq']} changes the columns of the replica table {entry.db}.{entry.name} in a "
            f"way rpl_sql cannot apply exactly: {why}: '{(ev['statement'] or '')[:300]}'. To go past it: "
            f"{skip_advice(self.channel)}; the table then "
            "takes the source's columns from its next row event, with NULL in the rows already there for the "
            "columns this statement added or renamed")

    def _create_db(self, ev: dict) -> None:
        if ev["default_db"]:
            self.cat.add_database(ev["default_db"])

    def _drop_db(self, ev: dict) -> None:
        db = ev["default_db"]
        if not db:
            return
        kept = [e for e in self.cat.tables.values() if self.cat.fold(e.db) == self.cat.fold(db) and _in_snapshot(e, ev)]
        self.cat.drop_database(db)
        for e in kept:  # copied by a snapshot taken after this DROP DATABASE: they exist
            self.cat.tables[self.cat.key(e.db, e.name)] = e
            self.cat.add_database(e.db)


def _copy_unfinished(entry: TableEntry, channel: str) -> MySQLError:
    """An event for a table whose copy was interrupted: applying it would leave the table silently short."""
    return MySQLError(1105, "HY000", "ER_UNKNOWN_ERROR",
                      f"the copy of {entry.db}.{entry.name} has not finished: run `rpl-sql snapshot --channel "
                      f"{channel}` to complete it before START REPLICA FOR CHANNEL '{channel}'")


def skip_advice(channel: str) -> str:
    """How to go past the transaction the SQL thread stopped before, as MySQL's message says it."""
    return f"SET GLOBAL sql_replica_skip_counter = 1; START REPLICA SQL_THREAD FOR CHANNEL {mysql_str(channel)}"


def statement_dml_error(ev: dict, tables: list[tuple[str, str]], channel: str) -> StatementDMLError:
    names = ", ".join(f"{d}.{n}" for d, n in tables)
    return StatementDMLError(
        1105, "HY000", "ER_UNKNOWN_ERROR",
        f"Statement-format DML at seq {ev['seq']} would change the replica table(s) {names}: "
        f"'{(ev.get('statement') or '')[:300]}'. rpl_sql applies row events only: set binlog_format=ROW on the "
        f"source. To go past this transaction: {skip_advice(channel)}")


def _in_snapshot(entry: TableEntry, ev: dict) -> bool:
    """The event is already in the table's snapshot copy (it ends at or before the snapshot's position)."""
    if entry.since is None or ev.get("binlog_file") is None or ev.get("binlog_pos") is None:
        return False
    return (ev["binlog_file"], int(ev["binlog_pos"])) <= entry.since


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
