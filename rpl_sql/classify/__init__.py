"""Statement text of a binlog Query event -> MySQL's command and global table list (spec §5), via sqlglot.

    >>> classify("/*!40101 SET NAMES utf8 */").command
    'SET_OPTION'

The family comes from the leading keywords; tables from sqlglot's AST where its MySQL dialect parses the
family, else from a token-level recognizer; anything unrecognised is OTHER with no tables, and `classify`
never raises. Executable comments are read by `rpl_sql.language.lexer`, as in the shell. Decisions and known limits
(multi-table UPDATE, RENAME, ANALYZE, ...): docs/design/README.md#rpl_sqlclassify.
"""
from rpl_sql.classify.dispatch import classify
from rpl_sql.classify.info import KINDS, StatementInfo

__all__ = ["KINDS", "StatementInfo", "classify"]
