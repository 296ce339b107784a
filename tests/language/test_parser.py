"""rpl_sql.language.parser: statement forms, classification, splitting and MySQL's error reporting."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpl_sql.errors import MySQLError
from rpl_sql.language.lexer import split_statements
from rpl_sql.language.parser import ParseError, parse, parse_statement
from rpl_sql.language.token_values import RESERVED_WORDS
from rpl_sql.filters.rules import FilterType as F
from rpl_sql.language.statements import (ChangeReplicationFilter, ChangeReplicationSource, OtherSQL, ResetReplica,
                                ShowReplicaStatus, ShowReplicationFilterHistory, StartReplica, StopReplica)

SYNTAX = ("You have an error in your SQL syntax; check the manual that corresponds to your MySQL server "
          "version for the right syntax to use near '{}' at line {}")


def crf(body: str) -> ChangeReplicationFilter:
    stmt = parse_statement("CHANGE REPLICATION FILTER " + body)
    assert isinstance(stmt, ChangeReplicationFilter)
    return stmt


def source(body: str, verb: str = "CHANGE REPLICATION SOURCE TO ") -> ChangeReplicationSource:
    stmt = parse_statement(verb + body)
    assert isinstance(stmt, ChangeReplicationSource)
    return stmt


def syntax_error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_statement(text)
    err = info.value
    assert (err.code, err.sqlstate, err.name) == (1064, "42000", "ER_PARSE_ERROR")
    assert err.message == SYNTAX.format(err.near, err.line)
    return err


def mysql_error(text: str, code: int) -> MySQLError:
    with pytest.raises(MySQLError) as info:
        parse_statement(text)
    assert info.value.code == code
    return info.value


# ---------------------------------------------------------------- CHANGE REPLICATION FILTER

@pytest.mark.parametrize("keyword, ftype, values, expected", [
    ("REPLICATE_DO_DB", F.DO_DB, "(db1, db2)", ("db1", "db2")),
    ("REPLICATE_IGNORE_DB", F.IGNORE_DB, "(db1)", ("db1",)),
    ("REPLICATE_DO_TABLE", F.DO_TABLE, "(db1.t1, db2.t2)", ("db1.t1", "db2.t2")),
    ("REPLICATE_IGNORE_TABLE", F.IGNORE_TABLE, "(db1.t1)", ("db1.t1",)),
    ("REPLICATE_WILD_DO_TABLE", F.WILD_DO_TABLE, "('db1.old%', \"db2.%\")", ("db1.old%", "db2.%")),
    ("REPLICATE_WILD_IGNORE_TABLE", F.WILD_IGNORE_TABLE, "('db%.t1%')", ("db%.t1%",)),
    ("REPLICATE_REWRITE_DB", F.REWRITE_DB, "((dbA, dbB), (dbC, dbD))", (("dbA", "dbB"), ("dbC", "dbD"))),
])
def test_each_filter_type(keyword, ftype, values, expected):
    stmt = crf(f"{keyword} = {values}")
    assert stmt.filters == ((ftype, expected),)
    assert stmt.channel is None
    assert stmt.text == f"CHANGE REPLICATION FILTER {keyword} = {values}"
    assert stmt.line == 1


@pytest.mark.parametrize("keyword", [t.value for t in F])
def test_empty_list_is_legal_for_every_type(keyword):
    assert crf(f"{keyword}=()").filters == ((F.from_name(keyword), ()),)
    assert crf(f"{keyword} = ( )").filters == ((F.from_name(keyword), ()),)


def test_mysql_test_statement_with_backticks_repeat_and_mixed_case():
    stmt = crf("REPLICATE_DO_DB=(db2,`db32`,`db,3`), REPLICATE_DO_DB = (db1,my_db3,my_db4), "
               "Replicate_Ignore_DB = (my_initfiledb3) FOR CHANNEL 'channel_1'")
    assert stmt.filters == ((F.DO_DB, ("db2", "db32", "db,3")),
                            (F.DO_DB, ("db1", "my_db3", "my_db4")),
                            (F.IGNORE_DB, ("my_initfiledb3",)))
    assert stmt.channel == "channel_1"


def test_keywords_are_case_insensitive():
    stmt = parse_statement("change Replication filter replicate_wild_ignore_table=('a.b') for CHANNEL 'c'")
    assert stmt.filters == ((F.WILD_IGNORE_TABLE, ("a.b",)),) and stmt.channel == "c"


def test_free_whitespace_and_comments_between_tokens():
    stmt = parse_statement("CHANGE/*a*/REPLICATION -- dash comment\n FILTER # hash comment\n"
                           "\tREPLICATE_DO_DB\n=\n(\n db1 /* x */ ,\r\n db2 -- end\n) FOR /**/ CHANNEL\n'ch'")
    assert stmt.filters == ((F.DO_DB, ("db1", "db2")),) and stmt.channel == "ch"


def test_dash_dash_needs_whitespace_to_start_a_comment():
    assert crf("REPLICATE_DO_DB=(a)--").filters == ((F.DO_DB, ("a",)),)
    err = syntax_error("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(a)--x")
    assert err.near == "--x"


@pytest.mark.parametrize("written, stored", [
    ("`db,2`", "db,2"), ("`a``b`", "a`b"), ("````", "`"), ("`a b.c`", "a b.c"), ("`select`", "select"),
    ("`'\"\\%_`", "'\"\\%_"), ("$x", "$x"), ("1a", "1a"), ("été", "été"), ("db€", "db€"), ("MiXeD", "MiXeD"),
    ("filter", "filter"), ("channel", "channel"), ("source", "source"), ("status", "status"),
])
def test_identifier_forms(written, stored):
    assert crf(f"REPLICATE_DO_DB=({written})").filters == ((F.DO_DB, (stored,)),)


def test_tables_join_two_identifiers_with_one_dot():
    stmt = crf("REPLICATE_IGNORE_TABLE=(`db3`.initfilet3, `a.b`.c, a . b, db.`t``1`, `d`.`t`)")
    assert stmt.filters == ((F.IGNORE_TABLE, ("db3.initfilet3", "a.b.c", "a.b", "db.t`1", "d.t")),)


def test_reserved_word_next_to_a_dot_is_a_name():
    # MySQL never reads a word glued to a qualifying dot as a keyword.
    assert crf("REPLICATE_DO_TABLE=(db.select, select.t1)").filters == \
        ((F.DO_TABLE, ("db.select", "select.t1")),)


@pytest.mark.parametrize("written, stored", [
    (r"'my\_db.%'", r"my\_db.%"),
    (r"'a\%b.c'", r"a\%b.c"),
    (r"'it\'s.t'", "it's.t"),
    ("'it''s.t'", "it's.t"),
    (r"'q\"d.t'", 'q"d.t'),
    ('"dq"".t"', 'dq".t'),
    ("\"s''q.t\"", "s''q.t"),
    (r"'back\\slash.t'", "back\\slash.t"),
    (r"'tab\t.cr\r.bs\b.nul\0.z\Z'", "tab\t.cr\r.bs\b.nul\0.z\x1a"),
    (r"'other\x\y.t'", "otherxy.t"),
])
def test_pattern_unescaping(written, stored):
    assert crf(f"REPLICATE_WILD_DO_TABLE=({written})").filters == ((F.WILD_DO_TABLE, (stored,)),)


def test_repeated_types_keep_every_entry_in_order():
    stmt = crf("REPLICATE_DO_DB=(a), REPLICATE_IGNORE_DB=(b), REPLICATE_DO_DB=(), REPLICATE_DO_DB=(c)")
    assert stmt.filters == ((F.DO_DB, ("a",)), (F.IGNORE_DB, ("b",)), (F.DO_DB, ()), (F.DO_DB, ("c",)))


def test_rewrite_pairs():
    assert crf("REPLICATE_REWRITE_DB=((db1,db2))").filters == ((F.REWRITE_DB, (("db1", "db2"),)),)
    assert crf("REPLICATE_REWRITE_DB = ( ( `a,b` , `c``d` ) , (e,f) )").filters == \
        ((F.REWRITE_DB, (("a,b", "c`d"), ("e", "f"))),)


@pytest.mark.parametrize("clause, channel", [
    ("FOR CHANNEL 'channel_1'", "channel_1"),
    ("FOR CHANNEL 'CH_1'", "ch_1"),
    ('FOR CHANNEL "Double"', "double"),
    ("FOR CHANNEL ''", ""),
    (r"FOR CHANNEL 'it\'s'", "it's"),
])
def test_channel_is_a_lower_cased_string(clause, channel):
    assert crf(f"REPLICATE_DO_DB=(a) {clause}").channel == channel


def test_trailing_semicolon_is_allowed_in_a_single_statement():
    assert crf("REPLICATE_DO_DB=(a);").filters == ((F.DO_DB, ("a",)),)


# ---------------------------------------------------------------- errors, with MySQL's messages

@pytest.mark.parametrize("text, near, line", [
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = ('db1')", "'db1')", 1),            # quoted db name
    ("CHANGE REPLICATION FILTER REPLICATE_DO_TABLE = (t1)", ")", 1),                  # unqualified table
    ("CHANGE REPLICATION FILTER REPLICATE_DO_TABLE = (db.)", ")", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB (db1)", "(db1)", 1),                 # missing '='
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = db1", "db1", 1),                   # missing parens
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (db1", "", 1),                     # missing ')'
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = (db1.t%)", "db1.t%)", 1),   # unquoted pattern
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a) FOR CHANNEL ch1", "ch1", 1),   # bare channel name
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (select)", "select)", 1),          # reserved word
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a, Interval)", "Interval)", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_TABLE = (select . t)", "select . t)", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (123)", "123)", 1),                 # a number
    ("CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((a,b,c))", ",c))", 1),       # pair arity
    ("CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = ((a))", "))", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_REWRITE_DB = (a,b)", "a,b)", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = ('db1", "'db1", 1),                # unterminated quote
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (`db1)", "`db1)", 1),              # unterminated backtick
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a) /* open", "/* open", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_DB = ('a.b')", "REPLICATE_WILD_DO_DB = ('a.b')", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DBX = (a)", "REPLICATE_DO_DBX = (a)", 1),
    ("CHANGE REPLICATION FILTER", "", 1),
    ("CHANGE REPLICATION FILTER FOR CHANNEL 'c'", "FOR CHANNEL 'c'", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(a),", "", 1),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB=(a) LIMIT 1", "LIMIT 1", 1),
    ("CHANGE REPLICATION\nFILTER\n  REPLICATE_DO_DB = (a,\n  'b')", "'b')", 4),
    ("CHANGE REPLICATION FILTER\nREPLICATE_DO_DB = (a", "", 2),
    ("CHANGE TABLE t", "TABLE t", 1),                                                # CHANGE is ours
    ("change", "", 1),
])
def test_syntax_errors(text, near, line):
    err = syntax_error(text)
    assert (err.near, err.line, err.statement_line) == (near, line, 1)


def test_syntax_error_column():
    err = syntax_error("CHANGE REPLICATION FILTER\n  REPLICATE_DO_DB = ('db1')")
    assert (err.line, err.column) == (2, 22)


def test_near_text_is_cut_to_80_characters():
    rest = "x" * 100 + ")"
    err = syntax_error(f"CHANGE REPLICATION FILTER REPLICATE_DO_DB = ('{rest}")
    assert err.near == ("'" + rest)[:80]


def test_message_matches_the_manual_example():
    with pytest.raises(ParseError) as info:
        parse_statement("CHANGE REPLICATION FILTER REPLICATE_DO_DB = ('db1')")
    assert str(info.value) == "ERROR 1064 (42000): " + SYNTAX.format("'db1')", 1)


@pytest.mark.parametrize("pattern", ["'db1_old'", "''", r"'no\_dot'"])
def test_wild_pattern_without_dot_is_3067(pattern):
    err = mysql_error(f"CHANGE REPLICATION FILTER REPLICATE_WILD_IGNORE_TABLE = ('a.b', {pattern})", 3067)
    assert (err.sqlstate, err.name) == ("HY000", "ER_INVALID_RPL_WILD_TABLE_FILTER_PATTERN")
    assert err.message == ("Supplied filter list contains a value which is not in the required format "
                           "'db_pattern.table_pattern'")


@pytest.mark.parametrize("text, value", [
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = ('a.\nb')", "a.\nb"),
    ("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE = ('a.\\nb')", "a.\nb"),
    ("CHANGE REPLICATION FILTER REPLICATE_DO_DB = (a) FOR CHANNEL 'Ch\n1'", "Ch\n1"),
    ("CHANGE REPLICATION SOURCE TO SOURCE_HOST = 'h\nx'", "h\nx"),
])
def test_line_feed_is_1525(text, value):
    err = mysql_error(text, 1525)
    assert (err.sqlstate, err.name) == ("HY000", "ER_WRONG_VALUE")
    assert err.message == f"Incorrect argument contains not-allowed LF value: '{value}'"


def test_first_error_in_statement_order_wins():
    mysql_error("CHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE=('nodot'), REPLICATE_DO_DB=('x')", 3067)
    syntax_error("CHANGE REPLICATION FILTER REPLICATE_DO_DB=('x'), REPLICATE_WILD_DO_TABLE=('nodot')")


@pytest.mark.parametrize("word", ["select", "Interval", "ACCESSIBLE", "master_bind", "intersect", "lateral", "ON"])
def test_reserved_words_need_backticks(word):
    assert word.upper() in RESERVED_WORDS
    syntax_error(f"CHANGE REPLICATION FILTER REPLICATE_DO_DB = ({word})")
    assert crf(f"REPLICATE_DO_DB = (`{word}`)").filters == ((F.DO_DB, (word,)),)


# ---------------------------------------------------------------- CHANGE REPLICATION SOURCE / MASTER

def test_change_source_from_the_scenarios():
    stmt = source("SOURCE_HOST='127.0.0.1', SOURCE_PORT=13001, SOURCE_USER='root' FOR CHANNEL 'Channel_1'")
    assert stmt.options == (("SOURCE_HOST", "127.0.0.1"), ("SOURCE_PORT", 13001), ("SOURCE_USER", "root"))
    assert (stmt.channel, stmt.legacy, stmt.legacy_options) == ("channel_1", False, ())


def test_change_master_and_master_keys_are_canonicalised():
    stmt = source("master_host='h', SOURCE_PORT=1, Master_Log_Pos=4, GET_MASTER_PUBLIC_KEY=1, "
                  "MASTER_SSL_VERIFY_SERVER_CERT=0", verb="change master to ")
    assert stmt.options == (("SOURCE_HOST", "h"), ("SOURCE_PORT", 1), ("SOURCE_LOG_POS", 4),
                            ("GET_SOURCE_PUBLIC_KEY", 1), ("SOURCE_SSL_VERIFY_SERVER_CERT", 0))
    assert stmt.legacy is True
    assert stmt.legacy_options == ("MASTER_HOST", "MASTER_LOG_POS", "GET_MASTER_PUBLIC_KEY",
                                   "MASTER_SSL_VERIFY_SERVER_CERT")
    assert source("MASTER_HOST='h'").legacy is False


STRING_KEYS = ["HOST", "USER", "PASSWORD", "BIND", "LOG_FILE", "SSL_CA", "SSL_CAPATH", "SSL_CERT", "SSL_CRL",
               "SSL_CRLPATH", "SSL_KEY", "SSL_CIPHER", "TLS_VERSION", "PUBLIC_KEY_PATH", "COMPRESSION_ALGORITHMS"]
UINT_KEYS = ["PORT", "CONNECT_RETRY", "RETRY_COUNT", "DELAY", "LOG_POS", "ZSTD_COMPRESSION_LEVEL"]
FLAG_KEYS = ["SSL", "SSL_VERIFY_SERVER_CERT", "AUTO_POSITION"]


@pytest.mark.parametrize("prefix", ["SOURCE_", "MASTER_"])
def test_every_paired_option(prefix):
    parts = [f"{prefix}{k}='v{i}'" for i, k in enumerate(STRING_KEYS)]
    parts += [f"{prefix}{k}={i + 10}" for i, k in enumerate(UINT_KEYS)]
    parts += [f"{prefix}{k}=1" for k in FLAG_KEYS]
    parts += [f"{prefix}HEARTBEAT_PERIOD=30", f"{prefix}TLS_CIPHERSUITES='TLS_AES_128_GCM_SHA256'"]
    parts += [f"GET_{prefix}PUBLIC_KEY=1"]
    stmt = source(", ".join(parts))
    expected = [(f"SOURCE_{k}", f"v{i}") for i, k in enumerate(STRING_KEYS)]
    expected += [(f"SOURCE_{k}", i + 10) for i, k in enumerate(UINT_KEYS)]
    expected += [(f"SOURCE_{k}", 1) for k in FLAG_KEYS]
    expected += [("SOURCE_HEARTBEAT_PERIOD", 30), ("SOURCE_TLS_CIPHERSUITES", "TLS_AES_128_GCM_SHA256"),
                 ("GET_SOURCE_PUBLIC_KEY", 1)]
    assert stmt.options == tuple(expected)
    assert len(stmt.legacy_options) == (len(parts) if prefix == "MASTER_" else 0)


def test_options_without_a_master_spelling():
    stmt = source("RELAY_LOG_FILE='r.000001', RELAY_LOG_POS=4, NETWORK_NAMESPACE='ns', REQUIRE_ROW_FORMAT=1, "
                  "GTID_ONLY=0, SOURCE_CONNECTION_AUTO_FAILOVER=1, IGNORE_SERVER_IDS=(3, 2), "
                  "PRIVILEGE_CHECKS_USER='priv'@'localhost', REQUIRE_TABLE_PRIMARY_KEY_CHECK=stream, "
                  "ASSIGN_GTIDS_TO_ANONYMOUS_TRANSACTIONS='aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa'")
    assert stmt.options == (
        ("RELAY_LOG_FILE", "r.000001"), ("RELAY_LOG_POS", 4), ("NETWORK_NAMESPACE", "ns"),
        ("REQUIRE_ROW_FORMAT", 1), ("GTID_ONLY", 0), ("SOURCE_CONNECTION_AUTO_FAILOVER", 1),
        ("IGNORE_SERVER_IDS", (3, 2)), ("PRIVILEGE_CHECKS_USER", "'priv'@'localhost'"),
        ("REQUIRE_TABLE_PRIMARY_KEY_CHECK", "STREAM"),
        ("ASSIGN_GTIDS_TO_ANONYMOUS_TRANSACTIONS", "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"))


@pytest.mark.parametrize("written, value", [
    ("SOURCE_SSL=7", 1), ("SOURCE_AUTO_POSITION=0", 0), ("SOURCE_PORT=0x0CEA", 3306),
    ("SOURCE_HEARTBEAT_PERIOD=0.5", 0.5), ("SOURCE_HEARTBEAT_PERIOD=.25", 0.25),
    ("IGNORE_SERVER_IDS=()", ()), ("SOURCE_TLS_CIPHERSUITES=NULL", None),
    ("PRIVILEGE_CHECKS_USER=NULL", None), ("PRIVILEGE_CHECKS_USER='u'", "'u'@'%'"),
    ("PRIVILEGE_CHECKS_USER=u@localhost", "'u'@'localhost'"),
    ("PRIVILEGE_CHECKS_USER='u'@127.0.0.1", "'u'@'127.0.0.1'"),
    ("PRIVILEGE_CHECKS_USER=`o'k`@'h'", "'o''k'@'h'"),
    ("REQUIRE_TABLE_PRIMARY_KEY_CHECK=ON", "ON"), ("REQUIRE_TABLE_PRIMARY_KEY_CHECK=generate", "GENERATE"),
    ("ASSIGN_GTIDS_TO_ANONYMOUS_TRANSACTIONS=off", "OFF"), ("ASSIGN_GTIDS_TO_ANONYMOUS_TRANSACTIONS=LOCAL", "LOCAL"),
    ("SOURCE_COMPRESSION_ALGORITHMS='zlib,zstd'", "zlib,zstd"),
])
def test_option_values(written, value):
    ((_, got),) = source(written).options
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("body, near", [
    ("SOURCE_HOSTX='h'", "SOURCE_HOSTX='h'"),                 # unknown key
    ("SOURCE_HOST='h', NO_SUCH_OPTION=1", "NO_SUCH_OPTION=1"),
    ("MASTER_CONNECTION_AUTO_FAILOVER=1", "MASTER_CONNECTION_AUTO_FAILOVER=1"),
    ("SOURCE_PORT='3306'", "'3306'"),                          # string for a number
    ("SOURCE_PORT=-1", "-1"),
    ("SOURCE_PORT=3306.5", ".5"),
    ("SOURCE_HOST=localhost", "localhost"),                    # identifier for a string
    ("SOURCE_HOST=NULL", "NULL"),
    ("SOURCE_SSL=ON", "ON"),
    ("IGNORE_SERVER_IDS=1", "1"),
    ("SOURCE_HOST 'h'", "'h'"),
    ("", ""),
    ("SOURCE_HOST='h' FOR CHANNEL c", "c"),
])
def test_change_source_syntax_errors(body, near):
    assert syntax_error("CHANGE REPLICATION SOURCE TO " + body).near == near


def test_compression_algorithms_may_hold_a_line_feed():
    # MySQL reads it with TEXT_STRING_sys, not the no-newline variant.
    assert source("SOURCE_COMPRESSION_ALGORITHMS='zlib\nzstd'").options == \
        (("SOURCE_COMPRESSION_ALGORITHMS", "zlib\nzstd"),)


# ---------------------------------------------------------------- RESET / START / STOP / SHOW

@pytest.mark.parametrize("text, expected", [
    ("RESET REPLICA", ResetReplica(all=False, channel=None, legacy=False)),
    ("reset slave", ResetReplica(all=False, channel=None, legacy=True)),
    ("RESET REPLICA ALL", ResetReplica(all=True, channel=None, legacy=False)),
    ("RESET SLAVE ALL FOR CHANNEL 'CH'", ResetReplica(all=True, channel="ch", legacy=True)),
    ("RESET REPLICA FOR CHANNEL ''", ResetReplica(all=False, channel="", legacy=False)),
    ("START REPLICA", StartReplica(threads=frozenset(), channel=None, legacy=False)),
    ("start slave io_thread", StartReplica(threads=frozenset({"IO"}), legacy=True)),
    ("START REPLICA RELAY_THREAD", StartReplica(threads=frozenset({"IO"}))),
    ("START REPLICA SQL_THREAD, IO_THREAD FOR CHANNEL 'c1'",
     StartReplica(threads=frozenset({"IO", "SQL"}), channel="c1")),
    ("STOP REPLICA", StopReplica(threads=frozenset(), channel=None, legacy=False)),
    ("STOP SLAVE SQL_THREAD", StopReplica(threads=frozenset({"SQL"}), legacy=True)),
    ("STOP REPLICA IO_THREAD, RELAY_THREAD FOR CHANNEL 'x'", StopReplica(threads=frozenset({"IO"}), channel="x")),
    ("SHOW REPLICA STATUS", ShowReplicaStatus(channel=None, legacy=False)),
    ("show slave status for channel 'Channel_5'", ShowReplicaStatus(channel="channel_5", legacy=True)),
    ("SHOW REPLICATION FILTER HISTORY", ShowReplicationFilterHistory(channel=None, limit=None)),
    ("SHOW REPLICATION FILTER HISTORY FOR CHANNEL 'c' LIMIT 10", ShowReplicationFilterHistory(channel="c", limit=10)),
    ("SHOW REPLICATION FILTER HISTORY LIMIT 0", ShowReplicationFilterHistory(limit=0)),
])
def test_channel_statements(text, expected):
    stmt = parse_statement(text, line=7)
    assert stmt == type(expected)(**{**expected.__dict__, "text": text, "line": 7})


@pytest.mark.parametrize("clauses", [
    "UNTIL SQL_AFTER_MTS_GAPS",
    "UNTIL SQL_BEFORE_GTIDS = '3E11FA47-71CA-11E1-9E33-C80AA9429562:11-56'",
    "UNTIL SQL_AFTER_GTIDS='uuid:1'",
    "UNTIL SOURCE_LOG_FILE='binlog.000002', SOURCE_LOG_POS=154",
    "UNTIL MASTER_LOG_FILE='b.1', MASTER_LOG_POS=4",
    "UNTIL RELAY_LOG_FILE='r.1', RELAY_LOG_POS=4",
    "USER='u'",
    "USER='u' PASSWORD='p' DEFAULT_AUTH='caching_sha2_password' PLUGIN_DIR='/p'",
    "PASSWORD='p' PLUGIN_DIR='/p'",
    "UNTIL SQL_AFTER_MTS_GAPS USER='u' /* c */ PASSWORD='p'",
])
def test_start_records_unsupported_clauses(clauses):
    stmt = parse_statement(f"START REPLICA SQL_THREAD {clauses} FOR CHANNEL 'c'")
    assert stmt.unsupported == clauses
    assert stmt.threads == frozenset({"SQL"}) and stmt.channel == "c"


@pytest.mark.parametrize("text, near", [
    ("START REPLICA PASSWORD='p' USER='u'", "USER='u'"),        # MySQL's fixed clause order
    ("START REPLICA UNTIL", ""),
    ("START REPLICA IO_THREAD SQL_THREAD", "SQL_THREAD"),
    ("STOP REPLICA UNTIL SQL_AFTER_MTS_GAPS", "UNTIL SQL_AFTER_MTS_GAPS"),
    ("STOP REPLICA ALL", "ALL"),
    ("RESET REPLICA ALL ALL", "ALL"),
    ("SHOW REPLICA STATUS LIMIT 1", "LIMIT 1"),
    ("SHOW REPLICATION FILTER HISTORY LIMIT 1 FOR CHANNEL 'c'", "FOR CHANNEL 'c'"),
    ("SHOW REPLICATION FILTER HISTORY LIMIT x", "x"),
    ("SHOW REPLICATION FILTER HISTORY FOR CHANNEL c", "c"),
])
def test_channel_statement_errors(text, near):
    assert syntax_error(text).near == near


# ---------------------------------------------------------------- classification

@pytest.mark.parametrize("text", [
    "SELECT 1", "CREATE TEMPORARY VIEW v AS SELECT 1", "RESET", "RESET spark.sql.shuffle.partitions",
    "SHOW TABLES", "SET x = 1", "SELEC garbage ((",
    "/* c */ SHOW DATABASES", "`CHANGE` x", "(SELECT 1)", "/*!40101 SET NAMES utf8 */",
])
def test_other_sql_is_passed_through_unvalidated(text):
    assert parse_statement(text, line=3) == OtherSQL(text=text, line=3)


def test_replication_shaped_text_never_passes_to_spark():
    """What the old router passed to Spark: now rpl_sql's error (test_front_door has the routing rules)."""
    for text, code in [("SHOW REPLICAS", 1235), ("START TRANSACTION", 1064), ("show replica", 1064)]:
        with pytest.raises(MySQLError) as raised:
            parse_statement(text)
        assert raised.value.code == code, text


@pytest.mark.parametrize("text", [
    "-- why\nSHOW REPLICA STATUS", "/* x */ reset /* y */ replica", "#c\nstop\tslave", "SHOW/**/SLAVE STATUS",
    "/*!80000 CHANGE REPLICATION FILTER REPLICATE_DO_DB=(a) */",
])
def test_replication_statements_are_recognised_after_comments(text):
    assert not isinstance(parse_statement(text), OtherSQL)


def test_versioned_comments():
    assert crf("/*!REPLICATE_DO_DB=(a)*/").filters == ((F.DO_DB, ("a",)),)
    assert crf("/*!80000 REPLICATE_DO_DB=(a) */").filters == ((F.DO_DB, ("a",)),)
    assert crf("REPLICATE_DO_DB=(a) /*!90000 FOR CHANNEL 'future' */").channel is None


# ---------------------------------------------------------------- scripts

def test_split_statements():
    script = ("-- header; with a semicolon\nSELECT 1;  SELECT 'a;b', \"c;d\", `e;f`;\n\n"
              "/* ; */ CHANGE REPLICATION FILTER\n  REPLICATE_DO_DB=(x) # c;\n;\n;;  -- only a comment\n"
              "SHOW REPLICA STATUS")
    assert split_statements(script) == [
        ("SELECT 1", 2),
        ("SELECT 'a;b', \"c;d\", `e;f`", 2),
        ("CHANGE REPLICATION FILTER\n  REPLICATE_DO_DB=(x) # c;", 4),
        ("SHOW REPLICA STATUS", 8),
    ]


def test_split_keeps_escaped_quotes_and_unterminated_quotes():
    assert split_statements(r"SELECT 'it\'s;', 'x'';y'; SELECT 2") == [(r"SELECT 'it\'s;', 'x'';y'", 1),
                                                                       ("SELECT 2", 1)]
    assert split_statements("SELECT 'open; SELECT 2") == [("SELECT 'open; SELECT 2", 1)]
    assert split_statements("  \n -- nothing\n ;; ") == []


def test_parse_script_with_line_numbers():
    script = ("CHANGE REPLICATION SOURCE TO SOURCE_HOST='h' FOR CHANNEL 'ch1';\n"
              "\n"
              "CHANGE REPLICATION FILTER\n"
              "  REPLICATE_DO_DB = (db1),\n"
              "  REPLICATE_IGNORE_TABLE = (`db3`.initfilet3)\n"
              "  FOR CHANNEL 'ch1';\n"
              "SELECT * FROM t; START REPLICA;\n")
    stmts = parse(script)
    assert [type(s) for s in stmts] == [ChangeReplicationSource, ChangeReplicationFilter, OtherSQL, StartReplica]
    assert [s.line for s in stmts] == [1, 3, 7, 7]
    assert stmts[1].text.startswith("CHANGE REPLICATION FILTER\n") and stmts[1].text.endswith("'ch1'")
    assert stmts[1].filters == ((F.DO_DB, ("db1",)), (F.IGNORE_TABLE, ("db3.initfilet3",)))
    assert stmts[2].text == "SELECT * FROM t"


def test_parse_raises_on_the_first_bad_statement():
    script = "SELECT 1;\nCHANGE REPLICATION FILTER REPLICATE_DO_DB=(a);\n\nCHANGE REPLICATION FILTER\n" \
             "  REPLICATE_DO_TABLE=(t1);\nCHANGE nonsense"
    with pytest.raises(ParseError) as info:
        parse(script)
    err = info.value
    assert (err.near, err.line, err.statement_line, err.script_line) == (")", 2, 4, 5)
    assert err.message == SYNTAX.format(")", 2)


def test_parse_reports_the_statement_line_of_value_errors():
    with pytest.raises(MySQLError) as info:
        parse("SELECT 1;\n\nCHANGE REPLICATION FILTER REPLICATE_WILD_DO_TABLE=('nodot')")
    assert (info.value.code, info.value.statement_line) == (3067, 3)


def test_parse_empty_script():
    assert parse("") == [] and parse(" ;\n-- x\n") == []


# ---------------------------------------------------------------- round trips

NAME_CHARS = st.one_of(
    st.sampled_from(list("'\"\\`,.%_ ()$;#-/*\t\n") + ["--", "/*", "*/", "``", "é", "ß", "Σ", "€", "日", "😀"]),
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),  # a NUL is 1300 (test_cli.py)
)
NAMES = st.lists(NAME_CHARS, max_size=12).map("".join)
ONE_LINE = NAMES.map(lambda s: s.replace("\n", " "))


def backticked(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def mysql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@settings(max_examples=200, deadline=None)
@given(dbs=st.lists(NAMES, min_size=1, max_size=4), table=st.tuples(NAMES, NAMES), pair=st.tuples(NAMES, NAMES))
def test_backticked_identifiers_round_trip(dbs, table, pair):
    text = (f"change replication filter Replicate_Do_DB=({', '.join(map(backticked, dbs))}), "
            f"REPLICATE_DO_TABLE=({backticked(table[0])}.{backticked(table[1])}), "
            f"replicate_rewrite_db=(({backticked(pair[0])},{backticked(pair[1])}))")
    (stmt,) = parse(text + ";")
    assert stmt.filters == ((F.DO_DB, tuple(dbs)), (F.DO_TABLE, (f"{table[0]}.{table[1]}",)),
                            (F.REWRITE_DB, (pair,)))
    assert stmt.text == text


@settings(max_examples=200, deadline=None)
@given(pattern=st.tuples(ONE_LINE, ONE_LINE).map(".".join), channel=ONE_LINE)
def test_patterns_and_channels_round_trip(pattern, channel):
    stmt = crf(f"REPLICATE_WILD_DO_TABLE = ({mysql_string(pattern)}) FOR CHANNEL {mysql_string(channel)}")
    assert stmt.filters == ((F.WILD_DO_TABLE, (pattern,)),)
    assert stmt.channel == channel.lower()


@pytest.mark.parametrize("key, limit", [("SOURCE_HOST", 255), ("MASTER_HOST", 255), ("SOURCE_USER", 96)])
def test_source_strings_longer_than_mysql_allows_are_1470(key, limit):
    assert parse(f"CHANGE REPLICATION SOURCE TO {key}='{'h' * limit}'")
    assert parse(f"CHANGE REPLICATION SOURCE TO {key}='{'é' * (limit // 2)}'")  # bytes, not characters
    for value in ("h" * (limit + 1), "h" * 1_000_000, "é" * (limit // 2 + 1)):
        with pytest.raises(MySQLError) as e:
            parse(f"CHANGE REPLICATION SOURCE TO {key}='{value}'")
        assert (e.value.code, e.value.sqlstate) == (1470, "HY000")
        assert e.value.message == f"String '{value[:70]}' is too long for {key} (should be no longer than {limit})"


@pytest.mark.parametrize("option, stored", [
    ("SOURCE_PORT=99999999999999999999999", 4294967295),  # MySQL 8.0 keeps it in 32 bits; MariaDB shows the same
    ("MASTER_PORT=70000", 70000),
    ("SOURCE_PORT=0x10000000F", 15),
    ("SOURCE_CONNECT_RETRY=4294967296", 0),
    ("SOURCE_RETRY_COUNT=99999999999999999999999", 2**64 - 1),
    ("SOURCE_LOG_POS=0", 4),
    ("SOURCE_LOG_POS=18446744073709551616", 2**64 - 1),
    ("SOURCE_DELAY=2147483647", 2147483647),
])
def test_numeric_source_options_are_kept_as_mysql_keeps_them(option, stored):
    (_, value), = parse(f"CHANGE REPLICATION SOURCE TO {option}")[0].options
    assert value == stored


def test_a_source_delay_past_mysqls_maximum_is_1729():
    with pytest.raises(MySQLError) as e:
        parse("CHANGE REPLICATION SOURCE TO SOURCE_DELAY=2147483648")
    assert (e.value.code, e.value.message) == (
        1729, "The requested value 2147483648 for the master delay exceeds the maximum 2147483647")
