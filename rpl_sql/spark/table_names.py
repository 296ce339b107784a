"""The Spark names of replica tables: one per table, never shared, for any MySQL name.

Spark's session catalog folds names to lower case and takes only `[A-Za-z0-9_]` in database and table names,
while MySQL keeps `Case`.`T` and `Case`.`t` apart (lower_case_table_names=0) and allows any character but NUL.
A table whose name Spark can hold and whose folded name no other replica table shares keeps its name; every
other one gets a Spark name made of its name's safe characters and a hash of its exact identity
(`case`.`t_5e1f0c2a`), so a query by the MySQL name fails instead of reading another table's rows. The same
rule applies to databases. Column names Spark or the spark-sql CLI would alter (`${...}`, line breaks and other
control characters) are renamed the same way; the reader maps them back. Pure: no Spark, no I/O.
"""
from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, replace

from rpl_sql.language.quoting import qualified

_SPARK_NAME = re.compile(r"[A-Za-z0-9_]+\Z")
_UNSAFE_RUN = re.compile(r"[^a-z0-9_]+")
_UNSAFE_COLUMN = re.compile(r"\$\{|[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class SparkName:
    """Where the replica table `db`.`name` of `channel` is in a Spark catalog; `why` says why it is not its own."""

    channel: str
    db: str
    name: str
    spark_db: str
    spark_table: str
    why: str | None = None

    def quoted(self) -> str:
        return qualified(self.spark_db, self.spark_table)


def spark_valid(name: str) -> bool:
    """Whether Spark's session catalog takes `name` as a database or table name."""
    return bool(_SPARK_NAME.match(name))


def _digest(*parts: str, size: int) -> str:
    return hashlib.sha1(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()[:size]


def _stem(name: str, fallback: str) -> str:
    """The name's letters and digits, accents dropped (`ünï` -> `uni`), the rest as `_`."""
    ascii_only = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    return _UNSAFE_RUN.sub("_", ascii_only.lower()).strip("_")[:48] or fallback


def _made_up(name: str, fallback: str, identity: tuple[str, ...], size: int = 8) -> str:
    """A Spark-safe name for `name`: its stem and a hash of its exact `identity`."""
    return f"{_stem(name, fallback)}_{_digest(*identity, size=size)}"


def _why_db(db: str, spellings: set[str]) -> str | None:
    if not spark_valid(db):
        return f"Spark takes only letters, digits and _ in a database name; {db!r} has others"
    if len(spellings) > 1:
        others = ", ".join(repr(s) for s in sorted(spellings - {db}))
        return f"Spark folds case; database {db!r} and {others} would be one Spark database"
    return None


def _why_table(db: str, name: str, sharing: list[tuple[str, str, str]]) -> str | None:
    if not spark_valid(name):
        return f"Spark takes only letters, digits and _ in a table name; {name!r} has others"
    if len(sharing) > 1:
        if len({(d, n) for _, d, n in sharing}) == 1:
            channels = ", ".join(repr(c) for c, _, _ in sorted(sharing))
            return f"channels {channels} each keep a table {db}.{name}"
        others = ", ".join(repr(n) for _, _, n in sorted(sharing) if n != name)
        return f"Spark folds case; {name!r} and {others} would be one Spark table"
    return None


def spark_names(tables: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], SparkName]:
    """The Spark name of every (channel, db, name), as a function of the whole list: unique case-insensitively."""
    spellings: dict[str, set[str]] = {}
    for _, db, _ in tables:
        spellings.setdefault(db.lower(), set()).add(db)
    db_names: dict[str, tuple[str, str | None]] = {}
    for group in spellings.values():
        for db in group:
            why = _why_db(db, group)
            db_names[db] = (db.lower(), None) if why is None else (_made_up(db, "db", (db,)), why)
    by_spark: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for t in tables:
        by_spark.setdefault((db_names[t[1]][0], t[2].lower()), []).append(t)
    out: dict[tuple[str, str, str], SparkName] = {}
    identities: dict[tuple[str, str, str], tuple[str, ...]] = {}
    for (spark_db, _), sharing in by_spark.items():
        dup_channels = len({(d, n) for _, d, n in sharing}) < len(sharing)
        for channel, db, name in sharing:
            why = _why_table(db, name, sharing)
            identity = identities[(channel, db, name)] = (channel, db, name) if dup_channels else (db, name)
            table = name.lower() if why is None else _made_up(name, "t", identity)
            out[(channel, db, name)] = SparkName(channel, db, name, spark_db, table,
                                                 db_names[db][1] if why is None else why)
    return _unique(out, identities)


def _unique(names: dict[tuple[str, str, str], SparkName],
            identities: dict[tuple[str, str, str], tuple[str, ...]]) -> dict[tuple[str, str, str], SparkName]:
    """Lengthen the hash of a made-up name that happens to equal another table's Spark name."""
    taken: dict[tuple[str, str], tuple[str, str, str]] = {}
    for key, n in sorted(names.items(), key=lambda kv: kv[1].why is not None):
        spot = (n.spark_db, n.spark_table)
        size = 8
        while spot in taken and n.why is not None and size < 40:
            size += 8
            n = replace(n, spark_table=_made_up(n.name, "t", identities[key], size))
            spot = (n.spark_db, n.spark_table)
        if spot in taken:
            raise ValueError(f"replica tables {taken[spot]} and {key} got the same Spark name {n.quoted()}")
        taken[spot] = key
        names[key] = n
    return names


def spark_columns(columns: list[str]) -> dict[str, str]:
    """Spark column name -> source column name, for the columns that cannot keep theirs."""
    renamed: dict[str, str] = {}
    taken = {c.lower() for c in columns}
    for c in columns:
        if _UNSAFE_COLUMN.search(c):
            new = _made_up(c, "col", (c,))
            while new.lower() in taken:
                new += "_"
            taken.add(new.lower())
            renamed[new] = c
    return renamed
