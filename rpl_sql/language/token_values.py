"""The values of replication statements' tokens as MySQL 8.0 reads and keeps them: string literals with MySQL's
escapes, option strings without newlines, numeric options saturated and stored in MySQL's field widths, source-side
filter options, and the words that cannot be names."""
from __future__ import annotations

import re

from lark import Token

from rpl_sql.errors import MySQLError
from rpl_sql.filters.rules import TABLE_TYPES, FilterType


_UNESCAPE = {q: re.compile(r"\\(.)|" + q + q, re.DOTALL) for q in "'\""}
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}


def string_value(tok: Token) -> str:
    """A string literal's value: MySQL escapes, except that \\% and \\_ keep their backslash."""
    quote = tok[0]
    return _UNESCAPE[quote].sub(lambda m: quote if m[1] is None else _ESCAPES.get(m[1], m[1]), tok[1:-1])


def no_newline(value: str, shown: str | None = None) -> str:
    """MySQL's TEXT_STRING_sys_nonewline: patterns, channel names and most option strings (`shown` in the
    error instead of a secret value)."""
    if "\n" in value:
        raise MySQLError.of("ER_WRONG_VALUE", "argument contains not-allowed LF", value if shown is None else shown)
    return value


# MySQL 8.0's checks of CHANGE REPLICATION SOURCE strings, in bytes (HOSTNAME_LENGTH, USERNAME_LENGTH)
MAX_BYTES = {"SOURCE_HOST": 255, "SOURCE_USER": 96}


def uint_value(tok: Token) -> int:
    return int(tok, 16) if tok[:2] == "0x" else int(tok)


# How MySQL 8.0 keeps a numeric CHANGE REPLICATION SOURCE option: its grammar reads an unsigned number
# saturated at 2^64-1 (my_strtoll10), stored in a field of this many bits (Master_info's members)
_UINT_BITS = {"SOURCE_PORT": 32, "SOURCE_CONNECT_RETRY": 32, "SOURCE_ZSTD_COMPRESSION_LEVEL": 32}
_MAX_DELAY = 2**31 - 1  # MySQL's MASTER_DELAY_MAX


def option_uint(key: str, old: str | None, tok: Token) -> int:
    """An option's value as MySQL 8.0 stores it: `SOURCE_PORT=99999999999999999999999` is 4294967295 (MariaDB
    shows the same); a SOURCE_DELAY past its maximum is refused, and SOURCE_LOG_POS is at least 4."""
    value = min(uint_value(tok), 2**64 - 1)
    if key == "SOURCE_DELAY" and value > _MAX_DELAY:
        raise MySQLError.of("ER_MASTER_DELAY_VALUE_OUT_OF_RANGE", value, _MAX_DELAY)
    if key == "SOURCE_LOG_POS":
        return max(value, 4)
    return value % 2 ** _UINT_BITS.get(key, 64)


def option_key(tok: Token) -> tuple[str, str | None]:
    """(canonical SOURCE_* key, the MASTER_* spelling if that was used)."""
    key = tok.upper()
    if key == "GET_MASTER_PUBLIC_KEY":
        return "GET_SOURCE_PUBLIC_KEY", key
    if key.startswith("MASTER_"):
        return "SOURCE_" + key[len("MASTER_"):], key
    return key, None


def source_filter_option(ftype: FilterType, value) -> tuple[str, tuple, None]:
    """A source-side filter of CHANGE REPLICATION SOURCE (WL#2387's extension) as the channel option of its name:
    a list as CHANGE REPLICATION FILTER writes it, or MariaDB's 'a,b' string (its values trimmed)."""
    if ftype is FilterType.REWRITE_DB:
        raise MySQLError.of("ER_WRONG_ARGUMENTS", "CHANGE REPLICATION SOURCE: REPLICATE_REWRITE_DB stays on the "
                                                  "replica (WL#2387); set it with CHANGE REPLICATION FILTER")
    if isinstance(value, Token):
        value = tuple(p.strip() for p in no_newline(string_value(value)).split(",") if p.strip())
        if ftype in TABLE_TYPES and any("." not in p for p in value):
            raise MySQLError.of("ER_INVALID_RPL_WILD_TABLE_FILTER_PATTERN")
    return ftype.value, tuple(value), None


# MySQL 8.0's reserved words (manual: "Keywords and Reserved Words in MySQL 8.0", the (R) entries,
# up to 8.0.31's INTERSECT). Unquoted, they cannot be names.
RESERVED_WORDS = frozenset("""
ACCESSIBLE ADD ALL ALTER ANALYZE AND AS ASC ASENSITIVE BEFORE BETWEEN BIGINT BINARY BLOB BOTH BY
CALL CASCADE CASE CHANGE CHAR CHARACTER CHECK COLLATE COLUMN CONDITION CONSTRAINT CONTINUE CONVERT
CREATE CROSS CUBE CUME_DIST CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP CURRENT_USER CURSOR
DATABASE DATABASES DAY_HOUR DAY_MICROSECOND DAY_MINUTE DAY_SECOND DEC DECIMAL DECLARE DEFAULT
DELAYED DELETE DENSE_RANK DESC DESCRIBE DETERMINISTIC DISTINCT DISTINCTROW DIV DOUBLE DROP DUAL
EACH ELSE ELSEIF EMPTY ENCLOSED ESCAPED EXCEPT EXISTS EXIT EXPLAIN
FALSE FETCH FIRST_VALUE FLOAT FLOAT4 FLOAT8 FOR FORCE FOREIGN FROM FULLTEXT FUNCTION
GENERATED GET GRANT GROUP GROUPING GROUPS HAVING HIGH_PRIORITY HOUR_MICROSECOND HOUR_MINUTE HOUR_SECOND
IF IGNORE IN INDEX INFILE INNER INOUT INSENSITIVE INSERT INT INT1 INT2 INT3 INT4 INT8 INTEGER
INTERSECT INTERVAL INTO IO_AFTER_GTIDS IO_BEFORE_GTIDS IS ITERATE JOIN JSON_TABLE KEY KEYS KILL
LAG LAST_VALUE LATERAL LEAD LEADING LEAVE LEFT LIKE LIMIT LINEAR LINES LOAD LOCALTIME LOCALTIMESTAMP
LOCK LONG LONGBLOB LONGTEXT LOOP LOW_PRIORITY
MASTER_BIND MASTER_SSL_VERIFY_SERVER_CERT MATCH MAXVALUE MEDIUMBLOB MEDIUMINT MEDIUMTEXT MIDDLEINT
MINUTE_MICROSECOND MINUTE_SECOND MOD MODIFIES NATURAL NOT NO_WRITE_TO_BINLOG NTH_VALUE NTILE NULL
NUMERIC OF ON OPTIMIZE OPTIMIZER_COSTS OPTION OPTIONALLY OR ORDER OUT OUTER OUTFILE OVER
PARTITION PERCENT_RANK PRECISION PRIMARY PROCEDURE PURGE
RANGE RANK READ READS READ_WRITE REAL RECURSIVE REFERENCES REGEXP RELEASE RENAME REPEAT REPLACE
REQUIRE RESIGNAL RESTRICT RETURN REVOKE RIGHT RLIKE ROW ROWS ROW_NUMBER
SCHEMA SCHEMAS SECOND_MICROSECOND SELECT SENSITIVE SEPARATOR SET SHOW SIGNAL SMALLINT SPATIAL
SPECIFIC SQL SQLEXCEPTION SQLSTATE SQLWARNING SQL_BIG_RESULT SQL_CALC_FOUND_ROWS SQL_SMALL_RESULT
SSL STARTING STORED STRAIGHT_JOIN SYSTEM
TABLE TERMINATED THEN TINYBLOB TINYINT TINYTEXT TO TRAILING TRIGGER TRUE
UNDO UNION UNIQUE UNLOCK UNSIGNED UPDATE USAGE USE USING UTC_DATE UTC_TIME UTC_TIMESTAMP
VALUES VARBINARY VARCHAR VARCHARACTER VARYING VIRTUAL WHEN WHERE WHILE WINDOW WITH WRITE
XOR YEAR_MONTH ZEROFILL _FILENAME
""".split())
