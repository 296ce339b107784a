"""Executed GTID sets as MySQL and MariaDB write them: `uuid:1-100:105` intervals per source, and MariaDB's
last seq_no per domain (`domain-server-seq`). Pure: the binlog reader, the applier and the session share it."""
from __future__ import annotations

import re
from typing import Iterable

__all__ = ["GtidSet", "merge_intervals"]

_MARIADB = re.compile(r"^(\d+)-(\d+)-(\d+)$")  # domain-server-seq


class GtidSet:
    """A compact executed-GTID set: MySQL intervals per source (`uuid:1-100:105`, tags kept in the key) and,
    for MariaDB, the last seq_no per domain (`domain-server-seq`, like gtid_slave_pos)."""

    def __init__(self, mysql: dict[str, list[tuple[int, int]]] | None = None,
                 mariadb: dict[int, tuple[int, int]] | None = None):
        self.mysql = {k: merge_intervals(v) for k, v in (mysql or {}).items() if v}
        self.mariadb = dict(mariadb or {})  # domain -> (server_id, seq_no)

    @classmethod
    def parse(cls, text: str | None) -> "GtidSet":
        mysql: dict[str, list[tuple[int, int]]] = {}
        mariadb: dict[int, tuple[int, int]] = {}
        for item in re.split(r"[,\s]+", text or ""):
            if not item:
                continue
            m = _MARIADB.match(item)
            if m:
                d, s, n = map(int, m.groups())
                if d not in mariadb or n > mariadb[d][1]:
                    mariadb[d] = (s, n)
                continue
            parts = item.split(":")
            key = parts[0].lower()
            for p in parts[1:]:
                if re.fullmatch(r"\d+(-\d+)?", p):
                    a, _, b = p.partition("-")
                    mysql.setdefault(key, []).append((int(a), int(b or a)))
                else:
                    key = parts[0].lower() + ":" + p.lower()
        return cls(mysql, mariadb)

    def union(self, other: "GtidSet") -> "GtidSet":
        mysql = {k: list(v) for k, v in self.mysql.items()}
        for k, v in other.mysql.items():
            mysql.setdefault(k, []).extend(v)
        mariadb = dict(self.mariadb)
        for d, (s, n) in other.mariadb.items():
            if d not in mariadb or n > mariadb[d][1]:
                mariadb[d] = (s, n)
        return GtidSet(mysql, mariadb)

    def __contains__(self, gtid: str) -> bool:
        m = _MARIADB.match(gtid)
        if m:
            d, _, n = map(int, m.groups())
            return d in self.mariadb and n <= self.mariadb[d][1]
        key, _, n = gtid.rpartition(":")
        return any(a <= int(n) <= b for a, b in self.mysql.get(key.lower(), ()))

    def issuperset(self, other: "GtidSet") -> bool:
        """Every GTID of `other` is in this set (MariaDB: per domain, up to its seq_no)."""
        if any(d not in self.mariadb or n > self.mariadb[d][1] for d, (_, n) in other.mariadb.items()):
            return False
        return all(any(a <= lo and hi <= b for a, b in self.mysql.get(k, ())) for k, v in other.mysql.items()
                   for lo, hi in v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GtidSet) and str(self) == str(other)

    def __str__(self) -> str:
        out = [k + ":" + ":".join(str(a) if a == b else f"{a}-{b}" for a, b in v)
               for k, v in sorted(self.mysql.items())]
        out += [f"{d}-{s}-{n}" for d, (s, n) in sorted(self.mariadb.items())]
        return ",".join(out)

    __repr__ = __str__


def merge_intervals(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out
