"""rpl_sql: MySQL 8 replication filters, with MySQL's exact semantics, for change data in a Spark lakehouse.

>>> import rpl_sql
>>> session = rpl_sql.connect("/tmp/rpl_doc_wh")  # doctest: +SKIP
>>> session.execute("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1)")  # doctest: +SKIP
"""
from __future__ import annotations

from .errors import MySQLError, SparkRequired, SparkSQLError, StartupError, Warning
from .evaluate import Decision, RowEvent, StatementEvent, TableRef, decide
from .session import Result, Session, connect

__version__ = "0.1.0"


def register(spark, warehouse=None, **kwargs):
    """Register the views and SQL functions in `spark`; returns the Session that keeps them current."""
    from .spark import register as _register

    return _register(spark, warehouse, **kwargs)


__all__ = ["connect", "register", "Session", "Result", "MySQLError", "SparkSQLError", "SparkRequired", "StartupError", "Warning", "decide",
           "Decision", "RowEvent", "StatementEvent", "TableRef", "__version__"]
