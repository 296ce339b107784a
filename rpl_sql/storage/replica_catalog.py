"""Which databases and tables a channel's replica holds, and where each table's Delta data lives.

One small Delta table per channel (`<warehouse>/replica/_catalog/<channel hash>`), rewritten whole by each DDL
and at the end of each batch, with the channel's replica position as its app transaction
(`rpl_sql.replica/<channel>` = the last applied seq whose effect it holds). Table data live under opaque paths
(`replica/tables/<id>`), so any table name is safe on any file system and RENAME only changes the catalog;
DROP leaves the files for `rpl-sql upkeep` to remove.
"""
from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass, field, replace

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from rpl_sql.filters.rules import fold
from rpl_sql.storage.delta import archive
from rpl_sql.storage.delta import commit as delta_commit
from rpl_sql.storage.delta.log import check

SCHEMA = pa.schema([("kind", pa.string()), ("db", pa.string()), ("name", pa.string()), ("path", pa.string()),
                    ("columns", pa.string()), ("since", pa.string()), ("exact_after", pa.string()),
                    ("state", pa.string()), ("copy", pa.string())])


CHANNEL_KEY = "rpl_sql.replica.channel"  # commit metadata: the channel a catalog's or replica table's commit is of


def replica_root(warehouse: str) -> str:
    return f"{warehouse.rstrip('/')}/replica"


def catalog_path(warehouse: str, channel: str) -> str:
    return f"{replica_root(warehouse)}/_catalog/{hashlib.sha1(channel.encode('utf-8')).hexdigest()[:16]}"


def new_table_path() -> str:
    """Where a new table's data goes, relative to the replica root: opaque, so any name is safe on disk."""
    return f"tables/{uuid.uuid4().hex}"


COPYING, BACKFILLING, UNREPLICATED = "copying", "backfilling", "not replicated"


def app_id(channel: str) -> str:
    return delta_commit.app_id("replica", channel)


@dataclass(frozen=True)
class TableEntry:
    db: str
    name: str
    path: str                      # relative to the replica root
    columns: list[dict] | None     # None: created by a statement the replica could not read; the next table map
    #                                of the table gives them (until then the table has no Delta data)
    since: tuple[str, int] | None = None  # copied by a snapshot at this binlog position: events up to it are in it
    # copied in pages read between `since` and this position: events in between may find the table ahead of
    # them (a row already there, or gone), and are applied as upserts; past it the table is exact
    exact_after: tuple[str, int] | None = None
    # COPYING: `rpl-sql snapshot` is making its copy; BACKFILLING: the replica service is (the stream holds the
    # table's events meanwhile); UNREPLICATED: the filters no longer apply it; None: replicated
    state: str | None = None
    copy: dict | None = None  # BACKFILLING / UNREPLICATED: the source table, since which state version, ...


@dataclass
class Catalog:
    """A channel's replica as of `seq`: databases and tables by (db, name) after `fold`."""

    warehouse: str
    channel: str
    lctn: int = 0
    seq: int = 0
    databases: dict[str, str] = field(default_factory=dict)         # folded -> as created
    tables: dict[tuple[str, str], TableEntry] = field(default_factory=dict)
    filters: str | None = None  # the channel's filters the tables follow (backfill.filters_text); None: unknown
    resync_done: int = 0  # the last RESYNC REPLICA TABLE request (its number) the tables were given
    # the catalog table as this object last read or wrote it: its only writer commits through it, so a commit
    # does not replay the log since the last checkpoint to open the table
    _table: DeltaTable | None = field(default=None, repr=False, compare=False)

    def fold(self, name: str) -> str:
        return fold(name, self.lctn)  # MySQL's per-character folding, as the filters compare

    def key(self, db: str, name: str) -> tuple[str, str]:
        return self.fold(db), self.fold(name)

    def table(self, db: str, name: str) -> TableEntry | None:
        return self.tables.get(self.key(db, name))

    def root(self) -> str:
        return replica_root(self.warehouse)

    def data_path(self, entry: TableEntry) -> str:
        return f"{self.root()}/{entry.path}"

    def add_database(self, db: str) -> None:
        self.databases.setdefault(self.fold(db), self.fold(db) if self.lctn else db)

    def add_table(self, db: str, name: str, columns: list[dict] | None,
                  since: tuple[str, int] | None = None, path: str | None = None,
                  exact_after: tuple[str, int] | None = None, state: str | None = None,
                  copy: dict | None = None) -> TableEntry:
        """A new table (its data under `path`, relative to the replica root, default a fresh one)."""
        self.add_database(db)
        e = TableEntry(self.fold(db) if self.lctn else db, self.fold(name) if self.lctn else name,
                       path or new_table_path(), columns, since, exact_after, state, copy)
        self.tables[self.key(db, name)] = e
        return e

    def set_columns(self, entry: TableEntry, columns: list[dict]) -> TableEntry:
        new = replace(entry, columns=columns)
        self.tables[self.key(entry.db, entry.name)] = new
        return new

    def drop_table(self, db: str, name: str) -> TableEntry | None:
        return self.tables.pop(self.key(db, name), None)

    def rename_table(self, old: tuple[str, str], new: tuple[str, str]) -> bool:
        e = self.tables.pop(self.key(*old), None)
        if e is None:
            return False
        self.add_database(new[0])
        self.tables[self.key(*new)] = replace(e, db=self.fold(new[0]) if self.lctn else new[0],
                                               name=self.fold(new[1]) if self.lctn else new[1])
        return True

    def drop_database(self, db: str) -> bool:
        f = self.fold(db)
        found = self.databases.pop(f, None) is not None
        for k in [k for k in self.tables if k[0] == f]:
            del self.tables[k]
            found = True
        return found

    # ------------------------------------------------------------ persistence

    @classmethod
    def load(cls, warehouse: str, channel: str, lctn: int = 0) -> "Catalog":
        cat = cls(os.fspath(warehouse), channel, lctn)
        path = catalog_path(cat.warehouse, channel)
        check(path)
        try:
            dt = archive.open_table(path)
        except TableNotFoundError:
            return cat
        cat._table = dt
        cat.seq = dt.transaction_version(app_id(channel)) or 0
        for r in dt.to_pyarrow_table().to_pylist():
            if r["kind"] == "database":
                cat.databases[cat.fold(r["db"])] = r["db"]
            elif r["kind"] == "filters":
                cat.filters = r["columns"]
            elif r["kind"] == "resync":
                cat.resync_done = int(r["columns"])
            else:
                cat.tables[cat.key(r["db"], r["name"])] = _entry(r)
        return cat

    def to_arrow(self) -> pa.Table:
        rows = [{"kind": "database", "db": d, "name": None, "path": None, "columns": None, "since": None,
                 "exact_after": None, "state": None, "copy": None} for d in sorted(self.databases.values())]
        rows += [{"kind": "table", "db": e.db, "name": e.name, "path": e.path,
                  "columns": json.dumps(e.columns, ensure_ascii=False) if e.columns is not None else None,
                  "since": _position_text(e.since), "exact_after": _position_text(e.exact_after), "state": e.state,
                  "copy": json.dumps(e.copy, ensure_ascii=False) if e.copy is not None else None}
                 for e in sorted(self.tables.values(), key=lambda e: (e.db, e.name))]
        for kind, value in (("filters", self.filters), ("resync", str(self.resync_done) if self.resync_done else None)):
            if value is not None:
                rows.append({"kind": kind, "db": None, "name": None, "path": None, "columns": value, "since": None,
                             "exact_after": None, "state": None, "copy": None})
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    def commit(self, seq: int) -> None:
        """The catalog as of `seq`, in one commit (creating the table on first use)."""
        path = catalog_path(self.warehouse, self.channel)
        created = self._table is None and not DeltaTable.is_deltatable(path)
        target = self._table or path
        older = not created and len((target if self._table else archive.open_table(path)).schema().fields) < len(SCHEMA)
        delta_commit.write(target, self.to_arrow(), mode="overwrite", create=created,
                           schema_mode="overwrite" if older else None,  # a catalog of an earlier release
                           metadata={CHANNEL_KEY: self.channel, "rpl_sql.replica.seq": str(seq)},
                           app=(app_id(self.channel), seq), checkpoint=True)
        if self._table is None:
            self._table = archive.open_table(path)
        self.seq = seq


def _position_text(pos: tuple[str, int] | None) -> str | None:
    return f"{pos[0]}:{pos[1]}" if pos else None


def _position(text: str | None) -> tuple[str, int] | None:
    return (text.rsplit(":", 1)[0], int(text.rsplit(":", 1)[1])) if text else None


def _entry(r: dict) -> TableEntry:
    cols = json.loads(r["columns"]) if r["columns"] else None
    return TableEntry(r["db"], r["name"], r["path"], cols, _position(r.get("since")),
                      _position(r.get("exact_after")), r.get("state"),
                      json.loads(r["copy"]) if r.get("copy") else None)


def catalog_versions(warehouse: str) -> tuple:
    """A cheap fingerprint of every channel's catalog (names and log versions): changes when any DDL lands."""
    base = f"{replica_root(os.fspath(warehouse))}/_catalog"
    if "://" in base or not os.path.isdir(base):
        return ()
    out = []
    for name in sorted(os.listdir(base)):
        log_dir = os.path.join(base, name, "_delta_log")
        try:
            out.append((name, max((f for f in os.listdir(log_dir) if f.endswith(".json")), default="")))
        except OSError:
            continue
    return tuple(out)


def find_table(warehouse: str, db: str, name: str, channel: str | None = None,
               exact: bool = False) -> tuple[str, TableEntry] | None:
    """(channel, entry) of the replica table `db`.`name` (of `channel` if given): its exact spelling, else, unless
    `exact`, the one table that matches case-insensitively (none when several do: `Case`.`T` is not `Case`.`t`)."""
    tables = [(ch, e) for ch, e in all_tables(warehouse) if channel is None or ch == channel]
    for ch, e in tables:
        if (e.db, e.name) == (db, name):
            return ch, e
    if exact:
        return None
    folded = [(ch, e) for ch, e in tables if (e.db.lower(), e.name.lower()) == (db.lower(), name.lower())]
    return folded[0] if len(folded) == 1 else None


def all_tables(warehouse: str) -> list[tuple[str, TableEntry]]:
    """(channel, entry) for every table of every channel's replica, as the catalogs say now."""
    base = f"{replica_root(os.fspath(warehouse))}/_catalog"
    if "://" in base or not os.path.isdir(base):
        return []
    out = []
    for name in sorted(os.listdir(base)):
        path = f"{base}/{name}"
        try:
            dt = archive.open_table(path)
        except TableNotFoundError:
            continue
        channel = _channel_of(dt) or name
        for r in dt.to_pyarrow_table().to_pylist():
            if r["kind"] == "table":
                out.append((channel, _entry(r)))
    return out


def _channel_of(dt: DeltaTable) -> str | None:
    """The channel a catalog belongs to, from its newest commit that says (not one a user's ALTER made)."""
    for limit in (1, 64, None):
        history = archive.history(dt, limit)
        for info in history:
            if CHANNEL_KEY in info:
                return str(info[CHANNEL_KEY])
        if limit is None or len(history) < limit:
            return None
    return None
