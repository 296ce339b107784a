"""Environment for Spark JVMs that tests start themselves (spark-sql, a Spark Connect server)."""
from __future__ import annotations

import os
import sys
from pathlib import Path


def spark_jvm_env(tmp: Path, python: str = sys.executable) -> dict[str, str]:
    """Env of a Spark JVM whose Python workers run `python`, as the exported script's header says.

    No PYTHONPATH: the workers must find rpl_sql and pyspark_rpl_sql the way a user's shell would.
    """
    import pyspark

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(SPARK_HOME=str(Path(pyspark.__file__).parent), PYSPARK_PYTHON=python,
               PYSPARK_DRIVER_PYTHON=python, SPARK_LOCAL_IP="127.0.0.1", LC_ALL="C.UTF-8",
               SPARK_LOG_DIR=str(tmp), SPARK_PID_DIR=str(tmp))
    for k in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        env.pop(k, None)
    return env
