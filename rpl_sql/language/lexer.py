"""MySQL's lexical rules, once: quotes, comments, executable comments `/*!NNNNN ... */`, statement ends.

The shell, the statement parser and the binlog statement classifier all read text through this module, so a
versioned comment runs (or not) the same everywhere: NNNNN <= MYSQL_VERSION_ID, the release rpl_sql emulates.
"""
from __future__ import annotations

import re

MYSQL_VERSION_ID = 80040

_SCAN = re.compile(r"""
    (?P<quoted> '(?:[^'\\]|\\.|'')*'? | "(?:[^"\\]|\\.|"")*"? | `(?:[^`]|``)*`? )
  | (?P<comment> \#[^\n]* | --(?=[\x00-\x20]|\Z)[^\n]* | /\*(?!!)(?:.*?\*/|.*) )
  | (?P<versioned> /\*!(?P<version>[0-9]{5})? )
  | (?P<close> \*/ )
  | (?P<semi> ; )
  | (?P<vertical> \\G )
  | (?P<word> [^\x00-#%-/:-@\[-\^`{-\x7f]+ )     # as the grammar's names
  | (?P<space> [\ \t\n\r\f\v]+ )
  | (?P<other> . )
""", re.VERBOSE | re.DOTALL)


def pieces(text: str, version_id: int = MYSQL_VERSION_ID):
    """Yield (kind, start, end) over `text`; unterminated quotes and comments run to the end.

    An executed ``/*!`` comment yields its opener and its ``*/`` as kind 'marker' and its
    content as code; a comment for a newer server is a 'comment'.
    """
    pos, n, in_versioned = 0, len(text), False
    while pos < n:
        m = _SCAN.match(text, pos)
        kind, end = m.lastgroup, m.end()
        if kind == "versioned":
            version = m.group("version")
            if version and int(version) > version_id:
                close = text.find("*/", end)
                kind, end = "comment", (n if close < 0 else close + 2)
            else:
                kind, in_versioned = "marker", True
        elif kind == "close":
            kind = "marker" if in_versioned else "other"
            in_versioned = False
        yield kind, pos, end
        pos = end


def split_statements(text: str) -> list[tuple[str, int]]:
    """Split a script on ';' (or the mysql client's ``\\G``, kept on the text) outside quotes and comments.

    Returns (statement text, 1-based script line where it starts). Leading comments and
    surrounding whitespace are not part of a statement, so its line is that of its first
    keyword; statements with nothing else are dropped. As in the mysql client, ';' inside an
    executed ``/*! ... */`` comment does end a statement.
    """
    out: list[tuple[str, int]] = []
    line, counted = 1, 0
    start = end = None

    def flush():
        nonlocal line, counted
        if start is not None:
            line += text.count("\n", counted, start)
            counted = start
            out.append((text[start:end], line))

    for kind, s, e in pieces(text):
        if kind == "semi":
            flush()
            start = None
        elif kind == "vertical":
            if start is not None:
                end = e
            flush()
            start = None
        elif kind == "space" or (kind == "comment" and start is None):
            continue
        else:
            start = s if start is None else start
            end = e
    flush()
    return out


def expand_executable_comments(text: str, version_id: int = MYSQL_VERSION_ID) -> str:
    """What MySQL's lexer reads: the markers of executed ``/*!NNNNN ... */`` comments blanked, comments for a
    newer server blanked whole; every offset kept, so positions in errors stay those of the text."""
    if "/*!" not in text:
        return text
    chars = list(text)
    for kind, s, e in pieces(text, version_id):
        if kind == "marker" or (kind == "comment" and text.startswith("/*!", s)):
            chars[s:e] = " " * (e - s)
    return "".join(chars)


_SECRET_KEYS = frozenset({"SOURCE_PASSWORD", "MASTER_PASSWORD", "PASSWORD"})
SECRET = "<secret>"


def redact(text: str) -> str:
    """`text` with every password shown as <secret>, as MySQL rewrites a statement before its logs and status
    see it: the string after SOURCE_PASSWORD / MASTER_PASSWORD / PASSWORD [= | (] and after IDENTIFIED [WITH
    plugin] BY; the statement's other text is kept as is.

    >>> redact("CHANGE REPLICATION SOURCE TO SOURCE_USER='u', SOURCE_PASSWORD = 'it''s' FOR CHANNEL 'c'")
    "CHANGE REPLICATION SOURCE TO SOURCE_USER='u', SOURCE_PASSWORD = <secret> FOR CHANNEL 'c'"
    >>> redact("CREATE USER u IDENTIFIED WITH mysql_native_password BY 'pw'; SET PASSWORD = PASSWORD('pw')")
    'CREATE USER u IDENTIFIED WITH mysql_native_password BY <secret>; SET PASSWORD = PASSWORD(<secret>)'
    """
    upper = text.upper()
    if "PASSWORD" not in upper and "IDENTIFIED" not in upper:
        return text
    out, last, armed, identified = [], 0, False, False
    for kind, s, e in pieces(text):
        if kind in ("space", "comment", "marker"):
            continue
        word = text[s:e].upper() if kind == "word" else ""
        if armed and kind == "quoted" and text[s] in "'\"":
            out += [text[last:s], SECRET]
            last = e
        elif armed and text[s:e] in ("=", "("):
            continue
        armed = word in _SECRET_KEYS or (identified and word == "BY")
        identified = word == "IDENTIFIED" or (identified and kind in ("word", "quoted") and word != "BY")
    return "".join(out) + text[last:]
