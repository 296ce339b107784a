"""Environment for Spark JVMs that tests start themselves (spark-sql, a Spark Connect server)."""
from __future__ import annotations

import os
import sys
from pathlib import Path


def spark_jvm_env(tmp: Path) -> dict[str, str]:
    """Env of a Spark JVM whose Python workers import this checkout's rpl_sql and pyspark_rpl_sql."""
    import pyspark
    import pyspark_rpl_sql

    env = dict(os.environ)
    # Spark lists `pyspark_*` modules with pkgutil.iter_modules(), blind to editable-install import hooks.
    paths = [str(Path(pyspark_rpl_sql.__file__).resolve().parent)] + \
        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(SPARK_HOME=str(Path(pyspark.__file__).parent), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONPATH=os.pathsep.join(paths),
               SPARK_LOCAL_IP="127.0.0.1", LC_ALL="C.UTF-8", SPARK_LOG_DIR=str(tmp), SPARK_PID_DIR=str(tmp))
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        env.pop(k, None)
    return env
