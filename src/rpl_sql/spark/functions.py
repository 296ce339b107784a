"""Compiled SQL functions in a SparkSession: one step that compiles with the session's flags and installs them.

The Spark surface (public functions), the applier (its private set) and the spark-sql export all compile
through `compile_flags`, so every consumer gets the encoding its JVM runs best.
"""
from __future__ import annotations

from typing import Any

from rpl_sql.compile import CompiledFunctions, Guard, compile_functions
from rpl_sql.spark.env import installed_map_lookup_hash_min, jit_huge_methods, map_lookup_hash_min
from rpl_sql.state import ServerState


def compile_flags(spark: Any = None) -> dict[str, Any]:
    """The compiler's knobs for `spark`; None: a spark-sql shell of the installed pyspark, default JVM options."""
    if spark is None:
        return {"jit_huge_methods": False, "map_hash_min": installed_map_lookup_hash_min()}
    return {"jit_huge_methods": jit_huge_methods(spark), "map_hash_min": map_lookup_hash_min(spark)}


class FunctionInstaller:
    """Keeps one session's functions equal to a state's; CREATE FUNCTION runs only when the text changed."""

    def __init__(self, spark: Any, applier: bool = False):
        self.spark, self.applier = spark, applier
        self.flags = compile_flags(spark)
        self.installed: tuple[str, ...] = ()
        self.encoding = ""

    def install(self, state: ServerState, guard: Guard | None = None) -> CompiledFunctions:
        compiled = compile_functions(state, applier=self.applier, guard=guard, **self.flags)
        if compiled.statements != self.installed:
            for text in compiled.statements:
                self.spark.sql(text)
            self.installed, self.encoding = compiled.statements, compiled.encoding
        return compiled
