"""A randomised workload on a real MariaDB primary, against a real MariaDB replica with the same filters: DDL of
every kind the docs list (CREATE, CREATE LIKE, ALTER adding with and without defaults, dropping, renaming and
changing columns, RENAME, TRUNCATE, DROP), every type with its edge values and hostile column names, DML that
changes keys, statements the service cannot apply exactly (which must stop the channel), and the service
SIGKILLed at random moments. Every stop must name the transaction it stopped before, with the executed GTID set
just before it; after the skip its message gives, the workload goes on. In the end every replica table equals
the MariaDB replica's: nothing in between."""
from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.support.mariadb import SourceWorkload, running
from tests.pipeline.replica.test_replica import _normal, _ours
from tests.pipeline.replica.test_replica_service import (caught_up, fresh_pair, killed_and_restarted, start_service,
                                                         status, wait_for)
from tests.pipeline.replica.test_replica_values import _text_decimals

# (SQL type, edge values as SQL literals)
TYPES = [
    ("TINYINT", ["-128", "127", "0"]), ("TINYINT UNSIGNED", ["255", "0"]), ("SMALLINT", ["-32768", "32767"]),
    ("MEDIUMINT UNSIGNED", ["16777215", "0"]), ("INT", ["-2147483648", "2147483647"]),
    ("BIGINT", ["-9223372036854775808", "9223372036854775807"]), ("BIGINT UNSIGNED", ["18446744073709551615", "0"]),
    ("DECIMAL(65,30)", ["-99999999999999999999999999999999999.999999999999999999999999999999",
                        "0.000000000000000000000000000001"]),
    ("DECIMAL(10,2)", ["-99999999.99", "0.01"]), ("FLOAT", ["3.40282e38", "-1.17549e-38", "0"]),
    ("DOUBLE", ["1.7976931348623157e308", "-2.2250738585072014e-308", "4.9e-324"]),
    ("BIT(1)", ["b'0'", "b'1'"]), ("BIT(64)", ["18446744073709551615", "0"]),
    ("DATE", ["'1000-01-01'", "'9999-12-31'"]),
    ("DATETIME(6)", ["'9999-12-31 23:59:59.999999'", "'1000-01-01 00:00:00'"]),
    ("TIMESTAMP(3)", ["'2038-01-19 03:14:07.999'", "'1970-01-01 00:00:01'"]),
    ("TIME(6)", ["'-838:59:59'", "'-00:00:00.000001'", "'838:59:59'"]), ("TIME", ["'-12:34:56'"]),
    ("YEAR", ["1901", "2155"]), ("CHAR(3) CHARACTER SET utf8mb4", ["'ü✓'", "''"]),
    ("VARCHAR(20) CHARACTER SET utf8mb4", ["'x''\\\\`\"%_é日本'", "' '"]), ("TEXT", ["'long text'", "''"]),
    ("BLOB", ["x'00ff'", "''"]), ("ENUM('a','b')", ["'a'", "'b'"]), ("SET('x','y','z')", ["''", "'x,z'"]),
    ("JSON", ["'{\"a\": [1, 2]}'", "'[]'"]),
]
COLUMN_NAMES = ["c{}", "C{} x", "ü{}`q", "c{}'d"]


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Workload:
    """The source's tables as the workload made them, and the statements that change them."""

    def __init__(self, rnd: random.Random):
        self.rnd = rnd
        self.tables: dict[str, dict] = {}  # name -> {"cols": {name: (type index, nullable)}, "ids": set}
        self.n = 0
        self.injected: list[tuple[str, str]] = []  # (statement, the GTID set before it)

    def fresh(self, pattern: str) -> str:
        self.n += 1
        return pattern.format(self.n)

    def value(self, col: tuple[int, bool]) -> str:
        t, nullable = col
        return "NULL" if nullable and self.rnd.random() < 0.15 else self.rnd.choice(TYPES[t][1])

    def column_def(self, name: str, t: int, default: bool) -> tuple[str, tuple[int, bool]]:
        text = f"{q(name)} {TYPES[t][0]}"
        if default:
            lit, nullable = self.rnd.choice(TYPES[t][1]), self.rnd.random() < 0.5
            return text + (" NULL" if nullable else " NOT NULL") + f" DEFAULT {lit}", (t, nullable)
        return text + " NULL", (t, True)

    def step(self, cur) -> None:
        rnd = self.rnd
        names = sorted(self.tables)
        with_rows = [t for t in names if self.tables[t]["ids"]]
        op = rnd.choices(["create", "like", "insert", "update", "rekey", "delete", "add", "drop_col", "rename_col",
                          "rename", "truncate", "drop", "ignored", "inject"],
                         [3, 1, 14, 6, 2, 3, 3, 2, 2, 1, 1, 1, 2, 1])[0]
        if op == "create" or not names:
            name = self.fresh("t{}")
            made = {self.fresh(rnd.choice(COLUMN_NAMES)): self.column_def("", rnd.randrange(len(TYPES)), False)
                    for _ in range(rnd.randint(1, 4))}
            cols = {c: col for c, (_, col) in made.items()}
            defs = ", ".join(q(c) + text[2:] for c, (text, _) in made.items())
            cur.execute(f"CREATE TABLE fz.{q(name)} (id INT PRIMARY KEY, {defs})")
            self.tables[name] = {"cols": cols, "ids": set()}
            return
        t = rnd.choice(names)
        tab = self.tables[t]
        if op == "like":
            name = self.fresh("t{}")
            cur.execute(f"CREATE TABLE fz.{q(name)} LIKE fz.{q(t)}")
            self.tables[name] = {"cols": dict(tab["cols"]), "ids": set()}
        elif op == "insert" or (op in ("update", "rekey", "delete") and not tab["ids"]):
            ids = [self.fresh("{}") for _ in range(rnd.randint(1, 3))]
            cols = list(tab["cols"])
            rows = ", ".join("(" + ", ".join([i] + [self.value(tab["cols"][c]) for c in cols]) + ")" for i in ids)
            cur.execute(f"INSERT INTO fz.{q(t)} (id{''.join(', ' + q(c) for c in cols)}) VALUES {rows}")
            tab["ids"].update(int(i) for i in ids)
        elif op == "update" and tab["cols"]:
            c = rnd.choice(list(tab["cols"]))
            cur.execute(f"UPDATE fz.{q(t)} SET {q(c)} = {self.value(tab['cols'][c])} "
                        f"WHERE id = {rnd.choice(sorted(tab['ids']))}")
        elif op == "rekey":
            old = rnd.choice(sorted(tab["ids"]))
            new = int(self.fresh("{}")) + 1_000_000
            cur.execute(f"UPDATE fz.{q(t)} SET id = {new} WHERE id = {old}")
            tab["ids"].discard(old)
            tab["ids"].add(new)
        elif op == "delete":
            k = rnd.choice(sorted(tab["ids"]))
            cur.execute(f"DELETE FROM fz.{q(t)} WHERE id = {k}")
            tab["ids"].discard(k)
        elif op == "add":
            c = self.fresh(rnd.choice(COLUMN_NAMES))
            text, col = self.column_def(c, rnd.randrange(len(TYPES)), rnd.random() < 0.6)
            where = " AFTER id" if rnd.random() < 0.3 else ""
            cur.execute(f"ALTER TABLE fz.{q(t)} ADD COLUMN {text}{where}")
            tab["cols"][c] = col
        elif op == "drop_col" and tab["cols"]:
            c = rnd.choice(list(tab["cols"]))
            cur.execute(f"ALTER TABLE fz.{q(t)} DROP COLUMN {q(c)}")
            del tab["cols"][c]
        elif op == "rename_col" and tab["cols"]:
            c = rnd.choice(list(tab["cols"]))
            new = self.fresh(rnd.choice(COLUMN_NAMES))
            if rnd.random() < 0.5:
                cur.execute(f"ALTER TABLE fz.{q(t)} RENAME COLUMN {q(c)} TO {q(new)}")
            else:
                cur.execute(f"ALTER TABLE fz.{q(t)} CHANGE COLUMN {q(c)} {q(new)} {TYPES[tab['cols'][c][0]][0]} NULL")
                tab["cols"][c] = (tab["cols"][c][0], True)
            tab["cols"] = {new if k == c else k: v for k, v in tab["cols"].items()}
        elif op == "rename":
            new = self.fresh("t{}")
            cur.execute(f"RENAME TABLE fz.{q(t)} TO fz.{q(new)}")
            self.tables[new] = self.tables.pop(t)
        elif op == "truncate":
            cur.execute(f"TRUNCATE TABLE fz.{q(t)}")
            tab["ids"].clear()
        elif op == "drop":
            cur.execute(f"DROP TABLE fz.{q(t)}")
            del self.tables[t]
        elif op == "ignored":
            cur.execute("CREATE TABLE IF NOT EXISTS other.x (id INT PRIMARY KEY, v INT)")
            cur.execute(f"INSERT INTO other.x VALUES ({self.fresh('{}')}, 1)")
        elif op == "inject" and with_rows:
            # MariaDB's parenthesised column list, which sqlglot cannot read: the service must stop before it
            t = rnd.choice(with_rows)
            c = self.fresh("x{}")
            cur.execute("SELECT @@gtid_binlog_pos")
            before = cur.fetchone()[0]
            stmt = f"ALTER TABLE fz.{q(t)} ADD COLUMN ({q(c)} INT)"
            cur.execute(stmt)
            self.tables[t]["cols"][c] = (4, True)
            self.injected.append((stmt, before))

    def touch_all(self, cur) -> None:
        """A row event on every table: a table whose ALTER was skipped takes the source's columns from it."""
        for t in sorted(self.tables):
            cur.execute(f"INSERT INTO fz.{q(t)} (id) VALUES (-1)")
            cur.execute(f"DELETE FROM fz.{q(t)} WHERE id = -1")


def _fz(contents: dict) -> dict:
    return {k: v for k, v in contents.items() if k == "fz" or (isinstance(k, tuple) and k[0] == "fz")}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with running(tmp_path_factory, 911, 912) as pair:
        yield pair


@pytest.mark.parametrize("seed", [11, 23])
def test_a_random_workload_under_sigkills_ends_equal_to_a_mariadb_replica(warehouse, servers, seed):
    src, oracle = servers
    session = fresh_pair(warehouse, src, oracle, "REPLICATE_WILD_DO_TABLE = ('fz.%')",
                         {"replicate_wild_do_table": "fz.%"})
    src.execute("SET SESSION binlog_format = ROW", "CREATE DATABASE fz", "CREATE DATABASE other")
    rnd = random.Random(seed)
    work = Workload(random.Random(seed * 7))
    def run(conn, cur):
        for _ in range(160):
            work.step(cur)
            conn.commit()
            time.sleep(0.01)
        work.touch_all(cur)
        conn.commit()

    worker = SourceWorkload(src, run, "SET SESSION binlog_format = ROW", "SET SESSION time_zone = '+00:00'")
    handled: list[str] = []

    def go_past_a_stop(row: dict) -> None:
        """The stop names an injected statement and stands just before it; the skip its message gives."""
        assert row["Last_SQL_Errno"] == 1105, row["Last_SQL_Error"]
        named = [(s, before) for s, before in work.injected if s in row["Last_SQL_Error"] and s not in handled]
        assert len(named) == 1, (row["Last_SQL_Error"], work.injected, handled)
        stmt, before = named[0]
        assert row["Executed_Gtid_Set"] == before, (stmt, row["Executed_Gtid_Set"], before)
        assert "sql_replica_skip_counter = 1" in row["Last_SQL_Error"]
        handled.append(stmt)
        session.execute("SET GLOBAL sql_replica_skip_counter = 1;\nSTART REPLICA SQL_THREAD FOR CHANNEL 'a'")

        def past(r: dict) -> bool:  # or stopped at once again, before the next injected statement
            return r["Last_SQL_Errno"] == 0 or stmt not in r["Last_SQL_Error"]
        wait_for(lambda: past(status(session)), "the SQL thread to go past it")

    worker.start()
    proc = start_service(warehouse)
    kills = 0
    try:
        while not worker.done.is_set():
            time.sleep(rnd.uniform(0.3, 1.2))
            row = status(session)
            if row["Last_SQL_Errno"]:
                go_past_a_stop(row)
            elif kills < 10:
                proc = killed_and_restarted(proc, warehouse)
                kills += 1
        worker.join()
        assert not worker.failed, worker.failed
        # the stops still ahead, then the end of the binlog; the catch-up is killed too, up to the tenth kill (a
        # workload that ends soon or has many stops to go past used fewer while it ran)
        while True:
            if kills < 10:
                proc = killed_and_restarted(proc, warehouse)
                kills += 1
                time.sleep(rnd.uniform(0.3, 1.2))
            row = status(session)
            if row["Last_SQL_Errno"]:
                go_past_a_stop(row)
                continue
            if kills == 10 and caught_up(warehouse, src, timeout=120, or_stopped=True) \
                    and not status(session)["Last_SQL_Errno"]:
                break
        assert sorted(handled) == sorted(s for s, _ in work.injected), "an injected ALTER passed without a stop"
        oracle.caught_up(src, "a")
        ours = _text_decimals(_normal(_fz(_ours(warehouse, ["a"]))))
        theirs = _text_decimals(_normal(_fz(oracle.contents())))
        assert set(ours) == set(theirs)
        for key in theirs:
            assert ours[key] == theirs[key], key
        assert kills == 10 and len(work.tables) >= 2 and work.injected
    finally:
        worker.done.wait(120)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
