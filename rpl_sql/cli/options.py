"""The options every subcommand shares, declared once: `--warehouse`, and the Spark options of every command that
starts Spark, spelled as spark-sql spells them."""
from __future__ import annotations

import argparse

DEFAULT_MASTER = "default: spark.master in spark-defaults.conf, else $MASTER, else local[2]"
WAREHOUSE_HELP = "warehouse directory (default: $RPL_SQL_WAREHOUSE or ./rpl_warehouse)"


def add_warehouse_option(p: argparse.ArgumentParser, help: str = WAREHOUSE_HELP) -> None:
    """`--warehouse WH`: where the replica server's state and tables live."""
    p.add_argument("--warehouse", help=help)


def add_spark_options(p: argparse.ArgumentParser, master_help: str) -> None:
    """`--master`, `--conf KEY=VALUE` (repeatable) and `-v/--verbose`."""
    p.add_argument("--master", help=master_help)
    p.add_argument("--conf", metavar="KEY=VALUE", action="append", default=[], help="a Spark setting (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show Spark's own log and warnings (by default they go to a log file in $TMPDIR)")


def spark_conf(p: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """The `--conf` settings as a dict; a setting without `=` is a usage error (exit 2), as in spark-sql."""
    bad = [c for c in args.conf if "=" not in c]
    if bad:
        p.error(f"--conf wants KEY=VALUE, got {bad[0]!r}")
    return dict(c.split("=", 1) for c in args.conf)
