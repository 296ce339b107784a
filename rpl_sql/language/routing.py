"""Who runs a statement, from its first words and without parsing it: rpl_sql (the grammar), Spark, or neither
(a misspelt replication keyword is a MySQL error with a hint; a replication statement rpl_sql does not implement
says so)."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from rpl_sql.language.lexer import pieces


def _leading_words(code: str, count: int) -> list[tuple[str, int, int, str]]:
    """The first `count` words (upper-cased if ASCII) with their offsets and what follows each: 'other'
    when punctuation such as '.' touches it, else ''; stops at the first piece that is not a word."""
    words: list[tuple[str, int, int, str]] = []
    for kind, s, e in pieces(code):
        if words and s == words[-1][2] and kind == "other":
            words[-1] = (*words[-1][:3], "other")
        if kind in ("space", "comment", "marker"):
            continue
        if kind != "word" or len(words) == count:
            break
        word = code[s:e]
        words.append((word.upper() if word.isascii() else word, s, e, ""))
    return words


# Statements rpl_sql owns begin with one of these; SHOW and RESET only before a replication word (Spark has
# its own SHOW ... and RESET <config key>). Spark has no CHANGE, START or STOP statement at all.
LEADERS = ("CHANGE", "START", "STOP", "RESET", "SHOW", "RESYNC")
REPLICA_WORDS = ("REPLICA", "SLAVE", "REPLICATION", "MASTER", "SOURCE")
# What a Spark SQL statement can start with (Spark 4's statement rule, SQL scripting, Delta's commands): a
# first word outside this set that is close to one of LEADERS is taken as a misspelt replication statement.
SPARK_LEADERS = frozenset("""
    SELECT WITH FROM VALUES TABLE MAP REDUCE INSERT UPDATE DELETE MERGE USE SET RESET CREATE REPLACE ALTER DROP
    SHOW DESC DESCRIBE EXPLAIN COMMENT REFRESH CACHE UNCACHE CLEAR LOAD TRUNCATE REPAIR MSCK ADD LIST ANALYZE
    DECLARE EXECUTE CALL BEGIN IF WHILE REPEAT LOOP FOR CASE LEAVE ITERATE SIGNAL RESIGNAL GRANT REVOKE LOCK
    UNLOCK EXPORT IMPORT DFS OPTIMIZE VACUUM RESTORE CONVERT GENERATE FSCK COPY
""".split())
# SET forms of MySQL's and MariaDB's replication system variables: owned, so they never reach Spark.
SET_REPLICATION = re.compile(
    r"\s*SET\s+(?:(?P<scope>GLOBAL|SESSION|LOCAL|PERSIST|PERSIST_ONLY)\s+|@@(?:(?P<scope2>GLOBAL|SESSION|LOCAL)\.)?)?"
    r"(?:(?P<conn>`(?:[^`]|``)*`|[A-Za-z0-9_$]+)\.)?"
    r"(?P<var>replicate_\w*|sql_(?:replica|slave)_skip_counter|default_master_connection)\b"
    r"(?P<rest>.*)", re.IGNORECASE | re.DOTALL)
SET_VALUE = re.compile(r"\s*:?=\s*(?P<value>'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|[A-Za-z0-9_$]+)\s*$",
                        re.DOTALL)
SHOW_VARIABLES = re.compile(r"\s*SHOW\s+(?:(?:GLOBAL|SESSION|LOCAL)\s+)?VARIABLES\b\s*(?P<rest>.*)$",
                             re.IGNORECASE | re.DOTALL)
# waiting for executed GTIDs: a SELECT of MySQL's or MariaDB's function alone is the replica's to answer
WAIT_GTIDS = re.compile(
    r"\s*SELECT\s+(?P<fn>WAIT_FOR_EXECUTED_GTID_SET|MASTER_GTID_WAIT)\s*\(\s*"
    r"(?P<set>'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\")\s*(?:,\s*(?P<timeout>-?[0-9]+(?:\.[0-9]*)?)\s*)?\)\s*$",
    re.IGNORECASE | re.DOTALL)
# MariaDB's dynamic filter variables (as in its multi-source replication), and the filter each sets
SET_FILTER_VARIABLES = ("replicate_do_db", "replicate_ignore_db", "replicate_do_table", "replicate_ignore_table",
                        "replicate_wild_do_table", "replicate_wild_ignore_table", "replicate_rewrite_db")
# `/*spark*/` before a statement sends it to Spark as written, whatever it looks like.
FORCE_SPARK = re.compile(r"\s*/\*\s*spark\s*\*/", re.IGNORECASE)


def _distance(a: str, b: str) -> int:
    """Optimal string alignment distance (swapping neighbours counts one): `STPO` is 1 from `STOP`."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


@functools.lru_cache(maxsize=4096)
def _closest(word: str, choices: tuple[str, ...]) -> str | None:
    """The choice that `word` is a likely typo of (distance 1, or 2 for choices of 6+ letters), if any."""
    if word in choices or len(word) < 3 or not word.isascii():
        return None
    best, best_d = None, None
    for c in choices:
        if abs(len(c) - len(word)) > 2:  # the distance is at least the length difference: never close enough
            continue
        d = _distance(word, c)
        if best_d is None or d < best_d:
            best, best_d = c, d
    return best if best is not None and best_d <= (2 if len(best) >= 6 else 1) else None


@dataclass(frozen=True)
class Route:
    """Who runs a statement: 'grammar' (rpl_sql), 'spark', 'unsupported' (a replication statement rpl_sql
    does not implement, named by `what`) or 'typo' (a misspelt replication keyword at offset `near`; `hint`
    is the likely start of the statement)."""

    owner: str
    near: int = 0
    hint: str = ""
    what: str = ""


def route(code: str) -> Route:
    """Decide who runs `code` from its first words, without parsing it."""
    if FORCE_SPARK.match(code):
        return Route("spark")
    m = SET_REPLICATION.match(code)
    if m:
        var = m.group("var").lower()
        if var in SET_FILTER_VARIABLES or var == "default_master_connection" or var.endswith("_skip_counter"):
            return Route("grammar")
        return Route("unsupported", what=f"SET {var}",
                     hint="set filters with CHANGE REPLICATION FILTER ... [FOR CHANNEL '...']")
    if SHOW_VARIABLES.match(code) or WAIT_GTIDS.match(code):
        return Route("grammar")
    w = _leading_words(code, 2)
    if not w:
        return Route("spark")
    first, second = w[0][0], (w[1][0] if len(w) > 1 else "")
    if first in ("CHANGE", "START", "STOP", "RESYNC"):
        return Route("grammar")
    if first in ("RESET", "SHOW"):
        if second in ("REPLICA", "SLAVE") or (first == "SHOW" and second in ("REPLICATION", "WARNINGS")):
            return Route("grammar")
        if second in ("MASTER", "BINARY", "BINLOG", "RELAYLOG", "REPLICAS"):
            return Route("unsupported", what=f"{first} {second}",
                         hint="rpl_sql is a replica: it has no binary log of its own")
        fix = _closest(second, REPLICA_WORDS) if second and w[1][3] != "other" else None
        if fix:  # not a dotted config key (RESET spark.sql.x): a misspelt RESET REPLICA, SHOW REPLICA ...
            return Route("typo", w[1][1], f"{first} {fix}")
        return Route("spark")
    if first == "EXPLAIN":  # EXPLAIN REPLICATION FILTER / EXPLAIN CHANGE REPLICATION FILTER; Spark's EXPLAIN <query>
        if second in ("REPLICATION", "CHANGE"):
            return Route("grammar")
        fix = _closest(second, ("REPLICATION",)) if second and second not in SPARK_LEADERS and \
            second not in ("EXTENDED", "CODEGEN", "COST", "FORMATTED", "LOGICAL") else None
        if fix:
            return Route("typo", w[1][1], f"EXPLAIN {fix}")
        return Route("spark")
    if first in SPARK_LEADERS:
        return Route("spark")
    fix = _closest(first, LEADERS)
    if fix:
        rest = second if not second or second in REPLICA_WORDS else _closest(second, REPLICA_WORDS)
        if rest is not None:
            return Route("typo", w[0][1], f"{fix} {rest}".strip())
    return Route("spark")
