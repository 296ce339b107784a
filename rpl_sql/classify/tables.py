"""Assembling MySQL's global table list: order, and which tables a multi-table UPDATE or DELETE updates."""
from __future__ import annotations

from typing import Iterable, Mapping

from rpl_sql.filters.evaluate import TableRef
from rpl_sql.classify.tokens import same_ci, RawRef

# ---------------------------------------------------------------- assembling the table list


def refs_to_tables(entries: Iterable[tuple[float, int, TableRef]]) -> tuple[TableRef, ...]:
    return tuple(t for _, _, t in sorted(entries, key=lambda e: (e[0], e[1])))


class ColumnHints:
    """The optional knowledge about a multi-table UPDATE: the schema (table name or `db.table` -> column names,
    case-insensitive) and the source's table_map_for_update bitmap."""

    def __init__(self, columns: Mapping[str, Iterable[str]] | None, table_map: int | None = None):
        self.table_map = table_map
        self.exact: dict[str, frozenset[str]] = {}
        self.folded: dict[str, frozenset[str]] = {}
        for table, cols in (columns or {}).items():
            cs = frozenset(str(c).lower() for c in cols)
            self.exact[str(table)] = cs
            self.folded.setdefault(str(table).lower(), cs)

    def __bool__(self) -> bool:
        return bool(self.exact)

    def of(self, ref: RawRef) -> frozenset[str] | None:
        keys = ([f"{ref.db}.{ref.name}"] if ref.db is not None else []) + [ref.name or ""]
        for k in keys:
            if k in self.exact:
                return self.exact[k]
        for k in keys:
            if k.lower() in self.folded:
                return self.folded[k.lower()]
        return None


def _match_qualified(refs: list[RawRef], db: str | None, table: str) -> list[int]:
    """Indexes of join-list entries that `db.table` / `table` (a column qualifier or a DELETE target) names."""
    for same in (lambda a, b: a == b, same_ci):
        hits = [k for k, r in enumerate(refs)
                if not r.derived and same(r.visible, table)
                and (db is None or (r.alias is None and (r.db is None or same(r.db, db))))]
        if hits:
            return hits
    return []


def _multi_update_flags(refs: list[RawRef], targets: list[tuple[str | None, str | None, str]],
                        columns: ColumnHints) -> list[bool]:
    """Which join-list entries a multi-table UPDATE's SET list assigns (see the module docstring)."""
    real = [k for k, r in enumerate(refs) if not r.derived]
    flags = [False] * len(refs)
    for db, table, col in targets:
        if table is not None:
            hits = _match_qualified(refs, db, table) or real
        elif columns:
            owners = [k for k in real if col.lower() in (columns.of(refs[k]) or ())]
            unknown = [k for k in real if columns.of(refs[k]) is None]
            hits = owners or unknown or real
        else:
            hits = real
        for k in hits:
            flags[k] = True
    return flags


def _bitmap_flags(refs: list[RawRef], ro: list[RawRef], table_map: int) -> list[bool] | None:
    """Updating flags from the Query event's Q_TABLE_MAP_FOR_UPDATE_CODE bitmap (bit k = k-th table of MySQL's
    global table list), when our list provably has MySQL's positions: the join list holds only base tables
    and every other (read-only, subquery) table comes after it. Otherwise None."""
    if any(r.derived for r in refs) or any(x.pos <= max(r.pos for r in refs) for x in ro):
        return None
    return [bool(table_map >> k & 1) for k in range(len(refs))]


def update_entries(refs: list[RawRef], targets: list, ro: list[RawRef], columns: ColumnHints) -> list:
    """(pos, TableRef) for an UPDATE: the join list with its updating flags, then the read-only tables."""
    if len(refs) == 1:
        flags = [not refs[0].derived]
    else:
        flags = None
        if columns.table_map is not None:
            flags = _bitmap_flags(refs, ro, columns.table_map)
        if flags is None:
            flags = _multi_update_flags(refs, targets, columns)
    entries = [(r.pos, TableRef(r.db, r.name, f)) for r, f in zip(refs, flags) if not r.derived]
    return entries + read_only_entries(ro)


def delete_flags(refs: list[RawRef], targets: list[tuple[str | None, str, int]]) -> tuple[list[bool], list]:
    """Mark the FROM/USING entries a multi-table DELETE deletes from; unmatched targets come back as extras."""
    flags = [False] * len(refs)
    extra = []
    for db, name, pos in targets:
        hits = _match_qualified(refs, db, name)
        for k in hits[:1]:
            flags[k] = True
        if not hits:
            extra.append((pos, TableRef(db, name, True)))
    return flags, extra


def numbered(entries: list) -> list[tuple[float, int, TableRef]]:
    return [(p, k, t) for k, (p, t) in enumerate(entries)]


def read_only_entries(refs: Iterable[RawRef]) -> list[tuple[float, TableRef]]:
    return [(r.pos, TableRef(r.db, r.name, False)) for r in refs]
