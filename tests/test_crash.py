"""Real processes: SIGKILL mid-step then resume, concurrent resumers racing for one run, and who owns
a run: on this host a live process (pid and start identity), elsewhere an unexpired lease. Every
test runs on both backends (the ``store_url`` fixture); the store is staged and read behind
relaypoint's back through tests/stores.py."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import procs
import pytest
import stores

from relaypoint import Runtime, RunStatus, StepStatus
from relaypoint.lease import HOST, process_start

APP = textwrap.dedent('''
    import os, time
    from relaypoint import Workflow

    wf = Workflow("chain")

    def _log(ctx):
        with open(os.environ["EXEC_LOG"], "a") as f:
            f.write(f"{ctx.step} {ctx.attempt} {os.getpid()}\\n")

    @wf.step
    def first(ctx):
        _log(ctx)
        return {"n": 1}

    @wf.step
    def slow(ctx):
        _log(ctx)
        time.sleep(float(ctx.input.get("sleep", 0)))
        return {"n": ctx.results["first"]["n"] + 1}

    @wf.step
    def last(ctx):
        _log(ctx)
        return {"n": ctx.results["slow"]["n"] + 1}

    workflows = [wf]
''')


@pytest.fixture
def app(tmp_path: Path, store_url: str) -> dict[str, str]:
    (tmp_path / "crashapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    env.update(EXEC_LOG=str(tmp_path / "exec.log"), PYTHONPATH=str(tmp_path))
    return {"db": store_url, "cwd": str(tmp_path), "log": env["EXEC_LOG"], "env": env}


def cli(app, *args: str, wait: bool = True):
    cmd = [sys.executable, "-m", "relaypoint", "--db", app["db"], *args]
    proc = subprocess.Popen(cmd, cwd=app["cwd"], env=app["env"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if wait:
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err
    return proc


def executions(app) -> list[str]:
    path = Path(app["log"])
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def wait_for_step(db: str, step: str, status: str = "running", timeout: float = 30.0) -> str:
    return procs.wait_step(db, step, status, timeout=timeout)["run_id"]


def wait_for_execution(app, step: str, timeout: float = 30.0) -> str:
    """The run whose ``step`` is running once its function has logged its start: the step is recorded
    running at a boundary that commits before the function is called, so a signal sent at the
    boundary alone may find it not yet begun (and the executions log without it)."""
    run_id = wait_for_step(app["db"], step, timeout=timeout)
    deadline = time.monotonic() + timeout
    while executions(app)[-1:] != [step]:
        assert time.monotonic() < deadline, f"step {step} did not begin executing"
        time.sleep(0.02)
    return run_id


def set_input(db: str, run_id: str, run_input: dict) -> None:
    """Change a run's stored input behind relaypoint's back (how long its step sleeps on a resume)."""
    stores.execute(db, "UPDATE run_inputs SET input = ? WHERE run_id = ?", json.dumps(run_input), run_id)


def test_sigkill_mid_step_then_resume_reruns_only_the_interrupted_step(app):
    proc = cli(app, "start", "chain", "--app", "crashapp:workflows", "--input", json.dumps({"sleep": 30}),
               wait=False)
    run_id = wait_for_execution(app, "slow")
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    with Runtime(app["db"], create=False) as rt:
        run = rt.get(run_id)
        assert run.status == RunStatus.INTERRUPTED
        assert [t.status for t in run.tasks] == [StepStatus.COMPLETED, StepStatus.INTERRUPTED, StepStatus.PENDING]
    set_input(app["db"], run_id, {"sleep": 0})

    code, out, err = cli(app, "resume", run_id, "--app", "crashapp:workflows")
    assert code == 0, err
    assert "completed" in out

    with Runtime(app["db"], create=False) as rt:
        run = rt.get(run_id)
        assert run.status == RunStatus.COMPLETED
        assert [t.output for t in run.tasks] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert [t.attempts for t in run.tasks] == [1, 2, 1]
        kinds = [e.kind for e in rt.events(run_id)]
    assert "interruption_detected" in kinds and kinds[-1] == "run_completed"
    assert executions(app) == ["first", "slow", "slow", "last"]


def test_concurrent_resumers_exactly_one_executes(app):
    proc = cli(app, "start", "chain", "--app", "crashapp:workflows", "--input", json.dumps({"sleep": 30}),
               wait=False)
    run_id = wait_for_execution(app, "slow")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    set_input(app["db"], run_id, {"sleep": 1.5})

    racers = [cli(app, "resume", run_id, "--app", "crashapp:workflows", wait=False) for _ in range(4)]
    results = [(p.wait(timeout=60), *p.communicate()) for p in racers]

    winners = [r for r in results if r[0] == 0]
    losers = [r for r in results if r[0] != 0]
    assert len(winners) == 1, results
    for code, out, err in losers:
        assert code == 1
        assert len(err.strip().splitlines()) == 1, err
        assert "being executed by" in err or "completed and cannot be resumed" in err, err
    for _, out, err in results:
        assert "locked" not in out + err and "Traceback" not in out + err
    assert executions(app) == ["first", "slow", "slow", "last"]
    with Runtime(app["db"], create=False) as rt:
        assert rt.get(run_id).status == RunStatus.COMPLETED


def test_owner_on_another_host_is_interrupted_only_after_its_lease_expires(app):
    code, _, err = cli(app, "start", "chain", "--app", "crashapp:workflows")
    assert code == 0, err
    with Runtime(app["db"], create=False) as rt:
        run_id = rt.list()[0].run_id
        for expires, expected in (("2999-01-01T00:00:00.000Z", RunStatus.RUNNING),
                                  ("2000-01-01T00:00:00.000Z", RunStatus.INTERRUPTED)):
            stores.execute(
                app["db"], "UPDATE runs SET status = 'running', lease_token = 't', lease_pid = 1, "
                "lease_host = 'elsewhere', lease_expires_at = ? WHERE run_id = ?", expires, run_id)
            assert rt.get(run_id).status == expected


def test_a_live_owner_on_this_host_keeps_its_run_past_its_lease_unless_its_pid_was_reused(app):
    code, _, err = cli(app, "start", "chain", "--app", "crashapp:workflows")
    assert code == 0, err
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_start(live.pid)
        assert started is not None and started.count(":") == 1  # "<boot id>:<start ticks>" on Linux
        boot, ticks = started.split(":")
        with Runtime(app["db"], create=False) as rt:
            run_id = rt.list()[0].run_id
            for recorded, expected in ((started, RunStatus.RUNNING),          # the owner itself
                                       (None, RunStatus.RUNNING),             # nothing recorded: the pid decides
                                       (f"{boot}:{int(ticks) + 1}", RunStatus.INTERRUPTED),  # pid reused
                                       (f"another-boot:{ticks}", RunStatus.INTERRUPTED)):    # before a reboot
                stores.execute(
                    app["db"], "UPDATE runs SET status = 'running', lease_token = 't', lease_pid = ?, "
                    "lease_pid_start = ?, lease_host = ?, lease_expires_at = '2000-01-01T00:00:00.000Z' "
                    "WHERE run_id = ?", live.pid, recorded, HOST, run_id)
                assert rt.get(run_id).status == expected, recorded
    finally:
        live.kill()
        live.wait()


def test_a_run_released_by_ctrl_c_is_not_charged_as_a_death(app, monkeypatch):
    proc = cli(app, "start", "chain", "--app", "crashapp:workflows", "--input", json.dumps({"sleep": 30}),
               wait=False)
    run_id = wait_for_execution(app, "slow")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err
    set_input(app["db"], run_id, {"sleep": 0})
    monkeypatch.setenv("EXEC_LOG", app["log"])
    spec = importlib.util.spec_from_file_location("crashapp_released", Path(app["cwd"]) / "crashapp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with Runtime(app["db"], module.workflows, create=False, max_recoveries=0) as rt:
        (seen,) = [e for e in rt.events(run_id) if e.kind == "interruption_detected"]
        assert seen.detail["cause"] == "released by its owner" and seen.detail["suspect"] is False
        assert rt.resume(run_id) == RunStatus.COMPLETED  # no death charged: not a poison pill
    assert executions(app) == ["first", "slow", "slow", "last"]


def test_postgres_a_boundary_sent_before_its_owner_was_killed_commits_fenced_and_runs_nothing_twice(
        tmp_path: Path, postgres_schema: str):
    # PostgreSQL's form of a kill inside a boundary (SQLite's: inside BEGIN IMMEDIATE ... COMMIT, rolled
    # back): the owner's commit_boundary statement is on its way, waiting for the schema's lock, when
    # the owner is SIGKILLed. The server runs a statement it has to its end and only then finds the
    # client gone, so the boundary commits after its owner's death, still fenced on its lease; a
    # resumer queued behind it then finds the next step interrupted, and no step runs twice.
    import psycopg

    from conftest import POSTGRES_URL
    from relaypoint.store.migrations.postgres import lock_key
    from relaypoint.store.postgres import LOCK_CLASS

    (tmp_path / "crashapp.py").write_text(APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    env.update(EXEC_LOG=str(tmp_path / "exec.log"), PYTHONPATH=str(tmp_path))
    app = {"db": f"{POSTGRES_URL}?schema={postgres_schema}", "cwd": str(tmp_path), "log": env["EXEC_LOG"], "env": env}
    waiting = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
               "AND classid::text::bigint = %s AND objid::text::bigint = %s AND objsubid = 2")
    keys = (LOCK_CLASS & 0xFFFFFFFF, lock_key(postgres_schema) & 0xFFFFFFFF)

    owner = cli(app, "start", "chain", "--app", "crashapp:workflows", "--input", json.dumps({"sleep": 1.0}),
                wait=False)
    run_id = wait_for_step(app["db"], "slow", timeout=60)
    with psycopg.connect(POSTGRES_URL) as holder:  # the schema's lock, as a writer elsewhere would hold it
        holder.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, lock_key(postgres_schema)))
        with psycopg.connect(POSTGRES_URL, autocommit=True) as watcher:
            procs.wait_until(lambda: watcher.execute(waiting, keys).fetchone()[0] >= 1, 60,
                             "the owner's boundary to wait for the lock")
            owner.send_signal(signal.SIGKILL)
            owner.wait()
            resumer = cli(app, "resume", run_id, "--app", "crashapp:workflows", wait=False)
            procs.wait_until(lambda: watcher.execute(waiting, keys).fetchone()[0] >= 2, 60,
                             "the resumer's claim to queue behind the boundary")
    out, err = resumer.communicate(timeout=60)  # the lock is released: the boundary, then the claim
    assert resumer.returncode == 0 and out.strip() == f"run {run_id} is completed", out + err

    assert executions(app) == ["first", "slow", "last"]  # slow's output was recorded by the dead owner
    with Runtime(app["db"], create=False) as rt:
        run = rt.get(run_id)
        assert run.status == RunStatus.COMPLETED
        assert [t.output for t in run.tasks] == [{"n": 1}, {"n": 2}, {"n": 3}]
        assert [t.attempts for t in run.tasks] == [1, 1, 2]
        cut = [e for e in rt.events(run_id) if e.kind == "interruption_detected"]
    assert [(e.step, e.detail["pid"]) for e in cut] == [("last", owner.pid)]
