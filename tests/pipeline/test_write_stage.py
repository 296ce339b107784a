"""The applier's write stage: batches written one at a time and committed in hand-over order, the next batch's
write under way while the one before commits, and nothing committed after a failure, which surfaces at the next
hand-over or wait."""
from __future__ import annotations

import threading

import pytest

from rpl_sql.pipeline.applier.job import _WriteStage


def test_the_next_write_runs_while_the_batch_before_commits_and_commits_keep_their_order():
    stage, log, release = _WriteStage(), [], threading.Event()
    second_written = threading.Event()

    def commit_first(actions):
        assert second_written.wait(10), "the second batch's write waited for the first batch's commits"
        release.wait(10)
        log.append(("commit", actions))

    def write_second():
        log.append(("write", 2))
        second_written.set()
        return 2

    try:
        stage.submit(lambda: log.append(("write", 1)) or 1, commit_first)
        stage.submit(write_second, lambda actions: log.append(("commit", actions)))
        assert stage.busy()
        release.set()
        stage.wait()
    finally:
        stage.close()
    assert log == [("write", 1), ("write", 2), ("commit", 1), ("commit", 2)]
    assert not stage.busy()


def test_a_failed_write_is_not_committed_and_its_error_surfaces_at_the_next_hand_over():
    stage, committed = _WriteStage(), []

    def write_first():
        raise RuntimeError("write 1 failed")

    try:
        stage.submit(write_first, committed.append)
        with pytest.raises(RuntimeError, match="write 1 failed"):
            stage.submit(lambda: 2, committed.append)  # it waits for the write before: the failure is known
        assert committed == [] and not stage.busy()
        stage.submit(lambda: 3, committed.append)  # a later hand-over starts afresh
        stage.wait()
        assert committed == [3]
    finally:
        stage.close()


def test_nothing_after_a_failed_commit_is_committed_and_its_error_surfaces_at_the_wait():
    stage, committed, handed = _WriteStage(), [], threading.Event()

    def commit_first(actions):
        assert handed.wait(10)
        raise RuntimeError("commit 1 failed")

    try:
        stage.submit(lambda: 1, commit_first)
        stage.submit(lambda: 2, committed.append)  # written, but its commit waits for the first one's
        handed.set()
        with pytest.raises(RuntimeError, match="commit 1 failed"):
            stage.wait()
        assert committed == []
    finally:
        stage.close()
