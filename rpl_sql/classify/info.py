"""What classifying a statement yields: MySQL's command, a kind, and the global table list."""
from __future__ import annotations

from dataclasses import dataclass, field

from rpl_sql.filters.evaluate import DROP_TEMPORARY_IF_EXISTS, StatementEvent, TableRef, statement_event

DML, TABLE_DDL, DATABASE_DDL, TRANSACTION, OTHER = "DML", "TABLE_DDL", "DATABASE_DDL", "TRANSACTION", "OTHER"
KINDS = (DML, TABLE_DDL, DATABASE_DDL, TRANSACTION, OTHER)

KIND_OF = {
    **dict.fromkeys(("INSERT", "INSERT_SELECT", "REPLACE", "REPLACE_SELECT", "UPDATE", "UPDATE_MULTI", "DELETE",
                     "DELETE_MULTI", "LOAD"), DML),
    **dict.fromkeys(("CREATE_TABLE", "ALTER_TABLE", "DROP_TABLE", DROP_TEMPORARY_IF_EXISTS, "TRUNCATE",
                     "RENAME_TABLE", "CREATE_INDEX", "DROP_INDEX", "CREATE_VIEW", "DROP_VIEW", "CREATE_TRIGGER",
                     "DROP_TRIGGER"), TABLE_DDL),
    **dict.fromkeys(("CREATE_DB", "ALTER_DB", "DROP_DB"), DATABASE_DDL),
    **dict.fromkeys(("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "ROLLBACK_TO_SAVEPOINT", "XA_START", "XA_END",
                     "XA_PREPARE", "XA_COMMIT", "XA_ROLLBACK"), TRANSACTION),
}

@dataclass(frozen=True)
class StatementInfo:
    """What the statement decision procedure needs to know about one statement text."""

    command: str  # one of evaluate.COMMANDS or the pseudo-commands DROP_TEMPORARY_TABLE_IF_EXISTS, DROP_TRIGGER
    kind: str  # 'DML' | 'TABLE_DDL' | 'DATABASE_DDL' | 'TRANSACTION' | 'OTHER'
    tables: tuple[TableRef, ...] = ()  # MySQL's global table list order; db None = unqualified
    database: str | None = None  # CREATE/ALTER/DROP DATABASE target (None: ALTER DATABASE of the default db)
    trigger: str | None = None  # DROP TRIGGER: the trigger name (its table is looked up on the replica)
    trigger_db: str | None = None  # DROP TRIGGER db.trg: the qualifier (None: the default database)
    # 'sqlglot' | 'tokens': which reader produced `tables`; 'incomplete': a DML/table statement whose table
    # could not be read (then `tables` is empty)
    method: str = field(default="tokens", compare=False)

    def event(self, default_db: str | None, trigger_table: TableRef | None = None) -> StatementEvent:
        """The evaluator's event: `default_db` is the event's database (replaced by `database` for database
        statements); `trigger_table` is DROP TRIGGER's table as found on the replica (None: not found)."""
        if self.kind == DATABASE_DDL and self.database is not None:
            default_db = self.database
        tables = self.tables
        if self.command == "DROP_TRIGGER":
            tables = (trigger_table,) if trigger_table is not None else ()
        return statement_event(self.command, default_db, tables)


def statement_info(command: str, tables=(), method: str = "tokens", kind: str | None = None, **kw) -> StatementInfo:
    return StatementInfo(command, kind or KIND_OF.get(command, OTHER), tuple(tables), method=method, **kw)


OTHER_STATEMENT = StatementInfo("OTHER", OTHER, ())

