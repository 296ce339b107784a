"""Quoting, once: the identifiers and string literals rpl_sql writes into SQL text come from here.

Three readers meet: MySQL (rpl_sql's own parser, a source server), Spark SQL, and the predicates delta-rs
evaluates. A back-quoted identifier reads the same in MySQL and Spark. String literals differ: MySQL's
default sql_mode takes backslash escapes (`mysql_str`); standard SQL, which delta-rs predicates and MySQL's
display of accounts follow, only doubles the quote (`standard_str`); Spark's parser and shell need more
(`rpl_sql.compile.literals.sql_str`, which builds on the same rules for the compiled functions).
"""
from __future__ import annotations


def ident(name: str) -> str:
    """`name` as a back-quoted identifier: a back quote inside is doubled."""
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, name: str) -> str:
    """`db`.`name`."""
    return ident(db) + "." + ident(name)


def mysql_str(value: str) -> str:
    """A MySQL string literal that reads back as `value` under the default sql_mode (a pattern's `\\%` and
    `\\_` included): backslash and quote escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def standard_str(value: str) -> str:
    """A standard SQL string literal: the quote doubled, a backslash taken as itself."""
    return "'" + value.replace("'", "''") + "'"


def channel_predicate(channel: str) -> str:
    """The delta-rs predicate for one channel's rows: the default channel '' is stored as NULL (an empty
    partition value)."""
    return "(channel = '' OR channel IS NULL)" if not channel else "channel = " + standard_str(channel)
