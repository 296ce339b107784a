"""Compiled SQL functions in a SparkSession: one step that compiles with the session's flags and installs them.

The Spark surface (public functions), the applier (its private set) and the spark-sql export all compile
through `compile_flags`, so every consumer gets the encoding its JVM runs best.
"""
from __future__ import annotations

from typing import Any

from rpl_sql import jvm
from rpl_sql.compile import JVM_FUNCTIONS, CompiledFunctions, Guard, compile_functions
from rpl_sql.spark.env import installed_map_lookup_hash_min, jit_huge_methods, map_lookup_hash_min
from rpl_sql.filters.state import ServerState



def compile_flags(spark: Any = None) -> dict[str, Any]:
    """The compiler's knobs for `spark`; None: a spark-sql shell of the installed pyspark, default JVM options.

    The JVM row code where the session can load it: a classic session (not Spark Connect) on a machine
    with a JDK; the spark-sql shell too (its script registers it through a Hive function, JVM_INSTALL)."""
    if spark is None:
        return {"jit_huge_methods": False, "map_hash_min": installed_map_lookup_hash_min(),
                "jvm": "expression" if jvm.possible() else None}
    classic = hasattr(spark, "_jsparkSession")
    return {"jit_huge_methods": jit_huge_methods(spark), "map_hash_min": map_lookup_hash_min(spark),
            "jvm": "expression" if classic and jvm.possible() else None}


def compile_with_jar(state: ServerState, flags: dict[str, Any], **kw: Any) -> tuple[CompiledFunctions, str | None]:
    """compile_functions(state, **flags, **kw) and, where it chose the JVM table code, the jar that holds it.
    Without a jar to be had (no JDK, javac failed) the compiled SQL instead, and no jar: the same results,
    slower; `flags` then loses the JVM table code, so that compiles after this one do not try again."""
    compiled = compile_functions(state, **flags, **kw)
    if compiled.jvm_spec is None:
        return compiled, None
    try:
        return compiled, str(jvm.jar_path())
    except jvm.JarUnavailableError:
        flags["jvm"] = None
        return compile_functions(state, **flags, **kw), None


def register_table_code(spark: Any, spec: str, jar: str | None = None) -> None:
    """JVM_FUNCTIONS in `spark`, deciding by `spec`: the jar added to the session once (executors fetch it
    from the driver), and Catalyst expressions' builders, loaded by the session's jar class loader, put in
    its function registry as temporary functions (what a Java UDF's registration does, minus the
    conversion of every argument to a Java object)."""
    jar = jar or str(jvm.jar_path())
    jss = spark._jsparkSession
    jvm.add_jar(spark, jar)
    gw = spark.sparkContext._gateway
    cls = jss.sharedState().jarClassLoader().loadClass(jvm.FUNCTION_CLASS)
    for name, kind in JVM_FUNCTIONS:
        args = gw.new_array(gw.jvm.java.lang.Object, 2)
        args[0], args[1] = spec, kind
        builder = cls.getConstructors()[0].newInstance(args)
        jss.sessionState().functionRegistry().createOrReplaceTempFunction(name, builder, "java_udf")


class FunctionInstaller:
    """Keeps one session's functions equal to a state's; CREATE FUNCTION runs only when the text changed."""

    def __init__(self, spark: Any, applier: bool = False, prefix: str | None = None):
        """applier: the applier's set (compile_functions(applier=True)), under `prefix` if given."""
        self.spark, self.applier, self.prefix = spark, applier, prefix
        self.flags = compile_flags(spark)
        if applier:  # it decides once per shape: the compiled SQL, and no clash with the session's JVM function
            self.flags["jvm"] = None
        self.installed: tuple = ()
        self.encoding = ""

    def install(self, state: ServerState, guard: Guard | None = None) -> CompiledFunctions:
        compiled, jar = compile_with_jar(state, self.flags, applier=self.applier, guard=guard, prefix=self.prefix)
        # the JVM function's text names no rule: its spec is half of what is installed
        if (compiled.statements, compiled.jvm_spec) != self.installed:
            if jar is not None:
                register_table_code(self.spark, compiled.jvm_spec, jar)
            for text in compiled.statements:
                self.spark.sql(text)
            self.installed, self.encoding = (compiled.statements, compiled.jvm_spec), compiled.encoding
        return compiled
