"""Kills inside group commits: a ``relaypoint worker`` executing several runs at once is SIGKILLed
while one transaction holds the boundaries of several of them (SQLite: inside the group's
transaction, after its last change was written and before its COMMIT; PostgreSQL, whose server
groups the flushes itself: while commits of several runs are in flight), twice, then a last worker
finishes. Invariants: every run completes with the outputs of an uninterrupted run; every step ran;
no boundary acknowledged and then lost (a step whose process went on to the next step never runs
again); on SQLite the killed group left nothing written (its steps are not completed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from relaypoint import Runtime
from relaypoint.status import StepStatus

RUNS, STEPS = 6, 8

FLOW = r'''
import asyncio, os
from relaypoint import Workflow

EXEC_LOG = os.environ.get("EXEC_LOG")

wf = Workflow("grouped")
for i in range(%(steps)d):
    async def step(ctx, name=f"s{i}"):
        fd = os.open(EXEC_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{ctx.run_id} {name} {os.getpid()}\n".encode())
        os.close(fd)
        await asyncio.sleep(0.002)
        return f"{ctx.run_id}:{name}"
    wf.step(name=f"s{i}")(step)
workflows = [wf]
''' % {"steps": STEPS}

# The worker's app: the workflow, and test instrumentation saying when a transaction holds
# boundaries of several runs (holding it there on SQLite).
APP = r'''
import os, threading, time
from gflow import workflows

GROUP_LOG = os.environ["GROUP_LOG"]
DWELL = float(os.environ.get("GROUP_DWELL", "0.3"))


def append(path, line):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def members(changes):
    return " ".join(f"{c.run_id}:{','.join(str(e.seq) for e in c.ended)}" for c in changes if c.ended)


from relaypoint.store.postgres import PostgresStore
from relaypoint.store.sqlite import SqliteStore

_group = threading.local()
_commit_group, _apply = SqliteStore._commit_group, SqliteStore._apply


def commit_group(self, changes):
    _group.changes, _group.applied = changes, 0
    try:
        return _commit_group(self, changes)
    finally:
        _group.changes = None


def apply(self, change):
    done = _apply(self, change)
    changes = getattr(_group, "changes", None)
    if changes is not None:
        _group.applied += 1
        if _group.applied == len(changes) and sum(1 for c in changes if c.ended) >= 2:
            append(GROUP_LOG, f"G {os.getpid()} {members(changes)}")
            time.sleep(DWELL)  # before COMMIT: the kill lands here
    return done


_pg_commit = PostgresStore._commit_alone
_in_flight = []


def pg_commit(self, change):
    _in_flight.append(change)
    try:
        if change.ended and sum(1 for c in list(_in_flight) if c.ended) >= 2:
            append(GROUP_LOG, f"G {os.getpid()} {members(list(_in_flight))}")
        return _pg_commit(self, change)
    finally:
        _in_flight.remove(change)


SqliteStore._commit_group, SqliteStore._apply, PostgresStore._commit_alone = commit_group, apply, pg_commit
'''


def start_worker(db: str, tmp: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "relaypoint", "--durability", "full", "worker", "--app", "gapp:workflows",
         "--concurrency", str(RUNS), "--poll", "0.05"],
        cwd=tmp, env={**env, "RELAYPOINT_DB": db}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def kill_in_a_group(worker: subprocess.Popen, group_log: Path, timeout: float = 60) -> list[tuple[str, int]]:
    """SIGKILL ``worker`` once it logs a transaction holding boundaries of several runs; returns
    those (run id, step seq) boundaries."""
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        assert worker.poll() is None, f"the worker ended before a group formed: {worker.stderr.read()}"
        mine = [line.split() for line in (group_log.read_text().splitlines() if group_log.exists() else [])
                if line.split()[1] == str(worker.pid)]
        if mine:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            return [(m.split(":")[0], int(seq)) for m in mine[-1][2:] for seq in m.split(":")[1].split(",")]
        time.sleep(0.002)
    worker.kill()
    raise AssertionError("no transaction held boundaries of several runs")


def acknowledged_then_lost(exec_log: Path) -> list[str]:
    """Steps run again after the process that ran them went on to the run's next step (which it
    does only once the step's boundary was committed)."""
    acknowledged: set[tuple[str, str]] = set()
    last: dict[str, tuple[str, str]] = {}
    breaches = []
    for line in exec_log.read_text().splitlines():
        run, step, pid = line.split()
        if (run, step) in acknowledged:
            breaches.append(f"run {run}: {step} ran again (pid {pid}) after its boundary was acknowledged")
        before = last.get(run)
        if before is not None and before[1] == pid and int(step[1:]) == int(before[0][1:]) + 1:
            acknowledged.add((run, before[0]))
        last[run] = (step, pid)
    return breaches


def test_kills_inside_group_commits_lose_no_acknowledged_boundary_and_rerun_no_completed_step(db, tmp_path: Path):
    (tmp_path / "gflow.py").write_text(FLOW)
    (tmp_path / "gapp.py").write_text(APP)
    exec_log, group_log = tmp_path / "exec.log", tmp_path / "groups.log"
    env = {**os.environ, "EXEC_LOG": str(exec_log), "GROUP_LOG": str(group_log), "PYTHONPATH": str(tmp_path)}
    sys.path.insert(0, str(tmp_path))
    try:
        import gflow
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("gflow", None)
    with Runtime(db, gflow.workflows) as rt:
        runs = [rt.enqueue("grouped") for _ in range(RUNS)]
    sqlite = not db.startswith("postgresql")
    for _ in range(2):
        killed = kill_in_a_group(start_worker(db, tmp_path, env), group_log)
        with Runtime(db, [], create=False) as rt:
            status = {(rid, s.seq): s.status for rid in {r for r, _ in killed} for s in rt.steps(rid)}
        if sqlite:  # the group's transaction never committed: none of its boundaries was written
            assert all(status[b] != StepStatus.COMPLETED for b in killed), (killed, status)
    last = start_worker(db, tmp_path, {**env, "GROUP_DWELL": "0"})
    try:
        with Runtime(db, [], create=False) as rt:
            limit = time.monotonic() + 120
            while sum(1 for rid in runs if str(rt.get(rid, with_outputs=False).status) == "completed") < RUNS:
                assert time.monotonic() < limit and last.poll() is None, "the last worker did not complete the runs"
                time.sleep(0.05)
            outputs = {rid: [t.output for t in rt.get(rid).tasks] for rid in runs}
    finally:
        last.send_signal(signal.SIGTERM)
        _, err = last.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert outputs == {rid: [f"{rid}:s{i}" for i in range(STEPS)] for rid in runs}
    ran = {tuple(line.split()[:2]) for line in exec_log.read_text().splitlines()}
    assert ran == {(rid, f"s{i}") for rid in runs for i in range(STEPS)}
    assert acknowledged_then_lost(exec_log) == []
