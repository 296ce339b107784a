"""rpl_sql.language.lexer: one reading of MySQL text for the shell, the statement parser and the binlog classifier."""
from __future__ import annotations

import pytest

from rpl_sql.language.lexer import MYSQL_VERSION_ID, expand_executable_comments, pieces, split_statements
from rpl_sql.language.parser import parse_statement
from rpl_sql.classify import classify
from rpl_sql.language.statements import StartReplica

NEWER, OLDER = MYSQL_VERSION_ID + 10, MYSQL_VERSION_ID - 10


@pytest.mark.parametrize("version, runs", [(OLDER, True), (MYSQL_VERSION_ID, True), (NEWER, False)])
def test_a_versioned_comment_runs_alike_in_the_shell_and_in_a_logged_statement(version, runs):
    shell = parse_statement(f"/*!{version} START REPLICA */")
    logged = classify(f"/*!{version} DROP TABLE t */")
    assert isinstance(shell, StartReplica) is runs
    assert (logged.command == "DROP_TABLE") is runs


def test_offsets_are_kept_so_errors_point_into_the_original_text():
    text = "SELECT /*!40101 'a;b' */ 1; /*!99999 ; */ SELECT 2"
    expanded = expand_executable_comments(text)
    assert len(expanded) == len(text) and expanded.index("'a;b'") == text.index("'a;b'")
    # a leading comment is not part of a statement
    assert [s for s, _ in split_statements(text)] == ["SELECT /*!40101 'a;b' */ 1", "SELECT 2"]


@pytest.mark.parametrize("text", ["'it''s /*!1 */'", '"a\\" /*!1 */"', "`x`` /*!1 */`", "-- /*!1 x */\n",
                                  "# /*!1 x */\n", "/* /*!1 x */"])
def test_quotes_and_comments_hide_executable_comments(text):
    assert expand_executable_comments(text) == text
    assert "".join(text[s:e] for _, s, e in pieces(text)) == text
