"""What one replica of the relay receives: each transaction decided by that replica's filters with MySQL's rules
(the reference evaluator), as a replica-side filter would decide it, and sent without what it ignores.

- Row events by their Table_map's table; the Table_map goes with them. MariaDB's Annotate_rows goes when one
  of its statement's rows events does.
- Statements by their default database and the tables they touch (`classify`, as the ingest reads them);
  transaction control, XA, DROP TRIGGER and statements whose tables cannot be read are always sent (the
  replica decides those itself).
- GTIDs are never lost: a transaction filtered away entirely is sent as its GTID and its end (an empty
  transaction), so the replica's GTID position moves as with replica-side filtering. A DDL group whose
  statement is ignored is sent as its GTID and a COMMIT.
- Positions are the source's: every event keeps its header; the replica skips over the gaps. Where an event
  changes (a statement's last rows event taking the end-of-statement flag of a dropped one, a made-up COMMIT)
  its checksum is computed again.
"""
from __future__ import annotations

import struct
from typing import Callable

from rpl_sql.relay import binlog_events as E
from rpl_sql.filters.rules import FilterType, Matching, filters_of, source_side_of
from rpl_sql.pipeline.source_filter import JoinedFilter, SourceFilter

FL_STANDALONE = 0x1
_ROWS = frozenset(E.ROWS_V1 + E.ROWS_V2)
STMT_END_F = 0x1
_CONTROL = {"BEGIN", "COMMIT", "ROLLBACK", "XA_START", "XA_END", "XA_PREPARE", "XA_COMMIT", "XA_ROLLBACK"}


def _query_parts(ev: bytes, crc: bool) -> tuple[str | None, str]:
    """(default database or None, SQL text) of a Query event."""
    p = E.HEADER
    db_len = ev[p + 8]
    status_len = struct.unpack_from("<H", ev, p + 11)[0]
    at = p + 13 + status_len
    db = ev[at:at + db_len].decode("utf-8", "replace")
    end = len(ev) - (4 if crc else 0)
    return (db or None), ev[at + db_len + 1:end].decode("utf-8", "replace")


def _table_map(ev: bytes) -> tuple[int, str, str]:
    p = E.HEADER
    table_id = int.from_bytes(ev[p:p + 6], "little")
    at = p + 8
    n = ev[at]
    db = ev[at + 1:at + 1 + n].decode("utf-8", "replace")
    at += 2 + n
    m = ev[at]
    return table_id, db, ev[at + 1:at + 1 + m].decode("utf-8", "replace")


def _rows_table_id(ev: bytes) -> int:
    return int.from_bytes(ev[E.HEADER:E.HEADER + 6], "little")


def _rows_flags(ev: bytes) -> int:
    return struct.unpack_from("<H", ev, E.HEADER + 6)[0]


def _with_stmt_end(ev: bytes, crc: bool) -> bytes:
    body = bytearray(ev[:len(ev) - (4 if crc else 0)])
    struct.pack_into("<H", body, E.HEADER + 6, _rows_flags(ev) | STMT_END_F)
    return E.with_checksum(bytes(body), crc)


def commit_query(template: bytes, crc: bool) -> bytes:
    """A Query event `COMMIT` with the header (time, server id, log_pos) of `template`: the end of a group
    whose content was filtered away."""
    h = E.Header.of(template)
    body = struct.pack("<IIBHH", 0, 0, 0, 0, 0) + b"\0" + b"COMMIT"
    return E.make(E.QUERY, h.server_id, h.log_pos, body, crc, timestamp=h.timestamp)


class ReplicaFilter:
    """Feeds on the spool's events in order; hands back what this replica is sent."""

    def __init__(self, source_filter: Callable[[], SourceFilter | None],
                 applied: dict[int, int] | E.MySQLGtids | None = None, annotate: bool = True):
        """`source_filter()`: the replica's filters now (None: everything is sent), asked once per transaction.
        `applied`: a GTID-connecting replica's position (MariaDB: domain -> seq_no; MySQL: its executed GTID
        set): the groups it has are not sent.
        `annotate`: whether the replica asked for MariaDB's Annotate_rows (the source sends them only then)."""
        self.source_filter = source_filter
        self.applied = applied if applied else {}
        self.annotate = annotate
        self.skipping = False
        self.sf: SourceFilter | None = None
        self.crc = False
        self.tables: dict[int, tuple[str, str]] = {}
        self.group: list[tuple[bytes, str]] | None = None  # the open transaction: (event, 'keep'|'drop'|...)
        self.dropped = False  # the open transaction has dropped something: it is sent as cut, not as it is
        self.plain = False  # it holds only its GTID, Table_maps and rows events (so far)
        self.kept_rows = False  # one of its rows events is sent
        self.standalone = False
        self.held: dict[int, list[bytes]] = {}  # domain -> the last wholly filtered MariaDB group, not sent yet
        self.events_in = self.events_out = 0
        self._keeps: dict[bytes, bool] = {}  # a Table_map's db and table bytes -> kept, under `_keeps_of`
        self._keeps_of: SourceFilter | None = None
        self._names: dict[bytes, tuple[str, str]] = {}
        self._id_keeps: dict[int, bool] = {}  # table id -> kept, for the open transaction's rows events

    def feed(self, ev: bytes) -> list[bytes]:
        """What is sent on `ev`, one event at a time (`feed_buffer` does the same for many)."""
        self.events_in += 1
        out = self._feed(ev)
        self.events_out += len(out)
        return out

    def feed_buffer(self, buf: bytes, at: int) -> tuple[list[bytes], int]:
        """What is sent on every whole event of `buf` from `at`, and where the first event not whole starts.

        Decides as `feed` does, event by event; only the events of a row transaction (Table_map, rows,
        Annotate_rows, Xid) are handled here, without a call each, because they are most of a binlog."""
        out: list[bytes] = []
        n = len(buf)
        unpack = struct.unpack_from
        rows = _ROWS
        count = 0
        group = self.group
        while n - at >= E.HEADER:
            size = unpack("<I", buf, at + 9)[0]
            end = at + size
            if end > n or size < E.HEADER:
                if size < E.HEADER:
                    raise ValueError(f"relay: an event of {size} bytes")
                break
            t = buf[at + 4]
            count += 1
            if t == E.ANNOTATE_ROWS and not self.annotate and group is not None and not self.skipping:
                at = end  # never sent, and decides nothing
                continue
            ev = buf[at:end]
            if group is None or self.skipping:
                if t == E.MARIADB_GTID and group is None and not self.applied:  # a MariaDB transaction starts
                    self.sf = sf = self.source_filter()
                    group = self.group = [(ev, "gtid")]
                    self.dropped = self.kept_rows = False
                    self.plain = True
                    self._id_keeps = {}
                    self.standalone = bool(buf[at + E.HEADER + 12] & FL_STANDALONE)
                    if self._keeps_of is not sf:
                        self._keeps, self._keeps_of = {}, sf
                else:
                    out += self._feed(ev)
                    group = self.group
                    self.plain = False
            elif t in rows:
                keep = self._id_keeps.get(unpack("<Q", buf, at + 19)[0] & 0xFFFFFFFFFFFF)
                if keep:
                    group.append((ev, "rows"))
                    self.kept_rows = True
                elif keep is None:  # a rows event whose Table_map is not in this transaction
                    out += self._feed(ev)
                    self.plain = False
                else:
                    group.append((ev, "drop-rows"))
                    self.dropped = True
            elif t == E.TABLE_MAP:
                if self._keeps_of is not self.sf:
                    self._keeps, self._keeps_of = {}, self.sf
                dn = buf[at + 27]
                key = ev[27:30 + dn + ev[29 + dn]]
                keep = self._keeps.get(key)
                table_id = unpack("<Q", buf, at + 19)[0] & 0xFFFFFFFFFFFF
                if keep is None:
                    _, db, name = _table_map(ev)
                    keep = self._keeps[key] = self.sf is None or not self.sf.drops(SourceFilter.row_key(db, name))
                    self._names[key] = (db, name)
                self.tables[table_id] = self._names[key]
                self._id_keeps[table_id] = keep
                if keep:
                    group.append((ev, "map"))
                else:
                    group.append((ev, "drop"))
                    self.dropped = True
            elif t == E.XID:
                group.append((ev, "end"))
                if self.plain and self.kept_rows and not self.dropped:  # sent as it is
                    if self.held:
                        out += self._take_held()
                    out += [e for e, _ in group]
                    self.group = None
                elif self.plain and not self.kept_rows:  # wholly filtered: held, as `_close_group` holds it
                    gtid = group[0][0]
                    self.held[unpack("<I", gtid, E.HEADER + 8)[0]] = [gtid, ev]
                    self.group = None
                else:
                    out += self._close_group()
                group = None
            elif t == E.ANNOTATE_ROWS:
                if self.annotate:  # else never sent: it need not be kept
                    group.append((ev, "annotate"))
                    self.plain = False
            else:
                out += self._feed(ev)
                group = self.group
                self.plain = False
            at = end
        self.events_in += count
        self.events_out += len(out)
        return out, at

    def flush(self) -> list[bytes]:
        """The held empty transactions (MariaDB: a replica's GTID position is the last seq_no of each domain, so
        of a run of wholly filtered transactions only the last one is sent), before anything that follows them
        and whenever the replica has everything else."""
        out = self._take_held()
        self.events_out += len(out)
        return out

    def _take_held(self) -> list[bytes]:
        out = [ev for group in self.held.values() for ev in group]
        self.held.clear()
        return out

    def _feed(self, ev: bytes) -> list[bytes]:
        t = ev[4]
        if t == E.FORMAT_DESCRIPTION:
            self.crc = E.fde_checksum(ev)
            self.tables.clear()
        if t in (E.MARIADB_GTID, E.MYSQL_GTID, E.ANONYMOUS_GTID):  # a group starts
            flushed = self._close_group() if self.group is not None else []
            self.sf = self.source_filter()
            self.group = [(ev, "gtid")]
            self.dropped = False
            self._id_keeps = {}
            self.standalone = t == E.MARIADB_GTID and bool(ev[E.HEADER + 12] & FL_STANDALONE)
            if t == E.MARIADB_GTID and isinstance(self.applied, dict) and self.applied:
                seq, domain = struct.unpack_from("<QI", ev, E.HEADER)
                self.skipping = seq <= self.applied.get(domain, -1)
            elif t == E.MYSQL_GTID and isinstance(self.applied, E.MySQLGtids):
                self.skipping = self.applied.has(ev[E.HEADER + 1:E.HEADER + 17],
                                                 struct.unpack_from("<q", ev, E.HEADER + 17)[0])
            return flushed
        if self.group is None:  # outside a transaction: housekeeping, or a statement without a GTID
            if t == E.ANNOTATE_ROWS and not self.annotate:
                return []
            if t == E.QUERY:
                return self._take_held() + [ev] if self._query_sent(ev) else []
            return self._take_held() + [ev]
        if t == E.TABLE_MAP:
            table_id, db, name = _table_map(ev)
            self.tables[table_id] = (db, name)
            keep = self.sf is None or not self.sf.drops(SourceFilter.row_key(db, name))
            self._id_keeps[table_id] = keep
            self.dropped |= not keep
            self.group.append((ev, "map" if keep else "drop"))
        elif t in E.ROWS_V1 or t in E.ROWS_V2:
            db, name = self.tables.get(_rows_table_id(ev), ("", ""))
            keep = self.sf is None or not self.sf.drops(SourceFilter.row_key(db, name))
            self.dropped |= not keep
            self.group.append((ev, "rows" if keep else "drop-rows"))
        elif t == E.ANNOTATE_ROWS:
            self.group.append((ev, "annotate"))
        elif t == E.XID:
            self.group.append((ev, "end"))
            return self._close_group()
        elif t == E.QUERY:
            db, sql = _query_parts(ev, self.crc)
            word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            if word in ("COMMIT", "ROLLBACK"):
                self.group.append((ev, "end"))
                return self._close_group()
            if word in ("BEGIN", "XA"):
                self.group.append((ev, "control"))
            else:
                sent = self._query_sent(ev)
                self.dropped |= not sent
                self.group.append((ev, "query" if sent else "drop"))
            if self.standalone:
                return self._close_group()
        else:
            self.group.append((ev, "other"))
        return []

    def _query_sent(self, ev: bytes) -> bool:
        if self.sf is None and self.group is None:
            self.sf = self.source_filter()
        if self.sf is None:
            return True
        from rpl_sql.classify import classify

        db, sql = _query_parts(ev, self.crc)
        info = classify(sql)
        if info.command in _CONTROL:
            return True
        default_db = info.database if info.kind == "DATABASE_DDL" and info.database is not None else db
        key = SourceFilter.statement_key(info.command, default_db, info.tables, info.method)
        return key is None or not self.sf.drops(key)

    def _close_group(self) -> list[bytes]:
        group, self.group = self.group or [], None
        if self.skipping:  # the replica has it already
            self.skipping = False
            return []
        if not any(kind in ("rows", "query", "other") for _, kind in group):  # nothing of it is applied
            out = [ev for ev, kind in group if kind in ("gtid", "control", "end")]
            if not any(kind == "end" for _, kind in group):  # a DDL group whose statement was dropped: + COMMIT
                out.append(commit_query(group[-1][0], self.crc))
            if group and group[0][0][4] == E.MARIADB_GTID:
                self.held[struct.unpack_from("<I", group[0][0], E.HEADER + 8)[0]] = out
                return []
            return out
        return self._take_held() + _cut(group, self.crc, self.annotate)


def _cut(group: list[tuple[bytes, str]], crc: bool, annotate: bool) -> list[bytes]:
    """A transaction without what it dropped. A statement's last rows event kept takes the end-of-statement flag
    of a dropped last one; an Annotate_rows goes (when asked for) with its statement's kept rows."""
    kinds = [kind for _, kind in group]
    evs = [ev for ev, _ in group]
    last_kept = None
    for i, (ev, kind) in enumerate(group):
        if kind == "rows":
            last_kept = i
        elif kind == "drop-rows" and _rows_flags(ev) & STMT_END_F and last_kept is not None and \
                not _rows_flags(evs[last_kept]) & STMT_END_F:
            evs[last_kept] = _with_stmt_end(evs[last_kept], crc)
            last_kept = None
        if kind in ("rows", "drop-rows") and _rows_flags(evs[i]) & STMT_END_F:
            last_kept = None
    out = []
    for i, (ev, kind) in enumerate(zip(evs, kinds)):
        if kind == "annotate":
            if annotate and _annotated(kinds, i):
                out.append(ev)
        elif kind in ("gtid", "control", "end", "rows", "query", "other", "map"):
            out.append(ev)
    return out


def _annotated(kinds: list[str], i: int) -> bool:
    """Whether one of the rows events of the statement whose Annotate_rows is at `i` is sent."""
    for kind in kinds[i + 1:]:
        if kind == "rows":
            return True
        if kind not in ("map", "drop", "drop-rows"):
            return False
    return False


def parse_gtid_state(text: str | None) -> dict[int, int]:
    """MariaDB's @slave_connect_state ('0-1-100,1-2-5') as domain -> seq_no."""
    out: dict[int, int] = {}
    for part in (text or "").replace(" ", "").split(","):
        if part:
            domain, _server, seq = part.split("-")
            out[int(domain)] = int(seq)
    return out


def forwarded_filter(text: str) -> SourceFilter | JoinedFilter | None:
    """The filters an rpl-sql channel forwarded (`source_server.connection.forwarded_filters`): its own and its
    source-side ones, an event dropped when either drops it; None when they drop nothing."""
    own, lctn = filters_of(text)
    drop = [t for t in FilterType if t is not FilterType.REWRITE_DB]
    return JoinedFilter.of(*(SourceFilter.of(f, Matching(lctn)) for f in (own, source_side_of(text))
                             if f is not None and any(f.values(t) for t in drop)))
