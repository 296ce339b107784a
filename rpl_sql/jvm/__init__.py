"""The JVM table code (java/rpl_sql/jvm): where rpl_sql's Java classes come from and how a session gets them.

The jar is compiled on first use with the machine's JDK against the jars of the pyspark that runs it, and
kept in a cache keyed by both (the Java sources' hash, that pyspark's version): it always matches the Spark
it runs in. Without a JDK there is no jar and the compiled SQL decides instead (rpl_sql.compile);
RPL_SQL_JVM=0 asks for the compiled SQL on purpose.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import weakref
import zipfile
from pathlib import Path
from typing import Any

from rpl_sql.errors import RplSqlError
from rpl_sql.native import cache_dir

SOURCES = Path(__file__).with_name("java")
READER_CLASS = "rpl_sql.jvm.ReplicaTableSource"  # replica tables by name through Spark's own Parquet scan
FUNCTION_CLASS = "rpl_sql.jvm.RowCodeFunction"  # Python sessions: the builder of a Catalyst expression
HIVE_CLASS = "rpl_sql.jvm.RowCodeHive"  # the spark-sql shell: CREATE FUNCTION ... USING JAR, registers the same


class JarUnavailableError(RplSqlError, RuntimeError):
    """No JVM table code here (no JDK, or javac failed); the compiled SQL decides instead."""


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def _key() -> str:
    import pyspark

    h = hashlib.sha256(pyspark.__version__.encode())
    for src in sorted(SOURCES.rglob("*.java")):
        h.update(src.relative_to(SOURCES).as_posix().encode() + b"\0" + src.read_bytes())
    return h.hexdigest()[:16]


_BUILT: dict[str, Path] = {}
_FAILED: dict[Path, JarUnavailableError] = {}  # a jar whose build failed is not tried again by this process


def jar_path() -> Path:
    """The jar of rpl_sql's Java classes for the installed pyspark, built if it is not in the cache yet."""
    key = _key()
    if key in _BUILT:
        return _BUILT[key]
    out = cache_dir() / f"rpl_sql-jvm-{key}.jar"
    if out in _FAILED:
        raise _FAILED[out]
    if not out.exists():
        try:
            _build(_spark_jars(), out)
        except OSError as e:  # a cache that cannot be written, a javac that cannot start
            _FAILED[out] = JarUnavailableError(f"cannot build {out}: {e}")
            raise _FAILED[out] from e
        except JarUnavailableError as e:
            _FAILED[out] = e
            raise
    _BUILT[key] = out
    return out


def _build(jars: Path, out: Path) -> None:
    javac = _javac()
    if javac is None:
        raise JarUnavailableError("no javac (a JDK 17) on this machine")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rpl_sql-jvm-", dir=out.parent) as tmp:
        classes = Path(tmp, "classes")
        sources = [str(p) for p in sorted(SOURCES.rglob("*.java"))]
        res = subprocess.run([javac, "-nowarn", "--release", "17", "-d", str(classes), "-cp", str(jars / "*"),
                              *sources], capture_output=True, text=True)
        if res.returncode != 0:
            raise JarUnavailableError(f"javac failed: {res.stderr.strip()[-2000:]}")
        partial = Path(tmp, "rpl_sql.jar")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: rpl_sql\r\n\r\n")
            for f in sorted(classes.rglob("*.class")):
                z.write(f, f.relative_to(classes).as_posix())
        os.replace(partial, out)  # atomic: a concurrent build leaves one whole jar


def _javac() -> str | None:
    found = shutil.which("javac")
    if found:
        return found
    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "javac") if home and os.path.exists(os.path.join(home, "bin", "javac")) else None


def possible() -> bool:
    """The jar is built already or a JDK is here to build it (cheap: nothing is compiled)."""
    if os.environ.get("RPL_SQL_JVM", "1") == "0":
        return False
    try:
        return (cache_dir() / f"rpl_sql-jvm-{_key()}.jar").exists() or _javac() is not None
    except ImportError:
        return False


_JARS_ADDED: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def add_jar(spark: Any, jar: str) -> None:
    """The jar in a classic SparkSession's class loader, once (executors fetch it from the driver)."""
    if _JARS_ADDED.get(spark) != jar:
        spark._jsparkSession.sessionState().resourceLoader().addJar(jar)  # ADD JAR, without quoting a path into SQL
        _JARS_ADDED[spark] = jar


def reader_jar(spark: Any) -> str | None:
    """The jar whose READER_CLASS reads replica tables with Spark's own scan, added to `spark`; None where the
    session cannot load it (Spark Connect, no JDK to build it, RPL_SQL_JVM=0)."""
    if not hasattr(spark, "_jsparkSession") or not possible():
        return None
    try:
        jar = str(jar_path())
    except JarUnavailableError:
        return None
    add_jar(spark, jar)
    return jar
