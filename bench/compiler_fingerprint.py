"""One digest of everything the compiler and the evaluator produce for seeded random filter states with hostile
names: the SQL texts (public and applier sets, both encodings), the JVM table spec, and the decisions of a grid
of row and statement events. A refactor that must change no output leaves it unchanged:

    python bench/compiler_fingerprint.py [--states 200] [--ref REV]

With --ref, the same digest is computed for git revision REV (its tree from `git archive`, first on the path)
and both are printed side by side. Uses only the package's public face and `rpl_sql.compile`, which every
layout has had.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["db1", "Db1", "d_b", "d%b", "it's", "back\\slash", "`tick`", "a,b", "ünï", "MiXed", "x.y", "日本", "t1",
         "tmp_x", "%", "_"]
TYPES = ["REPLICATE_DO_DB", "REPLICATE_IGNORE_DB", "REPLICATE_DO_TABLE", "REPLICATE_IGNORE_TABLE",
         "REPLICATE_WILD_DO_TABLE", "REPLICATE_WILD_IGNORE_TABLE", "REPLICATE_REWRITE_DB"]


def quoted(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "''") + "'"


def ident(s: str) -> str:
    return "`" + s.replace("`", "``") + "`"


def statement(rnd: random.Random, channel: str) -> str:
    parts = []
    for t in rnd.sample(TYPES, rnd.randint(1, 4)):
        n = rnd.randint(0, 4)
        if t == "REPLICATE_REWRITE_DB":
            values = [f"({ident(rnd.choice(NAMES))}, {ident(rnd.choice(NAMES))})" for _ in range(n)]
        elif t.endswith("_DB"):
            values = [ident(rnd.choice(NAMES)) for _ in range(n)]
        elif "WILD" in t:
            values = [quoted(f"{rnd.choice(NAMES)}.{rnd.choice(NAMES)}{rnd.choice(['', '%', '_'])}") for _ in range(n)]
        else:
            values = [f"{ident(rnd.choice(NAMES))}.{ident(rnd.choice(NAMES))}" for _ in range(n)]
        parts.append(f"{t} = ({', '.join(values)})")
    return f"CHANGE REPLICATION FILTER {', '.join(parts)} FOR CHANNEL {quoted(channel)}"


def digest(states: int) -> str:
    import rpl_sql
    from rpl_sql.compile import compile_functions

    h = hashlib.sha256()
    rnd = random.Random(58)
    for i in range(states):
        with tempfile.TemporaryDirectory() as wh:
            session = rpl_sql.connect(wh)
            channels = [f"ch{k}" for k in range(rnd.randint(1, 3))]
            for ch in channels:
                session.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL {quoted(ch)}")
                for _ in range(rnd.randint(0, 2)):
                    try:
                        session.execute(statement(rnd, ch))
                    except rpl_sql.MySQLError as e:
                        h.update(f"error {e.code}".encode())
            state = session.state
            for kw in ({}, {"applier": True}, {"encoding": "flat"}, {"encoding": "case"}):
                compiled = compile_functions(state, **kw)
                h.update(repr((kw, compiled.statements, getattr(compiled, "jvm_spec", None))).encode("utf-8"))
            for ch in channels:
                filters = state.channel(ch).filters
                for db in NAMES:
                    for tbl in NAMES[:8]:
                        d = rpl_sql.decide(filters, rpl_sql.RowEvent(db, tbl))
                        h.update(repr((ch, db, tbl, d.apply, d.decided_by, d.database)).encode("utf-8"))
    return h.hexdigest()


def tree_at(ref: str) -> str:
    tmp = tempfile.mkdtemp(prefix="rpl_sql-fingerprint-")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
    return os.path.join(tmp, "src") if os.path.isdir(os.path.join(tmp, "src", "rpl_sql")) else tmp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--states", type=int, default=200)
    ap.add_argument("--ref", help="also the digest of this git revision")
    args = ap.parse_args()
    if args.ref:
        path = tree_at(args.ref)
        env = dict(os.environ, PYTHONPATH=path)
        code = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import compiler_fingerprint as f; " \
               f"print(f.digest({args.states}))"
        theirs = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True,
                                text=True, cwd=path).stdout.strip()
        print(f"{args.ref}: {theirs}")
    ours = digest(args.states)
    print(f"this checkout: {ours}")
    if args.ref:
        print("identical" if ours == theirs else "DIFFERENT")


if __name__ == "__main__":
    main()
