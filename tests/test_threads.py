"""One :class:`Runtime` shared between threads (what ``asyncio.to_thread`` from a web app does): every
public operation may be called from many threads at once, on both backends, and each run's record
comes out as if its operations had been made one after another.

Each test runs on SQLite and PostgreSQL (conftest's ``store_url``). Threads are real threads
released together by a barrier; steps sleep a little so that their runs' boundaries interleave.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from relaypoint import Runtime, StoreError, Workflow
from relaypoint.status import CheckpointKind, Decision, EventKind, RunStatus, StepStatus
from relaypoint.store import Change, NewEvent
from relaypoint.store.url import parse

STEP_SECONDS = 0.002
"""How long each step sleeps: long enough for other threads' boundaries to land between a run's."""


class Review:
    """``review``: draft -> check (an approval gate) -> publish, each output a function of the input;
    ``executions`` counts each (run, step) executed, across threads."""

    def __init__(self, gated: bool = True) -> None:
        self.wf = Workflow("review")
        self.executions: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

        @self.wf.step
        def draft(ctx):
            return self._ran(ctx, {"text": f"about {ctx.input['topic']}"})

        @self.wf.step(approval=gated)
        def check(ctx):
            return self._ran(ctx, {"checked": ctx.results["draft"]["text"].upper()})

        @self.wf.step
        def publish(ctx):
            return self._ran(ctx, {"title": ctx.results["check"]["checked"] + "!", "key": ctx.idempotency_key})

    def _ran(self, ctx: Any, output: Any) -> Any:
        with self._lock:
            self.executions[(ctx.run_id, ctx.step)] += 1
        time.sleep(STEP_SECONDS)
        return output


def together(count: int, work) -> list[Any]:
    """Call ``work(i)`` on ``count`` threads released together; their results, in order. Re-raises
    the first exception a thread raised (after every thread ended)."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as e:  # re-raised below, once every thread ended
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), name=f"caller-{i}") for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), f"{t.name} still running after 120 s"
    if errors:
        raise errors[0]
    return results


def reference_outputs(tmp_path: Path, topics: list[str]) -> dict[str, dict[str, Any]]:
    """topic -> the outputs of an uninterrupted run of ``review`` with that topic, each made alone,
    one after another, in a store of their own (idempotency keys left out: they name the run)."""
    flow = Review()
    with Runtime(f"sqlite:///{tmp_path / 'reference.db'}", [flow.wf]) as rt:
        expected = {}
        for topic in topics:
            rid = rt.start("review", {"topic": topic})
            rt.approve(rid)
            assert rt.resume(rid) == RunStatus.COMPLETED
            expected[topic] = outputs(rt, rid)
        return expected


def outputs(rt: Runtime, run_id: str) -> dict[str, Any]:
    out = {t.name: t.output for t in rt.get(run_id).tasks}
    out["publish"] = {k: v for k, v in out["publish"].items() if k != "key"}
    return out


def check_record(rt: Runtime, flow: Review, run_id: str, expected: dict[str, Any], *, copied: tuple[str, ...] = (),
                 pauses: int = 1) -> None:
    """Run ``run_id`` is completed with every step completed once, outputs ``expected``, and
    ``pauses`` approval checkpoints, each decided approved once. ``copied``: steps a fork copied
    from its parent (never executed in this run)."""
    run = rt.get(run_id)
    assert run.status == RunStatus.COMPLETED, (run_id, run.status, run.error)
    assert [(t.name, t.status, t.attempts) for t in run.tasks] == [
        (name, StepStatus.COMPLETED, 1) for name in ("draft", "check", "publish")]
    assert outputs(rt, run_id) == expected
    assert run.tasks[-1].output["key"] == f"{run_id}/publish"
    events = rt.events(run_id)
    completed = Counter(e.step for e in events if e.kind == EventKind.STEP_COMPLETED)
    executed = {name for name in ("draft", "check", "publish") if name not in copied}
    assert completed == Counter(executed), (run_id, completed)
    assert {step for (rid, step) in flow.executions if rid == run_id} == executed
    assert all(flow.executions[(run_id, step)] == 1 for step in executed), flow.executions
    assert sum(e.kind == EventKind.RUN_COMPLETED for e in events) == 1
    gates = [c for c in rt.store.checkpoints(run_id) if c.kind == CheckpointKind.APPROVAL]
    assert [(c.step, c.decision) for c in gates] == [("check", Decision.APPROVED)] * pauses, gates
    assert sum(e.kind == EventKind.APPROVED for e in events) == pauses
    assert sum(e.kind == EventKind.PAUSED for e in events) == pauses


@pytest.mark.parametrize("threads", [5, 8])
def test_threads_starting_runs_on_one_runtime_each_complete_theirs(store_url, threads):
    flow = Review(gated=False)  # each start runs to the end
    with Runtime(store_url, [flow.wf]) as rt:
        run_ids = together(threads, lambda i: rt.start("review", {"topic": f"t{i}"}))
        for i, rid in enumerate(run_ids):
            run = rt.get(rid)
            assert run.status == RunStatus.COMPLETED, (rid, run.status, run.error)
            assert [t.status for t in run.tasks] == [StepStatus.COMPLETED] * 3
            assert run.tasks[-1].output["title"] == f"ABOUT T{i}!"
        assert all(n == 1 for n in flow.executions.values()) and len(flow.executions) == 3 * threads


ROUNDS = 2
"""Runs each thread of the mixed test starts (each also forked once)."""


def mixed_operations(rt: Runtime, i: int, handoff: queue.Queue) -> list[tuple[str, str, tuple[str, ...], int]]:
    """Thread ``i``'s share of the mixed test: start a run (it pauses at its gate) and hand it over,
    take a run some thread handed over, read it (get, list, the review queue, events, counts),
    approve it, resume it to the end, fork it from the gate, resume the fork to its own gate,
    approve, resume it to the end; ``ROUNDS`` times. Returns (run id, topic, steps copied, pauses)
    of every run it took and forked."""
    made = []
    for k in range(ROUNDS):
        topic = f"t{i}-{k}"
        handoff.put((rt.start("review", {"topic": topic}), topic))
        rid, topic = handoff.get(timeout=60)  # its own, or another thread's
        assert rt.get(rid).status == RunStatus.AWAITING_APPROVAL
        assert rid in {r.run_id for r in rt.list(status="awaiting_approval", limit=1000)}
        assert any(p.run_id == rid for p in rt.pending_decisions(limit=1000))
        rt.list(limit=20)
        rt.counts()
        rt.approve(rid, by=f"thread-{i}", checkpoint_id=rt.get(rid).pending.checkpoint_id)
        assert rt.resume(rid) == RunStatus.COMPLETED
        fid = rt.fork(rid, from_step="check")
        assert rt.get(fid, with_outputs=False).status == RunStatus.QUEUED
        assert rt.resume(fid) == RunStatus.AWAITING_APPROVAL
        rt.events(fid)
        rt.approve(fid, by=f"thread-{i}", checkpoint_id=rt.get(fid).pending.checkpoint_id)
        assert rt.resume(fid) == RunStatus.COMPLETED
        assert rt.step_output(fid, "draft") == rt.step_output(rid, "draft")
        made += [(rid, topic, (), 1), (fid, topic, ("draft",), 1)]
    return made


def check_all(rt: Runtime, flow: Review, made: list[tuple[str, str, tuple[str, ...], int]], tmp_path: Path) -> None:
    """Every run made has the record :func:`check_record` asks for, and the store holds no other."""
    expected = reference_outputs(tmp_path, sorted({topic for _, topic, _, _ in made}))
    for rid, topic, copied, pauses in made:
        check_record(rt, flow, rid, expected[topic], copied=copied, pauses=pauses)
    assert sorted(r.run_id for r in rt.list(limit=1000)) == sorted(rid for rid, *_ in made)
    assert rt.counts() == {"completed": len(made)}


THREADS = 8


def test_eight_threads_of_mixed_operations_on_one_runtime_leave_every_run_recorded_once(store_url, tmp_path):
    flow = Review()
    with Runtime(store_url, [flow.wf]) as rt:
        handoff: queue.Queue = queue.Queue()
        made = [run for runs in together(THREADS, lambda i: mixed_operations(rt, i, handoff)) for run in runs]
        assert len(made) == THREADS * ROUNDS * 2
        check_all(rt, flow, made, tmp_path)


def test_a_web_apps_to_thread_calls_share_one_runtime(store_url, tmp_path):
    """What an async web app does: each request's blocking call goes to asyncio's thread pool."""
    flow = Review()

    async def app(rt: Runtime) -> list[Any]:
        handoff: queue.Queue = queue.Queue()
        return await asyncio.gather(*(asyncio.to_thread(mixed_operations, rt, i, handoff) for i in range(THREADS)))

    with Runtime(store_url, [flow.wf]) as rt:
        made = [run for runs in asyncio.run(app(rt)) for run in runs]
        check_all(rt, flow, made, tmp_path)


def test_threads_writing_at_once_each_get_their_turns_throughout(store_url):
    """No writer thread waits while the others take turn after turn: on SQLite, a writer kept out
    by SQLite's own lock retries by sleeping (up to 100 ms at a time) and was seen kept out for
    seconds, finishing last, while threads that came later finished first."""
    flow = Review(gated=False)
    with Runtime(store_url, [flow.wf]) as rt:
        rid = rt.start("review", {"topic": "x"})
        store, start = rt.store, time.perf_counter()

        def write(i: int) -> float:
            for _ in range(100):
                store.commit(Change(rid, rt.clock(), run=None, events=[NewEvent("noted", actor=f"thread-{i}")]))
            return time.perf_counter()

        finished = together(THREADS, write)
        total = max(finished) - start
        assert min(finished) - start > total / 2, sorted(round(f - start, 3) for f in finished)
        assert sum(e.kind == "noted" for e in rt.events(rid)) == THREADS * 100


# ---- connections: one per thread, all closed by close() --------------------------------------------


def open_connections(store_url: str, *, sidecars: bool = False) -> int:
    """The store's connections open now: on SQLite this process's descriptors of the store's file
    (one per connection; ``sidecars``: of its -wal and -shm too, which SQLite keeps while any
    connection to the file is open); on PostgreSQL the server's client connections named for the
    store's schema (this process's store connections, listeners and heartbeat pool: relaypoint names
    them all so)."""
    where = parse(store_url)
    if where.backend == "postgres":
        import psycopg

        with psycopg.connect(where.conninfo, autocommit=True) as conn:
            return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                                "AND backend_type = 'client backend'", (f"relaypoint-{where.schema}",)).fetchone()[0]
    path = str(Path(where.path).resolve())
    files = {path + suffix for suffix in ("", "-wal", "-shm")} if sidecars else {path}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") in files
        except OSError:  # the descriptor listing the directory itself, closed meanwhile
            pass
    return count


def settled(store_url: str, count: int) -> int:
    """:func:`open_connections`, once it is ``count`` or after 10 s (a PostgreSQL backend leaves
    pg_stat_activity a moment after its client closed the connection)."""
    deadline = time.monotonic() + 10
    while (now := open_connections(store_url)) != count and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


def test_close_closes_every_threads_connection_and_the_store_refuses_use_after(store_url):
    flow = Review(gated=False)
    with Runtime(store_url, [flow.wf]) as rt:
        rid = rt.start("review", {"topic": "first"})
        alone = open_connections(store_url)
        assert alone >= 1
        together(THREADS, lambda i: rt.start("review", {"topic": f"t{i}"}) and rt.list(limit=5))
        assert open_connections(store_url) > alone  # the threads had connections of their own
        rt.data_version()  # the console's check opens one more (SQLite) or a listener (PostgreSQL)
    assert settled(store_url, 0) == 0
    assert open_connections(store_url, sidecars=True) == 0
    with pytest.raises(StoreError, match=r"was closed by this process; open it again to use it$"):
        rt.get(rid)
    with pytest.raises(StoreError, match="was closed"):
        together(2, lambda i: rt.start("review", {"topic": "late"}))
    assert open_connections(store_url, sidecars=True) == 0
    with Runtime(store_url, [flow.wf]) as again:  # nothing was lost
        assert again.get(rid).status == RunStatus.COMPLETED and len(again.list(limit=100)) == THREADS + 1


def test_threads_that_end_leave_their_connection_to_the_next_thread(store_url):
    """A thread pool's turnover, or a thread per request, does not open a connection per thread."""
    flow = Review(gated=False)
    with Runtime(store_url, [flow.wf]) as rt:
        rt.start("review", {"topic": "first"})
        alone = open_connections(store_url)
        for i in range(12):  # one thread after another, each ended before the next starts
            together(1, lambda _: rt.start("review", {"topic": f"t{i}"}))
        assert settled(store_url, alone + 1) == alone + 1
        assert all(r.status == RunStatus.COMPLETED for r in rt.list(limit=100))
