"""Replica tables by name in Spark: every table gets a Spark name no other table shares, for any MySQL name.

Spark's catalog folds case and takes only letters, digits and `_`; MySQL keeps `Case`.`T` and `Case`.`t` apart
and takes nearly anything. A query must read the table it names or fail, never read another table's rows.
"""
from __future__ import annotations

import re
import warnings

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rpl_sql.spark.table_names import spark_columns, spark_names, spark_valid

HOSTILE = "aAbBzZ019 '\"`\\,.%_-$#{};éÉßΣσ€😀\n"
name = st.one_of(st.sampled_from(["t", "T", "orders", "Orders", "a_b", "x1", "Case"]),
                 st.text(HOSTILE, min_size=1, max_size=6))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "A"]), name, name), max_size=12, unique=True))
def test_spark_names_are_valid_unique_and_kept_when_they_can_be(tables):
    names = spark_names(tables)
    assert set(names) == set(tables)
    spots = [(n.spark_db.lower(), n.spark_table.lower()) for n in names.values()]
    assert len(set(spots)) == len(spots), "two replica tables share a Spark name"
    for (channel, db, tbl), n in names.items():
        assert spark_valid(n.spark_db) and spark_valid(n.spark_table)
        alike = [t for t in tables if (t[1].lower(), t[2].lower()) == (db.lower(), tbl.lower())]
        db_alike = {t[1] for t in tables if t[1].lower() == db.lower()}
        own = spark_valid(db) and spark_valid(tbl) and len(alike) == 1 and db_alike == {db}
        assert (n.why is None) == own, (n, alike)
        if own:
            assert (n.spark_db, n.spark_table) == (db.lower(), tbl.lower())
    # a function of the names, not of their order
    assert spark_names(list(reversed(tables))) == names


def test_a_made_up_name_never_takes_a_real_tables_name():
    clash = spark_names([("a", "d", "T"), ("a", "d", "t")])[("a", "d", "T")].spark_table
    names = spark_names([("a", "d", "T"), ("a", "d", "t"), ("a", "d", clash)])
    assert names[("a", "d", clash)].spark_table == clash and names[("a", "d", clash)].why is None
    assert len({n.spark_table for n in names.values()}) == 3


@given(st.lists(st.text(HOSTILE + "\r\t\x00", min_size=1, max_size=6), unique_by=str.lower, max_size=8))
def test_spark_columns_rename_only_what_spark_or_its_shell_would_alter(columns):
    renamed = spark_columns(columns)
    assert set(renamed.values()) == {c for c in columns if "${" in c or any(ord(x) < 0x20 or x == "\x7f" for x in c)}
    final = [next((s for s, src in renamed.items() if src == c), c) for c in columns]
    assert len({c.lower() for c in final}) == len(final)
    assert not any("${" in c or "\n" in c for c in final)


# ------------------------------------------------------------------ in a SparkSession

TABLES = [  # (db, name, columns, the one row that tells it apart)
    ("Case", "T", ["id"], (1,)),
    ("Case", "t", ["id"], (2,)),
    ("shop", "orders", ["id", "${x}", "new\nline"], (3, 30, 300)),
    ("shop", "with space", ["id"], (4,)),
    ("shop", "back`tick", ["id"], (5,)),
    ("shop", "semi;colon", ["id"], (6,)),
    ("shop", "ünï", ["id"], (7,)),
    ("shop", "new\nline", ["id"], (8,)),
    ("shop", "${x}", ["id"], (9,)),
    ("we;ird db", "plain", ["id"], (10,)),
    ("日本", "表", ["id"], (11,)),
    ("shop", "dot.ted", ["id"], (12,)),
    ("shop", "quote'", ["id"], (13,)),
    ("shop", "back\\slash", ["id"], (14,)),
    ("shop", "😀", ["id"], (15,)),
]


def hostile_replica(wh: str, channel: str = "a", tables=TABLES, seq: int = 1) -> None:
    from deltalake import write_deltalake

    from rpl_sql.storage.replica_catalog import Catalog

    cat = Catalog.load(wh, channel)
    for db, tbl, cols, row in tables:
        entry = cat.add_table(db, tbl, [{"name": c, "type": "int", "pk": i == 0} for i, c in enumerate(cols)])
        write_deltalake(cat.data_path(entry), pa.table({c: pa.array([v], pa.int32()) for c, v in zip(cols, row)}))
    cat.add_table("shop", "unread", None)  # a CREATE TABLE the replica could not read: no columns yet
    cat.commit(seq)


@pytest.mark.spark
def test_every_hostile_table_is_read_under_its_own_spark_name(spark, warehouse):
    import rpl_sql
    from pyspark.errors import AnalysisException

    from rpl_sql.spark.replica_tables import ReplicaNameWarning

    hostile_replica(warehouse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = rpl_sql.register(spark, warehouse)
    view = {(r.TABLE_SCHEMA, r.TABLE_NAME): r for r in spark.sql("SELECT * FROM rpl_sql_replica_tables").collect()}
    assert set(view) == {(db, t) for db, t, _, _ in TABLES} | {("shop", "unread")}
    assert view[("shop", "unread")].SPARK_TABLE is None and "not defined" in view[("shop", "unread")].NOTE
    assert view[("shop", "orders")].NOTE is None and view[("shop", "orders")].SPARK_TABLE == "orders"
    renamed = {k for k, r in view.items() if r.NOTE is not None and r.SPARK_TABLE is not None}
    assert len(renamed) == len(TABLES) - 1  # all but shop.orders: hostile, or `Case` (case) twice
    said = [str(w.message) for w in caught if issubclass(w.category, ReplicaNameWarning)]
    assert len(said) == len(renamed) and any("`Case`.`T` is `case`.`t_" in m for m in said), said

    for db, tbl, cols, row in TABLES:
        r = view[(db, tbl)]
        got = spark.sql(f"SELECT * FROM `{r.SPARK_SCHEMA}`.`{r.SPARK_TABLE}`").collect()
        assert [tuple(x) for x in got] == [row], (db, tbl)
    orders = spark.table("shop.orders")
    assert orders.columns[0] == "id" and orders.columns[1].startswith("x_") and len(orders.columns) == 3
    # the MySQL name of a table Spark cannot tell apart fails: it never reads the other table's rows
    for query in ("SELECT * FROM `Case`.`T`", "SELECT * FROM `Case`.`t`"):
        with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND|SCHEMA_NOT_FOUND"):
            spark.sql(query).collect()

    # a table dropped from the catalog goes, and its namesake of the other case takes the plain name
    from rpl_sql.storage.replica_catalog import Catalog

    cat = Catalog.load(warehouse, "a")
    cat.drop_table("Case", "T")
    cat.commit(2)
    session.surface.replica.sync()
    assert [tuple(x) for x in spark.sql("SELECT * FROM `Case`.`t`").collect()] == [(2,)]
    with pytest.raises(AnalysisException):
        spark.sql(f"SELECT * FROM `case`.`{view[('Case', 'T')].SPARK_TABLE}`").collect()


def test_the_export_never_stops_and_says_which_names_changed(warehouse):
    from rpl_sql import Session
    from rpl_sql.spark.export import export_sql

    hostile_replica(warehouse)
    text = export_sql(Session(warehouse))
    header = [ln for ln in text.splitlines() if ln.startswith("--")]
    body = [ln for ln in text.splitlines() if ln and not ln.startswith("--")]
    assert any("REPLICA TABLES UNDER ANOTHER NAME (14)" in ln for ln in header)
    assert any(re.search(r"Case\.T is `case`\.`t_[0-9a-f]{8}`: Spark folds case", ln) for ln in header)
    assert any("REPLICA TABLES NOT DEFINED (1)" in ln for ln in header)
    assert sum(ln.startswith("CREATE TABLE") for ln in body) == len(TABLES)
    assert all(ln.isascii() and "${" not in ln for ln in body)
    assert all("\n" not in ln for ln in header)
