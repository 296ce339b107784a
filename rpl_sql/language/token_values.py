"""The values of replication statements' tokens as MySQL 8.0 reads and keeps them: string literals with MySQL's
escapes, option strings without newlines, numeric options saturated and stored in MySQL's field widths."""
from __future__ import annotations

import re

from lark import Token

from rpl_sql.errors import MySQLError


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
