"""What the replica service says about each channel it runs: one small JSON file per channel, rewritten at
every heartbeat (`<warehouse>/replica/_service/<channel hash>.json`).

The state's `io_running`/`sql_running` flags are what START/STOP REPLICA asked for; this file is what is
actually running. SHOW REPLICA STATUS shows a thread as running only while a service heartbeat is fresh, and
STOP REPLICA waits (as MySQL's does) until the service reports the thread stopped, so a CHANGE REPLICATION
FILTER issued after it never meets a batch still being decided.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from dataclasses import asdict, dataclass, field, replace

STALE_SECONDS = 5.0  # a heartbeat older than this means the service is gone


@dataclass
class ChannelStatus:
    channel: str
    pid: int = 0
    host: str = ""
    updated: float = 0.0                  # time.time() of the heartbeat
    io: str = "No"                        # Replica_IO_Running: Yes | Connecting | No
    sql: str = "No"                       # Replica_SQL_Running: Yes | No
    io_state: str = ""                    # Replica_IO_State
    sql_state: str = ""                   # Replica_SQL_Running_State
    seconds_behind: int | None = None     # Seconds_Behind_Source
    read_file: str = ""                   # Source_Log_File / Read_Source_Log_Pos: what the receiver landed
    read_pos: int = 0
    retrieved_gtid_set: str = ""
    reset_at: int = 0                     # the channel's RESET REPLICA this status knows of (older: forgotten)
    source_server_id: int = 0             # Source_Server_Id / Source_UUID of the server the receiver reads
    source_uuid: str = ""
    io_version: int = -1                  # the state table version each thread last acted on: STOP REPLICA,
    sql_version: int = -1                 # committed as version V, waits until the thread says "No" as of >= V
    last_io_error: list = field(default_factory=lambda: [0, "", ""])   # errno, message, timestamp text
    last_sql_error: list = field(default_factory=lambda: [0, "", ""])

    def live(self, now: float | None = None) -> bool:
        """A fresh heartbeat from a process that still exists (when it ran on this host)."""
        now = time.time() if now is None else now
        if now - self.updated > STALE_SECONDS:
            return False
        if self.host == socket.gethostname() and self.pid:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass
        return True


def status_dir(warehouse: str) -> str:
    return os.path.join(os.fspath(warehouse), "replica", "_service")


def status_path(warehouse: str, channel: str) -> str:
    return os.path.join(status_dir(warehouse), hashlib.sha1(channel.encode("utf-8")).hexdigest()[:16] + ".json")


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def one_line(message: str) -> str:
    """An error message as SHOW REPLICA STATUS shows it: no terminal colour codes, no line breaks."""
    return " ".join(_ANSI.sub("", message).split())


def write_status(warehouse: str, st: ChannelStatus) -> None:
    """Replace the channel's status file atomically (a reader sees the old or the new one)."""
    for err in (st.last_io_error, st.last_sql_error):
        err[1] = one_line(str(err[1]))
    path = status_path(warehouse, st.channel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(asdict(st), f, ensure_ascii=False)
    os.replace(tmp, path)


def read_status(warehouse: str, channel: str) -> ChannelStatus | None:
    if "://" in os.fspath(warehouse):
        return None
    try:
        with open(status_path(warehouse, channel), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    known = ChannelStatus.__dataclass_fields__
    return ChannelStatus(**{k: v for k, v in data.items() if k in known})


def shown(st: ChannelStatus | None, io_wanted: bool, sql_wanted: bool, reset_at: int = 0) -> dict:
    """The SHOW REPLICA STATUS values this status gives (empty without a service: the flags are shown). What it
    says of a time before the channel's last RESET REPLICA (`reset_at`), positions and errors, is forgotten."""
    if st is None:
        return {}
    if st.reset_at != reset_at:
        st = replace(st, read_file="", read_pos=0, retrieved_gtid_set="", last_io_error=[0, "", ""],
                     last_sql_error=[0, "", ""])
    alive = st.live()
    out = {"last_io_error": st.last_io_error, "last_sql_error": st.last_sql_error}
    if alive:
        # Seconds_Behind_Source is NULL unless both threads run (MySQL: also while the receiver is not connected)
        behind = io_wanted and sql_wanted and st.sql == "Yes" and st.io == "Yes"
        out.update(replica_io_running=st.io if io_wanted else "No", replica_sql_running=st.sql if sql_wanted else "No",
                   io_state=st.io_state if io_wanted else "", sql_state=st.sql_state if sql_wanted else "",
                   seconds_behind=st.seconds_behind if behind else None,
                   retrieved_gtid_set=st.retrieved_gtid_set)
    else:
        out.update(replica_io_running="No", replica_sql_running="No", io_state="", sql_state="",
                   seconds_behind=None)
    if st.source_server_id:
        out.update(source_server_id=st.source_server_id, source_uuid=st.source_uuid)
    if st.read_file:  # as MySQL, a stopped receiver still shows how far it read
        out.update(source_log_file=st.read_file, read_source_log_pos=st.read_pos)
    return out
