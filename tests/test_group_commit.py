"""Group commit on SQLite (relaypoint.store.group): the commits of a store's threads that wait while
a transaction is under way share the next one, each acknowledged only once it is committed; a
refused fence fails its change alone; a failing statement fails the whole group with nothing of it
written. Groups are made deterministic by holding the file's write lock from another connection
while the members line up."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from relaypoint import Runtime, Workflow
from relaypoint.errors import LeaseLost, StoreError
from relaypoint.status import RunStatus
from relaypoint.store import NewRun, open_store
from relaypoint.throughput import WorkerStats
from relaypoint.worker import Worker

from test_store_contract import add_run, at, everything, finish, lease, stage


def wait_until(check, what: str, seconds: float = 30) -> None:
    limit = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < limit, f"never: {what}"
        time.sleep(0.002)


def in_one_group(store, path: Path, commits) -> list[object]:
    """Run ``commits`` (functions of no argument, each committing one change) on threads of their
    own so that the first commits alone, behind another connection's write lock, and the rest wait
    for it and form the next group. Returns each commit's result or exception, in order."""
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    outcomes: list[object] = [None] * len(commits)

    def run(i):
        try:
            outcomes[i] = commits[i]()
        except Exception as e:
            outcomes[i] = e

    group = store.group_commit
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(commits))]
    threads[0].start()
    wait_until(lambda: group._leading and not group._waiting, "the first commit leads, behind the lock")
    for t in threads[1:]:
        t.start()
    wait_until(lambda: len(group._waiting) == len(commits) - 1, "the others wait for the next group")
    blocker.execute("ROLLBACK")
    blocker.close()
    for t in threads:
        t.join(30)
    return outcomes


def delta(store, before: tuple[int, int, int]) -> tuple[int, int, int]:
    """What ``store.commit_counts`` counted since ``before``: (changes, boundaries, transactions)."""
    return tuple(now - then for now, then in zip(store.commit_counts.read(), before))


def committed_output(path: Path, run_id: str, seq: int) -> object:
    """Step ``seq``'s output of ``run_id`` as a new connection reads it from the file (None if absent)."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT value FROM outputs WHERE run_id = ? AND seq = ?", (run_id, seq)).fetchone()
    finally:
        conn.close()
    return None if row is None else json.loads(row[0])


@pytest.fixture
def store_file(tmp_path: Path):
    path = tmp_path / "runs.db"
    with open_store(str(path), create=True, durability="full") as store:
        for i in range(6):
            add_run(store, f"r{i}", owner=lease())
        yield store, path


def test_a_lone_commit_is_a_group_of_one_written_at_once(store_file):
    store, path = store_file
    before = store.commit_counts.read()
    for i in range(3):
        finish(store, f"r{i}", 0, {"n": i})
        assert committed_output(path, f"r{i}", 0) == {"n": i}  # on the file when commit returned
    assert delta(store, before) == (3, 3, 3)


def test_commits_waiting_behind_a_transaction_share_the_next_one_each_acknowledged_once_committed(store_file):
    store, path = store_file
    before = store.commit_counts.read()

    def boundary(i):
        def commit():
            finish(store, f"r{i}", 0, {"n": i})
            return committed_output(path, f"r{i}", 0)  # read by another connection as soon as it returns
        return commit

    assert in_one_group(store, path, [boundary(i) for i in range(6)]) == [{"n": i} for i in range(6)]
    assert delta(store, before) == (6, 6, 2)  # (changes, boundaries, transactions)


def test_a_refused_fence_fails_its_change_alone_and_the_rest_of_its_group_is_committed(store_file):
    store, path = store_file
    before, before_counts = everything(store, "r3"), store.commit_counts.read()
    outcomes = in_one_group(store, path, [
        lambda i=i: finish(store, f"r{i}", 0, {"n": i}, fence="theirs" if i == 3 else "tok") for i in range(6)])
    assert isinstance(outcomes[3], LeaseLost)
    assert everything(store, "r3") == before
    assert [committed_output(path, f"r{i}", 0) for i in range(6)] == [{"n": i} if i != 3 else None for i in range(6)]
    assert delta(store, before_counts) == (5, 5, 2)


def test_a_failing_statement_fails_every_change_of_its_group_with_nothing_of_it_written(store_file):
    store, path = store_file
    taken = NewRun(run_id="r0", workflow="flow", status=RunStatus.QUEUED, input="{}", definition="[]",
                   fingerprint="fp", created_at=at(0), steps_total=0)  # r0 exists: its insert fails
    before = store.commit_counts.read()
    outcomes = in_one_group(store, path, [
        lambda: finish(store, "r5", 0, {"n": 5}),
        lambda: finish(store, "r1", 0, {"n": 1}),
        lambda: finish(store, "r2", 0, {"n": 2}),
        lambda: stage(store, "r0", new=taken),
        lambda: finish(store, "r4", 0, {"n": 4})])
    assert outcomes[0] is not None and not isinstance(outcomes[0], Exception)  # the lone first group
    assert all(isinstance(o, StoreError) for o in outcomes[1:]), outcomes
    assert [committed_output(path, f"r{i}", 0) for i in (1, 2, 4)] == [None, None, None]
    assert delta(store, before) == (1, 1, 1)
    finish(store, "r1", 0, {"n": 1})  # the store goes on: the next group is written
    assert committed_output(path, "r1", 0) == {"n": 1}


def test_a_worker_commits_the_boundaries_of_its_runs_in_shared_transactions_and_says_so(tmp_path: Path):
    wf = Workflow("naps")
    for i in range(10):
        async def nap(ctx, i=i):
            await asyncio.sleep(0.01)
            return i
        wf.step(name=f"s{i}")(nap)
    db = str(tmp_path / "runs.db")
    with Runtime(db, [wf], durability="full") as rt:
        runs = [rt.enqueue("naps") for _ in range(8)]
        stats: list[WorkerStats] = []
        worker = Worker(db, [wf], concurrency=8, durability="full", poll_seconds=0.05, log=lambda line: None,
                        stats_seconds=0.1, on_stats=stats.append)
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            wait_until(lambda: rt.counts().get("completed", 0) == 8, "8 runs completed", 120)
        finally:
            worker.stop()
            thread.join(60)
        assert all([t.output for t in rt.get(rid).tasks] == list(range(10)) for rid in runs)
    assert stats and max(s.in_flight for s in stats) == 8
    assert max(s.changes_per_transaction or 0 for s in stats) > 1  # boundaries of several runs shared one
    assert sum(s.boundaries_per_second * s.seconds for s in stats) == pytest.approx(80, abs=0.5)
