"""rpl_sql's own scratch space on this machine: `$TMPDIR/rpl_sql-<uid>/` (mode 0700, this user's), holding
what rpl_sql's processes leave there and nothing else: a quiet Spark session's console log
(`spark-<pid>.log`) and its Spark scratch directory (`spark-<pid>/`, its spark.local.dir). `rpl-sql upkeep`
removes those of processes that are gone and never looks anywhere else in $TMPDIR.
"""
from __future__ import annotations

import os
import re
import stat
import tempfile

_OWN = re.compile(r"^spark-(\d+)(?:\.log)?$")


def folder() -> str:
    """This user's scratch folder, made 0700 if missing; refused if another user owns it or it is a link."""
    path = os.path.join(tempfile.gettempdir(), f"rpl_sql-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise PermissionError(f"{path} is not a folder of this user's: remove it, or set TMPDIR elsewhere")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def spark_log(pid: int | None = None) -> str:
    return os.path.join(folder(), f"spark-{pid or os.getpid()}.log")


def spark_local_dir(pid: int | None = None) -> str:
    return os.path.join(folder(), f"spark-{pid or os.getpid()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftovers() -> list[str]:
    """The logs and Spark scratch directories in this user's scratch folder whose process is gone."""
    base = os.path.join(tempfile.gettempdir(), f"rpl_sql-{os.getuid()}")
    if not os.path.isdir(base) or os.path.islink(base):
        return []
    out = []
    for name in os.listdir(base):
        m = _OWN.match(name)
        if m and not _alive(int(m[1])):
            out.append(os.path.join(base, name))
    return sorted(out)
