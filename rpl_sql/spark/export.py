"""`rpl-sql --export-sql`: a plain Spark SQL init script for `spark-sql -i rpl_init.sql` and SQL notebooks.

The views read the live Delta state through the `rpl_sql` Python data source; the SQL functions are a
snapshot compiled at export time, guarded so they raise once the filters change. `harden` rewrites string
literals so the spark-sql CLI (which splits on `;`, drops `--` lines, substitutes `${...}` and reads the
platform charset) reads back exactly the same statement. Details: docs/design/README.md#rpl_sqlsparkexport.
"""
from __future__ import annotations

import os
import pkgutil
import shlex
import sys
import textwrap
from collections import Counter
from datetime import datetime, timezone

from rpl_sql import jvm
from rpl_sql.compile import JVM_FUNCTIONS, JVM_INSTALL, JVM_ROW_CODE, SET_MAP_MIN, Guard
from rpl_sql.compile.literals import escape_char, sql_str
from rpl_sql.spark.functions import compile_flags, compile_with_jar
from rpl_sql.spark.replica_tables import TABLES_VIEW, create_statements, replica_spark_names

__all__ = ["export_sql", "harden", "VIEW_TABLES"]

# view name -> the data source's `table` option
VIEW_TABLES = (
    ("replication_applier_filters", "filters"),
    ("replication_applier_global_filters", "global_filters"),
    ("rpl_sql_channels", "channels"),
    ("rpl_sql_filter_rule_hits", "rule_hits"),
    ("rpl_sql_filter_history", "filter_history"),
    (TABLES_VIEW, "replica_tables"),
)

def _needs_escape(c: str) -> bool:
    return c in "\n\r$;" or ord(c) < 0x20 or ord(c) >= 0x7F


def harden(statement: str) -> str:
    """Re-escape the string literals of one statement so the spark-sql CLI reads back the same statement.

    Raw `$`, `;`, control and non-ASCII characters in literals become `\\uXXXX` (and a raw newline `\\n`);
    escape pairs whose character is one of those are replaced by the equivalent `\\uXXXX`. Everything else,
    including every existing escape, is copied unchanged. In comments `${` becomes `$ {` and a line starting
    with `--` gets a leading `-`, which changes no meaning. Raises ValueError for a back-quoted identifier the CLI
    would corrupt (with `${` or a line break): nothing can escape those.
    """
    out: list[str] = []
    i, n = 0, len(statement)
    while i < n:
        c = statement[i]
        if c in "'\"":
            raw = i > 0 and statement[i - 1] in "rR" and (i < 2 or not (statement[i - 2].isalnum()
                                                                       or statement[i - 2] == "_"))
            j = i + 1
            body: list[str] = []
            while j < n and statement[j] != c:
                ch = statement[j]
                if ch == "\\" and not raw and j + 1 < n:
                    nxt = statement[j + 1]
                    if _needs_escape(nxt):  # Spark reads backslash + such a character as the character
                        body.append(escape_char(nxt, script_safe=True))
                    else:
                        body.append(ch + nxt)
                    j += 2
                    continue
                if raw:
                    body.append(escape_char(ch, script_safe=True))
                else:
                    body.append(escape_char(ch, script_safe=True) if _needs_escape(ch) else ch)
                j += 1
            if j >= n:
                raise ValueError(f"unterminated string literal in: {statement[:80]!r}")
            if raw:  # a raw literal becomes a plain one: every character escaped as needed
                out.pop()
                out.append("'" + "".join(body) + "'")
            else:
                out.append(c + "".join(body) + c)
            i = j + 1
        elif c == "`":
            j = statement.index("`", i + 1) if "`" in statement[i + 1:] else -1
            while j != -1 and j + 1 < n and statement[j + 1] == "`":  # `` is an escaped back-quote
                j = statement.find("`", j + 2)
            if j == -1:
                raise ValueError(f"unterminated back-quoted identifier in: {statement[:80]!r}")
            ident = statement[i:j + 1]
            if "${" in ident or "\n" in ident or "\r" in ident:
                raise ValueError(f"identifier {ident!r} cannot be written safely for the spark-sql CLI")
            out.append(ident)
            i = j + 1
        elif statement.startswith("--", i):
            j = statement.find("\n", i)
            j = n if j == -1 else j
            out.append(statement[i:j].replace("${", "$ {"))
            i = j
        elif statement.startswith("/*", i):
            j, depth = i + 2, 1  # Spark's bracketed comments nest
            while j < n and depth:
                if statement.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif statement.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            lines = statement[i:j].replace("${", "$ {").split("\n")
            out.append("\n".join([lines[0]] + ["-" + ln if ln.lstrip().startswith("--") else ln
                                               for ln in lines[1:]]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _terminated(statement: str) -> str:
    text = statement.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    return harden(text) + ";"


def _comment(text: str) -> str:
    """Free text for a `--` comment line: printable (other characters as `\\uXXXX`), one line, no variable
    references."""
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text).replace("${", "$ {")


def worker_env() -> dict[str, str]:
    """What the Python workers of a shell running the script need: this interpreter (which has rpl_sql), and
    PYTHONPATH only where Spark could not list `pyspark_rpl_sql` (an install served by an import hook)."""
    env = {"PYSPARK_PYTHON": sys.executable or "python3"}
    if not any(m.name == "pyspark_rpl_sql" for m in pkgutil.iter_modules()):
        try:
            import pyspark_rpl_sql
        except ImportError:  # not installed at all: nothing to point at
            return env
        env["PYTHONPATH"] = os.path.dirname(os.path.abspath(pyspark_rpl_sql.__file__))
    return env


def _utc(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


STATE_VIEW = "rpl_sql_state_version"


def stale_guard(warehouse: str, version: int | None, fingerprint: str):
    """The check the exported functions make per query: the warehouse's filters are still the ones they were
    compiled from, else an error naming both versions and the refresh."""
    current = f"(SELECT FILTERS_FINGERPRINT FROM {STATE_VIEW})"
    now = f"coalesce(CAST((SELECT VERSION FROM {STATE_VIEW}) AS STRING), 'none')"
    refresh = f"rpl-sql --warehouse {shlex.quote(warehouse)} --export-sql > rpl_init.sql"
    before = (f"rpl_sql: these functions were compiled from version {version} of warehouse {warehouse}, "
              "whose filters have changed since (now version ")
    after = f"). Refresh them: {refresh}, then in this session: source rpl_init.sql;"
    message = f"concat({sql_str(before, script_safe=True)}, {now}, {sql_str(after, script_safe=True)})"
    return Guard(f"{current} <=> {sql_str(fingerprint, script_safe=True)}", message)


def _replica_tables(warehouse: str, jvm_source: bool) -> tuple[list[list[str]], list[str]]:
    """Each replica table's defining statements, and the header's notes on tables Spark knows by another name
    or not at all. A table that cannot be written is left out with a note: the script never stops halfway."""
    names = replica_spark_names(warehouse)
    channels_of = Counter((where.db, where.name) for where, _ in names)
    defined: list[list[str]] = []
    renamed: list[str] = []
    missing: list[str] = []
    for where, entry in names:
        mysql = f"{where.db}.{where.name}"
        if channels_of[(where.db, where.name)] > 1:  # the same table in several channels
            mysql += f" (channel {where.channel})"
        if entry.columns is None:
            missing.append(f"{mysql}: its CREATE TABLE was not readable and no row event has given its columns yet")
            continue
        try:
            defined.append([harden(stmt) + ";" for stmt in create_statements(warehouse, where, entry,
                                                                               script_safe=True,
                                                                               jvm_source=jvm_source)])
        except Exception as e:  # dropped since the catalog was read, or its first commit is being written
            missing.append(f"{mysql}: {e}")
            continue
        if where.why is not None:
            renamed.append(f"  {mysql} is {where.quoted()}: {where.why}")
    notes = []
    if renamed:
        notes += [f"REPLICA TABLES UNDER ANOTHER NAME ({len(renamed)}): Spark folds case and takes only letters, "
                  "digits and _ in names, so these are defined under names of their own (a query by the MySQL "
                  f"name fails rather than read another table):"] + renamed[:50]
        if len(renamed) > 50:
            notes.append(f"  ... and {len(renamed) - 50} more: SELECT * FROM {TABLES_VIEW} WHERE NOTE IS NOT NULL")
    if missing:
        notes += [f"REPLICA TABLES NOT DEFINED ({len(missing)}):"] + ["  " + m for m in missing[:50]]
        if len(missing) > 50:
            notes.append(f"  ... and {len(missing) - 50} more: SELECT * FROM {TABLES_VIEW} WHERE SPARK_TABLE IS NULL")
    return defined, notes


def _reader_jar() -> str | None:
    """rpl_sql's jar for reading replica tables with Spark's own scan, if this machine can have it."""
    if not jvm.possible():
        return None
    try:
        return str(jvm.jar_path())
    except jvm.JarUnavailableError:
        return None


def export_sql(session, stale_check: bool = True) -> str:
    """The init script for `session`'s warehouse: live data-source views, then the compiled functions.

    stale_check: the functions raise an error once the warehouse's filters differ from the ones they were
    compiled from (a subquery per query reads the live state version; measured in the README).
    """
    warehouse = os.path.abspath(session.warehouse)
    snapshot = session.store.load()
    guard = stale_guard(warehouse, snapshot.version, snapshot.state.filters_fingerprint()) if stale_check else None
    compiled, jar = compile_with_jar(snapshot.state, compile_flags(), guard=guard)
    now = datetime.now(timezone.utc)
    if snapshot.version is None:
        source = "an empty warehouse (no Delta commit yet)"
    else:
        history = session.store.history(1)
        when = f", committed {_utc(history[0].timestamp)}" if history else ""
        source = f"Delta version {snapshot.version}{when}"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in worker_env().items())
    w = shlex.quote(warehouse)
    views = ", ".join(v for v, _ in VIEW_TABLES)
    header = [
        "rpl_sql init script: MySQL 8 replication filters as Spark SQL views and functions.",
        f"NEEDS: Spark 4.0+ whose Python workers run {env.split('=', 1)[1].split()[0]} (it has rpl_sql; its "
        "module pyspark_rpl_sql registers the `rpl_sql` data source):",
        f"  {env} spark-sql -i rpl_init.sql",
        "In a SQL notebook run it as the first cell, in a Spark started with the same PYSPARK_PYTHON.",
        "",
        f"Generated by `rpl-sql --export-sql` at {_utc(now)} for warehouse {w}.",
        f"VIEWS (live): {views}, {STATE_VIEW} read the warehouse's latest Delta state on every query.",
        f"FUNCTIONS (snapshot): compiled from {source}. "
        + ("Once the warehouse's filters change they raise an error naming both versions; refresh them with"
           if stale_check else "They do not follow later filter changes (exported with --no-stale-check); "
           "refresh them with"),
        f"  rpl-sql --warehouse {w} --export-sql > rpl_init.sql",
        "and then, in the same session, `source rpl_init.sql;` (every statement is CREATE OR REPLACE).",
        f"Encoding: {compiled.encoding or 'default'}",
    ]
    if jar is not None:
        header += ["", f"A row's code is rpl_sql's JVM function {JVM_ROW_CODE} (and rewrite_db's and the statement "
                       f"tables' its siblings), from {jar} (compiled for this "
                       f"pyspark), which the Hive function {JVM_INSTALL} registers in the session (Hive support "
                       "is needed, as the spark-sql shell has it). Without Hive support, export with RPL_SQL_JVM=0 "
                       "for the compiled SQL: the same results, slower at this size."]
    if "map_from_arrays" in "".join(compiled.statements):
        header += ["", f"Exact lists of {SET_MAP_MIN} or more names are constant maps, which Spark 4.2+ looks up "
                       "through a hash (spark.sql.optimizer.mapLookupHashThreshold at its default). "
                       "An older Spark scans them: "
                       "the results are the same, only slower; export with that Spark's pyspark to get IN lists."]
    reader = _reader_jar()
    replica, notes = _replica_tables(warehouse, reader is not None)
    if notes:
        header += [""] + notes
    lines = []
    for paragraph in header:
        if paragraph.startswith("  ") or not paragraph:
            lines.append(paragraph)
        else:
            lines += textwrap.wrap(paragraph, 110, break_long_words=False, break_on_hyphens=False)
    body = []
    for view, table in VIEW_TABLES + ((STATE_VIEW, "state_version"),):
        body.append(f"CREATE OR REPLACE TEMPORARY VIEW {view}\n"
                    f"  USING rpl_sql OPTIONS (path {sql_str(warehouse, script_safe=True)}, table '{table}');")
    if replica:
        body.append("")
        body.append(f"-- The replica tables by name ({len(replica)} as of this export; their rows are read live). "
                    f"Re-export to see tables created later. Their Spark names: {TABLES_VIEW}.")
        if reader is not None:
            body.append(f"ADD JAR {sql_str(reader, script_safe=True)};")
        body.extend(line for table in replica for line in table)
    body.append("")
    body.append(f"-- Functions compiled from {source}.")
    if jar is not None:
        body.append(f"CREATE OR REPLACE TEMPORARY FUNCTION {JVM_INSTALL} AS '{jvm.HIVE_CLASS}' "
                    f"USING JAR {sql_str(jar, script_safe=True)};")
        # analysing the call registers the function; WHERE false: the shell prints no row
        names = " ".join(name for name, _ in JVM_FUNCTIONS)
        body.append(f"SELECT {JVM_INSTALL}({sql_str(names)}, {sql_str(compiled.jvm_spec, script_safe=True)}) "
                    "WHERE false;")
    for text in compiled.statements:
        body.append(_terminated(text))
    return "".join(_comment(("-- " + line).rstrip()) + "\n" for line in lines) + "\n" + "\n".join(body) + "\n"
