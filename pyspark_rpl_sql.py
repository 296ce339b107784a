"""Spark auto-registers `pyspark_<name>` modules' DefaultSource: `USING rpl_sql` works even in spark-sql."""
from rpl_sql.spark.datasource import DefaultSource  # noqa: F401
