"""Definition drift (a run recorded under one definition, resumed under another), runs whose workflow
or steps the loaded code does not know, and deletion (delete, prune, forks of deleted runs)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import stores
from helpers import (APP, DB, FakeClock, Flow, app_workflows, committed_writes, dead_pid, ids, one_line_error,
                     relaypoint, rows, set_owner, sql, write_app)
from relaypoint import (DriftError, RefusedTransition, RunStatus, Runtime, StepStatus, StoreError, UnknownRun,
                        UnknownWorkflow, Workflow)

# ---- drift ---------------------------------------------------------------------------------------

APPROVAL = {"approval": True}
V1 = ("a", ("b", APPROVAL), "c")

# (v2's steps, the change DriftError lists, steps that run on --allow-drift, steps dropped)
DRIFTS = [
    pytest.param(("a", ("b", APPROVAL), "x", "c"), "added x", ["x", "c"], [], id="added"),
    pytest.param(("a", ("b", APPROVAL)), "removed c", [], ["c"], id="removed"),
    pytest.param(("a", ("b", APPROVAL), "d"), "renamed c -> d", ["d"], ["c"], id="renamed"),
    pytest.param(("a", ("b", APPROVAL), ("c", {"retries": 2})), "options changed for c (retries: 0 -> 2)", ["c"], [],
                 id="options-changed"),
    pytest.param((("a", {"on_orphan": "hold"}), ("b", APPROVAL), "c"), "options changed for a (on_orphan: \"retry\" -> \"hold\")",
                 ["c"], [], id="options-of-a-completed-step"),
    pytest.param(("a", "c"), "removed b", ["c"], ["b"], id="completed-step-removed"),
    pytest.param(("a", ("b", APPROVAL), "x", "d"), "added d; renamed c -> x", ["x", "d"], ["c"],
                 id="added-and-renamed"),
    pytest.param((("b", APPROVAL), "a", "c"), "steps reordered", ["c"], [], id="reordered"),
]


def names(steps: tuple) -> list[str]:
    return [s if isinstance(s, str) else s[0] for s in steps]


def recorded_under_v1(db: str) -> tuple[Flow, str]:
    """A run of v1 that completed a and b, was approved at b, and is queued to go on with c."""
    v1 = Flow(*V1).on("a", lambda ctx: {"a": 1}).on("b", lambda ctx: {"b": ctx.results["a"]["a"] + 1})
    with Runtime(db, [v1.wf]) as rt:
        rid = rt.start("flow")
        rt.approve(rid, by="ana")
        assert rt.get(rid).status == RunStatus.QUEUED
    return v1, rid


@pytest.mark.parametrize(("v2_steps", "change", "runs", "dropped"), DRIFTS)
def test_resuming_after_the_definition_changed_is_refused_listing_the_changes(
        db: str, v2_steps: tuple, change: str, runs: list[str], dropped: list[str]) -> None:
    _, rid = recorded_under_v1(db)
    v2 = Flow(*v2_steps)
    before = rows(db, rid)
    with Runtime(db, [v2.wf], create=False) as rt:
        with pytest.raises(DriftError) as refused:
            rt.resume(rid)
    assert str(refused.value) == (f"workflow 'flow' changed since run {rid} was recorded ({change}); fork the run, "
                                  "or resume with --allow-drift to map completed steps by name")
    assert rows(db, rid) == before
    assert sum(v2.calls.values()) == 0


@pytest.mark.parametrize(("v2_steps", "change", "runs", "dropped"), DRIFTS)
def test_allow_drift_keeps_completed_steps_by_name_and_runs_the_rest(
        db: str, v2_steps: tuple, change: str, runs: list[str], dropped: list[str]) -> None:
    v1, rid = recorded_under_v1(db)
    v2 = Flow(*v2_steps)
    with Runtime(db, [v2.wf], create=False) as rt:
        kept_before = {t.name: t for t in rt.get(rid).tasks if t.status == StepStatus.COMPLETED}

        assert rt.resume(rid, allow_drift=True) == RunStatus.COMPLETED

        run = rt.get(rid)
        assert [t.name for t in run.tasks] == names(v2_steps)
        assert all(t.status == StepStatus.COMPLETED for t in run.tasks)
        assert run.steps_done == run.steps_total == len(v2_steps)
        assert run.definition == v2.wf.definition()
        assert sorted(v2.calls) == sorted(runs) and all(n == 1 for n in v2.calls.values())
        assert (v1.calls["a"], v1.calls["b"]) == (1, 1)  # kept by name: never run again
        for t in run.tasks:
            if t.name in kept_before:
                old = kept_before[t.name]
                assert (t.output, t.attempts, t.idempotency_key) == (old.output, old.attempts, old.idempotency_key)
        drift = [e for e in rt.events(rid) if e.kind == "drift_allowed"]
        assert len(drift) == 1 and drift[0].detail == {"change": change, "dropped": dropped}
        for name in runs:  # new steps saw the kept outputs of the steps before them
            seen = v2.seen[name][0].results
            assert {k: v for k, v in seen.items() if k in kept_before} == {
                k: kept_before[k].output for k in seen if k in kept_before}


def test_allow_drift_without_drift_records_nothing_extra(db: str) -> None:
    _, rid = recorded_under_v1(db)
    with Runtime(db, [Flow(*V1).wf], create=False) as rt:
        assert rt.resume(rid, allow_drift=True) == RunStatus.COMPLETED
        assert "drift_allowed" not in [e.kind for e in rt.events(rid)]


APP_TEMPLATE = textwrap.dedent('''
    import os
    from relaypoint import Workflow

    flow = Workflow("flow")

    def make(name):
        def run(ctx):
            with open(os.environ["EXEC_LOG"], "a") as f:
                f.write(name + "\\n")
            return {{"step": name, "seen": sorted(ctx.results)}}
        return run

    for spec in {steps!r}:
        name, options = (spec, {{}}) if isinstance(spec, str) else spec
        flow.step(name=name, **options)(make(name))

    workflows = [flow]
''')


@pytest.mark.parametrize(("v2_steps", "change"), [
    pytest.param(("a", ("b", APPROVAL), "x", "c"), "added x", id="added"),
    pytest.param(("a", ("b", APPROVAL), "d"), "renamed c -> d", id="renamed"),
])
def test_cli_drift_is_one_line_and_allow_drift_maps_by_name(db: str, tmp_path: Path, v2_steps: tuple,
                                                            change: str) -> None:
    (tmp_path / "flows_v1.py").write_text(APP_TEMPLATE.format(steps=V1))
    (tmp_path / "flows_v2.py").write_text(APP_TEMPLATE.format(steps=v2_steps))
    log = tmp_path / "exec.log"
    env = {"EXEC_LOG": str(log)}
    started = relaypoint(tmp_path, "start", "flow", "--app", "flows_v1:workflows", env=env, db=db)
    assert started.returncode == 0, started.stderr
    rid = started.stdout.strip()
    assert relaypoint(tmp_path, "approve", rid[:6], "--by", "ana", db=db).returncode == 0

    line = one_line_error(relaypoint(tmp_path, "resume", rid, "--app", "flows_v2:workflows", env=env, db=db))
    assert f"({change})" in line and "--allow-drift" in line
    assert log.read_text().split() == ["a", "b"]

    resumed = relaypoint(tmp_path, "resume", rid, "--app", "flows_v2:workflows", "--allow-drift", env=env,
                         db=db)
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {rid} is completed" in resumed.stdout
    ran = log.read_text().split()
    assert ran[:2] == ["a", "b"] and ran[2:] == [n for n in names(v2_steps) if n not in ("a", "b")]
    events = json.loads(relaypoint(tmp_path, "events", rid, "--json", db=db).stdout)
    drift = [e for e in events if e["kind"] == "drift_allowed"]
    assert len(drift) == 1 and drift[0]["detail"]["change"] == change
    shown = json.loads(relaypoint(tmp_path, "show", rid, "--json", db=db).stdout)
    assert [t["name"] for t in shown["tasks"]] == names(v2_steps)


# ---- runs whose workflow or steps the loaded code does not know ----------------------------------


def ghost_workflow() -> Workflow:
    wf = Workflow("ghost")
    wf.step(name="haunt", approval=True)(lambda ctx: {"boo": ctx.input.get("who", "?")})
    wf.step(name="vanish")(lambda ctx: {"gone": True})
    return wf


@pytest.fixture
def ghost_store(db: str, tmp_path: Path) -> tuple[Path, str, str]:
    """A store holding a paused run of ``ghost``, a workflow no app on disk defines: the directory
    with the app, the store's URL, the run id."""
    write_app(tmp_path)
    with Runtime(db, [ghost_workflow()], id_factory=ids("ghost000")) as rt:
        rt.start("ghost", {"who": "nobody"})
    return tmp_path, db, "ghost000"


def test_cli_shows_a_run_whose_workflow_no_loaded_code_defines(ghost_store) -> None:
    cwd, db, rid = ghost_store
    for args in (["list"], ["list", "--json"], ["show", rid], ["show", rid, "--json"], ["events", rid],
                 ["events", rid, "--json"]):
        result = relaypoint(cwd, *args, db=db)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr
    shown = json.loads(relaypoint(cwd, "show", rid, "--json", db=db).stdout)
    assert shown["workflow"] == "ghost" and [t["name"] for t in shown["tasks"]] == ["haunt", "vanish"]
    assert shown["tasks"][0]["output"] == {"boo": "nobody"}
    assert relaypoint(cwd, "approve", rid, "--by", "ana", db=db).returncode == 0  # deciding needs no code


def test_resume_with_an_app_lacking_the_workflow_is_one_line(ghost_store) -> None:
    cwd, db, rid = ghost_store
    assert relaypoint(cwd, "approve", rid, "--by", "ana", db=db).returncode == 0
    before = rows(db, rid)
    line = one_line_error(relaypoint(cwd, "resume", rid, "--app", APP, db=db))
    assert line == ("Error: workflow 'ghost' is not defined by the loaded app (it defines: ask, boom, review, "
                    "simple); pass the --app that defines it")
    assert rows(db, rid) == before
    missing = relaypoint(cwd, "resume", rid, db=db)  # no --app at all: a usage error
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and "--app" in missing.stderr
    with Runtime(db, create=False) as rt:
        with pytest.raises(UnknownWorkflow, match="resuming needs the definition of workflow 'ghost'"):
            rt.resume(rid)
    assert rows(db, rid) == before


def test_console_data_on_a_run_whose_workflow_is_unknown(ghost_store) -> None:
    cwd, db, rid = ghost_store
    from relaypoint.tui.data import PageKind, RefreshRequest, RunQuery, load_detail, load_output, read_page, read_refresh

    with Runtime(db, app_workflows(), create=False) as rt:
        page = read_page(rt, RunQuery(), PageKind.FIRST)
        assert [r.workflow for r in page.runs] == ["ghost"]
        detail = load_detail(rt, rid)
        assert detail.run.workflow == "ghost" and detail.run.pending is not None
        assert load_output(rt, detail.run, detail.run.tasks[0]).value == {"boo": "nobody"}
        assert [e.kind for e in detail.events][-1] == "paused"
        read = read_refresh(rt, 1, RefreshRequest(RunQuery(), version=None, sweep=True, window=None,
                                                  window_stale=False, top=None, first_page=True, selected=rid))
        assert read.state.counts == {"awaiting_approval": 1} and read.detail.run.run_id == rid
        with pytest.raises(RefusedTransition, match="awaiting approval"):
            rt.check_resumable(rid)


def test_resuming_a_run_with_a_step_the_code_does_not_define_is_one_line(db: str, tmp_path: Path) -> None:
    write_app(tmp_path)
    with Runtime(db, app_workflows(), id_factory=ids("review00")) as rt:
        rt.start("review", {"topic": "x"})
        rt.approve("review00", by="ana")
    sql(db, "UPDATE steps SET name = 'mystery' WHERE run_id = 'review00' AND name = 'publish'")
    shown = relaypoint(tmp_path, "show", "review00", db=db)
    assert shown.returncode == 0 and "mystery" in shown.stdout
    before = rows(db, "review00")
    line = one_line_error(relaypoint(tmp_path, "resume", "review00", "--app", APP, db=db))
    assert "mystery" in line
    assert rows(db, "review00") == before


# ---- deletion ------------------------------------------------------------------------------------

TABLES = ("runs", "run_inputs", "steps", "outputs", "checkpoints", "events", "calls")


def counts(db: str, rid: str) -> dict[str, int]:
    return {t: sql(db, f"SELECT count(*) FROM {t} WHERE run_id = ?", rid)[0][0] for t in TABLES}


@pytest.fixture
def two_runs(db: str, tmp_path: Path) -> tuple[str, str, str]:
    """In ``db`` (the app in ``tmp_path``): a paused review run (``victim0``, with checkpoints and
    events) and a completed one (``bystand``)."""
    write_app(tmp_path)
    with Runtime(db, app_workflows(), id_factory=ids("victim00", "bystand0")) as rt:
        rt.start("review", {"topic": "x"})
        rt.start("review", {"topic": "y"})
        rt.approve("bystand0", by="ana")
        rt.resume("bystand0")
    return db, "victim00", "bystand0"


def test_delete_removes_every_row_of_the_run_in_one_transaction(two_runs) -> None:
    db, victim, bystander = two_runs
    assert all(n > 0 for n in counts(db, victim).values())
    kept = rows(db, bystander)
    trace: list[str] = []
    with Runtime(db, create=False) as rt:
        if not stores.is_postgres(db):  # SQLite's statement trace shows the transactions
            rt.store.trace(trace.append)
        assert rt.delete(victim[:5]) == victim  # a unique prefix is enough
    if not stores.is_postgres(db):
        writes = committed_writes(trace)
        assert len(writes) == 1
        deleted_from = {s.split()[2] for s in writes[0] if s.upper().startswith("DELETE")}
        assert deleted_from == {*TABLES, "definitions"}  # a definition goes with the last run that has it
    assert counts(db, victim) == dict.fromkeys(TABLES, 0)
    assert rows(db, bystander) == kept
    with Runtime(db, create=False) as rt:
        assert rt.get(bystander).definition == app_workflows()[0].definition()  # shared with the victim: kept
        with pytest.raises(UnknownRun):
            rt.get(victim)


def test_cli_delete_says_what_it_did(two_runs, tmp_path: Path) -> None:
    db, victim, bystander = two_runs
    kept = rows(db, bystander)
    deleted = relaypoint(tmp_path, "delete", victim, db=db)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == f"deleted run {victim}"
    assert counts(db, victim) == dict.fromkeys(TABLES, 0)
    assert rows(db, bystander) == kept
    line = one_line_error(relaypoint(tmp_path, "delete", victim, db=db))
    assert repr(victim) in line
    line = one_line_error(relaypoint(tmp_path, "show", victim, db=db))
    assert repr(victim) in line


def test_delete_failing_midway_leaves_every_row(two_runs, tmp_path: Path) -> None:
    """The runs row is deleted last; make that statement fail: the events, checkpoints and steps
    already deleted in the same transaction come back."""
    db, victim, bystander = two_runs
    before = {rid: rows(db, rid) for rid in (victim, bystander)}
    if stores.is_postgres(db):
        sql(db, "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused'; END $$")
        sql(db, "CREATE TRIGGER refuse_run_delete BEFORE DELETE ON runs FOR EACH ROW EXECUTE FUNCTION refuse()")
    else:
        sql(db, "CREATE TRIGGER refuse_run_delete BEFORE DELETE ON runs BEGIN SELECT RAISE(ABORT, 'refused'); END")
    with Runtime(db, create=False) as rt:
        with pytest.raises(StoreError, match="refused"):
            rt.delete(victim)
        if not stores.is_postgres(db):
            assert not rt.store.conn.in_transaction
        assert rt.get(victim).run_id == victim  # the store is usable after the rollback
    assert {rid: rows(db, rid) for rid in (victim, bystander)} == before
    result = relaypoint(tmp_path, "delete", victim, db=db)
    one_line_error(result)
    assert {rid: rows(db, rid) for rid in (victim, bystander)} == before
    sql(db, "DROP TRIGGER refuse_run_delete" + (" ON runs" if stores.is_postgres(db) else ""))
    assert relaypoint(tmp_path, "delete", victim, db=db).returncode == 0
    assert counts(db, victim) == dict.fromkeys(TABLES, 0)


def test_delete_while_another_process_holds_the_write_lock_changes_nothing(tmp_path: Path) -> None:
    """SQLite's write lock (PostgreSQL locks rows: a delete waits for the holder)."""
    write_app(tmp_path)
    db = str(tmp_path / DB)
    with Runtime(db, app_workflows(), id_factory=ids("victim00")) as rt:
        victim = rt.start("review", {"topic": "x"})
    before = rows(db, victim)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with Runtime(db, create=False) as rt:
            rt.store.conn.execute("PRAGMA busy_timeout = 200")
            started = time.monotonic()
            with pytest.raises(StoreError, match="busy"):
                rt.delete(victim)
            assert time.monotonic() - started < 10
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert rows(db, victim) == before


def test_deleting_the_parent_of_a_fork_keeps_the_fork_readable_and_resumable(two_runs, tmp_path: Path) -> None:
    db, _, parent = two_runs
    with Runtime(db, app_workflows(), create=False, id_factory=ids("forked00", "grandkid")) as rt:
        fork = rt.fork(parent, "publish")
        assert rt.get(parent).forks == [fork]
        rt.delete(parent)
        assert counts(db, parent) == dict.fromkeys(TABLES, 0)
        run = rt.get(fork)
        assert (run.parent_run_id, run.forked_from_step) == (parent, "publish")
        assert run.tasks[1].output == {"draft": "about y"}  # copied, not re-run, and still there
        assert [e.kind for e in rt.events(fork)] == ["forked", "approval_inherited"]  # its gate 'check'
        assert rt.resume(fork) == RunStatus.COMPLETED
        assert rt.get(fork).tasks[2].output == {"published": {"draft": "about y"}}
        assert rt.get(fork).parent_run_id == parent
        assert rt.fork(fork, "check") == "grandkid"  # the fork can itself be forked
    shown = relaypoint(tmp_path, "show", fork, db=db)
    assert shown.returncode == 0, shown.stderr
    assert f"forked from {parent} at step 'publish'" in shown.stdout
    listed = json.loads(relaypoint(tmp_path, "list", "--json", db=db).stdout)
    assert {r["run_id"]: r["parent_run_id"] for r in listed}[fork] == parent
    from relaypoint.tui.data import load_detail

    with Runtime(db, create=False) as rt:
        assert load_detail(rt, fork).run.parent_run_id == parent


SLOW_APP = textwrap.dedent('''
    import os, time
    from relaypoint import Workflow

    slow = Workflow("slow")

    @slow.step
    def first(ctx):
        return {"n": 1}

    @slow.step
    def wait(ctx):
        go = os.path.join(os.getcwd(), "go")
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.02)
        return {"waited": True}

    workflows = [slow]
''')


def wait_for_running(db: str, step: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = stores.query(db, "SELECT run_id FROM steps WHERE name = ? AND status = 'running'", (step,))
        except sqlite3.OperationalError:  # the file is being created
            found = []
        if found:
            return found[0]["run_id"]
        time.sleep(0.02)
    raise AssertionError(f"step {step} never ran")


def start_slow(tmp_path: Path, db: str) -> subprocess.Popen:
    """Start the slow app's run in another process; it waits in step ``wait`` until ``go`` exists."""
    (tmp_path / "slowapp.py").write_text(SLOW_APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    return subprocess.Popen([sys.executable, "-m", "relaypoint", "--db", db, "start", "slow", "--app",
                             "slowapp:workflows"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_deleting_a_run_a_live_process_executes_is_refused(db: str, tmp_path: Path) -> None:
    proc = start_slow(tmp_path, db)
    try:
        rid = wait_for_running(db, "wait")
        before = rows(db, rid)
        line = one_line_error(relaypoint(tmp_path, "delete", rid, db=db))
        assert f"run {rid} is being executed by pid {proc.pid}" in line and "cancel it" in line
        with Runtime(db, create=False) as rt:
            with pytest.raises(RefusedTransition, match="being executed"):
                rt.delete(rid)
        after = rows(db, rid)  # (the owner's heartbeat may touch the runs row meanwhile)
        assert counts(db, rid)["runs"] == 1
        assert (after["steps"], after["checkpoints"], after["events"]) == (
            before["steps"], before["checkpoints"], before["events"])
    finally:
        (tmp_path / "go").touch()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert relaypoint(tmp_path, "delete", rid, db=db).returncode == 0


def test_prune_never_deletes_a_run_a_live_process_executes(db: str, tmp_path: Path) -> None:
    proc = start_slow(tmp_path, db)
    try:
        rid = wait_for_running(db, "wait")
        relaypoint(tmp_path, "prune", "--days", "0", "--status", "running", db=db)
        assert counts(db, rid)["runs"] == 1
    finally:
        (tmp_path / "go").touch()
        proc.communicate(timeout=60)


def test_deleting_a_running_run_whose_owner_died_is_allowed(two_runs, tmp_path: Path) -> None:
    db, victim, _ = two_runs
    set_owner(db, victim, pid=dead_pid(), expires_in=60)
    assert relaypoint(tmp_path, "delete", victim, db=db).returncode == 0
    assert counts(db, victim) == dict.fromkeys(TABLES, 0)


# ---- prune ---------------------------------------------------------------------------------------

OLD = datetime(2031, 1, 1, 12, 0, tzinfo=UTC)


def populate(db: str, clock: FakeClock) -> dict[str, str]:
    """Runs of every status at ``clock``'s time, then the same again 10 days later.
    Returns status-or-'new-'status -> run id."""
    made: dict[str, str] = {}
    rt = Runtime(db, app_workflows(), clock=clock)
    with rt:
        for prefix in ("", "new-"):
            made[prefix + "completed"] = rt.start("simple")
            made[prefix + "failed"] = rt.start("boom")
            made[prefix + "awaiting_approval"] = rt.start("review")
            made[prefix + "awaiting_input"] = rt.start("ask")
            rejected = rt.start("review")
            rt.reject(rejected, "no", by="ana")
            made[prefix + "rejected"] = rejected
            cancelled = rt.start("review")
            rt.cancel(cancelled, by="ana")
            made[prefix + "cancelled"] = cancelled
            queued = rt.start("review")
            rt.approve(queued, by="ana")
            made[prefix + "queued"] = queued
            clock.advance(days=10)
        for status, rid in made.items():
            assert rt.get(rid).status == status.removeprefix("new-"), status
    return made


def present(db: str) -> set[str]:
    return {r[0] for r in sql(db, "SELECT run_id FROM runs")}


def test_prune_by_default_deletes_only_old_terminal_runs(db: str) -> None:
    clock = FakeClock(OLD)
    made = populate(db, clock)
    old_terminal = {made[s] for s in ("completed", "rejected", "cancelled")}
    trace: list[str] = []
    with Runtime(db, create=False, clock=clock) as rt:  # clock: 20 days after the old runs
        if not stores.is_postgres(db):  # SQLite's statement trace shows the transactions
            rt.store.trace(trace.append)
        assert set(rt.prune(timedelta(days=15))) == old_terminal
    if not stores.is_postgres(db):
        assert len(committed_writes(trace)) == 1
    assert present(db) == set(made.values()) - old_terminal
    for rid in old_terminal:
        assert counts(db, rid) == dict.fromkeys(TABLES, 0)


def test_prune_by_status_deletes_only_those(db: str) -> None:
    clock = FakeClock(OLD)
    made = populate(db, clock)
    with Runtime(db, create=False, clock=clock) as rt:
        assert rt.prune(timedelta(days=15), ["failed", "awaiting_input"]) != []
        assert present(db) == set(made.values()) - {made["failed"], made["awaiting_input"]}
        assert rt.prune(timedelta(days=5), ["queued"]) != []  # both queued runs are older than 5 days
        assert made["queued"] not in present(db) and made["new-queued"] not in present(db)
        with pytest.raises(ValueError):
            rt.prune(timedelta(days=1), ["zombie"])


def test_prune_counts_from_the_last_update_not_the_creation(db: str) -> None:
    clock = FakeClock(OLD)
    with Runtime(db, app_workflows(), clock=clock) as rt:
        rid = rt.start("review")
        clock.advance(days=30)
        rt.approve(rid, by="ana")
        rt.resume(rid)
        clock.advance(days=1)
        assert rt.prune(timedelta(days=7)) == []
        clock.advance(days=7)
        assert rt.prune(timedelta(days=7)) == [rid]


def test_cli_prune(db: str, tmp_path: Path) -> None:
    write_app(tmp_path)
    now = datetime.now(UTC)
    made = populate(db, FakeClock(now - timedelta(days=50)))  # old at -50 days, "new" at -40 days
    with Runtime(db, app_workflows()) as rt:  # and recent ones, at the real time
        recent = {rt.start("simple"), rt.start("boom")}
    result = relaypoint(tmp_path, "prune", "--days", "45", db=db)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "deleted 3 run(s)"
    gone = {made[s] for s in ("completed", "rejected", "cancelled")}
    assert present(db) == (set(made.values()) | recent) - gone
    result = relaypoint(tmp_path, "prune", "--days", "30", "--status", "failed", "--status", "awaiting_approval",
                        db=db)
    assert result.stdout.strip() == "deleted 4 run(s)", result.stderr
    gone |= {made[s] for s in ("failed", "new-failed", "awaiting_approval", "new-awaiting_approval")}
    assert present(db) == (set(made.values()) | recent) - gone
    bad = relaypoint(tmp_path, "prune", "--days", "30", "--status", "zombie", db=db)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert relaypoint(tmp_path, "prune", "--days", "-1", db=db).returncode == 2
    assert present(db) == (set(made.values()) | recent) - gone
