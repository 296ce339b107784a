"""Decision codes shared by every compiled function, the compiler's size limits, and its result types."""
from __future__ import annotations

from dataclasses import dataclass

from rpl_sql.filters.evaluate import (
    DEFAULT,
    EXEMPT,
    NO_UPDATED_TABLE,
    NONE,
    TRANSACTION,
    TRIGGER_NOT_FOUND,
)
from rpl_sql.filters.rules import FilterType as T

# decision codes shared by all functions: code -> decided_by label; TRUE_CODES are the applied ones
LABELS = {
    1: TRANSACTION, 2: T.DO_DB.value, 3: T.IGNORE_DB.value, 4: T.WILD_DO_TABLE.value,
    5: T.WILD_IGNORE_TABLE.value, 6: DEFAULT, 7: TRIGGER_NOT_FOUND, 8: EXEMPT, 9: NO_UPDATED_TABLE,
    10: T.DO_TABLE.value, 11: T.IGNORE_TABLE.value, 12: T.WILD_DO_TABLE.value, 13: T.WILD_IGNORE_TABLE.value,
    14: DEFAULT, 15: DEFAULT, 16: T.DO_DB.value, 17: NONE, 18: NONE, 19: DEFAULT,
}
TRUE_CODES = (1, 4, 8, 10, 12, 14, 16, 17, 18, 19)  # rows' among them: ROW_TRUE_CODES
APPLYING_DB_CODE = 16  # should_apply's database code for the table code helper, once it has tested dbc >= 16
ROW_TRUE_GIVEN_APPLYING_DB = (10, 12, 14, APPLYING_DB_CODE)  # the helper's applied answers given that code

CASE_MAX_GROUPS = 4  # more distinct non-trivial filter configurations than this -> flat encoding
CHANNEL_INDEX_MAX = 8  # case encoding with up to this many channels: dispatch on an INT index (channel_index)
REGEX_CHUNK = 12000  # max regex source chars per RLIKE (Spark embeds it in generated Java as a constant)
COMPILE_MAX_CHARS = 6000  # a larger row table code is interpreted, not compiled (see functions())
# ... unless the JVMs JIT-compile huge methods (-XX:-DontCompileHugeMethods): then up to this size, which keeps
# whole-stage codegen's method under Janino's 64 KB limit (27,000 characters made a 49 KB method)
COMPILE_MAX_CHARS_JIT = 30000
# ... and from this size the JVM table code (a Catalyst expression's memo) where the session has it: at 10
# rules per channel (3,251 chars) it took should_apply from 2.36x to 1.78x the bare scan, at 3 (1,618) it tied
JVM_MIN_CHARS = 2000
MAP_CHUNK = 64  # max entries of one literal map (element_at scans maps linearly)
SET_MAP_MIN = 64  # an exact list this long is one map literal, not an IN list (see in_list)
MAP_HASH_MIN = 1000  # Spark 4.2's default spark.sql.optimizer.mapLookupHashThreshold
MAP_PAD_MAX = 10000  # a session whose threshold is higher keeps IN lists (padding would cost more than it saves)
MAX_LENGTH_GROUPS = 4  # more distinct prefix/suffix lengths than this: a guard lookup first (fix_test)
FIX_CHAIN_MAX = 4  # up to this many prefixes of one length: startswith() each (no copy), else left() IN (...)
STATEMENT_TYPE = "ARRAY<STRUCT<db: STRING, name: STRING, updating: BOOLEAN>>"
HELPER_PREFIX = "rpl_sql__"  # prefix of the helper functions
APPLIER_PREFIX = "rpl_sql_apply__"  # prefix of the applier's set: its own helpers, never the session's
JVM_ROW_CODE = HELPER_PREFIX + "jrc"  # the JVM's whole row code (rpl_sql/jvm): a Catalyst expression
JVM_REWRITE = HELPER_PREFIX + "jrw"  # rewrite_db's, beside it
JVM_STATEMENT_CODE = HELPER_PREFIX + "jsc"  # a statement's whole code
# (name, RowCodeFunction's kind)
JVM_FUNCTIONS = ((JVM_ROW_CODE, "row"), (JVM_REWRITE, "rewrite"), (JVM_STATEMENT_CODE, "statement"))
JVM_INSTALL = HELPER_PREFIX + "jinstall"  # the spark-sql shell's way to register JVM_FUNCTIONS: a Hive function
ROW_TRUE_CODES = (10, 12, 14, 16, 17, 18)  # the row codes that apply


@dataclass(frozen=True)
class Guard:
    """A check every public function makes before deciding: `condition` (SQL, true to go on), else
    raise_error(`message`, a SQL string expression). An uncorrelated subquery in it runs once per query."""

    condition: str
    message: str


@dataclass(frozen=True)
class CompiledFunctions:
    """CREATE FUNCTION texts in dependency order, and which encoding was chosen and why."""

    statements: tuple[str, ...]
    encoding: str
    jvm_spec: str | None = None  # the statements call JVM_FUNCTIONS, which decide by this spec


