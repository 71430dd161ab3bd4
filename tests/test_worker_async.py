"""The worker with async steps: ``worker --concurrency N`` keeps N runs in flight on one event loop,
and stops them gracefully. Real worker processes on both backends (the ``store_url`` fixture); the
runs are queued in this process, the steps log their starts to the sandbox's executions log."""

from __future__ import annotations

import importlib.util
import json
import signal
import time
from pathlib import Path

import procs
import pytest
from procs import Sandbox, finish, wait_until

APP = "asyncapp:workflows"
RUNS = 64
APP_SOURCE = r'''
"""Workflows for tests/test_worker_async.py."""
import asyncio, os, threading, time
from relaypoint import Workflow


def _log(ctx):
    """One line per execution: run, step, attempt, pid, and the thread it ran on."""
    path = os.environ.get("EXEC_LOG")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{ctx.run_id} {ctx.step} {ctx.attempt} {os.getpid()} {threading.get_native_id()}\n".encode())
        os.close(fd)


def _started() -> int:
    with open(os.environ["EXEC_LOG"]) as f:
        return sum(1 for _ in f)


together = Workflow("together")  # waits until input["runs"] steps have started (60 s at most), then 1 s more


@together.step
async def meet(ctx):
    _log(ctx)
    limit = time.monotonic() + 60
    while _started() < ctx.input["runs"] and time.monotonic() < limit:
        await asyncio.sleep(0.02)
    seen = _started()
    await asyncio.sleep(1)
    return seen


pair = Workflow("pair")  # an async step awaiting input["sleep"] s (first attempt only), then a quick one


@pair.step
async def wait(ctx):
    _log(ctx)
    if ctx.attempt == 1:
        await asyncio.sleep(float(ctx.input["sleep"]))
    return ctx.input["n"]


@pair.step
def after(ctx):
    _log(ctx)
    return ctx.results["wait"] + 1


workflows = [together, pair]
'''


@pytest.fixture
def box(tmp_path: Path, store_url: str) -> Sandbox:
    (tmp_path / "asyncapp.py").write_text(APP_SOURCE)
    return Sandbox(tmp_path, APP, db=store_url)


def queue(box: Sandbox, workflow: str, inputs: list[dict]) -> list[str]:
    """Queue one run of ``workflow`` per input, through an in-process Runtime with the app loaded."""
    from relaypoint import Runtime

    spec = importlib.util.spec_from_file_location(f"asyncapp_{abs(hash(box.dir))}", box.dir / "asyncapp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with Runtime(str(box.db), module.workflows) as rt:
        return [rt.enqueue(workflow, i) for i in inputs]


def starts(box: Sandbox) -> list[tuple[str, ...]]:
    """(run, step, attempt, pid, thread) of each logged execution, in order."""
    return box.executions()


def stop(worker) -> procs.Done:
    procs.kill(worker, signal.SIGTERM)
    done = finish(worker, 60)
    assert done.code == 0 and not done.leaks(), done.text
    return done


def test_sixty_four_async_runs_are_in_flight_at_once_on_one_event_loop(box):
    runs = queue(box, "together", [{"runs": RUNS}] * RUNS)
    worker = box.spawn("worker", "--app", APP, "--concurrency", str(RUNS), "--poll", "0.1")
    try:
        wait_until(lambda: all(procs.run_status(box.db, r) == "completed" for r in runs), 120,
                   "every queued run to complete")
    finally:
        done = stop(worker)
    # each step waited for all 64 to have started: each saw them all, so all were in flight at once
    assert {procs.outputs(box.db, r)["meet"] for r in runs} == {str(RUNS)}, done.err
    rows = [procs.step_row(box.db, r, "meet") for r in runs]
    assert max(procs.parse_utc(s["started_at"]) for s in rows) < min(procs.parse_utc(s["finished_at"]) for s in rows)
    logged = starts(box)
    assert sorted(r for r, *_ in logged) == sorted(runs)  # each executed once
    assert {(pid, thread) for *_, pid, thread in logged} == {(str(worker.pid), logged[0][4])}  # one loop's thread
    assert all(f"run {r}: completed" in done.err for r in runs)


def test_sigterm_finishes_the_async_steps_in_flight_and_releases_their_runs(box):
    runs = queue(box, "pair", [{"n": i, "sleep": 2.0} for i in range(8)])
    worker = box.spawn("worker", "--app", APP, "--concurrency", "8", "--poll", "0.1")
    try:
        wait_until(lambda: len(starts(box)) == 8, 60, "the eight async steps to be in flight")
    except BaseException:
        procs.kill(worker)
        finish(worker)
        raise
    procs.kill(worker, signal.SIGTERM)
    sent = time.monotonic()
    done = finish(worker, 60)
    took = time.monotonic() - sent
    assert done.code == 0 and not done.leaks(), done.text
    assert took < 2.0 + 3.0, f"the worker took {took:.1f} s to stop"  # the steps' 2 s, not another run's
    assert "stopping" in done.err
    for rid in runs:
        row = procs.run_row(box.db, rid)
        assert row["status"] == "queued" and row["lease_token"] is None and row["current_step"] == "after", row
        assert procs.step_row(box.db, rid, "wait")["status"] == "completed"
        assert procs.step_row(box.db, rid, "after")["status"] == "pending"
        released = [e for e in procs.events(box.db, rid) if e["kind"] == "released"]
        assert len(released) == 1 and released[0]["step"] == "after"
        assert f"run {rid}: queued" in done.err
    # another worker continues each where it stopped: no wait step runs again
    again = box.spawn("worker", "--app", APP, "--concurrency", "8", "--poll", "0.1")
    try:
        wait_until(lambda: all(procs.run_status(box.db, r) == "completed" for r in runs), 60, "every run to complete")
    finally:
        stop(again)
    for i, rid in enumerate(runs):
        assert [(s, a) for r, s, a, *_ in starts(box) if r == rid] == [("wait", "1"), ("after", "1")]
        assert {k: json.loads(v) for k, v in procs.outputs(box.db, rid).items()} == {"wait": i, "after": i + 1}


def test_a_recovery_among_async_runs_in_flight_waits_for_their_release_then_executes_alone(box):
    runs = queue(box, "pair", [{"n": i, "sleep": 5.0} for i in range(3)])
    worker = box.spawn("worker", "--app", APP, "--concurrency", "4", "--poll", "0.1")
    try:
        wait_until(lambda: len(starts(box)) == 3, 60, "the three async steps to be in flight")
        # meanwhile a `start` process dies in its step: the worker's next sweep finds that run interrupted
        dying = box.spawn("start", "pair", "--app", APP, "--input", json.dumps({"n": 9, "sleep": 60}))
        (orphan,) = wait_until(lambda: [r for r, *_ in starts(box) if r not in runs], 60, "the orphan's step")
        procs.kill(dying)
        finish(dying)
        wait_until(lambda: all(procs.run_status(box.db, r) == "completed" for r in (*runs, orphan)), 60,
                   "every run to complete")
    finally:
        done = stop(worker)
    def at(rid: str, kind: str) -> list:
        return [procs.parse_utc(e["at"]) for e in procs.events(box.db, rid) if e["kind"] == kind]

    reason = f"making way for the recovery of run {orphan}, executed alone"
    for rid in runs:
        released = [json.loads(e["detail"])["reason"] for e in procs.events(box.db, rid) if e["kind"] == "released"]
        assert released == [reason], (rid, released)  # at the boundary after its 5 s step, which was kept
        assert [(s, a) for r, s, a, *_ in starts(box) if r == rid] == [("wait", "1"), ("after", "1")]
    # the orphan was claimed once the three were released, and executed alone up to its boundary
    (recovered, continued), (alone_until,) = at(orphan, "resumed"), at(orphan, "released")
    assert recovered < alone_until < continued
    assert max(t for rid in runs for t in at(rid, "released")) <= recovered
    assert all(at(rid, "resumed")[1] >= alone_until for rid in runs)
    [alone] = [e for e in procs.events(box.db, orphan) if e["kind"] == "released"]
    assert json.loads(alone["detail"])["reason"].startswith("recovered alone up to this boundary")
    assert [(s, a) for r, s, a, *_ in starts(box) if r == orphan] == [("wait", "1"), ("wait", "2"), ("after", "1")]
    assert f"run {orphan}: recovering it alone up to its next boundary" in done.err
