"""`delta.scan.read_range` (files picked by add actions and statistics) against delta-rs' own dataset scan:
the same rows for every range, partition ('' and NULL partitions included) and after a column was added."""
from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable, write_deltalake

from rpl_sql.storage.delta.scan import Followed, files_in_range, read_range

SCHEMA = pa.schema([("channel", pa.string()), ("seq", pa.int64()), ("v", pa.string()), ("extra", pa.string())])


def _append(path, channel, lo, hi, extra: bool):
    data = {"channel": [channel] * (hi - lo), "seq": list(range(lo + 1, hi + 1)),
            "v": [f"v'`,%_ü{i}" for i in range(lo, hi)]}
    if extra:
        data["extra"] = [f"x{i}" for i in range(lo, hi)]
    schema = SCHEMA if extra else pa.schema(list(SCHEMA)[:3])
    write_deltalake(path, pa.table(data, schema=schema), mode="append", partition_by=["channel"],
                    schema_mode="merge" if extra else None)


def test_read_range_equals_the_dataset_scan(tmp_path):
    path = str(tmp_path / "t")
    rnd = random.Random(7)
    tops = {"": 0, "a": 0, "b b": 0}
    for i in range(24):
        ch = rnd.choice(list(tops))
        n = rnd.randint(1, 40)
        _append(path, ch, tops[ch], tops[ch] + n, extra=i >= 12)
        tops[ch] += n
    followed = Followed(path)
    dt = followed.table()
    assert len(dt.file_uris()) == 24
    for _ in range(200):
        ch = rnd.choice(list(tops))
        lo = rnd.randint(0, tops[ch])
        hi = rnd.choice([None, rnd.randint(lo, tops[ch] + 5)])
        got = read_range(dt, path, SCHEMA, {"channel": ch or None}, "seq", lo, hi).sort_by("seq")
        cond = (ds.field("channel").is_null() if not ch else ds.field("channel") == ch) & (ds.field("seq") > lo)
        if hi is not None:
            cond = cond & (ds.field("seq") <= hi)
        want = DeltaTable(path).to_pyarrow_dataset().to_table(filter=cond).sort_by("seq")
        assert got.column("seq").to_pylist() == want.column("seq").to_pylist()
        assert got.column("v").to_pylist() == [str(v) for v in want.column("v").to_pylist()]
        assert got.column("extra").to_pylist() == want.column("extra").to_pylist()  # NULL where a file lacks it
        assert set(got.column("channel").to_pylist()) <= {ch or None}
        # only files that can hold the range are read
        picked = files_in_range(dt, {"channel": ch or None}, "seq", lo, hi)
        assert len(picked) < 24 or lo == 0


def test_read_range_of_an_unpartitioned_table_with_a_row_condition(tmp_path):
    """The applied events are not partitioned: a channel is a row condition (`where`), the default channel's
    rows are NULL or '', and channels interleave in the same files."""
    path = str(tmp_path / "t")
    rnd = random.Random(11)
    seq = 0
    for i in range(12):
        chans = [rnd.choice(["", None, "a", "b b"]) for _ in range(rnd.randint(1, 30))]
        write_deltalake(path, pa.table({"channel": chans, "seq": list(range(seq + 1, seq + 1 + len(chans))),
                                        "v": [f"v'`,%_ü{seq + j}" for j in range(len(chans))]},
                                       schema=pa.schema(list(SCHEMA)[:3])), mode="append")
        seq += len(chans)
    dt = DeltaTable(path)
    for _ in range(100):
        ch = rnd.choice(["", "a", "b b"])
        where = ds.field("channel") == ch if ch else ds.field("channel").is_null() | (ds.field("channel") == "")
        lo = rnd.randint(0, seq)
        hi = rnd.choice([None, rnd.randint(lo, seq + 5)])
        got = read_range(dt, path, SCHEMA, {}, "seq", lo, hi, columns=["seq", "v"], where=where).sort_by("seq")
        cond = where & (ds.field("seq") > lo)
        if hi is not None:
            cond = cond & (ds.field("seq") <= hi)
        want = DeltaTable(path).to_pyarrow_dataset().to_table(filter=cond).sort_by("seq")
        assert got.column_names == ["seq", "v"]
        assert got.column("seq").to_pylist() == want.column("seq").to_pylist()
        assert got.column("v").to_pylist() == [str(v) for v in want.column("v").to_pylist()]


def test_followed_sees_new_commits(tmp_path):
    path = str(tmp_path / "t")
    followed = Followed(path)
    assert followed.table() is None
    _append(path, "a", 0, 5, extra=True)
    assert followed.table().version() == 0
    _append(path, "a", 5, 9, extra=True)
    dt = followed.table()
    assert dt.version() == 1
    got = read_range(dt, path, SCHEMA, {"channel": "a"}, "seq", 4, None).sort_by("seq")  # files in any order
    assert got.column("seq").to_pylist() == [5, 6, 7, 8, 9]
