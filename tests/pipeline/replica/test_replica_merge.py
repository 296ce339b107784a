"""Replica table pieces without a server: the type vocabulary's edges, DDL reading, and one table's merge with
MySQL's row errors (1032, 1062), IDEMPOTENT mode, tables without a primary key and hostile column names."""
from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from deltalake import DeltaTable

from rpl_sql.pipeline.replica import columns as C
from rpl_sql.pipeline.replica import ddl
from rpl_sql.pipeline.replica.merge import read_all, Changes, ReplicaRowError, apply_changes, create, reshape, table_seq
from rpl_sql.pipeline.canonical_rows import rows_json

HOSTILE = ["i`d", "we'ird \"x\", %_ é\\", "Mixed Case"]


def _images(changes):
    """Row images through the events table's JSON, as the applier lands them."""
    return json.loads(rows_json(changes))


def _rows(path, names):
    t = read_all(path)
    return sorted(zip(*(t.column(n).to_pylist() for n in names)), key=repr)


@pytest.mark.parametrize("col, arrow, landed, value", [
    ({"type": "bigint", "unsigned": True}, pa.decimal128(20, 0), 2 ** 64 - 1, decimal.Decimal(2 ** 64 - 1)),
    ({"type": "bigint"}, pa.int64(), -2 ** 63, -2 ** 63),
    ({"type": "int", "unsigned": True}, pa.int64(), 2 ** 32 - 1, 2 ** 32 - 1),
    ({"type": "tinyint", "unsigned": True}, pa.int16(), 255, 255),
    ({"type": "decimal", "precision": 38, "scale": 10}, pa.decimal128(38, 10),
     "-1234567890123456789012345678.0123456789", decimal.Decimal("-1234567890123456789012345678.0123456789")),
    ({"type": "decimal", "precision": 65, "scale": 30}, pa.string(), "1.5", "1.5"),
    ({"type": "decimal", "precision": 40, "scale": 10}, pa.string(), "0E-10", "0.0000000000"),  # never an exponent
    ({"type": "bit", "bits": 64}, pa.decimal128(20, 0), "1" * 64, decimal.Decimal(2 ** 64 - 1)),
    ({"type": "bit", "bits": 3}, pa.int64(), "101", 5),
    ({"type": "datetime", "fsp": 6}, pa.timestamp("us"), "2024-02-29T23:59:59.999999",
     dt.datetime(2024, 2, 29, 23, 59, 59, 999999)),
    ({"type": "timestamp", "fsp": 0}, pa.timestamp("us", tz="UTC"), "1970-01-01T00:00:01",
     dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)),
    ({"type": "time", "fsp": 2}, pa.string(), "-838:59:59", "-838:59:59"),
    ({"type": "set", "values": ["x", "y", "z"]}, pa.string(), ["z", "x"], "x,z"),
    ({"type": "blob"}, pa.binary(), {"$binary": "AP8="}, b"\x00\xff"),
    ({"type": "json"}, pa.string(), {"a": [1]}, '{"a": [1]}'),
    ({"type": "year"}, pa.int16(), 2155, 2155),
])
def test_types_keep_every_value(col, arrow, landed, value):
    col = dict(col, name="c")
    assert C.arrow_type(col) == arrow
    got = C.converter(col)(landed)
    assert got == value
    assert pa.array([got], type=arrow).to_pylist() == [value]


def test_ddl_reads_columns_keys_and_alter_actions():
    t = ddl.parse("CREATE TABLE IF NOT EXISTS d.`we``ird` (a INT UNSIGNED, `b c` DECIMAL(9,2) NOT NULL, "
                  "e ENUM('x','y'), PRIMARY KEY (`b c`, a)) ENGINE=InnoDB")
    assert (t.db, t.name, t.if_not_exists) == ("d", "we`ird", True)
    assert t.columns == [{"name": "a", "type": "int", "unsigned": True, "pk": True},
                         {"name": "b c", "type": "decimal", "precision": 9, "scale": 2, "pk": True},
                         {"name": "e", "type": "enum", "values": ["x", "y"]}]
    a = ddl.parse("ALTER TABLE t ADD COLUMN x INT NOT NULL DEFAULT -5 FIRST, DROP COLUMN y, CHANGE v w TEXT, "
                  "RENAME COLUMN w TO w2")
    assert a.complete and [x[0] for x in a.actions] == ["add", "drop", "modify", "rename_column"]
    assert a.actions[0][2] == (True, "-5") and a.actions[0][3] == ""
    assert ddl.parse("ALTER TABLE t ADD COLUMN (p int, q int)") is None  # unreadable: the service stops
    assert ddl.parse("CREATE TABLE t2 LIKE d.t").like == ("d", "t")


@pytest.mark.parametrize("sql, default", [
    ("ALTER TABLE t ADD c INT NOT NULL DEFAULT (5)", "5"),
    ("ALTER TABLE t ADD c INT DEFAULT ((-5))", "-5"),
    ("ALTER TABLE t ADD c INT DEFAULT (1 + 1)", ddl.Unknown),
    ("ALTER TABLE t ADD c TIMESTAMP DEFAULT CURRENT_TIMESTAMP", ddl.Now),
    ("ALTER TABLE t ADD c TIMESTAMP NOT NULL DEFAULT NOW()", ddl.Now),
    ("ALTER TABLE t ADD c CHAR(36) DEFAULT (uuid())", ddl.Unknown),
    ("ALTER TABLE t ADD c INT AS (a + 1) VIRTUAL", ddl.Unknown),
    ("ALTER TABLE t ADD c INT", None),
    ("ALTER TABLE t ADD c BIT(3) NOT NULL DEFAULT b'101'", 5),
    ("ALTER TABLE t ADD c BLOB DEFAULT x'00ff'", {"$binary": "AP8="}),
    ("ALTER TABLE t ADD c TINYINT DEFAULT TRUE", 1),
    ("ALTER TABLE t ADD c VARCHAR(3) DEFAULT _utf8mb4'x'", "x"),
])
def test_add_column_defaults_are_literal_now_or_unknown(sql, default):
    (has, got), = [a[2] for a in ddl.parse(sql).actions]
    assert isinstance(got, default) if isinstance(default, type) else got == default


@pytest.mark.parametrize("sql, clause", [
    ("ALTER TABLE t ADD COLUMN (c INT, d INT)", "ADD"),
    ("ALTER ONLINE TABLE t ADD c INT DEFAULT 5", "ADD"),
    ("ALTER TABLE t WAIT 5 DROP c", "DROP"),
    ("ALTER TABLE t CHANGE a b INT", "CHANGE"),
    ("ALTER TABLE t rename  column a TO b", "RENAME COLUMN"),
    ("ALTER TABLE `add x` ENGINE=InnoDB, FORCE", None),
    ("ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4", None),
    ("ALTER TABLE t ALTER COLUMN a SET DEFAULT 5", None),
    ("ALTER TABLE t ADD UNIQUE KEY k (a), DROP INDEX i, ADD CONSTRAINT f FOREIGN KEY (a) REFERENCES u (id)", None),
    ("ALTER TABLE t COMMENT 'ADD c INT'", None),
    ("ALTER TABLE t RENAME INDEX a TO b", None),
])
def test_an_alter_that_may_change_columns_is_recognised_without_reading_it(sql, clause):
    assert ddl.changes_columns(sql) == clause


COLS = [{"name": HOSTILE[0], "type": "int", "pk": True}, {"name": HOSTILE[1], "type": "text"},
        {"name": HOSTILE[2], "type": "blob"}]


def _changes(cols, *items, seq=1):
    ch = Changes(cols)
    for kind, before, after in items:
        names = [c["name"] for c in cols]
        img = {"before": dict(zip(names, before)) if before else None,
               "after": dict(zip(names, after)) if after else None}
        ch.add(seq, kind + "_rows", _images([img]))
        seq += 1
    return ch


def test_primary_key_changes_merge_in_source_order(tmp_path):
    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    apply_changes(p, _changes(COLS, ("write", None, (1, "a", b"\x00")), ("write", None, (2, "b", None)),
                              ("update", (2, "b", None), (3, "b2", b"`")),          # key change
                              ("write", None, (2, "again", None)),                  # the old key reused
                              ("delete", (1, "a", b"\x00"), None)), "c", strict=True, table_label="d.t")
    assert _rows(p, [c["name"] for c in COLS]) == [(2, "again", None), (3, "b2", b"`")]
    assert table_seq(p, "c") == 5


def test_strict_mode_stops_on_missing_and_duplicate_rows_and_changes_nothing(tmp_path):
    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    apply_changes(p, _changes(COLS, ("write", None, (1, "a", None))), "c", strict=True, table_label="d.t")
    before = DeltaTable(p).version()
    with pytest.raises(ReplicaRowError) as e:
        apply_changes(p, _changes(COLS, ("write", None, (5, "x", None)), ("delete", (7, "x", None), None), seq=2),
                      "c", strict=True, table_label="d.t")
    assert e.value.code == 1032 and "Can't find record" in e.value.message
    with pytest.raises(ReplicaRowError) as e:
        apply_changes(p, _changes(COLS, ("write", None, (1, "dup", None)), seq=2), "c", strict=True,
                      table_label="d.t")
    assert e.value.code == 1062 and "Duplicate entry '1'" in e.value.message
    assert DeltaTable(p).version() == before


def test_idempotent_mode_overwrites_and_skips(tmp_path):
    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    apply_changes(p, _changes(COLS, ("write", None, (1, "a", None))), "c", strict=True, table_label="d.t")
    apply_changes(p, _changes(COLS, ("write", None, (1, "dup", None)), ("delete", (7, "x", None), None),
                              ("update", (8, "y", None), (9, "z", None)), seq=2),
                  "c", strict=False, table_label="d.t")
    assert _rows(p, [c["name"] for c in COLS]) == [(1, "dup", None)]  # the update of a missing row is skipped


def test_a_table_without_a_key_counts_identical_rows(tmp_path):
    cols = [{"name": HOSTILE[1], "type": "text"}, {"name": "n", "type": "double"}]
    p = str(tmp_path / "t")
    create(p, cols, "c", 0)
    apply_changes(p, _changes(cols, ("write", None, ("x", 1.5)), ("write", None, ("x", 1.5)),
                              ("write", None, (None, None))), "c", strict=True, table_label="d.t")
    apply_changes(p, _changes(cols, ("delete", ("x", 1.5), None), ("update", (None, None), ("y", None)), seq=4),
                  "c", strict=True, table_label="d.t")
    assert _rows(p, [c["name"] for c in cols]) == [("x", 1.5), ("y", None)]
    with pytest.raises(ReplicaRowError):
        apply_changes(p, _changes(cols, ("delete", ("x", 2.5), None), seq=6), "c", strict=True, table_label="d.t")


def test_reshape_adds_with_default_renames_and_drops(tmp_path):
    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    apply_changes(p, _changes(COLS, ("write", None, (1, "a", b"z"))), "c", strict=True, table_label="d.t")
    new = [COLS[0], {"name": "renamed", "type": "text"}, {"name": "n", "type": "int"}]
    reshape(p, COLS, new, "c", 2, renames={HOSTILE[1]: "renamed"}, defaults={"n": "7"})
    assert _rows(p, ["i`d", "renamed", "n"]) == [(1, "a", 7)]
    assert read_all(p).column_names == ["i`d", "renamed", "n"]


def test_keys_are_found_in_any_file_when_lookups_read_only_files_that_can_hold_them(tmp_path):
    """Integer keys: only files whose min/max can hold a touched key are read; old rows are still found."""
    cols = [{"name": "k", "type": "bigint", "pk": True}, {"name": "v", "type": "text"}]
    p = str(tmp_path / "t t%")  # a path that percent-encoding would change
    create(p, cols, "c", 0)
    seq = 1
    for lo in (1, 11, 21):
        apply_changes(p, _changes(cols, *[("write", None, (k, "x")) for k in range(lo, lo + 10)], seq=seq), "c",
                      strict=True, table_label="d.t")
        seq += 10
    assert len(DeltaTable(p).get_add_actions(flatten=True)) >= 3
    with pytest.raises(ReplicaRowError) as e:
        apply_changes(p, _changes(cols, ("write", None, (15, "dup")), seq=seq), "c", strict=True, table_label="d.t")
    assert e.value.code == 1062
    apply_changes(p, _changes(cols, ("delete", (5, "x"), None), ("update", (25, "x"), (40, "moved")), seq=seq), "c",
                  strict=True, table_label="d.t")
    keys = sorted(k for k, _ in _rows(p, ["k", "v"]))
    assert keys == [k for k in range(1, 31) if k not in (5, 25)] + [40]


def test_a_keyless_table_with_text_columns_and_an_integer_first_column(tmp_path):
    """Whole-row keys whose first column is an integer take the statistics path; text columns read back as
    string views from delta-rs' files must still compare (a crash test found they did not)."""
    cols = [{"name": "a", "type": "int"}, {"name": "b", "type": "text"}]
    p = str(tmp_path / "t")
    create(p, cols, "c", 0)
    apply_changes(p, _changes(cols, ("write", None, (1, "x")), ("write", None, (1, "x")), ("write", None, (2, None))),
                  "c", strict=True, table_label="d.t")
    apply_changes(p, _changes(cols, ("delete", (1, "x"), None), ("update", (2, None), (2, "y")), seq=4), "c",
                  strict=True, table_label="d.t")
    assert _rows(p, ["a", "b"]) == [(1, "x"), (2, "y")]


@pytest.mark.parametrize("keyed", [True, False])
def test_a_batch_of_keys_the_table_lacks_is_appended_and_one_that_touches_held_keys_merged(tmp_path, keyed):
    """Both commit the rows MySQL would hold and the channel's position; only the second needs a merge."""
    cols = [{"name": HOSTILE[0], "type": "int", "pk": keyed}, {"name": HOSTILE[2], "type": "text"}]
    p = str(tmp_path / "t")
    create(p, cols, "c", 0)

    def operations():
        return [h["operation"] for h in reversed(DeltaTable(p).history())][1:]

    apply_changes(p, _changes(cols, ("write", None, (1, "a")), ("write", None, (2, "b")),
                              ("update", (2, "b"), (3, "c")), ("delete", (1, "a"), None), seq=5),
                  "c", strict=True, table_label="d.t")  # every key it touches is new to the table
    assert operations() == ["WRITE"] and _rows(p, [c["name"] for c in cols]) == [(3, "c")]
    assert table_seq(p, "c") == 8  # the batch's last seq
    apply_changes(p, _changes(cols, ("write", None, (4, "d")), ("update", (3, "c"), (3, "c2")), seq=9),
                  "c", strict=True, table_label="d.t")
    assert operations() == ["WRITE", "MERGE"]
    assert _rows(p, [c["name"] for c in cols]) == [(3, "c2"), (4, "d")] and table_seq(p, "c") == 10
    apply_changes(p, _changes(cols, ("write", None, (5, "e")), seq=12), "c", strict=True, table_label="d.t")
    assert operations() == ["WRITE", "MERGE", "WRITE"] and table_seq(p, "c") == 12
    assert _rows(p, [c["name"] for c in cols]) == [(3, "c2"), (4, "d"), (5, "e")]


@pytest.mark.parametrize("cols", [
    [{"name": "k", "type": "varchar", "pk": True}, {"name": "v", "type": "double"}],
    [{"name": HOSTILE[1], "type": "text"}, {"name": "n", "type": "double"}],
], ids=["text key", "no key, text first"])
def test_key_lookups_of_local_tables_read_files_without_delta_rs_pre_buffered_dataset(tmp_path, monkeypatch, cols):
    """Keys that statistics cannot narrow (text, whole rows) are read from the version's files as well, not
    through delta-rs' dataset, whose pre-buffered reads kept memory (storage/delta/scan.py); after an ALTER too."""
    p = str(tmp_path / "t t%")
    create(p, cols, "c", 0)
    def forbid():
        monkeypatch.setattr(DeltaTable, "to_pyarrow_dataset", lambda *a, **k: pytest.fail("pre-buffered read"))

    forbid()
    apply_changes(p, _changes(cols, ("write", None, ("a", 1.0)), ("write", None, ("b", 2.0))), "c", strict=True,
                  table_label="d.t")
    apply_changes(p, _changes(cols, ("write", None, ("c", 3.0)), seq=3), "c", strict=True, table_label="d.t")
    monkeypatch.undo()  # an ALTER reads the whole table once, through delta-rs
    new = cols + [{"name": "added", "type": "int"}]
    reshape(p, cols, new, "c", 4, defaults={"added": "7"})
    forbid()
    apply_changes(p, _changes(new, ("write", None, ("d", 4.0, 8)), seq=5), "c", strict=True, table_label="d.t")
    apply_changes(p, _changes(new, ("update", ("a", 1.0, 7), ("a2", 1.0, 7)), ("delete", ("d", 4.0, 8), None),
                              seq=6), "c", strict=True, table_label="d.t")
    with pytest.raises(ReplicaRowError) as e:
        apply_changes(p, _changes(new, ("delete", ("zz", 9.0, 7), None), seq=8), "c", strict=True,
                      table_label="d.t")
    assert e.value.code == 1032
    monkeypatch.undo()
    names = [c["name"] for c in new]
    assert _rows(p, names) == [("a2", 1.0, 7), ("b", 2.0, 7), ("c", 3.0, 7)]


def _text_key(draw):
    """Hostile text keys, some past the statistics' cut (64 bytes) with shared prefixes and multibyte ends."""
    prefix = draw(st.sampled_from(["", "k", "é" * 31, "z" * 62, "ü" * 40, "a'`\\,%_"]))
    return prefix + draw(st.text(alphabet=st.sampled_from(list("aAzZ'`\\,%_ éüý€\U0001F600")), max_size=3))


_KEYS = st.composite(_text_key)()


@st.composite
def _text_batches(draw):
    return [draw(st.lists(st.tuples(st.sampled_from(["write", "update", "delete"]), _KEYS, _KEYS), min_size=1,
                          max_size=8)) for _ in range(draw(st.integers(2, 6)))]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=_text_batches())
def test_text_key_lookups_pruned_by_statistics_equal_a_model(tmp_path_factory, batches):
    """A text primary key: lookups read only the files whose min/max statistics (cut at 64 bytes for long
    values) can hold a touched key. STRICT batches of what a source could log, against a dict of what MySQL
    would hold: a held key missed by the pruning would stop them with 1032, and a write of a held key must
    stop with 1062."""
    cols = [{"name": "k", "type": "varchar", "pk": True}, {"name": "v", "type": "int"}]
    p = str(tmp_path_factory.mktemp("t") / "t")
    create(p, cols, "c", 0)
    model: dict[str, int] = {}
    seq, n = 1, 0
    for batch in batches:
        items = []
        for kind, a, b in batch:
            n += 1
            if kind == "write" and a not in model:
                items.append(("write", None, (a, n)))
                model[a] = n
            elif kind == "update" and a in model and (b == a or b not in model):
                items.append(("update", (a, model[a]), (b, n)))
                del model[a]
                model[b] = n
            elif kind == "delete" and a in model:
                items.append(("delete", (a, model[a]), None))
                del model[a]
        if items:
            apply_changes(p, _changes(cols, *items, seq=seq), "c", strict=True, table_label="d.t")
            seq += len(items)
    assert dict(_rows(p, ["k", "v"])) == model
    for held in {min(model), max(model)} if model else ():
        with pytest.raises(ReplicaRowError) as e:
            apply_changes(p, _changes(cols, ("write", None, (held, -1)), seq=seq), "c", strict=True,
                          table_label="d.t")
        assert e.value.code == 1062


def test_text_key_lookups_read_only_the_files_that_can_hold_the_keys(tmp_path):
    """Ordered text keys (codes, ULIDs) skip the older files; a file whose maximum may have been cut is kept
    for any key from its minimum on."""
    from rpl_sql.pipeline.replica.merge import _files_for

    cols = [{"name": "k", "type": "varchar", "pk": True}, {"name": "v", "type": "int"}]
    p = str(tmp_path / "t")
    create(p, cols, "c", 0)
    seq = 1
    for lo in (0, 10, 20):
        apply_changes(p, _changes(cols, *[("write", None, (f"k{i:03d}", i)) for i in range(lo, lo + 10)], seq=seq),
                      "c", strict=True, table_label="d.t")
        seq += 10
    long = "m" * 70
    apply_changes(p, _changes(cols, ("write", None, ("l", 0)), ("write", None, (long, 1)), seq=seq), "c",
                  strict=True, table_label="d.t")
    dt = DeltaTable(p)
    assert len(_files_for(dt, p, "k", ["k025"], False)) == 1
    assert len(_files_for(dt, p, "k", ["k005", "k006"], False)) == 1
    assert len(_files_for(dt, p, "k", ["k015", "k025"], False)) == 2
    assert len(_files_for(dt, p, "k", ["zz"], False)) == 1  # past every exact maximum: only the cut one
    assert len(_files_for(dt, p, "k", ["a"], False)) == 0


@pytest.mark.parametrize("vectors", [True, False], ids=["deletion vectors", "rewriting merge"])
def test_a_merge_through_a_held_table_after_another_writers_compaction(tmp_path, monkeypatch, vectors):
    """The service merges through the table it keeps open; `rpl-sql upkeep` compacts the same table between
    two batches, or between the service's look at the log and its commit. The commit planned on the version
    before the compaction is refused (delta-rs: "a concurrent transaction added new data"; by deletion
    vectors: the version is taken): the batch is merged on the compacted version instead, once, and nothing
    is lost or doubled."""
    from rpl_sql.pipeline.replica import merge
    from rpl_sql.storage.delta import dv_commit

    if not vectors:
        monkeypatch.setenv("RPL_SQL_DELETION_VECTORS", "0")

    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    held = DeltaTable(p)
    for i in range(1, 5):
        apply_changes(p, _changes(COLS, ("write", None, (i, f"r{i}", None)), seq=i), "c", strict=True,
                      table_label="d.t", table=held)
    DeltaTable(p).optimize.compact()  # upkeep, between two batches
    apply_changes(p, _changes(COLS, ("update", (2, "r2", None), (2, "two", b"2")), seq=5), "c", strict=True,
                  table_label="d.t", table=held)
    where, name = (dv_commit, "commit") if vectors else (merge, "_merge")
    merged = getattr(where, name)

    def compacted_first(*args, **kw):  # upkeep commits a compaction after the batch read the table
        monkeypatch.setattr(where, name, merged)
        for i in range(6, 8):
            apply_changes(p, _changes(COLS, ("write", None, (i * 10, "other", None)), seq=i), "c", strict=True,
                          table_label="d.t")
        DeltaTable(p).optimize.compact()
        return merged(*args, **kw)

    monkeypatch.setattr(where, name, compacted_first)
    apply_changes(p, _changes(COLS, ("delete", (3, "r3", None), None), ("update", (4, "r4", None), (4, "four", None)),
                              seq=8), "c", strict=True, table_label="d.t", table=held)
    assert _rows(p, [c["name"] for c in COLS]) == [(1, "r1", None), (2, "two", b"2"), (4, "four", None),
                                                   (60, "other", None), (70, "other", None)]
    assert table_seq(p, "c") == 9  # the last batch: seqs 8 and 9
