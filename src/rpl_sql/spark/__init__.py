"""Everything that touches a SparkSession: views and functions, the data source, jar-free Delta reads, export."""
from rpl_sql.spark.surface import SparkSurface, attach, register

__all__ = ["SparkSurface", "attach", "register"]
