"""What SHOW REPLICA STATUS says of a failed replica thread: Last_IO_Errno and Last_IO_Error as MySQL names a
receiver's failure, and the error's timestamp."""
from __future__ import annotations

from datetime import datetime, timezone

from rpl_sql.pipeline.ingest_position import IngestError

_NO_SPACE = {28: ("No space left on device", "os error 28", "Errno 28"),
             122: ("Disk quota exceeded", "os error 122", "Errno 122")}


def io_error(e: Exception) -> tuple[int, str]:
    """Last_IO_Errno and Last_IO_Error of a receiver failure, as MySQL would name it: the pymysql error's code
    (the source's own, or the client's, as 2013 for a connection lost), 1026 (ER_ERROR_ON_WRITE) when the
    warehouse could not be written, 13114 when the events table refused the batch, else 2003 (the source could
    not be reached)."""
    text = f"{type(e).__name__}: {e}".split("\nstack backtrace:")[0]  # a Rust panic's trace is no message
    for errno, marks in _NO_SPACE.items():
        if any(s in text for s in marks) or (isinstance(e, OSError) and e.errno == errno):
            return 1026, f"Error writing file in the warehouse (errno: {errno} - {marks[0]}): {text}"
    if isinstance(e, IngestError):
        return getattr(e, "code", 13114), text
    code = getattr(e, "args", [None])[0] if type(e).__module__.startswith("pymysql") else None  # the server's
    return (code if isinstance(code, int) and not isinstance(code, bool) else 2003), text


def error_stamp() -> str:
    """Last_*_Error_Timestamp as MySQL shows it."""
    return datetime.now(timezone.utc).strftime("%y%m%d %H:%M:%S")
