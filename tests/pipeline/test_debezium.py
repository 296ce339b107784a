"""Debezium MySQL change events -> the canonical events table: mapping, and idempotence by source position.

The sample records are written by hand after Debezium's documented MySQL connector format: the Kafka Connect
JSON envelope ({"schema", "payload"}) around `before`/`after`/`source`/`op`/`ts_ms` for change events, and
`databaseName`/`ddl`/`tableChanges` for the schema change topic.
"""
from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from rpl_sql.pipeline.debezium import DebeziumRecordError, ingest_debezium, ingest_debezium_file
from rpl_sql.pipeline.events import EVENTS_SCHEMA, events_path
from rpl_sql.pipeline.ingest_position import ConcurrentIngestError, IngestError, committed_position
from rpl_sql.pipeline.writer import EventsWriter

from tests.support.landed import landed

SERVER = "mysql-server-1"
GTID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
TS = 1_700_000_000_000


def source(db, table, file, pos, row=0, gtid=None, snapshot="false", query=None, ts=TS):
    return {"version": "2.5.0.Final", "connector": "mysql", "name": SERVER, "ts_ms": ts, "snapshot": snapshot,
            "db": db, "sequence": None, "table": table, "server_id": 223344, "gtid": gtid, "file": file,
            "pos": pos, "row": row, "thread": 7, "query": query}


def change(op, db, table, file, pos, before=None, after=None, row=0, gtid=None, snapshot="false", envelope=True):
    payload = {"before": before, "after": after, "source": source(db, table, file, pos, row, gtid, snapshot),
               "op": op, "ts_ms": TS + 5, "transaction": None}
    if not envelope:
        return payload
    schema = {"type": "struct", "optional": False, "name": f"{SERVER}.{db}.{table}.Envelope", "version": 1,
              "fields": [{"type": "struct", "optional": True, "field": "before"},
                         {"type": "struct", "optional": True, "field": "after"},
                         {"type": "struct", "optional": False, "field": "source"},
                         {"type": "string", "optional": False, "field": "op"},
                         {"type": "int64", "optional": True, "field": "ts_ms"}]}
    return {"schema": schema, "payload": payload}


def schema_change(db, ddl, file, pos, row=0, gtid=None, table=None):
    return {"schema": {"type": "struct", "name": "io.debezium.connector.mysql.SchemaChangeValue"},
            "payload": {"source": source(db, table, file, pos, row, gtid), "ts_ms": TS + 1, "databaseName": db,
                        "schemaName": None, "ddl": ddl,
                        "tableChanges": [] if table is None else [{"type": "CREATE", "id": f'"{db}"."{table}"'}]}}


def customer(i, email=None):
    return {"id": i, "first_name": f"F{i}", "last_name": f"L{i}", "email": email or f"c{i}@example.com"}


F3, F4 = "mysql-bin.000003", "mysql-bin.000004"


def inventory_records():
    """A snapshot, DDL, inserts (one multi-row event), an update, a delete + tombstone, noise records."""
    return [
        schema_change("inventory", "CREATE DATABASE `inventory`", F3, 154),
        schema_change("inventory", "CREATE TABLE customers (id INT PRIMARY KEY, first_name VARCHAR(255), "
                      "last_name VARCHAR(255), email VARCHAR(255))", F3, 154, table="customers"),
        change("r", "inventory", "customers", F3, 154, after=customer(1001), snapshot="first"),
        change("r", "inventory", "customers", F3, 154, after=customer(1002), snapshot="last"),
        {"status": "BEGIN", "id": f"{GTID}:23", "event_count": None, "data_collections": None, "ts_ms": TS},
        change("c", "inventory", "customers", F3, 484, after=customer(1003), gtid=f"{GTID}:23"),
        change("c", "inventory", "customers", F3, 800, after=customer(1004), row=0, gtid=f"{GTID}:24"),
        change("c", "inventory", "customers", F3, 800, after=customer(1005), row=1, gtid=f"{GTID}:24"),
        change("u", "inventory", "customers", F3, 1100, before=customer(1004), after=customer(1004, "new@x.org"),
               gtid=f"{GTID}:25"),
        change("d", "inventory", "customers", F3, 1400, before=customer(1005), gtid=f"{GTID}:26", envelope=False),
        None,                                   # the delete's tombstone
        {"ts_ms": TS + 9},                      # a heartbeat-like value without op
        schema_change("inventory", "ALTER TABLE customers ADD COLUMN middle_name VARCHAR(255)", F4, 4,
                      gtid=f"{GTID}:27", table="customers"),
        change("c", "inventory", "orders", F4, 700, after={"order_number": 10001, "purchaser": 1003},
               gtid=f"{GTID}:28"),
    ]


def test_mapping(warehouse):
    report = ingest_debezium(warehouse, "cdc", inventory_records())
    rows = landed(warehouse)
    assert report.landed == len(rows) == 10 and report.first_seq == 1 and report.last_seq == 10
    assert [r["seq"] for r in rows] == list(range(1, 11))
    assert [(r["event_type"], r["command"], r["db_name"], r["table_name"]) for r in rows] == [
        ("query", "CREATE_DB", None, None),
        ("query", "CREATE_TABLE", None, None),
        ("write_rows", None, "inventory", "customers"),   # snapshot reads are inserts for the replica
        ("write_rows", None, "inventory", "customers"),
        ("write_rows", None, "inventory", "customers"),
        ("write_rows", None, "inventory", "customers"),   # rows 0 and 1 of one rows event: one canonical row
        ("update_rows", None, "inventory", "customers"),
        ("delete_rows", None, "inventory", "customers"),
        ("query", "ALTER_TABLE", None, None),
        ("write_rows", None, "inventory", "orders"),
    ]
    assert {r["source"] for r in rows} == {"debezium"} and {r["channel"] for r in rows} == {"cdc"}
    assert rows[0]["default_db"] == "inventory" and rows[0]["statement"] == "CREATE DATABASE `inventory`"
    assert rows[1]["tables"] == [{"db": None, "name": "customers", "updating": True}]
    assert rows[1]["statement_kind"] == "TABLE_DDL" and rows[0]["statement_kind"] == "DATABASE_DDL"
    assert json.loads(rows[5]["rows"]) == [{"before": None, "after": customer(1004)},
                                           {"before": None, "after": customer(1005)}]
    assert json.loads(rows[6]["rows"]) == [{"before": customer(1004), "after": customer(1004, "new@x.org")}]
    assert json.loads(rows[7]["rows"]) == [{"before": customer(1005), "after": None}]
    assert [r["gtid"] for r in rows[4:]] == [f"{GTID}:{n}" for n in (23, 24, 25, 26, 27, 28)]
    assert [(r["binlog_file"], r["binlog_pos"]) for r in rows[4:]] == \
        [(F3, 484), (F3, 800), (F3, 1100), (F3, 1400), (F4, 4), (F4, 700)]
    assert [r["filter_db"] for r in rows] == ["inventory"] * 10
    assert rows[4]["event_time"].timestamp() == TS / 1000
    assert DeltaTable(events_path(warehouse)).schema().to_arrow() is not None
    assert DeltaTable(events_path(warehouse)).protocol().min_reader_version == 1


def test_reingesting_the_same_file_lands_nothing(warehouse, tmp_path):
    path = tmp_path / "inventory.jsonl"
    path.write_text("\n".join("null" if r is None else json.dumps(r) for r in inventory_records()) + "\n")
    first = ingest_debezium_file(warehouse, "cdc", path)
    again = ingest_debezium_file(warehouse, "cdc", path)
    assert first.landed == 10 and again.landed == 0 and again.skipped == 11  # 8 change + 3 DDL records
    assert len(landed(warehouse)) == 10
    assert DeltaTable(events_path(warehouse)).version() == 1  # create + one commit: the replay wrote nothing


def test_incremental_and_redelivered_records(warehouse):
    recs = inventory_records()
    ingest_debezium(warehouse, "cdc", recs[:8])
    # a restarted connector re-delivers from an earlier position, then goes on
    more = recs[5:] + [change("u", "inventory", "customers", F4, 900, before=customer(1003),
                              after=customer(1003, "z@z"), gtid=f"{GTID}:29")]
    report = ingest_debezium(warehouse, "cdc", more)
    rows = landed(warehouse)
    assert report.landed == 5 and report.skipped == 3 and len(rows) == 11
    clean = str(warehouse) + "_clean"
    ingest_debezium(clean, "cdc", recs + more[-1:])
    assert [(r["binlog_file"], r["binlog_pos"], r["rows"], r["statement"]) for r in landed(clean)] == \
        [(r["binlog_file"], r["binlog_pos"], r["rows"], r["statement"]) for r in rows]


def test_split_rows_event_is_not_lost(warehouse):
    recs = inventory_records()
    ingest_debezium(warehouse, "cdc", recs[:7])          # ends after row 0 of the rows event at pos 800
    ingest_debezium(warehouse, "cdc", recs[7:])
    images = [json.loads(r["rows"]) for r in landed(warehouse) if r["binlog_pos"] == 800]
    assert sum(len(i) for i in images) == 2


def test_topics_in_any_order(warehouse):
    """Each table is its own stream: a later-ingested topic with earlier positions still lands."""
    orders = [change("c", "inventory", "orders", F3, 300 + i, after={"order_number": i}) for i in range(3)]
    customers = [change("c", "inventory", "customers", F3, 900 + i, after=customer(i)) for i in range(3)]
    assert ingest_debezium(warehouse, "cdc", customers).landed == 3
    assert ingest_debezium(warehouse, "cdc", orders).landed == 3
    assert ingest_debezium(warehouse, "cdc", orders + customers).landed == 0


def test_snapshot_replay_is_deduplicated(warehouse):
    snap = [change("r", "inventory", "customers", F3, 154, after=customer(i), snapshot="true") for i in range(5)]
    assert ingest_debezium(warehouse, "cdc", snap[:3]).landed == 3
    # the connector restarted mid-snapshot and redid it from the start
    report = ingest_debezium(warehouse, "cdc", snap)
    assert report.landed == 2 and report.skipped == 3
    assert sorted(json.loads(r["rows"])[0]["after"]["id"] for r in landed(warehouse)) == [0, 1, 2, 3, 4]


def test_several_records_at_one_position(warehouse):
    """One DDL may be reported once per table, all at one position: content tells them apart."""
    recs = [schema_change("inventory", "DROP TABLE `a`", F3, 500, table="a"),
            schema_change("inventory", "DROP TABLE `b`", F3, 500, table="b")]
    assert ingest_debezium(warehouse, "cdc", recs).landed == 2
    assert ingest_debezium(warehouse, "cdc", recs[1:]).landed == 0


def test_batches_commit_marks_with_rows(warehouse):
    """An interrupted call keeps its committed batches; repeating it completes without duplicates."""
    recs = inventory_records()

    def interrupted():
        for i, r in enumerate(recs):
            if i == 9:
                raise RuntimeError("consumer died")
            yield r

    with pytest.raises(RuntimeError):
        ingest_debezium(warehouse, "cdc", interrupted(), batch_rows=2)
    partial = len(landed(warehouse))
    assert 0 < partial < 10
    ingest_debezium(warehouse, "cdc", recs, batch_rows=2)
    rows = landed(warehouse)
    assert [r["seq"] for r in rows] == list(range(1, 11))
    clean = str(warehouse) + "_clean"
    ingest_debezium(clean, "cdc", recs)
    assert [(r["binlog_pos"], r["rows"]) for r in rows] == [(r["binlog_pos"], r["rows"]) for r in landed(clean)]
    pos = committed_position(warehouse, "cdc")
    assert pos.last_seq == 10 and pos.metadata["source"] == "debezium"


def test_channels_are_independent(warehouse):
    ingest_debezium(warehouse, "a", inventory_records())
    ingest_debezium(warehouse, "", inventory_records())   # the default channel
    assert [r["seq"] for r in landed(warehouse, "a")] == list(range(1, 11))
    assert [r["seq"] for r in landed(warehouse, "")] == list(range(1, 11))
    assert ingest_debezium(warehouse, "", inventory_records()).landed == 0


def test_concurrent_ingest_of_a_channel_is_refused(warehouse):
    with EventsWriter(warehouse, "cdc"):
        with pytest.raises(ConcurrentIngestError):
            ingest_debezium(warehouse, "cdc", inventory_records())
    assert ingest_debezium(warehouse, "cdc", inventory_records()).landed == 10


def test_bad_records(warehouse):
    with pytest.raises(DebeziumRecordError):
        ingest_debezium(warehouse, "cdc", ["{not json"])
    with pytest.raises(DebeziumRecordError):
        ingest_debezium(warehouse, "cdc", [{"payload": {"op": "x", "source": source("d", "t", F3, 4)}}])


def test_truncate_lands_as_a_statement(warehouse):
    report = ingest_debezium(warehouse, "cdc", [change("t", "inventory", "customers", F3, 2000)])
    (row,) = landed(warehouse)
    assert report.landed == 1
    assert (row["event_type"], row["command"], row["default_db"]) == ("query", "TRUNCATE", "inventory")
    assert row["tables"] == [{"db": "inventory", "name": "customers", "updating": True}]


def test_schema_is_canonical(warehouse):
    ingest_debezium(warehouse, "cdc", inventory_records())
    dt = DeltaTable(events_path(warehouse))
    assert dt.to_pyarrow_table().schema.names == EVENTS_SCHEMA.names
    assert dt.metadata().partition_columns == ["channel", "filter_db"]


def test_binlog_fed_channel_refuses_debezium(warehouse):
    from rpl_sql.pipeline.canonical_rows import Batch

    with EventsWriter(warehouse, "x") as w:
        b = Batch("x", "binlog")
        b.add("0-1-1", "binlog.000001", 400, "query", "BEGIN", "TRANSACTION", "", time_us=0)
        w.commit(b.to_table(1), {"source": "binlog", "binlog_file": "binlog.000001", "binlog_pos": "400"})
    with pytest.raises(IngestError):
        ingest_debezium(warehouse, "x", inventory_records())


def test_the_cli_lands_files_and_stdin_once(warehouse, tmp_path):
    import subprocess
    import sys

    from rpl_sql.pipeline.debezium import DebeziumIngest
    from rpl_sql.pipeline.source import EventSource

    assert isinstance(DebeziumIngest(warehouse, "cdc", []), EventSource)
    path = tmp_path / "topic.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in inventory_records()), encoding="utf-8")
    cmd = [sys.executable, "-m", "rpl_sql.cli", "debezium", "--channel", "CDC", "--warehouse", warehouse]
    first = subprocess.run(cmd + [str(path)], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    again = subprocess.run(cmd + ["-"], input=path.read_text(encoding="utf-8"), capture_output=True, text=True)
    assert again.returncode == 0 and " 0 events landed" in again.stdout, again.stdout + again.stderr
    rows = landed(warehouse)
    assert rows and {r["channel"] for r in rows} == {"cdc"}
    assert first.stdout.startswith(f"channel 'cdc': {len(rows)} events landed")
    missing = subprocess.run(cmd + [str(tmp_path / "nope.jsonl")], capture_output=True, text=True)
    assert missing.returncode == 1 and "No such file" in missing.stderr
