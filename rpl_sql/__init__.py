"""rpl_sql: MySQL 8 replication filters, with MySQL's exact semantics, for change data in a Spark lakehouse.

>>> import rpl_sql
>>> session = rpl_sql.connect("/tmp/rpl_doc_wh")  # doctest: +SKIP
>>> session.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1)")  # doctest: +SKIP
"""
from __future__ import annotations

from rpl_sql.errors import MySQLError, MySQLWarning, RplSqlError, SparkRequiredError, SparkSQLError, StartupError
from rpl_sql.filters.evaluate import Decision, RowEvent, StatementEvent, TableRef, decide
from rpl_sql.session import Result, Session
from rpl_sql.spark import attach_when_needed

__version__ = "0.1.0"


def connect(warehouse=None, *, spark=None) -> Session:
    """Open a session on the replica server kept under `warehouse` (default ./rpl_warehouse).

    spark: None (never start Spark; Spark SQL raises SparkRequiredError), True (start a local one when a
    statement needs it), or a SparkSession."""
    return Session(warehouse, spark=spark, attach=attach_when_needed)


def register(spark, warehouse=None, **kwargs):
    """Register the views and SQL functions in `spark`; returns the Session that keeps them current."""
    from rpl_sql.spark.surface import register as _register  # the compiler: not for control-plane statements

    return _register(spark, warehouse, **kwargs)


def load_ipython_extension(ipython):
    """`%load_ext rpl_sql`: the %%rpl_sql cell magic (IPython is imported only here)."""
    from rpl_sql.cli.magic import load_ipython_extension as _load

    _load(ipython)


__all__ = ["connect", "register", "Session", "Result", "RplSqlError", "MySQLError", "SparkSQLError",
           "SparkRequiredError", "StartupError", "MySQLWarning", "decide", "Decision", "RowEvent", "StatementEvent",
           "TableRef", "__version__"]
