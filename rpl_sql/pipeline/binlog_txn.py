"""A binlog transaction while the reader builds it: its pending events as they will be landed, and how a
rows event's row images read when the compiled decoder (row_images) cannot read them."""
from __future__ import annotations

import logging
from collections import Counter

from pymysqlreplication.constants import NONE_SOURCE

from rpl_sql.pipeline.replica.columns import UnsupportedColumnError, columns_json, from_table_map

log = logging.getLogger("rpl_sql.pipeline.binlog")

ROW_TYPES = {"WriteRowsEvent": "write_rows", "UpdateRowsEvent": "update_rows", "DeleteRowsEvent": "delete_rows"}
STMT_END_F = 0x0001
FL_STANDALONE = 0x01  # MariaDB GTID event flag: no BEGIN/COMMIT follows
FL_XA = 0x40 | 0x80   # MariaDB GTID event flags FL_PREPARED_XA, FL_COMPLETED_XA


def library_images(ev, etype: str) -> list[dict]:
    if etype == "update_rows":
        return [{"before": _sets(r["before_values"], r["before_none_sources"]),
                 "after": _sets(r["after_values"], r["after_none_sources"])} for r in ev.rows]
    if etype == "write_rows":
        return [{"before": None, "after": _sets(r["values"], r["none_sources"])} for r in ev.rows]
    return [{"before": _sets(r["values"], r["none_sources"]), "after": None} for r in ev.rows]


def _sets(values: dict, none_sources: dict) -> dict:
    """The library reads an empty SET ('') as None, as if it were NULL: give it back as the empty set."""
    empty = [k for k, src in none_sources.items() if src == NONE_SOURCE.EMPTY_SET]
    return {**values, **{k: set() for k in empty}} if empty else values


class PendingEvent:
    """One event of the open transaction, as it will be landed (a rows event's images kept as a list until the
    transaction ends, so the next rows event of the same statement can join them)."""

    __slots__ = ("gtid", "file", "pos", "event_type", "command", "kind", "default_db", "db_name", "table_name",
                 "tables", "statement", "images", "time_us", "columns")

    def __init__(self, gtid, file, pos, event_type, command=None, kind=None, default_db=None, db_name=None,
                 table_name=None, tables=None, statement=None, images=None, time_us=0, columns=None):
        self.gtid, self.file, self.pos, self.event_type = gtid, file, pos, event_type
        self.command, self.kind, self.default_db = command, kind, default_db
        self.db_name, self.table_name, self.tables, self.statement = db_name, table_name, tables, statement
        self.images, self.time_us, self.columns = images, time_us, columns


class OpenTransaction:
    __slots__ = ("gtid", "open", "xa", "rows", "dropped", "withheld", "content", "kept", "time_us", "merge")

    def __init__(self, gtid: str | None, open_: bool):
        self.gtid, self.open, self.xa = gtid, open_, False
        self.rows: list[PendingEvent] = []  # the events to land, in order
        self.dropped: Counter = Counter()
        self.withheld = 0               # events the channel's source-side filters drop: never re-decided
        self.content = 0                # non-control events seen
        self.kept = 0                   # non-control events kept
        self.time_us = 0
        self.merge: tuple | None = None  # (table_id, rows event kind, row or None when dropped)

    def withhold(self, merge: tuple | None = None) -> None:
        """An event the channel's source-side filters drop (WL#2387): it never reaches the replica, as if its
        source had not sent it, and nothing decides it again. `merge`: rows events that continue it."""
        self.withheld += 1
        self.merge = merge

    @classmethod
    def of_gtid_event(cls, ev) -> "OpenTransaction":
        """The transaction a GTID event starts: MySQL's opens at its BEGIN; MariaDB's flags say whether a BEGIN
        follows, and mark an XA transaction (which MariaDB logs without XA START)."""
        mariadb = type(ev).__name__ == "MariadbGtidEvent"
        txn = cls(ev.gtid, open_=mariadb and not ev.flags & FL_STANDALONE)
        txn.xa = mariadb and bool(ev.flags & FL_XA)
        return txn


def xa_xid(ev) -> str:
    """An XA_PREPARE event's xid as XA statements spell it."""
    return "X'" + bytes(ev.xid_gtrid).hex() + "',X'" + bytes(ev.xid_bqual).hex() + f"',{ev.xid_format_id}"


class TableMapColumns(dict):
    """Table id -> its table map's columns as JSON, read once per id (an id names one table definition while
    the server runs; cleared at each new binlog file)."""

    def __init__(self, channel: str):
        super().__init__()
        self.channel = channel

    def of(self, ev) -> str | None:
        tid = ev.table_id
        if tid not in self:
            try:
                self[tid] = columns_json(from_table_map(ev.columns))
            except UnsupportedColumnError as e:
                log.warning("channel %r: %s.%s: %s; its replica table gets no types", self.channel, ev.schema,
                            ev.table, e)
                self[tid] = None
        return self[tid]
