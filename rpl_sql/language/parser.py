"""MySQL 8.0 replication statements -> rpl_sql.language.statements nodes (spec/statements.md §0-7).

`routing.route` decides who runs a statement (rpl_sql, Spark, or neither: a typo is a MySQL error with a hint);
replication statements are parsed with the Lark grammar in grammar/replication.lark and must be exactly right
(1064 with MySQL's position otherwise); any other statement is handed on as OtherSQL, Spark's to judge. Text
is read by `rpl_sql.language.lexer`. Deliberate choices where MySQL is ambiguous or rpl_sql stricter (FOR CHANNEL takes
a string only, numeric option values, on/off options): docs/design/README.md#rpl_sqllanguageparser.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from importlib import resources
from pathlib import Path
from typing import NamedTuple

from lark import Lark, Token, Transformer, UnexpectedInput, UnexpectedToken

from rpl_sql.language.quoting import standard_str
from rpl_sql.errors import CATALOGUE, MySQLError
from rpl_sql.filters.evaluate import COMMANDS, DROP_TEMPORARY_IF_EXISTS
from rpl_sql.language.lexer import SECRET, expand_executable_comments, split_statements
from rpl_sql.language.token_values import (MAX_BYTES, RESERVED_WORDS, no_newline, option_key, option_uint,
                                          source_filter_option, string_value, uint_value)
from rpl_sql.language.routing import SET_REPLICATION, SET_VALUE, SHOW_VARIABLES, WAIT_GTIDS, route
from rpl_sql.filters.rules import FilterType
from rpl_sql.filters.state import channel_key
from rpl_sql.language.statements import (
    ChangeReplicationFilter, ChangeReplicationSource, ExplainChangeReplicationFilter, ExplainReplicationFilter,
    OtherSQL, ResetReplica, ResyncReplicaTables, SetDefaultConnection, SetReplicationVariable, SetSkipCounter,
    ShowReplicaStatus, ShowReplicaTables, ShowReplicationFilterHistory, ShowReplicationFilters,
    ShowReplicationFilterWarnings, ShowVariables, ShowWarnings, StartReplica, Statement, StopReplica, WaitForGtidSet,
)

_NEAR_LIMIT = 80  # MySQL prints the rest of the statement with '%-.80s'


class ParseError(MySQLError):
    """1064 ER_PARSE_ERROR, located as MySQL locates it.

    `near` is the statement text from the offending token on ('' at end of input), cut to
    80 characters; `line` and `column` (1-based) are within the statement; `statement_line`
    is the script line where the statement starts.
    """

    def __init__(self, near: str, line: int, column: int = 1, statement_line: int = 1):
        spec = CATALOGUE["ER_PARSE_ERROR"]
        super().__init__(spec.code, spec.sqlstate, spec.name, spec.template % (near, line))
        self.near = near
        self.line = line
        self.column = column
        self.statement_line = statement_line

    @property
    def script_line(self) -> int:
        """The script line of the offending token."""
        return self.statement_line + self.line - 1


# ---------------------------------------------------------------- building nodes

EXPLAIN_COMMAND = re.compile(r"[A-Za-z_]+")
EXPLAIN_COMMANDS = COMMANDS | {DROP_TEMPORARY_IF_EXISTS, "XA_PREPARE"}

class _Span(NamedTuple):
    """Source offsets of START's unsupported clauses, turned into text once the text is known."""

    start: int
    end: int


def _span(children) -> _Span:
    bounds = [(c.start_pos, c.end_pos) if isinstance(c, Token) else c for c in children if c is not None]
    return _Span(min(b[0] for b in bounds), max(b[1] for b in bounds))


def _source_filter_rule(ftype: FilterType):
    return lambda self, c: source_filter_option(ftype, c[0])


class _Build(Transformer):
    """Rule callbacks, run by the LALR parser as it reduces (no parse tree is built)."""

    def start(self, c):
        return c[0]

    # -- CHANGE REPLICATION FILTER

    def change_filter(self, c):
        return ChangeReplicationFilter(filters=tuple(c[:-1]), channel=c[-1])

    def do_db(self, c):
        return FilterType.DO_DB, c[0]

    def ignore_db(self, c):
        return FilterType.IGNORE_DB, c[0]

    def do_table(self, c):
        return FilterType.DO_TABLE, c[0]

    def ignore_table(self, c):
        return FilterType.IGNORE_TABLE, c[0]

    def wild_do_table(self, c):
        return FilterType.WILD_DO_TABLE, c[0]

    def wild_ignore_table(self, c):
        return FilterType.WILD_IGNORE_TABLE, c[0]

    def rewrite_db(self, c):
        return FilterType.REWRITE_DB, c[0]

    db_list = table_list = pattern_list = pair_list = server_id_list = thread_list = staticmethod(tuple)

    def table(self, c):
        return f"{c[0]}.{c[1]}"

    def pattern(self, c):
        value = no_newline(string_value(c[0]))
        if "." not in value:
            raise MySQLError.of("ER_INVALID_RPL_WILD_TABLE_FILTER_PATTERN")
        return value

    def pair(self, c):
        return c[0], c[1]

    def ident(self, c):
        tok = c[0]
        return tok[1:-1].replace("``", "`") if tok.type == "QUOTED_IDENT" else str(tok)

    def channel(self, c):
        return channel_key(no_newline(string_value(c[0])))

    # -- CHANGE REPLICATION SOURCE / CHANGE MASTER

    def change_source(self, c, legacy=False):
        options = c[:-1]
        return ChangeReplicationSource(
            options=tuple((key, value) for key, value, _ in options), channel=c[-1], legacy=legacy,
            legacy_options=tuple(old for _, _, old in options if old))

    def change_master(self, c):
        name, c = c[0], c[1:]
        if name is not None:  # MariaDB's CHANGE MASTER 'connection' TO
            named = channel_key(no_newline(string_value(name)))
            if c[-1] is not None and c[-1] != named:
                raise MySQLError.of("ER_WRONG_ARGUMENTS", "CHANGE MASTER: a connection name and another FOR CHANNEL")
            c = [*c[:-1], named]
        return self.change_source(c, legacy=True)

    # Source-side filters (WL#2387): stored as the channel's options of the same names
    source_do_db, source_ignore_db, source_do_table, source_ignore_table, source_wild_do_table, \
        source_wild_ignore_table, source_rewrite_db = (_source_filter_rule(t) for t in FilterType)

    def string_key(self, c):
        return option_key(c[0])

    uint_key = flag_key = heartbeat_key = ciphersuites_key = string_key

    def string_option(self, c):
        (key, old), value = c[0], string_value(c[1])
        limit = MAX_BYTES.get(key)
        if limit is not None and len(value.encode("utf-8", "surrogatepass")) > limit:
            raise MySQLError.of("ER_WRONG_STRING_LENGTH", value, old or key, limit)
        if key == "SOURCE_COMPRESSION_ALGORITHMS":
            return key, value, old
        return key, no_newline(value, SECRET if key == "SOURCE_PASSWORD" else None), old

    def uint_option(self, c):
        (key, old), value = c
        return key, option_uint(key, old, value), old

    def flag_option(self, c):
        (key, old), value = c
        return key, int(uint_value(value) != 0), old

    def heartbeat_option(self, c):
        (key, old), value = c
        return key, (float(value) if value.type == "DECIMAL" else uint_value(value)), old

    def nullable_string_option(self, c):
        (key, old), value = c
        return key, (None if value.type == "NULL" else no_newline(string_value(value))), old

    def ignore_server_ids(self, c):
        return "IGNORE_SERVER_IDS", tuple(uint_value(t) for t in c[0]), None

    def privilege_checks_user(self, c):
        value = c[0]
        return "PRIVILEGE_CHECKS_USER", (None if isinstance(value, Token) and value.type == "NULL" else value), None

    def account(self, c):
        user, host = (string_value(p) if isinstance(p, Token) and p.type == "STRING" else str(p) for p in c)
        return f"{standard_str(user)}@{standard_str('%' if c[1] is None else host)}"

    def pk_check(self, c):
        return c[0].upper()

    def require_table_primary_key_check(self, c):
        return "REQUIRE_TABLE_PRIMARY_KEY_CHECK", c[0], None

    def anon_gtids(self, c):
        tok = c[0]
        return string_value(tok) if tok.type == "STRING" else tok.upper()

    def assign_gtids_to_anonymous_transactions(self, c):
        return "ASSIGN_GTIDS_TO_ANONYMOUS_TRANSACTIONS", c[0], None

    # -- RESET / START / STOP / SHOW

    def replica(self, c):
        return c[0].upper() == "SLAVE"

    def reset_replica(self, c):
        legacy, all_, channel = c
        return ResetReplica(all=all_ is not None, channel=channel, legacy=legacy)

    def thread(self, c):
        return "SQL" if c[0].upper() == "SQL_THREAD" else "IO"

    def start_replica(self, c):
        legacy, threads, *clauses, channel = c
        clauses = [x for x in clauses if x is not None]
        return StartReplica(threads=frozenset(threads or ()), channel=channel, legacy=legacy,
                            unsupported=_span(clauses) if clauses else None)

    until = until_condition = user = password = default_auth = plugin_dir = staticmethod(_span)

    def stop_replica(self, c):
        legacy, threads, channel = c
        return StopReplica(threads=frozenset(threads or ()), channel=channel, legacy=legacy)

    def show_replica_status(self, c):
        legacy, channel = c
        return ShowReplicaStatus(channel=channel, legacy=legacy)

    def show_replica_tables(self, c):
        return ShowReplicaTables(channel=c[1])

    def resync_tables(self, c):
        return ResyncReplicaTables(tables=tuple(c[1:-1]), channel=c[-1])

    def resync_table(self, c):
        return c[0], c[1]

    def explain_change(self, c):
        change, window = c
        return ExplainChangeReplicationFilter(change=change, **(window or {}))

    def last_events(self, c):
        return {"last": uint_value(c[0])}

    def since(self, c):
        return {"since": no_newline(string_value(c[0]))}

    def show_filter_warnings(self, c):
        return ShowReplicationFilterWarnings(channel=c[0])

    def show_filter_history(self, c):
        channel, limit = c
        return ShowReplicationFilterHistory(channel=channel, limit=limit)

    def show_warnings(self, c):
        return ShowWarnings(limit=c[0])

    # -- EXPLAIN REPLICATION FILTER

    def explain_filter(self, c):
        channel, as_of, event = c
        return ExplainReplicationFilter(channel=channel, as_of=as_of, **event)

    def show_filters(self, c):
        global_, channel, as_of = c
        if global_ is not None and channel is not None:
            raise MySQLError.of("ER_WRONG_ARGUMENTS", "SHOW REPLICATION GLOBAL FILTERS (the global filters "
                                "belong to no channel: drop FOR CHANNEL)")
        return ShowReplicationFilters(channel=channel, global_=global_ is not None, as_of=as_of)

    def show_filter_hits(self, c):
        channel, as_of = c
        return ShowReplicationFilters(channel=channel, hits=True, as_of=as_of)

    def as_of(self, c):
        tok = c[0]
        return uint_value(tok) if tok.type == "UINT" else no_newline(string_value(tok))

    def explain_row(self, c):
        return {"table": (c[0], c[1])}

    def explain_statement(self, c):
        text, db, tables = c
        value = no_newline(string_value(text)).strip()
        if EXPLAIN_COMMAND.fullmatch(value):  # a command name (evaluate.COMMANDS), as should_apply_statement takes
            if value.upper() not in EXPLAIN_COMMANDS:
                raise MySQLError.of("ER_WRONG_ARGUMENTS", f"EXPLAIN REPLICATION FILTER (unknown command '{value}'; "
                                    f"one of {', '.join(sorted(EXPLAIN_COMMANDS))}, or the statement's SQL text)")
            return {"command": value.upper(), "default_db": db, "tables": tables or ()}
        if tables is not None:
            raise MySQLError.of("ER_WRONG_ARGUMENTS", "EXPLAIN REPLICATION FILTER (TABLES go with a command name "
                                "such as 'UPDATE'; SQL text names its own tables)")
        return {"sql": value, "default_db": db}

    def explain_db(self, c):
        return c[0]

    def explain_tables(self, c):
        return tuple(c)

    def explain_table(self, c):
        first, second, read = c
        return (first, second, read is None) if second is not None else (None, first, read is None)

    def limit(self, c):
        return uint_value(c[0])


class _AlwaysLexNames:
    """Postlexer that makes every lexer state try names, so keywords match as whole words."""

    always_accept = ("IDENT", "NEAR_DOT_IDENT")

    def process(self, stream):
        return stream


def _reserved_to_error(tok: Token) -> Token:
    """A reserved word where a name is expected gets a type no rule accepts: 1064 right there."""
    if tok.isascii() and tok.upper() in RESERVED_WORDS:
        tok.type = "RESERVED_WORD"
    return tok


def grammar_text(name: str = "replication.lark") -> str:
    """A Lark grammar: inside an installed wheel (rpl_sql/grammar/, setup.py puts it there), else grammar/ at
    the top of the checkout this package runs from."""
    packaged = resources.files("rpl_sql") / "grammar" / name
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[2] / "grammar" / name).read_text(encoding="utf-8")


@functools.cache
def _lark() -> Lark:
    grammar = grammar_text()
    return Lark(grammar, parser="lalr", lexer="contextual", transformer=_Build(),
                postlex=_AlwaysLexNames(), lexer_callbacks={"IDENT": _reserved_to_error},
                g_regex_flags=re.ASCII, maybe_placeholders=True, cache=True)


def _variable_statement(code: str, text: str, line: int) -> Statement:
    """SET of a replication variable, or SHOW VARIABLES: a few fixed shapes, matched without the grammar."""
    m = SHOW_VARIABLES.match(code)
    if m:
        rest = m.group("rest").strip().rstrip(";").strip()
        if not rest:
            return ShowVariables(text=text, line=line)
        like = re.fullmatch(r"LIKE\s+('(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\")", rest, re.IGNORECASE | re.DOTALL)
        if not like:
            raise _near(text, code.index(rest), line)
        return ShowVariables(text=text, line=line, like=string_value(Token("STRING", like.group(1))))
    m = SET_REPLICATION.match(code)
    var, scope = m.group("var").lower(), (m.group("scope") or m.group("scope2") or "").upper()
    rest = m.group("rest").rstrip().rstrip(";")
    v = SET_VALUE.fullmatch(rest)
    if not v:
        raise _near(text, m.start("rest") + len(rest) - len(rest.lstrip()) if rest.strip() else len(code), line)
    raw = v.group("value")
    value = None if raw.upper() == "DEFAULT" else string_value(Token("STRING", raw)) if raw[0] in "'\"" else raw
    conn = m.group("conn")
    if conn is not None:
        conn = conn[1:-1].replace("``", "`") if conn.startswith("`") else conn
        conn = channel_key(conn)
    if var == "default_master_connection":
        if scope in ("GLOBAL", "PERSIST", "PERSIST_ONLY"):
            raise _at_line(MySQLError.of("ER_LOCAL_VARIABLE", var), line)
        return SetDefaultConnection(text=text, line=line, connection=channel_key(value or ""))
    if scope not in ("GLOBAL", "PERSIST", "PERSIST_ONLY"):
        raise _at_line(MySQLError.of("ER_GLOBAL_VARIABLE", var), line)
    if var.endswith("_skip_counter"):
        if value is None:
            value = "0"
        if raw[0] in "'\"" or not value.isdigit() or int(value) > 2 ** 32 - 1:
            raise _at_line(MySQLError(1232, "42000", "ER_WRONG_TYPE_FOR_VAR",
                                      f"Incorrect argument type to variable '{var}'"), line)
        return SetSkipCounter(text=text, line=line, value=int(value), connection=conn)
    return SetReplicationVariable(text=text, line=line, variable=var, connection=conn, value=value)


def _at_line(err: MySQLError, line: int) -> MySQLError:
    err.statement_line = line
    return err


def _near(text: str, pos: int, statement_line: int) -> ParseError:
    """The 1064 MySQL reports for an unexpected token at offset `pos` of `text`."""
    line = text.count("\n", 0, pos) + 1
    return ParseError(text[pos:pos + _NEAR_LIMIT], line, pos - (text.rfind("\n", 0, pos) + 1) + 1, statement_line)


def _parse_error(err: UnexpectedInput, text: str, statement_line: int) -> ParseError:
    tok = getattr(err, "token", None)
    if isinstance(err, UnexpectedToken) and tok.type == "$END":
        return ParseError("", text.count("\n") + 1, len(text) - text.rfind("\n"), statement_line)
    pos = tok.start_pos if isinstance(err, UnexpectedToken) else err.pos_in_stream
    return ParseError(text[pos:pos + _NEAR_LIMIT], err.line, err.column, statement_line)


def parse_statement(text: str, line: int = 1) -> Statement:
    """One statement: a replication statement's node, or OtherSQL for anything else.

    Raises ParseError (1064), or MySQLError 3067 / 1525 for a bad wild pattern or a line
    feed in a pattern, channel name or option string; either carries `statement_line`.
    """
    code = expand_executable_comments(text)
    where = route(code)
    if where.owner == "spark":
        return OtherSQL(text=text, line=line)
    if where.owner == "unsupported":
        err = _at_line(MySQLError.of("ER_NOT_SUPPORTED_YET", where.what), line)
        err.hint = where.hint
        err.add_note(err.hint)
        raise err
    if where.owner == "typo":
        err = _near(text, where.near, line)
        err.hint = (f"did you mean {where.hint} ...? (to send this text to Spark as it is, "
                    "start it with /*spark*/)")
        err.add_note(err.hint)
        raise err
    if SET_REPLICATION.match(code) or SHOW_VARIABLES.match(code):
        return _variable_statement(code, text, line)
    m = WAIT_GTIDS.match(code)
    if m:
        timeout = float(m["timeout"]) if m["timeout"] is not None else None
        fn = m["fn"].upper()
        if fn == "MASTER_GTID_WAIT" and timeout is not None and timeout < 0:
            timeout = None  # MariaDB: a negative timeout waits as long as it takes
        return WaitForGtidSet(text=text, line=line, gtids=string_value(m["set"]), timeout=timeout, function=fn)
    try:
        stmt = _lark().parse(code)
    except UnexpectedInput as err:
        raise _parse_error(err, text, line) from None
    except MySQLError as err:
        err.statement_line = line
        raise
    stmt = dataclasses.replace(stmt, text=text, line=line)
    if isinstance(stmt, StartReplica) and stmt.unsupported is not None:
        start, end = stmt.unsupported
        stmt = dataclasses.replace(stmt, unsupported=text[start:end])
    return stmt


def check_utf8(text: str) -> None:
    """Text that cannot be UTF-8 (a lone surrogate, as Python decodes invalid bytes) is MySQL's 1300; so is a NUL,
    which no MySQL name, pattern or option may hold."""
    nul = text.find("\0")
    if nul >= 0:
        raise _at_line(MySQLError.of("ER_INVALID_CHARACTER_STRING", "utf8mb4", "00"), text.count("\n", 0, nul) + 1)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        bad = text[e.start:e.end]
        shown = "".join(f"{ord(c) - 0xDC00:02X}" if 0xDC80 <= ord(c) <= 0xDCFF else f"{ord(c):04X}" for c in bad)
        raise _at_line(MySQLError.of("ER_INVALID_CHARACTER_STRING", "utf8mb4", shown),
                       text.count("\n", 0, e.start) + 1) from None


def parse(text: str) -> list[Statement]:
    """A whole script, all or nothing: the first bad replication statement raises."""
    check_utf8(text)
    return [parse_statement(strip_vertical(stmt), line) for stmt, line in split_statements(text)]


def strip_vertical(text: str) -> str:
    """A statement without the ``\\G`` terminator that asks the shell for vertical output."""
    return text[:-2].rstrip() if text.endswith("\\G") else text
