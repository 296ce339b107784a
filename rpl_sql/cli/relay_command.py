"""`rpl-sql relay`: run the relay beside a channel's source, or show a running one's status."""
from __future__ import annotations

import argparse
import getpass
import json
import os
import signal
import sys
import time

from rpl_sql.cli.options import add_warehouse_option
from rpl_sql.errors import MySQLError, error_text
from rpl_sql.storage.store import resolve_warehouse

PASSWORD_ENV = "RPL_SQL_RELAY_PASSWORD"


def relay_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="rpl-sql relay",
        description="Read a channel's source binlog once and serve MySQL/MariaDB replicas (CHANGE MASTER TO "
                    "MASTER_HOST=<relay>) each only what its filters apply: the channel 'replica_<server_id>' of "
                    "this warehouse when it exists, else the relay's own channel. Positions and GTIDs stay the "
                    "source's.")
    add_warehouse_option(p)
    p.add_argument("--channel", required=True, help="the channel whose source the relay reads")
    p.add_argument("--listen", default="127.0.0.1:3307", metavar="HOST:PORT",
                   help="where replicas connect (default 127.0.0.1:3307; 0.0.0.0 to listen on every interface)")
    p.add_argument("--user", default="repl", help="the user replicas log in as (default repl)")
    p.add_argument("--spool", metavar="DIR", help="where the copy of the binlog goes (default: under the warehouse)")
    p.add_argument("--status", action="store_true", help="show a running relay's status and exit")
    args = p.parse_args(argv)
    warehouse = resolve_warehouse(args.warehouse)
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        p.error(f"--listen {args.listen!r}: give HOST:PORT")
    from rpl_sql.relay.relay_service import Relay  # pymysql and the pipeline: loaded for the relay only

    if args.status:
        try:
            path = os.path.join(Relay.spool_folder(warehouse, args.channel, args.spool), "status.json")
            print(json.dumps(json.load(open(path)), indent=1))
        except FileNotFoundError:
            sys.stderr.write(f"no relay has run for channel {args.channel!r} in {warehouse}\n")
            return 1
        return 0
    password = os.environ.get(PASSWORD_ENV)
    if password is None:
        password = getpass.getpass(f"password replicas log in with as {args.user!r} ({PASSWORD_ENV} to script it): ")
    try:
        relay = Relay(warehouse, args.channel, host=host, port=int(port), user=args.user, password=password,
                      spool=args.spool).start()
    except MySQLError as e:
        sys.stderr.write(error_text(e))
        return 1
    signalled: list[int] = []  # the handler takes no lock: one that set an Event the main thread waits on
    for sig in (signal.SIGINT, signal.SIGTERM):  # could land while that thread holds the Event's own lock
        signal.signal(sig, lambda number, _: signalled.append(number))
    sys.stderr.write(f"rpl-sql relay: channel {args.channel!r} on {host}:{relay.server.port}, spool "
                     f"{relay.spool.folder}; Ctrl-C stops it\n")
    while not signalled:
        time.sleep(0.2)
    relay.close()
    return 0
