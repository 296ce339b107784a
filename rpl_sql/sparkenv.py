"""Start a local SparkSession the way rpl_sql needs it (no Delta JARs required)."""
from __future__ import annotations

import os
import sys


def local_spark(app_name: str = "rpl_sql", master: str = "local[2]", **conf: str):
    """A local SparkSession whose Python workers run this interpreter (so they can import rpl_sql).

    >>> spark = local_spark()  # doctest: +SKIP
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
               .config("spark.driver.memory", os.environ.get("RPL_SQL_DRIVER_MEMORY", "4g")))
    for k, v in conf.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
