"""Statement results as Spark DataFrames (SHOW REPLICA STATUS and friends)."""
from __future__ import annotations

from typing import Any


def result_frame(spark: Any, result) -> Any:
    """A DataFrame of a replication statement's rows; every column a STRING except integers and times."""
    from pyspark.sql.types import StructType

    if not result.columns:
        return spark.createDataFrame([], StructType([]))
    schema = ", ".join(f"`{c}` {_type(result.rows, i)}" for i, c in enumerate(result.columns))
    return spark.createDataFrame([tuple(r) for r in result.rows], schema)


def _type(rows: list[tuple], i: int) -> str:
    values = [r[i] for r in rows if r[i] is not None]
    if values and all(isinstance(v, bool) for v in values):
        return "BOOLEAN"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "BIGINT"
    from datetime import datetime

    if values and all(isinstance(v, datetime) for v in values):
        return "TIMESTAMP"
    return "STRING"
