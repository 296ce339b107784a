"""Deletion vectors: rpl_sql writes them (delta-rs 1.6 reads but does not write them) for primary-key merges.

- The codec round-trips any set of row indexes, and delta-rs (an independent reader) decodes what it writes.
- Random batches of inserts, updates (key changes too) and deletes merged by deletion vectors leave a table
  equal, row for row, to the same batches merged by delta-rs' rewriting merge and to a plain model of the
  table, through rpl_sql's reader and through delta-rs' own (DataFusion applies the vectors); across
  checkpoints, an upkeep compaction in between and a commit that lost its version to another writer.
"""
from __future__ import annotations

import random
import shutil

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import CommitFailedError
from hypothesis import given, settings, strategies as st

from rpl_sql.pipeline.replica import merge
from rpl_sql.pipeline.replica.merge import Changes, apply_changes, create, read_all
from rpl_sql.storage.delta import deletion_vectors as dvs
from rpl_sql.storage.delta import dv_commit, live_files

HOSTILE = ["i`d", "we'ird \"x\", %_ é\\", "Mixed Case"]
COLS = [{"name": HOSTILE[0], "type": "int", "pk": True}, {"name": HOSTILE[1], "type": "text"},
        {"name": HOSTILE[2], "type": "int"}]
TEXTS = ["", "a", "'", "\\", "`", ",", "%", "_", "é", "Ünï", "x" * 40]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2 ** 34), max_size=3000))
def test_the_codec_round_trips_any_rows(rows):
    assert dvs.decode(dvs.encode(np.array(rows, dtype=np.uint64))).tolist() == sorted(set(rows))


def test_delta_rs_reads_the_vectors_rpl_sql_writes(tmp_path):
    """Array and bitmap containers, two high words: delta-rs' selection vector deletes exactly these rows."""
    rng = np.random.default_rng(7)
    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    merge.write(p, pa.table({c["name"]: pa.array(v, type=t) for c, v, t in zip(
        COLS, [range(200_000), ["v"] * 200_000, range(200_000)], [pa.int32(), pa.string(), pa.int32()])}),
        "c", 1, mode="append")
    live = live_files.live_files(p)
    (path, add), = live.by_path().items() if len(live.adds) == 1 else pytest.fail("one file")
    gone = np.unique(np.concatenate([rng.integers(0, 65_536, 30_000), rng.integers(65_536, 200_000, 300)]))
    dv_commit.commit(live, {add["path"]: gone.astype(np.uint64)}, None, metadata={}, app=("rpl_sql.test", 2))
    sv = pa.table(DeltaTable(p).deletion_vectors().read_all()).column("selection_vector")[0].as_py()
    assert np.flatnonzero(~np.array(sv)).tolist() == gone.tolist()
    assert read_all(p).num_rows == 200_000 - len(gone)
    assert dvs.decode(dvs.encode(np.array([5, 2 ** 32 + 1], dtype=np.uint64))).tolist() == [5, 2 ** 32 + 1]


def _run_length_vector() -> bytes:
    """A vector with a run container (as Delta Lake's own writer makes them): rows 3..9 and 70000."""
    import struct
    body = struct.pack("<I", 12347 | (1 << 16))  # cookie with runs, 2 containers
    body += bytes([0b01])  # container 0 is a run container
    body += struct.pack("<HHHH", 0, 6, 1, 0)  # keys and cardinalities - 1
    body += struct.pack("<HHH", 1, 3, 6)  # one run: start 3, length - 1 = 6
    body += struct.pack("<H", 70000 - 65536)  # array container of key 1
    return struct.pack("<iq", dvs.MAGIC, 1) + struct.pack("<I", 0) + body


def test_run_containers_decode():
    assert dvs.decode(_run_length_vector()).tolist() == [3, 4, 5, 6, 7, 8, 9, 70000]


def _table(path: str) -> list[tuple]:
    t = read_all(path)
    return sorted(zip(*(t.column(c["name"]).to_pylist() for c in COLS)))


def _delta_rs(path: str) -> list[tuple]:
    q = "SELECT " + ", ".join('"' + c["name"].replace('"', '""') + '"' for c in COLS) + " FROM t"
    t = pa.table(QueryBuilder().register("t", DeltaTable(path)).execute(q).read_all())
    return sorted(zip(*(t.column(i).to_pylist() for i in range(3))))


def _batch(rng: random.Random, model: dict, seq: int) -> Changes:
    ch = Changes(COLS)
    names = [c["name"] for c in COLS]
    for _ in range(rng.randint(1, 60)):
        roll = rng.random()
        if model and roll < 0.45:
            k = rng.choice(sorted(model))
            new_k = k if rng.random() < 0.8 else rng.randint(0, 400)
            if new_k != k and new_k in model:
                continue
            before, after = (k, *model[k]), (new_k, rng.choice(TEXTS), rng.randint(-9, 9))
            del model[k]
            model[new_k] = after[1:]
            ch.add(seq, "update_rows", [{"before": dict(zip(names, before)), "after": dict(zip(names, after))}])
        elif model and roll < 0.65:
            k = rng.choice(sorted(model))
            ch.add(seq, "delete_rows", [{"before": dict(zip(names, (k, *model.pop(k)))), "after": None}])
        else:
            k = rng.randint(0, 400)
            if k in model:
                continue
            model[k] = (rng.choice(TEXTS), rng.randint(-9, 9))
            ch.add(seq, "write_rows", [{"before": None, "after": dict(zip(names, (k, *model[k])))}])
        seq += 1
    return ch


@pytest.mark.parametrize("seed", range(4))
def test_merges_by_vectors_equal_rewriting_merges_and_the_model(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    model: dict = {}
    vec, rew = str(tmp_path / "vectors"), str(tmp_path / "rewrites")
    for p in (vec, rew):
        create(p, COLS, "c", 0)
    seq = 1
    for b in range(40):
        state = dict(model)
        ch = _batch(rng, model, seq)
        seq = ch.last_seq + 1
        apply_changes(vec, ch, "c", strict=True, table_label="d.t")
        monkeypatch.setenv("RPL_SQL_DELETION_VECTORS", "0")
        apply_changes(rew, ch, "c", strict=True, table_label="d.t")
        monkeypatch.delenv("RPL_SQL_DELETION_VECTORS")
        want = sorted((k, *v) for k, v in model.items())
        assert _table(vec) == _table(rew) == want, (b, state)
        if b % 7 == 3:
            assert _delta_rs(vec) == want
        if b == 20:  # upkeep's compaction (delta-rs optimize applies the vectors) and a checkpoint between
            DeltaTable(vec).optimize.compact()
            DeltaTable(vec).create_checkpoint()
            live_files._CACHE.clear()
    assert _delta_rs(vec) == _table(vec)
    assert merge.table_seq(vec, "c") == seq - 1 == merge.table_seq(rew, "c")
    assert any(a.get("deletionVector") for a in live_files.live_files(vec).adds.values())


def test_live_files_reads_only_new_commits_and_never_a_table_made_again_at_the_path(tmp_path, monkeypatch):
    """Merges name the version they read, as every caller does: each reads the commits since the last one (it
    replayed every commit since the checkpoint, each batch); the state equals one replayed afresh; and a
    table deleted and made again at the same path (the same version numbers, other files) is read anew."""
    from rpl_sql.storage.delta import archive

    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    rng, model, seq = random.Random(3), {}, 1
    read: list[int] = []
    real = archive.read_commit
    monkeypatch.setattr(archive, "read_commit", lambda root, v: read.append(v) or real(root, v))
    for _ in range(12):
        ch = _batch(rng, model, seq)
        seq = ch.last_seq + 1
        apply_changes(p, ch, "c", strict=True, table_label="d.t")
        v = DeltaTable(p).version()
        read.clear()
        kept = live_files.live_files(p, v)
        assert read in ([], [v])  # the merge's own call read the rest
        live_files._CACHE.clear()
        assert live_files.live_files(p, v).adds == kept.adds  # the same as replayed from scratch
    assert sorted((k, *r) for k, r in model.items()) == _table(p)
    shutil.rmtree(p)
    create(p, COLS, "c", 0)
    names = [c["name"] for c in COLS]
    for n in range(14):  # past the version the old table's state was kept at
        ch = Changes(COLS)
        ch.add(n + 1, "write_rows", [{"before": None, "after": dict(zip(names, (1000 + n, "new", n)))}])
        apply_changes(p, ch, "c", strict=True, table_label="d.t")
    got = live_files.live_files(p, DeltaTable(p).version())
    assert sorted(a["path"] for a in got.adds.values()) == \
        sorted(pa.table(DeltaTable(p).get_add_actions(flatten=True)).column("path").to_pylist())
    assert _table(p) == [(1000 + n, "new", n) for n in range(14)]


def test_merges_by_vectors_checkpoint_at_the_tables_own_interval(tmp_path):
    """A table that sets delta.checkpointInterval (to keep its log short under an archiver) gets a checkpoint
    at each multiple of it from rpl_sql's own commits too, as from delta-rs' (they kept to every 100th)."""
    import os

    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    DeltaTable(p).alter.set_table_properties({"delta.checkpointInterval": "5"})
    rng, model, seq = random.Random(5), {}, 1
    for _ in range(16):
        ch = _batch(rng, model, seq)
        seq = ch.last_seq + 1
        apply_changes(p, ch, "c", strict=True, table_label="d.t")
    v = DeltaTable(p).version()
    assert v >= 15
    checkpoints = {int(n[:20]) for n in os.listdir(os.path.join(p, "_delta_log")) if ".checkpoint." in n}
    assert set(range(5, v + 1, 5)) <= checkpoints, (v, sorted(checkpoints))
    assert dv_commit.checkpoint_interval(DeltaTable(p)) == 5
    assert sorted((k, *r) for k, r in model.items()) == _table(p)


def test_a_commit_that_lost_its_version_leaves_nothing_and_the_batch_is_redone(tmp_path, monkeypatch):
    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    names = [c["name"] for c in COLS]
    ch = Changes(COLS)
    ch.add(1, "write_rows", [{"before": None, "after": dict(zip(names, (k, "a", k)))} for k in range(10)])
    apply_changes(p, ch, "c", strict=True, table_label="d.t")
    real = dv_commit._put_if_absent
    calls = []

    def racing(root, version, actions):  # another writer takes the version first, once
        if not calls:
            calls.append(version)
            merge.write(p, pa.table({n: pa.array([v], type=t) for n, v, t in zip(
                names, [100, "x", 1], [pa.int32(), pa.string(), pa.int32()])}), "other", 1, mode="append")
        return real(root, version, actions)

    monkeypatch.setattr(dv_commit, "_put_if_absent", racing)
    ch = Changes(COLS)
    ch.add(2, "update_rows", [{"before": dict(zip(names, (3, "a", 3))), "after": dict(zip(names, (3, "b", 3)))}])
    apply_changes(p, ch, "c", strict=True, table_label="d.t")
    assert calls and _table(p) == sorted([(k, "b" if k == 3 else "a", k) for k in range(10)] + [(100, "x", 1)])
    files = {f.name for f in (tmp_path / "t").iterdir() if f.is_file()}
    live = live_files.live_files(p)
    used = {a["path"] for a in live.adds.values()} | {
        dvs.file_of(p, a["deletionVector"]).rsplit("/", 1)[1] for a in live.adds.values() if a.get("deletionVector")}
    assert files <= used | {f for f in files if f.startswith("part-") and f not in used and _removed(p, f)}
    with pytest.raises(CommitFailedError):
        dv_commit._put_if_absent(p, 1, [{"commitInfo": {}}])


def _removed(p: str, name: str) -> bool:
    """Whether some commit removed the file (files a rewriting merge or compaction replaced stay until vacuum)."""
    from rpl_sql.storage.delta import archive
    return any(a.get("remove", {}).get("path") == name
               for v in archive.commit_versions(p) for a in archive.read_commit(p, v) or [])


def test_a_compaction_planned_before_a_merge_by_vectors_is_refused(tmp_path):
    """Upkeep opened the table, a merge then deleted rows by vectors, upkeep's compaction commits last: delta-rs
    refuses it (it read files the merge removed), so no deleted row comes back and none is doubled."""
    p = str(tmp_path / "t")
    cols = COLS[:2]
    create(p, cols, "c", 0)
    for i in range(3):
        merge.write(p, pa.table({cols[0]["name"]: pa.array(range(i * 10, i * 10 + 10), pa.int32()),
                                 cols[1]["name"]: pa.array(["a"] * 10)}), "c", i + 1, mode="append")
    stale = DeltaTable(p)
    ch = Changes(cols)
    names = [c["name"] for c in cols]
    ch.add(10, "update_rows", [{"before": dict(zip(names, (5, "a"))), "after": dict(zip(names, (5, "b")))}])
    ch.add(11, "delete_rows", [{"before": dict(zip(names, (15, "a"))), "after": None}])
    apply_changes(p, ch, "c", strict=True, table_label="d.t")
    with pytest.raises(CommitFailedError, match="concurrent transaction deleted data"):
        stale.optimize.compact()
    t = read_all(p)
    assert sorted(zip(t.column(0).to_pylist(), t.column(1).to_pylist())) == \
        [(i, "b" if i == 5 else "a") for i in range(30) if i != 15]


def test_heavy_vectors_are_purged_and_upkeep_vacuums_the_vector_files_no_version_reads(tmp_path):
    """Each merge writes a file of vectors; files whose vectors delete 5% of their rows are rewritten without
    them (delta-rs' compaction leaves a large file alone), and `--keep-days` deletes the vector files (like the
    data files) that no kept version reads."""
    import os
    import time

    from rpl_sql.storage.upkeep import upkeep_table

    rng = random.Random(11)
    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    names = [c["name"] for c in COLS]
    merge.write(p, pa.table({n: pa.array(v, type=t) for n, v, t in zip(
        names, [range(2000), ["v"] * 2000, [0] * 2000], [pa.int32(), pa.string(), pa.int32()])}), "c", 1,
        mode="append")
    model = {k: ("v", 0) for k in range(2000)}
    for seq in range(2, 40):
        ch = Changes(COLS)
        for k in rng.sample(range(2000), 20):
            after = ("w", model[k][1] + 1)
            ch.add(seq, "update_rows", [{"before": dict(zip(names, (k, *model[k]))),
                                         "after": dict(zip(names, (k, *after)))}])
            model[k] = after
        apply_changes(p, ch, "c", strict=True, table_label="d.t")
    vectors = lambda: {f for f in os.listdir(p) if f.startswith("deletion_vector_")}  # noqa: E731
    assert len(vectors()) > 30
    want = sorted((k, *v) for k, v in model.items())
    big = [a for a in live_files.live_files(p).adds.values() if a.get("deletionVector")
           and a["deletionVector"]["cardinality"] > 100]
    assert len(big) == 1  # the first file, 2,000 rows
    assert dv_commit.purge(DeltaTable(p), p) >= 1 and _table(p) == want
    assert not any(a["path"] == big[0]["path"] for a in live_files.live_files(p).adds.values())
    time.sleep(0.05)
    upkeep_table(p, keep_days=0)
    live = live_files.live_files(p)
    in_use = {dvs.file_of(p, a["deletionVector"]).rsplit("/", 1)[1] for a in live.adds.values()
              if a.get("deletionVector")}
    assert vectors() == in_use and len(in_use) < 30
    assert _table(p) == want and _delta_rs(p) == want
    assert not any(d["cardinality"] / 2000 >= dv_commit.PURGE_RATIO
                   for d in (a.get("deletionVector") for a in live.adds.values()) if d)


def test_a_table_with_vectors_is_compacted_a_bounded_step_at_a_time(tmp_path, monkeypatch):
    """The service's compaction of a table with deletion vectors rewrites the smallest files, at most a step's
    bytes, into one (their deleted rows left out), where delta-rs' rewrites every file under a tier at once."""
    from rpl_sql.storage import upkeep

    rng = random.Random(5)
    p = str(tmp_path / "t")
    create(p, COLS, "c", 0)
    model: dict = {}
    for b in range(30):
        apply_changes(p, _batch(rng, model, 1 + 100 * b), "c", strict=True, table_label="d.t")
    before = live_files.live_files(p).adds.values()
    sizes = sorted(a["size"] for a in before)
    step = sum(sizes[:5]) + 1
    monkeypatch.setattr(upkeep, "STEP_BYTES", step)
    removed, added = upkeep.compact_growing_table(DeltaTable(p))
    after = live_files.live_files(p).adds.values()
    assert (removed, added) == (5, 1) and len(after) == len(before) - 4
    assert _table(p) == sorted((k, *v) for k, v in model.items()) == _delta_rs(p)
    assert upkeep.upkeep_table(p).compacted[1] >= 1 and len(live_files.live_files(p).adds) <= 2
    assert _table(p) == sorted((k, *v) for k, v in model.items())
