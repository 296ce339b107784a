"""The statements a replica table follows: CREATE, DROP, RENAME, TRUNCATE and ALTER TABLE, CREATE and DROP
DATABASE, each applied exactly to the replica tables and the catalog or stopping the SQL thread (an ALTER whose
effect on existing rows cannot be known, a partition change that removes rows). A part of
`materialize.ReplicaTables`, which holds the catalog and the open tables these methods use.
"""
from __future__ import annotations

import logging
import re

from deltalake import DeltaTable

from rpl_sql.language.quoting import mysql_str
from rpl_sql.storage.delta import archive
from rpl_sql.errors import MySQLError
from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica import ddl
from rpl_sql.storage.replica_catalog import TableEntry
from rpl_sql.pipeline.replica.merge import create, reshape

log = logging.getLogger("rpl_sql.pipeline.replica.materialize")

_DROP_IF_EXISTS = re.compile(r"^\s*(?:/\*.*?\*/\s*)*DROP\s+TABLES?\s+IF\s+EXISTS\b", re.I | re.S)
# partition maintenance that removes or swaps rows: the replica table does not know the source's partitions
_ROW_PARTITION_DDL = re.compile(r"\b(DROP|TRUNCATE|EXCHANGE)\s+PARTITION\b", re.I)


class TableStatements:
    """Table and database statements on one channel's replica tables (mixed into `ReplicaTables`)."""

    def _target(self, ev: dict, kind: type) -> tuple[object, tuple[str, str] | None]:
        """The statement read by `ddl.parse` (if it is a `kind`) and the table it acts on (sqlglot's reading,
        else the classifier's first table)."""
        stmt = ddl.parse(ev["statement"] or "")
        refs = ev["tables"] or []
        if isinstance(stmt, kind):
            return stmt, self.resolve(stmt.db, stmt.name, ev)
        return None, (self.resolve(refs[0]["db"], refs[0]["name"], ev) if refs else None)

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
            src = self.cat.table(*self.resolve(stmt.like[0], stmt.like[1], ev))
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
        targets = [self.resolve(t["db"], t["name"], ev) for t in ev["tables"] or []]
        if not _DROP_IF_EXISTS.match(ev["statement"] or ""):
            for db, name in targets:  # MySQL 8.0's DROP TABLE is atomic: one missing table drops none
                if self.cat.table(db, name) is None:
                    raise self._missing(1051, ev, db, name)
        for db, name in targets:
            self.cat.drop_table(db, name)

    def _rename_table(self, ev: dict) -> None:
        refs = [self.resolve(t["db"], t["name"], ev) for t in ev["tables"] or []]
        for old, new in zip(refs[0::2], refs[1::2]):
            self.cat.rename_table(old, new)

    def _truncate(self, ev: dict) -> None:
        for t in ev["tables"] or []:
            target = self.resolve(t["db"], t["name"], ev)
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
                target = self.resolve(a[1], a[2], ev)
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
        kept = [e for e in self.cat.tables.values() if self.cat.fold(e.db) == self.cat.fold(db) and in_snapshot(e, ev)]
        self.cat.drop_database(db)
        for e in kept:  # copied by a snapshot taken after this DROP DATABASE: they exist
            self.cat.tables[self.cat.key(e.db, e.name)] = e
            self.cat.add_database(e.db)


def skip_advice(channel: str) -> str:
    """How to go past the transaction the SQL thread stopped before, as MySQL's message says it."""
    return f"SET GLOBAL sql_replica_skip_counter = 1; START REPLICA SQL_THREAD FOR CHANNEL {mysql_str(channel)}"


def in_snapshot(entry: TableEntry, ev: dict) -> bool:
    """The event is already in the table's snapshot copy (it ends at or before the snapshot's position)."""
    if entry.since is None or ev.get("binlog_file") is None or ev.get("binlog_pos") is None:
        return False
    return (ev["binlog_file"], int(ev["binlog_pos"])) <= entry.since
