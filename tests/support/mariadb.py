"""Throwaway MariaDB servers for tests and benchmarks: real binlogs, no mocks.

Each `MariaDBServer` gets its own data directory, socket and free TCP port, binlogs in MIXED format with
`binlog_row_metadata=FULL` (row images carry column names), and a password-less `root@127.0.0.1` for TCP.
It is always stopped (SHUTDOWN, then SIGKILL by pid) at teardown, even when the test failed.

    >>> with MariaDBServer(tmp_path / "m1", server_id=1) as m:   # doctest: +SKIP
    ...     m.execute("CREATE DATABASE d1")

Fixtures (module-scoped, so a test file starts its servers once; `reset()` between tests):
`mariadb` (one server) and `mariadb_pair` (two servers, for two channels). Without `mariadbd` on PATH or in
/usr/sbin they skip with the reason; CI installs it with `apt-get install -y mariadb-server`.
"""
from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

try:
    import pytest
except ImportError:  # used by bench/ without pytest
    pytest = None

SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"])
SYSTEM_DBS = ("mysql", "information_schema", "performance_schema", "sys")
# Small footprints: two servers and Spark share 2 cores; durability is irrelevant for throwaway data.
LIGHT_OPTIONS = ("--innodb-buffer-pool-size=64M", "--innodb-log-file-size=32M", "--innodb-flush-log-at-trx-commit=2",
                 "--sync-binlog=0", "--skip-innodb-doublewrite", "--max-connections=50",
                 "--performance-schema=OFF")


def binaries() -> tuple[str, str] | None:
    """(mariadbd, mariadb-install-db) paths, or None when MariaDB is not installed."""
    server = shutil.which("mariadbd", path=SEARCH_PATH) or shutil.which("mysqld", path=SEARCH_PATH)
    install = shutil.which("mariadb-install-db", path=SEARCH_PATH) or \
        shutil.which("mysql_install_db", path=SEARCH_PATH)
    if not server or not install:
        return None
    return server, install


def free_port() -> int:
    """A free port below the kernel's ephemeral range. A port the kernel handed out (bind to 0) is one it hands
    out again for outgoing connections, so a server restarted on it could find it taken: CI's relay test met
    EADDRINUSE that way while the relay was down and its replica was reconnecting."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.SystemRandom().randrange(max(1024, low - 12_000), low)  # not the seeded global one
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def port_holders(port: int) -> str:
    """Who holds 127.0.0.1:`port`, from /proc: each socket on it (state, peer) and the processes with it open."""
    states = dict(zip(("01", "02", "03", "04", "05", "06", "07", "08", "09", "0A", "0B"), (
        "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK",
        "LISTEN", "CLOSING")))
    found = []  # (inode, state); sockets in TIME_WAIT have no inode (0), so several can share one
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port:
                peer = int(cols[2].rsplit(":", 1)[1], 16)
                found.append((cols[9], f"{states.get(cols[3], cols[3])} peer port {peer}"))
    inodes, owners = {inode for inode, _ in found}, {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            owners.setdefault(link[8:-1], set()).add(f"{pid} {f.read()[:120]!r}")
    return "; ".join(f"{state} by {sorted(owners.get(inode, ())) or 'no process'}" for inode, state in found) \
        or "nothing"


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_TEMPLATE: dict[str, Path] = {}


def _installed_datadir(install: str, base: Path) -> Path:
    """A freshly initialised data directory; later servers of the process copy the first one (saves ~3 s each)."""
    key = install
    template = _TEMPLATE.get(key)
    if template is None or not template.exists():
        template = base.parent / f"_mariadb_template_{os.getpid()}"
        if template.exists():
            shutil.rmtree(template)
        log = base.parent / f"_mariadb_install_{os.getpid()}.log"
        with open(log, "wb") as out:
            rc = subprocess.call([install, "--no-defaults", f"--datadir={template}",
                                  "--auth-root-authentication-method=normal", "--skip-test-db"],
                                 stdout=out, stderr=subprocess.STDOUT)
        if rc != 0:
            raise RuntimeError(f"mariadb-install-db failed ({rc}), see {log}")
        _TEMPLATE[key] = template
    data = base / "data"
    shutil.copytree(template, data)
    return data


class MariaDBServer:
    """One mariadbd process on 127.0.0.1:<port>, binlog on, killed for sure by `stop()`."""

    def __init__(self, base: str | os.PathLike, server_id: int = 1, extra_options: Iterable[str] = LIGHT_OPTIONS):
        self.base = Path(base)
        self.server_id = server_id
        self.extra_options = tuple(extra_options)
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.socket = str(self.base / "sock")

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 60.0) -> "MariaDBServer":
        found = binaries()
        if found is None:
            raise RuntimeError("mariadbd is not installed (apt-get install -y mariadb-server)")
        server, install = found
        self.base.mkdir(parents=True, exist_ok=True)
        first = not (self.base / "data").exists()
        data = _installed_datadir(install, self.base) if first else self.base / "data"
        # A socket path must stay under ~107 bytes; pytest's tmp paths can be long.
        if len(self.socket) > 100:
            self.socket = f"/tmp/mdb-{os.getpid()}-{self.server_id}-{free_port()}.sock"
        for attempt in range(3):  # the free port can be taken between probe and bind
            if first or attempt:
                self.port = free_port()
            args = [server, "--no-defaults", f"--datadir={data}", f"--port={self.port}",
                    "--bind-address=127.0.0.1", f"--socket={self.socket}", f"--log-bin={self.base / 'binlog'}",
                    f"--server-id={self.server_id}", "--binlog-format=MIXED", "--binlog-row-metadata=FULL",
                    "--user=root", "--skip-name-resolve", f"--pid-file={self.base / 'mariadbd.pid'}",
                    f"--log-error={self.base / 'error.log'}", *self.extra_options]
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True)
            try:
                self._wait_ready(timeout)
                break
            except RuntimeError:
                self._kill()
                if attempt == 2:
                    raise
        if first:
            self.execute("CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''",
                         "GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
                         "FLUSH PRIVILEGES", "RESET MASTER", socket=True)
        return self

    def restart(self) -> "MariaDBServer":
        """Stop and start on the same data directory and port (binlogs kept; a new binlog file begins)."""
        self.stop()
        return self.start()

    def _wait_ready(self, timeout: float) -> None:
        import pymysql

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self.proc.returncode}: {self.error_log()[-2000:]}")
            try:
                pymysql.connect(unix_socket=self.socket, user="root", password="", connect_timeout=1).close()
                return
            except Exception:
                time.sleep(0.1)
        raise RuntimeError(f"mariadbd not ready after {timeout}s: {self.error_log()[-2000:]}")

    def error_log(self) -> str:
        try:
            return (self.base / "error.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SHUTDOWN, wait a little, then SIGKILL by pid: a server never outlives its test."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.execute("SHUTDOWN", socket=True, timeout=5)
            except Exception:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._kill()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> "MariaDBServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ SQL

    def connect(self, database: str | None = None, socket: bool = False, timeout: int = 30, **kw: Any):
        """A pymysql connection (autocommit on), over TCP as root@127.0.0.1 unless `socket`."""
        import pymysql

        where = {"unix_socket": self.socket} if socket else {"host": "127.0.0.1", "port": self.port}
        return pymysql.connect(user="root", password="", database=database, autocommit=True,
                               connect_timeout=timeout, read_timeout=600, write_timeout=600, **where, **kw)

    def execute(self, *statements: str, database: str | None = None, socket: bool = False,
                timeout: int = 30) -> list[tuple]:
        """Run statements on one connection (one session: SET SESSION and USE carry over); last result rows."""
        conn = self.connect(database, socket=socket, timeout=timeout)
        try:
            rows: list[tuple] = []
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
                    rows = list(cur.fetchall()) if cur.description else []
            return rows
        finally:
            conn.close()

    def binlog_end(self) -> tuple[str, int]:
        """(file, position) of the end of the binlog: where a complete ingest stops."""
        rows = self.execute("SHOW MASTER STATUS")
        return rows[0][0], int(rows[0][1])

    def reset(self) -> None:
        """Drop user databases and start a fresh binlog (RESET MASTER): the next test sees a clean source."""
        dbs = [r[0] for r in self.execute("SHOW DATABASES") if r[0] not in SYSTEM_DBS]
        self.execute("SET SESSION sql_log_bin=0", *[f"DROP DATABASE `{d}`" for d in dbs], "RESET MASTER")

    def follow(self, source: "MariaDBServer", connection: str, settings: dict[str, str] | None = None,
               start: tuple[str, int] | None = None) -> None:
        """Make this server a MariaDB replica of `source` on the named connection, with `replicate_*` settings
        (variable name -> value, set per connection with the threads stopped), from `start` (default: the
        source's first binlog) and start it: the oracle a replica test compares rpl_sql with."""
        file, pos = start or (source.execute("SHOW BINARY LOGS")[0][0], 4)
        sets = [f"SET GLOBAL {k} = '{v}'" for k, v in (settings or {}).items()]
        self.execute(f"SET @@default_master_connection = '{connection}'",
                     f"CHANGE MASTER '{connection}' TO MASTER_HOST='127.0.0.1', MASTER_PORT={source.port}, "
                     f"MASTER_USER='root', MASTER_USE_GTID=no, MASTER_LOG_FILE='{file}', MASTER_LOG_POS={pos}",
                     *sets, f"START SLAVE '{connection}'")

    def stop_following(self) -> None:
        """Stop and forget every replica connection of this server."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW ALL SLAVES STATUS")
                names = [d[0] for d in cur.description]
                conns = [dict(zip(names, r))["Connection_name"] for r in cur.fetchall()]
                for c in conns:
                    name = c.replace("\\", "\\\\").replace("'", "''")
                    cur.execute(f"STOP SLAVE '{name}'")
                    cur.execute(f"RESET SLAVE '{name}' ALL")
        finally:
            conn.close()

    def caught_up(self, source: "MariaDBServer", connection: str, timeout: float = 60.0) -> dict:
        """Wait until the connection's SQL thread has executed the source's whole binlog; its status row.
        Raises with Last_SQL_Error when the replica stopped on an error."""
        end = source.binlog_end()
        deadline = time.monotonic() + timeout
        while True:
            conn = self.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute(f"SHOW SLAVE '{connection}' STATUS")
                    names = [d[0] for d in cur.description]
                    row = dict(zip(names, cur.fetchone()))
            finally:
                conn.close()
            if row.get("Last_SQL_Errno") or row.get("Last_IO_Errno"):
                raise RuntimeError(f"oracle replica {connection!r} stopped: {row.get('Last_SQL_Error')} "
                                   f"{row.get('Last_IO_Error')}")
            if (row["Relay_Master_Log_File"], int(row["Exec_Master_Log_Pos"])) == end:
                return row
            if time.monotonic() > deadline:
                raise TimeoutError(f"oracle replica {connection!r} at {row['Relay_Master_Log_File']}:"
                                   f"{row['Exec_Master_Log_Pos']}, source at {end}")
            time.sleep(0.1)

    def contents(self) -> dict[tuple[str, str] | str, list[tuple] | None]:
        """Every user database (key: its name, value None) and table (key: (db, table), value: its rows in
        column order, sorted) with the column names as the first row."""
        out: dict = {}
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION time_zone = '+00:00'")
                cur.execute("SHOW DATABASES")
                for (db,) in cur.fetchall():
                    if db in SYSTEM_DBS:
                        continue
                    out[db] = None
                    cur.execute(f"SHOW FULL TABLES FROM `{db}` WHERE Table_type = 'BASE TABLE'")
                    for tab, _ in cur.fetchall():
                        cur.execute(f"SELECT * FROM `{db}`.`{tab}`")
                        names = tuple(d[0] for d in cur.description)
                        out[(db, tab)] = [names] + sorted(cur.fetchall(), key=repr)
        finally:
            conn.close()
        return out

    def channel_sql(self, channel: str, port: int | None = None) -> str:
        """The CHANGE REPLICATION SOURCE statement for a channel reading this server (through `port`, a proxy's
        in front of it, when given)."""
        return (f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT={port or self.port}, "
                f"SOURCE_USER='root' FOR CHANNEL '{channel}'")


def two_channels(pair, warehouse, then: str = ""):
    """Both servers of `pair` reset (fresh binlog, no user databases), channels 'a' and 'b' reading them,
    then the statements `then`; returns the rpl_sql Session."""
    import rpl_sql

    for server in pair:
        server.reset()
    session = rpl_sql.connect(warehouse)
    session.execute(";\n".join(filter(None, [pair[0].channel_sql("a"), pair[1].channel_sql("b"), then])))
    return session


_INSTALL_TRIED: list[str] = []


def install_mariadb() -> str:
    """Install Debian's MariaDB server where this run can (root with apt-get, RPL_SQL_NO_INSTALL unset), once;
    returns what happened, for the skip reason when it could not."""
    if _INSTALL_TRIED:
        return _INSTALL_TRIED[0]
    if os.environ.get("RPL_SQL_NO_INSTALL"):
        why = "RPL_SQL_NO_INSTALL is set"
    elif not shutil.which("apt-get") or os.geteuid() != 0:
        why = "not root with apt-get: install mariadb-server yourself"
    else:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        steps = [["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "mariadb-server", "mariadb-client"]]
        why = "installed"
        for cmd in steps:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                why = f"`{' '.join(cmd)}` failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
                break
    _INSTALL_TRIED.append(why)
    return why


def _require():
    if binaries() is None:
        why = install_mariadb()
        if binaries() is None:
            pytest.skip(f"mariadbd is not installed and this run could not install it ({why})")


@contextlib.contextmanager
def running(tmp_path_factory, *server_ids: int) -> Iterator[tuple["MariaDBServer", ...]]:
    """Started servers with these server ids (skips without MariaDB), stopped at the end whatever happened:
    the body of a module-scoped fixture."""
    _require()
    servers = [MariaDBServer(tmp_path_factory.mktemp(f"mariadb{i}"), server_id=i) for i in server_ids]
    try:
        for s in servers:
            s.start()
        yield tuple(servers)
    finally:
        for s in servers:
            s.stop()


if pytest is not None:
    @pytest.fixture(scope="module")
    def mariadb(tmp_path_factory):
        """One running MariaDB server for the module; call `.reset()` for a clean binlog."""
        _require()
        server = MariaDBServer(tmp_path_factory.mktemp("mariadb"), server_id=101)
        try:
            yield server.start()
        finally:
            server.stop()

    @pytest.fixture(scope="module")
    def mariadb_pair(tmp_path_factory):
        """Two running MariaDB servers (server ids 201, 202): sources of two channels."""
        with running(tmp_path_factory, 201, 202) as servers:
            yield servers


class SourceWorkload(threading.Thread):
    """`body(conn, cur)` on a connection of its own to `server`, in a thread, after `session_sql`: `done` is set
    when it ends, and `failed` holds what it raised."""

    def __init__(self, server: "MariaDBServer", body, *session_sql: str):
        super().__init__(daemon=True)
        self.server, self.body, self.session_sql = server, body, session_sql
        self.done = threading.Event()
        self.failed: list[BaseException] = []

    def run(self) -> None:
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                for sql in self.session_sql:
                    cur.execute(sql)
                self.body(conn, cur)
        except BaseException as e:
            self.failed.append(e)
        finally:
            conn.close()
            self.done.set()


def churn_keyed_table(cur, rnd, table: str, n: int) -> int:
    """One seeded change to `table` (`id INT PRIMARY KEY, k INT, v VARCHAR`): an insert, an update, a delete, or
    a new primary key for a row (maybe one a copy already passed, maybe one it has not reached); returns the
    highest id inserted so far."""
    k, op = rnd.randint(1, n), rnd.random()
    if op < 0.3:
        n += 1
        cur.execute(f"INSERT IGNORE INTO {table} VALUES (%s, %s, 'new')", (n, k % 10))
    elif op < 0.6:
        cur.execute(f"UPDATE {table} SET v = CONCAT('u', %s), k = k + 1 WHERE id = %s", (k, k))
    elif op < 0.8:
        cur.execute(f"DELETE FROM {table} WHERE id = %s", (k,))
    else:
        cur.execute(f"UPDATE IGNORE {table} SET id = %s WHERE id = %s", (n + 100_000 + k, k))
    return n
