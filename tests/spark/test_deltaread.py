"""rpl_sql.spark.deltaread: Delta snapshots into Spark without Delta's JARs (delta-rs lists, Spark reads)."""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from rpl_sql.spark.deltaread import UnsupportedDeltaTableError, read_delta, snapshot


def test_read_delta_partition_values_and_paths(spark, tmp_path):
    """'' and NULL partitions (both NULL, per the Delta protocol), hive-unsafe and non-ASCII values: the fast
    hive path, literal groups and the file-name join all give the log's values."""
    from rpl_sql.spark import deltaread

    path = str(tmp_path / "t")
    chans = ["", None, "a", "a", "b", "é", "x/y", "p%q", "='#"]
    dbs = ["", "", None, "db'q/%=é #", "Ab", "ü", "2024", "d", "__HIVE_DEFAULT_PARTITION__x"]
    t = pa.table({"channel": chans, "filter_db": dbs, "v": list(range(len(chans))),
                  "ts": pa.array([datetime(2024, 1, 1, tzinfo=timezone.utc)] * len(chans), pa.timestamp("us", "UTC"))})
    write_deltalake(path, t, partition_by=["channel", "filter_db"])
    write_deltalake(path, t.slice(2, 3), partition_by=["channel", "filter_db"], mode="append")
    want = sorted([(None if c == "" else c, None if d == "" else d, v) for c, d, v in zip(chans, dbs, range(9))]
                  + [(chans[i], dbs[i] or None, i) for i in (2, 3, 4)], key=str)
    for groups in (64, 0):
        deltaread.MAX_LITERAL_GROUPS = groups
        try:
            df = read_delta(spark, path, engine="delta-rs")
            assert df.columns == ["channel", "filter_db", "v", "ts"]
            assert dict(df.dtypes)["channel"] == "string" and dict(df.dtypes)["ts"] == "timestamp"
            assert sorted([(r.channel, r.filter_db, r.v) for r in df.collect()], key=str) == want
            got = read_delta(spark, path, partitions={"channel": ["a", ""]}, engine="delta-rs").collect()
            assert sorted(r.v for r in got) == [0, 1, 2, 2, 3, 3]
        finally:
            deltaread.MAX_LITERAL_GROUPS = 2
    assert sorted(r.v for r in read_delta(spark, path, version=0, engine="delta-rs").collect()) == list(range(9))
    assert len(snapshot(path, 0).files) == 9


def test_read_delta_prunes_partitions_on_the_fast_path(spark, tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"channel": ["a", "b"] * 5, "v": range(10)}), partition_by=["channel"])
    df = read_delta(spark, path, engine="delta-rs").where("channel = 'b'")
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [isnotnull(channel" in plan and sorted(r.v for r in df.collect()) == [1, 3, 5, 7, 9]


def test_read_delta_lists_local_files_on_the_driver(spark, tmp_path):
    """The log names every file: more than 32 of them must not start a Spark listing job (~1 s each read)."""
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"channel": [f"c{i:02d}" for i in range(40)], "v": range(40)}),
                    partition_by=["channel"])
    key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    before = spark.conf.get(key, None)
    tracker, group = spark.sparkContext.statusTracker(), "rpl_sql-listing-test"
    spark.sparkContext.setJobGroup(group, "read_delta listing")
    try:
        df = read_delta(spark, path, engine="delta-rs")
        assert list(tracker.getJobIdsForGroup(group)) == []
    finally:
        spark.sparkContext.setJobGroup(None, None)
    assert spark.conf.get(key, None) == before
    assert sorted(r.v for r in df.collect()) == list(range(40))


def test_read_delta_refuses_what_parquet_alone_cannot_read():
    from rpl_sql.spark.deltaread import _check_readable

    _check_readable(_FakeTable(("timestampNtz", "deletionVectors")))  # feature on, none in use: fine
    with pytest.raises(UnsupportedDeltaTableError, match="deletion vectors are in use"):
        _check_readable(_FakeTable(("deletionVectors",), dvs=[pa.record_batch({"filepath": ["f"]})]))
    with pytest.raises(UnsupportedDeltaTableError, match="column mapping"):
        _check_readable(_FakeTable(("columnMapping",), {"delta.columnMapping.mode": "name"}))
    with pytest.raises(UnsupportedDeltaTableError, match="typeWidening"):
        _check_readable(_FakeTable(("typeWidening",)))


class _FakeTable:
    table_uri = "file:///x"

    def __init__(self, features=(), config=None, dvs=()):
        self._features, self._config, self._dvs = features, config or {}, dvs

    def protocol(self):
        return type("P", (), {"reader_features": list(self._features)})()

    def metadata(self):
        return type("M", (), {"configuration": self._config})()

    def deletion_vectors(self):
        return iter(self._dvs)
