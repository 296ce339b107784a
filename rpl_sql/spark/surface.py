"""The Spark surface: performance_schema views and compiled SQL functions in a SparkSession.

>>> session = rpl_sql.register(spark, "/path/to/warehouse")  # doctest: +SKIP
>>> spark.sql("SELECT * FROM replication_applier_filters").show()  # doctest: +SKIP
>>> spark.sql("SELECT count_if(should_apply(channel, db, tbl)) FROM events").show()  # doctest: +SKIP
>>> spark.sql("SELECT * FROM crm.orders").show()  # a replica table, by name  # doctest: +SKIP
>>> spark.sql("SELECT * FROM replication_filter_explain('a', 'shop', 'orders')").show()  # doctest: +SKIP

After every statement the session commits, the views and functions are rebuilt from the new state;
`Session.refresh()` picks up commits made by other processes.
"""
from __future__ import annotations

from typing import Any, Callable

from rpl_sql.server import performance_schema as pfs
from rpl_sql.compile.literals import sql_str
from rpl_sql.server.performance_schema import CHANNELS_SCHEMA, channel_rows
from rpl_sql.spark import explain
from rpl_sql.spark import shapes_job as landed_shapes
from rpl_sql.spark import impact_job as spark_impact
from rpl_sql.spark.datasource import DefaultSource
from rpl_sql.spark.env import ensure_worker_python, local_spark, quiet_own_warnings
from rpl_sql.spark.functions import FunctionInstaller
from rpl_sql.spark.replica_tables import TABLES_VIEW, SparkCatalogSync
from rpl_sql.filters.state import ServerState
from rpl_sql.session import Session

FILTERS_VIEW = "replication_applier_filters"
GLOBAL_FILTERS_VIEW = "replication_applier_global_filters"
CHANNELS_VIEW = "rpl_sql_channels"
RULE_HITS_VIEW = "rpl_sql_filter_rule_hits"
VIEWS: dict[str, tuple[str, Callable[[ServerState], list[tuple]]]] = {
    FILTERS_VIEW: (pfs.FILTERS_SCHEMA, pfs.applier_filters),
    GLOBAL_FILTERS_VIEW: (pfs.GLOBAL_FILTERS_SCHEMA, pfs.applier_global_filters),
    CHANNELS_VIEW: (CHANNELS_SCHEMA, channel_rows),
    RULE_HITS_VIEW: (pfs.RULE_HITS_SCHEMA, pfs.rule_hit_rows),
}


class SparkSurface:
    """Keeps one SparkSession's views and functions equal to a state; re-creates functions only on change."""

    def __init__(self, spark: Any):
        self.spark = spark
        self.functions = FunctionInstaller(spark)
        self._impact_functions: tuple | None = None  # the impact's two sets (spark.impact_job), made on first use
        self.replica: SparkCatalogSync | None = None  # the replica tables by name (`register` sets it)

    def refresh(self, state: ServerState) -> None:
        for name, (schema, rows) in VIEWS.items():
            self.spark.createDataFrame(rows(state), schema).createOrReplaceTempView(name)
        self.functions.install(state)

    def landed_shapes(self, warehouse: str, channels: list[str] | None = None, last: int | None = None,
                      since: str | None = None):
        """The landed events' shapes, counted by a Spark job in this session (rpl_sql.spark.shapes_job)."""
        return landed_shapes.shapes(self.spark, warehouse, channels, last, since)

    def impact(self, warehouse: str, before: ServerState, after: ServerState, channels: list[str],
               last: int | None = None, since: str | None = None) -> list[tuple]:
        """EXPLAIN CHANGE REPLICATION FILTER's rows, decided by one Spark job (rpl_sql.spark.impact_job)."""
        if self._impact_functions is None:
            self._impact_functions = spark_impact.installers(self.spark)
        return spark_impact.impact(self.spark, warehouse, before, after, channels, self._impact_functions, last, since)

    @property
    def encoding(self) -> str:
        return self.functions.encoding


HISTORY_VIEW = "rpl_sql_filter_history"


def _register_live_views(spark: Any, warehouse: str) -> None:
    """The audit trail (a live view over the Delta log) and the replica tables' Spark names, through the
    `rpl_sql` data source.

    Registered explicitly: Spark's own discovery of `pyspark_rpl_sql` runs PYSPARK_PYTHON (else `python3`),
    not the interpreter ensure_worker_python gave this session's workers.
    """
    import os

    spark.dataSource.register(DefaultSource)
    for view, table in ((HISTORY_VIEW, "filter_history"), (TABLES_VIEW, "replica_tables")):
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {view} USING rpl_sql "
                  f"OPTIONS (path {sql_str(os.path.abspath(warehouse), script_safe=True)}, table '{table}')")


def session_factory(warehouse: Any, spark: Any) -> Session:
    """A new Session bound to `spark`."""
    return Session(warehouse, spark=spark, attach=attach)


def register(spark: Any, warehouse: Any = None, session: Any = None):
    """Register views and functions of the warehouse's state in `spark`; return the Session to use.

    Raises sparkenv.WorkerPythonError when Spark's Python workers cannot import rpl_sql.
    """
    ensure_worker_python(spark)
    quiet_own_warnings(spark)
    if session is None:
        session = session_factory(warehouse, spark)
    else:
        session._set_spark(spark)
    _register_live_views(spark, session.warehouse)
    explain.register(spark, session.warehouse)
    surface = SparkSurface(spark)
    surface.replica = SparkCatalogSync(spark, session.warehouse)
    surface.replica.sync()
    session.surface = surface
    session.on_change(surface.refresh)
    surface.refresh(session.state)
    return session


def attach(session) -> None:
    """Give a session its Spark side: the active SparkSession, else a new local one."""
    spark = session._spark if session._spark not in (None, "auto") else None
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    if spark is None and session.spark_factory is not None:
        spark = session.spark_factory()
    if spark is None:
        spark = local_spark()
    register(spark, session=session)


