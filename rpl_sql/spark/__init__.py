"""Everything that touches a SparkSession: views and functions, the data source, jar-free Delta reads, export.

Names resolve on first use, so importing one module of this package (say `spark.env`) loads no compiler.
"""
from typing import Any

__all__ = ["SparkSurface", "attach", "register"]


def attach_when_needed(session: Any) -> None:
    """`attach`, loaded only when a session first needs Spark: what the front ends (rpl_sql.connect, the shell,
    the magic) hand a Session opened with spark=True, since the session layer sits below this one."""
    from rpl_sql.spark.surface import attach

    attach(session)


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rpl_sql.spark import surface

        return getattr(surface, name)
    raise AttributeError(f"module 'rpl_sql.spark' has no attribute {name!r}")
