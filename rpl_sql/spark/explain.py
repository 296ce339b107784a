"""EXPLAIN REPLICATION FILTER as Spark table functions (Python UDTFs, registered by `rpl_sql.register`):

    SELECT * FROM replication_filter_explain('a', 'shop', 'orders')                        -- a row event
    SELECT * FROM replication_filter_explain_statement('a', 'UPDATE t SET x = 1', 'shop')  -- SQL text or a command

Each call reads the warehouse's current state and returns the rows the shell's statement returns (the
reference evaluator's trace), so the two can never differ.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from rpl_sql.language.quoting import ident, mysql_str
from rpl_sql.server import execute as server
from rpl_sql.filters.state import channel_key
from rpl_sql.language.statements import ExplainReplicationFilter

ROW_FUNCTION = "replication_filter_explain"
STATEMENT_FUNCTION = "replication_filter_explain_statement"
SCHEMA = "step INT, check STRING, subject STRING, outcome STRING, rule STRING, verdict STRING"


def _rows(warehouse: str, stmt) -> list[tuple]:
    from rpl_sql.storage.store import DeltaStore  # delta-rs: loaded by the Python worker that runs the function

    return list(server.explain_filter(DeltaStore(warehouse).load().state, stmt).result.rows)


def _statement(channel: str | None, text: str, default_db: str | None):
    """The shell's STATEMENT form read by the shell's own grammar: a command name or SQL text, same errors."""
    from rpl_sql.language.parser import parse  # lark: loaded when the function first runs

    db = "" if default_db is None else " DEFAULT DATABASE " + ident(default_db)
    stmt = parse(f"EXPLAIN REPLICATION FILTER STATEMENT {mysql_str(text)}{db}")[0]
    return replace(stmt, channel=None if channel is None else channel_key(channel))


def register(spark: Any, warehouse: str) -> None:
    """Define both table functions in `spark` for the warehouse at `warehouse`."""
    from pyspark.sql.functions import udtf

    @udtf(returnType=SCHEMA)
    class ExplainRow:
        def eval(self, channel: str, db: str, table: str):
            stmt = ExplainReplicationFilter(channel=None if channel is None else channel_key(channel),
                                            table=(db, table))
            yield from _rows(warehouse, stmt)

    @udtf(returnType=SCHEMA)
    class ExplainStatement:
        def eval(self, channel: str, statement: str, default_db: str = None):
            yield from _rows(warehouse, _statement(channel, statement, default_db))

    spark.udtf.register(ROW_FUNCTION, ExplainRow)
    spark.udtf.register(STATEMENT_FUNCTION, ExplainStatement)
