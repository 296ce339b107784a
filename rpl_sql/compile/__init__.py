"""Filter state to Spark SQL functions that agree exactly with the reference evaluator (`rpl_sql.filters.evaluate`).

    >>> compile_functions(state).statements  # doctest: +SKIP
    ('CREATE OR REPLACE TEMPORARY FUNCTION rpl_sql__dbc(...) ...', ..., 'CREATE ... should_apply(...) ...')

Public functions (argument names are part of the API): `rewrite_db(channel_name, db_name)`,
`should_apply` / `filter_decided_by(channel_name, db_name, table_name)` for row events, and
`should_apply_statement` / `filter_decided_by_statement(channel_name, command, default_db, tables)`; with
`applier=True` the applier's private set instead. Pure: no Spark here, only text. The NULL contract and the
encoding (why exact lists are hash lookups, why the text is shaped for Spark's parser):
docs/design/README.md#rpl_sqlcompile.
"""
from rpl_sql.compile.codes import (
                                   APPLIER_PREFIX,
                                   CASE_MAX_GROUPS,
                                   CHANNEL_INDEX_MAX,
                                   COMPILE_MAX_CHARS,
                                   JVM_FUNCTIONS, JVM_INSTALL, JVM_ROW_CODE,
                                   LABELS,
                                   MAP_HASH_MIN,
                                   SET_MAP_MIN,
                                   TRUE_CODES,
                                   CompiledFunctions,
                                   Guard,
)
from rpl_sql.compile.emit import compile_functions
from rpl_sql.compile.hashing import spark_hash
from rpl_sql.compile.literals import fold_sql, sql_str

__all__ = ["APPLIER_PREFIX", "CASE_MAX_GROUPS", "CHANNEL_INDEX_MAX", "COMPILE_MAX_CHARS", "JVM_ROW_CODE",
           "JVM_FUNCTIONS", "JVM_INSTALL", "LABELS",
           "MAP_HASH_MIN", "SET_MAP_MIN", "TRUE_CODES", "CompiledFunctions", "Guard", "compile_functions", "fold_sql",
           "spark_hash", "sql_str"]
