"""The source's tables as information_schema lists them: what provisioning, a backfill and EXPLAIN CHANGE
REPLICATION FILTER decide table by table."""
from __future__ import annotations
from rpl_sql.source_server.connection import connect

SYSTEM_DBS = ("mysql", "information_schema", "performance_schema", "sys")


def source_tables(settings: dict) -> list[tuple[str, str, int | None]]:
    """The source's base tables outside the system databases, with information_schema's row estimates."""
    conn = connect(settings, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
                        "WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_SCHEMA, TABLE_NAME")
            return [(db, name, rows) for db, name, rows in cur.fetchall() if db.lower() not in SYSTEM_DBS]
    finally:
        conn.close()
