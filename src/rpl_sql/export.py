"""`rpl-sql --export-sql`: a plain Spark SQL init script for `spark-sql -i rpl_init.sql` and SQL notebooks.

The views read the live Delta state through the `rpl_sql` Python data source; the SQL functions are a snapshot
compiled at export time. The text is hardened for the spark-sql CLI, which (checked on Spark 4.2):

* splits statements on `;` with a quote- and comment-aware splitter: `;` inside '...', "...", `...`,
  `--` and `/* */` is safe;
* drops every line of an `-i`/`-f` file whose first non-blank characters are `--`, even inside a string
  literal or a block comment (Hive's `processReader`), so a literal must never contain a raw newline;
* substitutes `${env:X}`, `${system:X}`, `${hivevar:X}`, ... everywhere in the text, string literals included
  (`spark.sql.variable.substitute`, also done by `spark.sql()`), so a literal must never contain a raw `$`;
* reads the file in the JVM's default charset, so literals are kept pure ASCII.

`harden` rewrites string literals with Spark's own escapes (`\\n`, `\\u0024`, `\\uXXXX`), which the parser
turns back into exactly the same characters; comments keep their meaning (none). It escapes `;` in literals
too (`\\u003b`): not needed by spark-sql, but notebook front ends that split cells naively on `;` exist.
"""
from __future__ import annotations

import os
import pkgutil
import shlex
import sys
import textwrap
from datetime import datetime, timezone

__all__ = ["export_sql", "sql_string", "harden", "VIEW_TABLES"]

# view name -> the data source's `table` option
VIEW_TABLES = (
    ("replication_applier_filters", "filters"),
    ("replication_applier_global_filters", "global_filters"),
    ("rpl_sql_channels", "channels"),
    ("rpl_sql_filter_history", "filter_history"),
)

_SIMPLE_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", "'": "\\'", "\"": "\\\""}


def _escape_char(c: str) -> str:
    """One character as it may appear inside a Spark SQL string literal of a CLI script."""
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c]
    if c == "$" or c == ";" or ord(c) < 0x20 or ord(c) == 0x7F:
        return "\\u%04x" % ord(c)
    if ord(c) > 0x7F:  # UTF-16 code units: Spark's unescape appends them as Java chars
        data = c.encode("utf-16-be")
        return "".join("\\u%02x%02x" % (data[i], data[i + 1]) for i in range(0, len(data), 2))
    return c


def sql_string(value: str) -> str:
    """A single-quoted Spark SQL literal of `value`, safe in spark-sql scripts (ASCII, no raw `$`, `;`, EOL)."""
    return "'" + "".join(_escape_char(c) for c in value) + "'"


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
                        body.append(_escape_char(nxt))
                    else:
                        body.append(ch + nxt)
                    j += 2
                    continue
                if raw:
                    body.append(_escape_char(ch))
                else:
                    body.append(_escape_char(ch) if _needs_escape(ch) else ch)
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
    """Free text for a `--` comment line: printable, one line, no variable references."""
    return "".join(c if c.isprintable() else "?" for c in text).replace("${", "$ {")


def worker_env() -> dict[str, str]:
    """Environment the Python workers need to find rpl_sql: this interpreter, and PYTHONPATH when needed.

    Spark finds `pyspark_<name>` modules with `pkgutil.iter_modules()`, which only lists sys.path directories:
    an editable install (`pip install -e`, served by an import hook) is invisible to it, so the directory of
    pyspark_rpl_sql.py must then be on PYTHONPATH.
    """
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


def export_sql(session) -> str:
    """The init script for `session`'s warehouse: live data-source views, then the compiled functions."""
    from .compile import SET_MAP_MIN, compile_functions
    from .sparkenv import installed_map_lookup_hash_min

    warehouse = os.path.abspath(session.warehouse)
    snapshot = session.store.load()
    compiled = compile_functions(snapshot.state, map_hash_min=installed_map_lookup_hash_min())
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
        "rpl_sql: MySQL 8 replication filters as Spark SQL views and functions.",
        f"Generated by `rpl-sql --export-sql` at {_utc(now)} for warehouse {w}",
        "",
        "Run it first in a Spark (4.0+) session, e.g.",
        f"  {env} spark-sql -i rpl_init.sql",
        "or as the first cell of a SQL notebook.",
        "",
        f"VIEWS (live): {views} read the warehouse's latest Delta state on every query through the `rpl_sql` "
        "Python data source (module pyspark_rpl_sql, which Spark registers by itself). Its Python workers must "
        f"import rpl_sql and find pyspark_rpl_sql on sys.path: set {env} (or use another interpreter with "
        "rpl_sql installed).",
        "",
        f"FUNCTIONS (snapshot): compiled at export time from {source}. They do not follow later filter "
        "changes; to refresh them run",
        f"  rpl-sql --warehouse {w} --export-sql > rpl_init.sql",
        "and run this script again in the session (every statement is CREATE OR REPLACE).",
        f"Encoding: {compiled.encoding or 'default'}",
    ]
    if "map_from_arrays" in "".join(compiled.statements):
        header += ["", f"Exact lists of {SET_MAP_MIN} or more names are constant maps, which Spark 4.2+ looks up "
                       "through a hash (spark.sql.optimizer.mapLookupHashThreshold at its default). An older Spark scans them: "
                       "the results are the same, only slower; export with that Spark's pyspark to get IN lists."]
    lines = []
    for paragraph in header:
        if paragraph.startswith("  ") or not paragraph:
            lines.append(paragraph)
        else:
            lines += textwrap.wrap(paragraph, 110, break_long_words=False, break_on_hyphens=False)
    body = []
    for view, table in VIEW_TABLES:
        body.append(f"CREATE OR REPLACE TEMPORARY VIEW {view}\n"
                    f"  USING rpl_sql OPTIONS (path {sql_string(warehouse)}, table '{table}');")
    body.append("")
    body.append(f"-- Functions compiled from {source}.")
    for text in compiled.statements:
        body.append(_terminated(text))
    return "".join(_comment(("-- " + line).rstrip()) + "\n" for line in lines) + "\n" + "\n".join(body) + "\n"
