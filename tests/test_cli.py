"""The ``relaypoint`` command line, through real subprocesses on a store and an app module in tmp_path."""

from __future__ import annotations

import getpass
import json
import os
import random
import shlex
import sqlite3
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

import stores
from helpers import (APP, DB, FakeClock, app_workflows, digest, one_line_error, relaypoint, rows, set_owner,
                     sidecars, sql, write_app)
from click.testing import CliRunner

from relaypoint import Runtime, Workflow, cli
from relaypoint.store import open_store
from relaypoint.store.sqlite import SCHEMA_VERSION as SQLITE_VERSION
from relaypoint.views.display import PREVIEW_CHARS

LIST_KEYS = {"run_id", "workflow", "status", "parent_run_id", "created_at", "updated_at"}
SHOW_KEYS = {"run_id", "workflow", "status", "input", "parent_run_id", "forked_from_step", "created_at",
             "updated_at", "tasks", "usage"}
TASK_KEYS = {"seq", "name", "iteration", "agent", "parent", "status", "attempts", "output", "error", "traceback",
             "started_at", "finished_at", "calls", "usage"}
EVENT_KEYS = {"event_id", "run_id", "at", "kind", "step", "actor", "detail"}


@pytest.fixture
def app(tmp_path):
    """A directory holding the app module; the store is ``store.db`` in it."""
    write_app(tmp_path)
    return tmp_path


def prepare(db: str, *starts: str | tuple[str, dict]) -> list[str]:
    """Start runs of the app's workflows in-process on store ``db``, one second apart; return their ids."""
    clock = FakeClock()
    started = []
    with Runtime(db, app_workflows(), clock=clock) as rt:
        for start in starts:
            workflow, input = (start, None) if isinstance(start, str) else start
            clock.advance(seconds=1)
            started.append(rt.start(workflow, input))
    return started


def ok(result) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr  # a crash; stdout may show a step's stored traceback
    return result.stdout


def as_json(app, db, *args):
    return json.loads(ok(relaypoint(app, *args, "--json", db=db)))


# ---- start ----------------------------------------------------------------------------------------


def test_start_exits_when_a_step_hung_past_its_timeout_still_holds_its_thread(tmp_path, db):
    (tmp_path / "hangapp.py").write_text(textwrap.dedent("""
        import time
        from relaypoint import Workflow

        hang = Workflow("hang")

        @hang.step(timeout=1, retries=0)
        def stuck(ctx):
            time.sleep(600)  # a sync call cannot be stopped: it is abandoned in its thread
    """))
    cmd = [sys.executable, "-m", "relaypoint", "--db", db, "start", "hang", "--app", "hangapp:hang"]
    # Before, the interpreter waited for the call's thread at exit: this would time out.
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "failed: step 'stuck' failed: TimeoutError" in done.stderr
    assert "still running in its thread past the step's timeout; exiting without waiting" in done.stderr
    with Runtime(db) as rt:
        (run,) = rt.list()
        assert run.status == "failed" and rt.get(run.run_id).tasks[0].status == "failed"


def test_start_prints_the_run_id_and_exits_0_when_the_run_completes(app, db):
    out = ok(relaypoint(app, "start", "simple", "--app", APP, "--input", '{"x": 1}', db=db))
    rid = out.strip()
    assert out == f"{rid}\n"
    run = as_json(app, db, "show", rid)
    assert (run["status"], run["input"], run["tasks"][0]["output"]) == ("completed", {"x": 1}, {"x": 1})


def test_start_exits_0_when_the_run_pauses_and_says_where(app, db):
    result = relaypoint(app, "start", "review", "--app", APP, db=db)
    rid = ok(result).strip()
    assert f"run {rid} is awaiting_approval at step 'check'" in result.stderr
    assert as_json(app, db, "show", rid)["status"] == "awaiting_approval"


def test_start_exits_1_when_the_run_fails_naming_the_step(app, db):
    result = relaypoint(app, "start", "boom", "--app", APP, db=db)
    rid = result.stdout.strip()
    line = one_line_error(result)
    assert f"run {rid} failed: step 'explode' failed: RuntimeError: kaboom" in line
    assert [t["status"] for t in as_json(app, db, "show", rid)["tasks"]] == ["completed", "failed"]


def test_a_huge_error_is_said_bounded_when_start_ends(tmp_path, db):
    (tmp_path / "loud.py").write_text(textwrap.dedent("""
        from relaypoint import Workflow

        loud = Workflow("loud")

        @loud.step(retries=0)
        def shout(ctx):
            raise RuntimeError("A" * 3_000_000)
    """))
    done = subprocess.run([sys.executable, "-m", "relaypoint", "--db", db, "start", "loud", "--app", "loud:loud"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    line = one_line_error(done)
    assert len(line) < 1_200 and line.endswith(f"bytes in all: relaypoint show {done.stdout.strip()})")
    assert "failed: step 'shout' failed: RuntimeError: AAAA" in line


def test_the_hint_to_continue_names_the_store_only_where_the_shell_would_not_find_it(app):
    (rid,) = prepare(str(app / "relaypoint.db"), "review")
    said = relaypoint(app, "approve", rid, db=None)
    assert said.returncode == 0 and f"`relaypoint resume {rid} --app MODULE:ATTR`" in said.stdout
    (other,) = prepare(str(app / "other.db"), "review")
    said = relaypoint(app, "approve", other, db=None, env={"RELAYPOINT_DB": "other.db"})
    assert said.returncode == 0 and f"`relaypoint resume {other} --app MODULE:ATTR`" in said.stdout
    (third,) = prepare(str(app / "third.db"), "review")
    said = relaypoint(app, "approve", third, db="third.db")
    assert f"`relaypoint --db third.db resume {third} --app MODULE:ATTR`" in said.stdout


def test_start_creates_the_store_owner_only(app):
    ok(relaypoint(app, "start", "simple", "--app", APP))
    assert (app / DB).stat().st_mode & 0o777 == 0o600


def test_start_queue_records_the_run_queued_prints_its_id_and_executes_nothing(app, db):
    result = relaypoint(app, "start", "review", "--queue", "--app", APP, "--input", '{"topic": "cats"}', db=db)
    rid = ok(result).strip()
    assert result.stdout == f"{rid}\n"
    assert result.stderr == (f"run {rid} is queued: continue it with `relaypoint --db {shlex.quote(db)} resume {rid} "
                             f"--app {APP}` or let a worker pick it up\n")
    run = as_json(app, db, "show", rid)
    assert (run["status"], run["input"], run["lease"]) == ("queued", {"topic": "cats"}, None)
    assert [(t["name"], t["status"], t["attempts"]) for t in run["tasks"]] == [
        ("draft", "pending", 0), ("check", "pending", 0), ("publish", "pending", 0)]
    assert [e["kind"] for e in as_json(app, db, "events", rid)] == ["run_queued"]
    # executed by whoever takes it: here a resume, up to the gate
    assert ok(relaypoint(app, "resume", rid, "--app", APP, db=db)) == f"run {rid} is awaiting_approval at step 'check'\n"


@pytest.mark.parametrize("args, said", [
    (("--queue",), "Error: start needs --app MODULE:ATTR (or RELAYPOINT_APP) to find the workflow"),
    (("--queue", "--app", APP, "--input", "[1]"), "Error: --input must be a JSON object"),
    (("--app", APP, "--queue", "--input", "{bad"), "Error: --input is not valid JSON"),
])
def test_start_queue_refuses_what_start_refuses_and_creates_no_store(app, args, said):
    result = relaypoint(app, "start", "simple", *args)
    assert result.returncode in (1, 2) and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(said), line
    assert not (app / DB).exists()
    line = one_line_error(relaypoint(app, "start", "nope", "--queue", "--app", APP))
    assert "unknown workflow 'nope'" in line and "review" in line and not (app / DB).exists()


# ---- list, show, events ---------------------------------------------------------------------------


def test_list_json_newest_first_with_filters_and_limit(app, db):
    simple, review, boom, ask = prepare(db, "simple", "review", "boom", "ask")
    runs = as_json(app, db, "list")
    assert [r["run_id"] for r in runs] == [ask, boom, review, simple]
    assert all(LIST_KEYS <= r.keys() for r in runs)
    assert [(r["workflow"], r["status"], r["parent_run_id"]) for r in runs] == [
        ("ask", "awaiting_input", None), ("boom", "failed", None), ("review", "awaiting_approval", None),
        ("simple", "completed", None)]
    assert all(r["created_at"].endswith("Z") and r["updated_at"].endswith("Z") for r in runs)
    assert [r["run_id"] for r in as_json(app, db, "list", "--status", "awaiting_approval")] == [review]
    assert [r["run_id"] for r in as_json(app, db, "list", "--workflow", "boom")] == [boom]
    assert [r["run_id"] for r in as_json(app, db, "list", "--status", "completed", "--workflow", "boom")] == []
    assert [r["run_id"] for r in as_json(app, db, "list", "--limit", "2")] == [ask, boom]


def test_list_and_show_for_people(app, db):
    (rid,) = prepare(db, "review")
    listing = ok(relaypoint(app, "list", db=db))
    assert rid in listing and "awaiting_approval" in listing and "2/3" in listing
    shown = ok(relaypoint(app, "show", rid[:6], db=db))
    assert rid in shown and "check" in shown and "approve the output of step 'check'" in shown


def test_show_json_has_the_run_and_its_tasks_in_order(app, db):
    (rid,) = prepare(db, ("review", {"topic": "cats"}))
    run = as_json(app, db, "show", rid)
    assert SHOW_KEYS <= run.keys()
    assert (run["run_id"], run["workflow"], run["status"], run["input"]) == (
        rid, "review", "awaiting_approval", {"topic": "cats"})
    assert (run["parent_run_id"], run["forked_from_step"]) == (None, None)
    assert [t["name"] for t in run["tasks"]] == ["draft", "check", "publish"]
    assert all(t.keys() == TASK_KEYS for t in run["tasks"])
    draft, check, publish = run["tasks"]
    assert (draft["status"], draft["attempts"], draft["output"]) == ("completed", 1, {"text": "about cats"})
    assert draft["started_at"].endswith("Z") and draft["finished_at"].endswith("Z")
    assert [t["seq"] for t in run["tasks"]] == [0, 1, 2]
    [about] = draft["calls"]  # the draft step's recorded call
    assert (about["position"], about["name"], about["kind"], about["status"], about["value"]) == (
        0, "about", "call", "completed", "about cats")
    assert (publish["status"], publish["attempts"], publish["output"], publish["started_at"]) == (
        "pending", 0, None, None)
    assert run["lease"] is None  # nobody executes a paused run


def test_show_names_the_process_executing_a_running_run(app, db):
    (rid,) = prepare(db, ("review", {"topic": "cats"}))
    set_owner(db, rid, pid=os.getpid(), host="worker-7", expires_in=30)
    lease = as_json(app, db, "show", rid)["lease"]
    assert (lease["pid"], lease["host"]) == (os.getpid(), "worker-7") and lease["heartbeat_at"].endswith("Z")
    assert "token" not in lease  # the fence is never printed
    assert f"executor: pid {os.getpid()} on worker-7, last heartbeat " in ok(relaypoint(app, "show", rid, db=db))


def test_events_json_is_the_audit_trail_oldest_first(app, db):
    (rid,) = prepare(db, "simple")
    events = as_json(app, db, "events", rid)
    assert all(e.keys() == EVENT_KEYS for e in events)
    assert [e["kind"] for e in events] == ["run_started", "step_started", "step_completed", "run_completed"]
    assert [e["event_id"] for e in events] == sorted(e["event_id"] for e in events)
    assert "step_completed" in ok(relaypoint(app, "events", rid, db=db))


# ---- decisions ------------------------------------------------------------------------------------


def test_approve_with_an_edited_output_queues_and_resume_uses_it(app, db):
    (rid,) = prepare(db, "review")
    out = ok(relaypoint(app, "approve", rid[:8], "--comment", "fine", "--output", '{"edited": true}', db=db))
    assert f"of run {rid}; the run is queued" in out and "(step 'check')" in out
    run = as_json(app, db, "show", rid)
    assert (run["status"], run["tasks"][1]["output"]) == ("queued", {"edited": True})
    approved = [e for e in as_json(app, db, "events", rid) if e["kind"] == "approved"]
    assert [(e["actor"], e["detail"]["comment"], e["detail"]["output_edited"]) for e in approved] == [
        (getpass.getuser(), "fine", True)]

    assert ok(relaypoint(app, "resume", rid, "--app", APP, db=db)).strip() == f"run {rid} is completed"
    assert as_json(app, db, "show", rid)["tasks"][2]["output"] == {"published": {"edited": True}}


def test_approve_records_by_and_refuses_a_second_approval(app, db):
    (rid,) = prepare(db, "review")
    ok(relaypoint(app, "approve", rid, "--by", "alice", db=db))
    assert [e["actor"] for e in as_json(app, db, "events", rid) if e["kind"] == "approved"] == ["alice"]
    assert "nothing to approve" in one_line_error(relaypoint(app, "approve", rid, db=db))


def test_approve_with_a_stale_checkpoint_is_refused(app, db):
    (rid,) = prepare(db, "review")
    current = as_json(app, db, "show", rid)["pending"]["checkpoint_id"]
    line = one_line_error(relaypoint(app, "approve", rid, "--checkpoint", str(current - 1), db=db))
    assert "moved on" in line
    ok(relaypoint(app, "approve", rid, "--checkpoint", str(current), db=db))


def test_reject_ends_the_run_and_resume_points_at_fork(app, db):
    (rid,) = prepare(db, "review")
    assert "rejected checkpoint" in ok(relaypoint(app, "reject", rid, "--comment", "too vague", db=db))
    run = as_json(app, db, "show", rid)
    assert run["status"] == "rejected"
    assert [t["status"] for t in run["tasks"]] == ["completed", "completed", "cancelled"]
    assert "fork" in one_line_error(relaypoint(app, "resume", rid, "--app", APP, db=db))


def test_reject_needs_a_comment(app, db):
    (rid,) = prepare(db, "review")
    result = relaypoint(app, "reject", rid, db=db)
    assert result.returncode == 2 and "--comment" in result.stderr
    assert "reason" in one_line_error(relaypoint(app, "reject", rid, "--comment", "  ", db=db))
    assert as_json(app, db, "show", rid)["status"] == "awaiting_approval"


def test_respond_queues_and_resume_returns_the_answer_to_the_step(app, db):
    (rid,) = prepare(db, "ask")
    assert as_json(app, db, "show", rid)["pending"]["reason"] == "Title?"
    ok(relaypoint(app, "respond", rid, "--value", '"Dune"', db=db))
    assert as_json(app, db, "show", rid)["status"] == "queued"
    assert "nothing to respond to" in one_line_error(relaypoint(app, "respond", rid, "--value", '"again"', db=db))
    ok(relaypoint(app, "resume", rid, "--app", APP, db=db))
    assert as_json(app, db, "show", rid)["tasks"][0]["output"] == {"title": "Dune"}


def test_fork_prints_the_new_run_which_reuses_upstream_outputs(app, db):
    (parent,) = prepare(db, ("review", {"topic": "cats"}))
    with Runtime(db, app_workflows()) as rt:
        rt.approve(parent)
        rt.resume(parent)
    before = rows(db, parent)
    child = ok(relaypoint(app, "fork", parent[:8], "--from", "check", "--input", '{"topic": "dogs"}', db=db)).strip()
    run = as_json(app, db, "show", child)
    assert (run["status"], run["parent_run_id"], run["forked_from_step"], run["input"]) == (
        "queued", parent, "check", {"topic": "dogs"})
    assert [(t["name"], t["status"]) for t in run["tasks"]] == [
        ("draft", "completed"), ("check", "pending"), ("publish", "pending")]
    assert run["tasks"][0]["output"] == {"text": "about cats"}  # copied, not re-run with the new input
    assert ok(relaypoint(app, "resume", child, "--app", APP, db=db)).strip() == (
        f"run {child} is awaiting_approval at step 'check'")
    assert rows(db, parent) == before
    assert as_json(app, db, "show", parent)["forks"] == [child]


def test_cancel_says_what_it_did_and_refuses_twice(app, db):
    (rid,) = prepare(db, "review")
    assert ok(relaypoint(app, "cancel", rid[:8], db=db)).strip() == f"cancelled run {rid} (it was awaiting_approval)"
    assert as_json(app, db, "show", rid)["status"] == "cancelled"
    assert "already cancelled" in one_line_error(relaypoint(app, "cancel", rid, db=db))


# ---- environment ----------------------------------------------------------------------------------


def test_store_and_app_from_the_environment(app, db):
    env = {"RELAYPOINT_DB": db, "RELAYPOINT_APP": APP}
    rid = ok(relaypoint(app, "start", "review", db=None, env=env)).strip()
    assert stores.query(db, "SELECT run_id FROM runs") == [{"run_id": rid}]
    assert not (app / "relaypoint.db").exists()
    assert [r["run_id"] for r in json.loads(ok(relaypoint(app, "list", "--json", db=None, env=env)))] == [rid]
    ok(relaypoint(app, "approve", rid, db=None, env=env))
    ok(relaypoint(app, "resume", rid, db=None, env=env))
    assert json.loads(ok(relaypoint(app, "show", rid, "--json", db=None, env=env)))["status"] == "completed"


# ---- resume refusals ------------------------------------------------------------------------------


def test_resume_of_a_paused_run_is_refused(app, db):
    (rid,) = prepare(db, "review")
    assert f"approve {rid}" in one_line_error(relaypoint(app, "resume", rid, "--app", APP, db=db))


def test_resume_of_an_ended_run_is_refused(app, db):
    (rid,) = prepare(db, "simple")
    assert "cannot be resumed; fork it" in one_line_error(relaypoint(app, "resume", rid, "--app", APP, db=db))


def test_resume_of_a_run_a_live_process_executes_is_refused(app, db):
    (rid,) = prepare(db, "review")
    with Runtime(db) as rt:
        rt.approve(rid)
    set_owner(db, rid, pid=os.getpid(), expires_in=300, step="publish")
    before = rows(db, rid)
    line = one_line_error(relaypoint(app, "resume", rid, "--app", APP, db=db))
    assert f"being executed by pid {os.getpid()}" in line
    assert rows(db, rid) == before


# ---- errors: one line, exit 1, no traceback, nothing changed ---------------------------------------


@pytest.mark.parametrize("args", [
    ["show", "feedface"], ["events", "feedface"], ["approve", "feedface"],
    ["reject", "feedface", "--comment", "no"], ["respond", "feedface", "--value", "1"],
    ["cancel", "feedface"], ["fork", "feedface", "--from", "draft"], ["resume", "feedface", "--app", APP],
    ["delete", "feedface"],
])
def test_an_unknown_run_id_is_echoed(app, db, args):
    prepare(db, "review")
    assert "'feedface'" in one_line_error(relaypoint(app, *args, db=db))


@pytest.mark.parametrize("args", [
    ["show", "{long}"], ["approve", "{long}"], ["fork", "{rid}", "--from", "{long}"],
    ["show", "{rid}", "--output", "{long}"], ["start", "{long}", "--app", APP],
    ["start", "review", "--app", "{long}"], ["start", "review", "--app", "{long}:workflows"],
    ["start", "review", "--app", "rpflows:{long}"],
])
def test_an_unknown_id_or_name_of_any_length_is_quoted_cut_in_one_short_line(app, db, args):
    (rid,) = prepare(db, "review")
    long = "x" * 100_000  # a command-line argument holds up to 128 KiB
    line = one_line_error(relaypoint(app, *[a.format(long=long, rid=rid) for a in args], db=db))
    assert len(line) < 400 and f"'{'x' * 100}'… (100,000 characters)" in line, line[:400]


def test_an_ambiguous_prefix_is_refused(app, db):
    prepare(db, *["simple"] * 40)  # 40 random hex ids: some share a first character
    ids = [r["run_id"] for r in as_json(app, db, "list")]
    shared = next(i[0] for i in ids if sum(j.startswith(i[0]) for j in ids) > 1)
    assert "matches several runs" in one_line_error(relaypoint(app, "show", shared, db=db))


@pytest.mark.parametrize("args, what", [
    (["approve", "{rid}", "--output", "{bad"], "--output is not valid JSON"),
    (["approve", "{rid}", "--output", "null"], "--output null: an edited output cannot be null"),
    (["respond", "{rid}", "--value", "yes"], "--value is not valid JSON"),
    (["fork", "{rid}", "--from", "draft", "--input", "[1,"], "--input is not valid JSON"),
    (["fork", "{rid}", "--from", "draft", "--input", "[1]"], "must be a JSON object"),
    (["start", "review", "--app", APP, "--input", "{'single': 1}"], "--input is not valid JSON"),
    (["start", "review", "--app", APP, "--input", "NaN"], "--input: nan is not valid JSON"),
])
def test_bad_json_is_refused_and_changes_nothing(app, db, args, what):
    (rid,) = prepare(db, "review")
    before = rows(db, rid)
    assert what in one_line_error(relaypoint(app, *[a.replace("{rid}", rid) for a in args], db=db))
    assert rows(db, rid) == before
    assert len(as_json(app, db, "list")) == 1


@pytest.mark.parametrize("command", [["approve", "{rid}"], ["reject", "{rid}", "--comment", "no"],
                                     ["respond", "{rid}", "--value", "1"], ["cancel", "{rid}"]])
def test_a_blank_name_for_by_is_refused_rather_than_recorded_as_the_os_user(app, db, command):
    (rid,) = prepare(db, "review")
    before = rows(db, rid)
    result = relaypoint(app, *[a.replace("{rid}", rid) for a in command], "--by", "  ", db=db)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Invalid value for '--by': give a name, or leave --by out" in result.stderr
    assert rows(db, rid) == before


def test_an_unknown_step_names_the_steps(app, db):
    (rid,) = prepare(db, "review")
    line = one_line_error(relaypoint(app, "fork", rid, "--from", "nope", db=db))
    assert "no step 'nope'; its steps are: draft, check, publish" in line


def test_an_unknown_workflow_names_the_known_ones(app, db):
    line = one_line_error(relaypoint(app, "start", "nope", "--app", APP, db=db))
    assert "unknown workflow 'nope'" in line and "review" in line


def test_migrate_makes_a_store_which_then_needs_nothing_and_has_no_roles(app):
    assert relaypoint(app, "migrate").stdout == f"made a store at {DB} (schema version {SQLITE_VERSION})\n"
    assert relaypoint(app, "migrate").stdout == (f"{DB} is at store schema version {SQLITE_VERSION}; "
                                                 "nothing to upgrade\n")
    assert one_line_error(relaypoint(app, "migrate", "--grant", "relay")) == (
        f"Error: roles belong to a database server; {DB} is a SQLite file, guarded by its file permissions")


@pytest.mark.parametrize("spec, what", [
    ("nomodule:workflows", "cannot import 'nomodule'"),
    ("rpflows", "must look like MODULE:ATTR"),
    ("rpflows:", "must look like MODULE:ATTR"),
    (":workflows", "must look like MODULE:ATTR"),
    ("rpflows:nothing", "has no attribute 'nothing'"),
    ("rpflows:Workflow", "must name a Workflow or a list of Workflows"),
])
def test_a_bad_app_is_one_line_and_creates_no_store(app, spec, what):
    assert what in one_line_error(relaypoint(app, "start", "review", "--app", spec))
    assert not (app / DB).exists()


def _text(path):
    path.write_text("these are my notes, not a store\n" * 10)


def _foreign(path):
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    conn.close()


def _random(path):
    path.write_bytes(random.Random(3).randbytes(16384))


def _newer(path):
    open_store(str(path), create=True).close()
    sql(path, "UPDATE meta SET value = '99' WHERE key = 'schema_version'")


def _one_byte(path):
    path.write_bytes(b"\n")


def _damaged_version(path):
    open_store(str(path), create=True).close()
    sql(path, "UPDATE meta SET value = 'one' WHERE key = 'schema_version'")


def refused_untouched(app, make, args) -> str:
    """Make ``bad.db`` with ``make``, run ``args`` on it: one-line error, file bytes unchanged."""
    path = app / "bad.db"
    make(path)
    before = digest(path)
    line = one_line_error(relaypoint(app, *args, db=str(path)))
    assert digest(path) == before and sidecars(path) == []
    return line


@pytest.mark.parametrize("make, what", [
    (_text, "not a readable SQLite database"),
    (_foreign, "not a relaypoint store"),
    (_random, "not a readable SQLite database"),
    (_newer, "newer than this relaypoint understands"),
])
@pytest.mark.parametrize("args", [["list"], ["show", "abc"], ["start", "simple", "--app", APP]])
def test_a_file_that_is_not_a_usable_store_is_refused_and_left_unchanged(app, make, what, args):
    assert what in refused_untouched(app, make, args)


@pytest.mark.parametrize("make", [_one_byte, _damaged_version])
def test_a_damaged_or_tiny_file_is_refused_and_left_unchanged(app, make):
    refused_untouched(app, make, ["list"])


def test_a_missing_store_is_refused_by_list_and_not_created(app):
    line = one_line_error(relaypoint(app, "list", db="absent.db"))
    assert "no relaypoint store at absent.db" in line
    assert not (app / "absent.db").exists()


EVERY_COMMAND = [
    ["list"], ["list", "--json"], ["show", "abc"], ["show", "abc", "--json"], ["show", "abc", "--output", "a"],
    ["events", "abc"], ["start", "simple", "--app", APP], ["resume", "abc", "--app", APP], ["approve", "abc"],
    ["reject", "abc", "--comment", "no"], ["respond", "abc", "--value", "1"], ["fork", "abc", "--from", "a"],
    ["cancel", "abc"], ["delete", "abc"], ["prune", "--days", "1"], ["worker", "--app", APP],
    ["demo", "--no-console"], ["console"],
]


@pytest.mark.parametrize("args", EVERY_COMMAND)
def test_an_empty_file_is_refused_by_every_command_and_never_adopted(app, args):
    (app / "empty.db").touch()
    line = one_line_error(relaypoint(app, *args, db="empty.db"))
    assert "empty.db is an empty file, not a relaypoint store; delete it" in line
    assert (app / "empty.db").stat().st_size == 0 and sidecars(app / "empty.db") == []


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_a_store_relaypoint_creates_is_0600_whatever_the_umask(app, umask):
    code = f"import os, sys; os.umask({umask}); from relaypoint.cli import main; sys.argv[0] = 'relaypoint'; main()"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    done = subprocess.run([sys.executable, "-c", code, "--db", DB, "start", "simple", "--app", APP], cwd=app,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (app / DB).stat().st_mode & 0o777 == 0o600
    assert [p.name for p in app.iterdir() if p.name.startswith(".")] == []  # the file made beside it is gone


# ---- big values ------------------------------------------------------------------------------------

BIG_APP = textwrap.dedent("""
    from relaypoint import Workflow

    big = Workflow("big")

    @big.step
    def produce(ctx):
        return "x" * ctx.input["size"] + "Z9" * 2

    @big.step
    def explode(ctx):
        raise ValueError("long " + "e" * ctx.input["size"] + " " + "Z9" * 2)

    workflows = [big]
""")


def test_show_prints_a_bounded_preview_of_big_values_and_says_how_to_get_them_whole(app, db):
    (app / "bigflows.py").write_text(BIG_APP)
    size = 2_000_000
    done = relaypoint(app, "start", "big", "--app", "bigflows:workflows", "--input", json.dumps({"size": size}), db=db)
    rid = done.stdout.strip()
    shown = ok(relaypoint(app, "show", rid, db=db))
    assert len(shown) < 6 * PREVIEW_CHARS and "Z9Z9" not in shown
    assert f"… cut here: {size + 6:,} bytes (1.9 MiB) in all; the whole value: relaypoint show {rid} --output produce" in shown
    assert f"the whole value: relaypoint show {rid} --json" in shown  # the long error and traceback
    whole = ok(relaypoint(app, "show", rid, "--output", "produce", db=db))
    assert json.loads(whole) == "x" * size + "Z9Z9"
    run = as_json(app, db, "show", rid)  # never truncated
    assert run["tasks"][0]["output"] == "x" * size + "Z9Z9"
    assert run["tasks"][1]["error"].endswith(" Z9Z9") and run["tasks"][1]["traceback"].rstrip().endswith(" Z9Z9")


def test_show_output_of_a_step_without_output_or_unknown_is_one_line(app, db):
    (rid,) = prepare(db, "review")
    assert "step 'publish' of run" in one_line_error(relaypoint(app, "show", rid, "--output", "publish", db=db))
    unknown = one_line_error(relaypoint(app, "show", rid, "--output", "x", db=db))
    assert "its steps are: draft, check, publish" in unknown
    assert json.loads(ok(relaypoint(app, "show", rid, "--output", "check", db=db))) == {"draft": "about nothing"}


# ---- streamed listings -----------------------------------------------------------------------------


def _many(path, n):
    wf = Workflow("w")
    wf.step(name="s")(lambda ctx: 1)
    clock = FakeClock()
    with Runtime(str(path), [wf], clock=clock) as rt:
        for _ in range(n):
            clock.advance(seconds=1)
            rt.start("w")
        return [r.model_dump(mode="json") for r in rt.list(limit=n)]


@pytest.mark.parametrize("as_json_", [False, True])
def test_list_streams_page_by_page_printing_rows_before_reading_more(tmp_path, monkeypatch, as_json_):
    expected = _many(tmp_path / DB, 25)
    monkeypatch.setattr(cli, "LIST_PAGE", 10)
    reads = []
    real = Runtime.list

    def spy(self, *args, **kwargs):
        sys.stdout.flush()
        reads.append((kwargs["limit"], len(sys.stdout.buffer.getvalue().splitlines())))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Runtime, "list", spy)
    args = ["--db", str(tmp_path / DB), "list", "--limit", "23"] + (["--json"] if as_json_ else [])
    result = CliRunner().invoke(cli.cli, args)
    assert result.exit_code == 0, result.output
    assert [limit for limit, _ in reads] == [10, 10, 3]  # never the whole listing at once
    assert reads[0][1] < reads[1][1] < reads[2][1]  # each page printed before the next is read
    if as_json_:
        assert result.stdout == json.dumps(expected[:23], indent=2) + "\n"  # the same text as one dump
    else:
        lines = result.stdout.splitlines()
        assert len(lines) == 24 and [line.split()[0] for line in lines[1:]] == [r["run_id"] for r in expected[:23]]
        assert len({line.index(" w ") for line in lines[1:]}) == 1  # fixed columns


def test_list_memory_does_not_grow_with_the_listing(tmp_path, monkeypatch):
    _many(tmp_path / DB, 300)
    monkeypatch.setattr(cli, "LIST_PAGE", 20)
    peaks = {}
    for limit in (40, 40, 300):  # the first listing warms caches (imports, character widths)
        with open(os.devnull, "w") as sink:  # what is printed is not kept
            monkeypatch.setattr(sys, "stdout", sink)
            tracemalloc.start()
            cli.cli.main(["--db", str(tmp_path / DB), "list", "--limit", str(limit)], standalone_mode=False)
            peaks[limit] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    assert peaks[300] < peaks[40] * 1.5, peaks


def test_list_json_of_an_empty_store_is_an_empty_array(app, db):
    prepare(db)
    assert ok(relaypoint(app, "list", "--json", db=db)) == "[]\n"


def test_demo_builds_the_same_runs_on_every_backend(app, db):
    """``relaypoint demo`` (its killed run included) leaves one run in each state the console shows."""
    (app / "audited").mkdir()
    (app / "audited" / "mod.py").write_text("def f(x):\n    return x + 1\n")
    ok(relaypoint(app, "demo", "--no-console", "--root", str(app / "audited"), db=db))
    listed = as_json(app, db, "list")
    assert sorted(r["status"] for r in listed) == sorted([
        "queued", "awaiting_approval", "awaiting_approval", "awaiting_input", "awaiting_input", "interrupted",
        "interrupted", "interrupted", "completed", "completed", "failed", "rejected", "cancelled"])
    assert sorted(r["workflow"] for r in listed) == (["panel", "panel", "panel-with-person"] + ["repo-audit"] * 8
                                                     + ["research"] * 2)


# ---- a step that exits, forks past gates, awaiting input ------------------------------------------


def test_a_step_calling_sys_exit_fails_the_run_in_one_line(app, db):
    (app / "exits.py").write_text("import sys\nfrom relaypoint import Workflow\nwf = Workflow('quits')\n"
                                  "wf.step(name='leave')(lambda ctx: sys.exit(0))\nworkflows = [wf]\n")
    done = relaypoint(app, "start", "quits", "--app", "exits:workflows", db=db)
    rid = done.stdout.strip()
    assert one_line_error(done) == f"Error: run {rid} failed: step 'leave' failed: SystemExit: 0"
    assert as_json(app, db, "show", rid)["status"] == "failed"


def test_fork_past_a_gate_not_approved_pauses_and_says_so(app, db):
    (parent,) = prepare(db, "review")
    ok(relaypoint(app, "reject", parent, "--comment", "no", db=db))
    done = relaypoint(app, "fork", parent, "--from", "publish", db=db)
    child = ok(done).strip()
    assert done.stderr.strip() == (f"run {child} is awaiting_approval at step 'check': approve the output of step "
                                   f"'check', copied from run {parent}, where its approval was rejected by "
                                   f"{getpass.getuser()}")
    assert "approve" in one_line_error(relaypoint(app, "resume", child, "--app", APP, db=db))
    ok(relaypoint(app, "approve", child, db=db))
    assert ok(relaypoint(app, "resume", child, "--app", APP, db=db)).strip() == f"run {child} is completed"
    events = [e["kind"] for e in as_json(app, db, "events", child)]
    assert events[:2] == ["forked", "paused"] and "approval_inherited" not in events


def test_fork_past_an_approved_gate_inherits_it(app, db):
    (parent,) = prepare(db, "review")
    ok(relaypoint(app, "approve", parent, "--by", "ana", db=db))
    ok(relaypoint(app, "resume", parent, "--app", APP, db=db))
    done = relaypoint(app, "fork", parent, "--from", "publish", db=db)
    child = ok(done).strip()
    assert done.stderr == ""
    inherited = [e for e in as_json(app, db, "events", child) if e["kind"] == "approval_inherited"]
    assert [(e["step"], e["detail"]["decided_by"]) for e in inherited] == [("check", "ana")]
    assert ok(relaypoint(app, "resume", child, "--app", APP, db=db)).strip() == f"run {child} is completed"


def test_a_step_waiting_for_input_shows_as_awaiting_input(app, db):
    (rid,) = prepare(db, "ask")
    (question,) = as_json(app, db, "show", rid)["tasks"]
    assert (question["status"], question["attempts"]) == ("awaiting_input", 1)
    assert "? question  awaiting_input  attempts 1" in ok(relaypoint(app, "show", rid, db=db))


# ---- store URLs and durability ----------------------------------------------------------------------


def test_db_takes_a_store_url_as_well_as_a_path(app):
    rid = ok(relaypoint(app, "start", "simple", "--app", APP, "--input", '{"k": 1}')).strip()
    for url in ("sqlite:///store.db", f"sqlite:///{app / 'store.db'}", str(app / "store.db")):
        assert json.loads(ok(relaypoint(app, "show", rid, "--json", db=url)))["status"] == "completed"
    rid2 = ok(relaypoint(app, "start", "simple", "--app", APP, db="sqlite:///other.db")).strip()
    assert (app / "other.db").is_file() and rid2 in ok(relaypoint(app, "list", db="other.db"))


def test_a_postgresql_url_that_cannot_be_used_is_refused_in_one_line(app):
    line = one_line_error(relaypoint(app, "list", db="postgresql://nobody@127.0.0.1:1/relay"))
    assert line == ("Error: the PostgreSQL server at 127.0.0.1:1 refused the connection (is PostgreSQL running and "
                    "listening there?)")
    assert "unknown store URL scheme 'mysql'" in one_line_error(relaypoint(app, "list", db="mysql://x/y"))


@pytest.mark.parametrize("how", ["option", "env"])
def test_durability_is_a_group_option_and_an_environment_variable(app, how):
    args = ["--durability", "normal"] if how == "option" else []
    env = {"RELAYPOINT_DURABILITY": "normal"} if how == "env" else {}
    rid = ok(relaypoint(app, *args, "start", "simple", "--app", APP, env=env)).strip()
    assert as_json(app, DB, "show", rid)["status"] == "completed"
    bad = relaypoint(app, "list", env={"RELAYPOINT_DURABILITY": "sometimes"})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1  # a usage error, one line
    assert "Invalid value for '--durability': 'sometimes' is not one of 'full', 'normal'" in bad.stderr


ACCEPTED = "write a file path, sqlite:///relative/path or sqlite:////absolute/path"


@pytest.mark.parametrize("url", ["sqlite:///q.db?mode=ro", "sqlite:///q.db#frag", "sqlite:///q.db?"])
@pytest.mark.parametrize("args", [["list"], ["start", "simple", "--app", APP], ["demo", "--no-console"]])
def test_a_store_url_with_a_query_or_fragment_is_refused_and_nothing_is_created(app, url, args):
    line = one_line_error(relaypoint(app, *args, db=url))
    assert line == (f"Error: store URL '{url}' has a query string or fragment, which relaypoint does not take; "
                    f"{ACCEPTED} (a '?' or '#' in the file name is written %3F or %23)")
    assert not [p for p in app.iterdir() if p.name.startswith("q.db")]


def test_a_question_mark_in_a_file_name_is_written_percent_encoded(app):
    rid = ok(relaypoint(app, "start", "simple", "--app", APP, db="sqlite:///what%3F.db")).strip()
    assert rid in ok(relaypoint(app, "list", db="what?.db"))


@pytest.mark.parametrize("args", EVERY_COMMAND)
def test_a_nul_character_or_an_empty_url_is_refused_by_every_command(app, args):
    line = one_line_error(relaypoint(app, *args, db="sqlite:///%00x.db"))
    assert line == (f"Error: store URL 'sqlite:///%00x.db' names a path with a NUL character, which no file name "
                    f"can hold; {ACCEPTED}")
    assert one_line_error(relaypoint(app, *args, db="")) == f"Error: the store URL is empty; {ACCEPTED}"
    assert sorted(p.name for p in app.iterdir() if p.suffix == ".db") == []


def test_a_bad_store_url_is_a_typed_error_from_the_api(tmp_path):
    from relaypoint import StoreError
    from relaypoint.store import InvalidStoreURL

    for url in ("", str(tmp_path / "a\x00b.db"), f"sqlite:///{tmp_path}/q.db?mode=ro"):
        with pytest.raises(InvalidStoreURL) as caught:
            Runtime(url)
        assert isinstance(caught.value, StoreError) and "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("root", ["missing", "a-file"])
def test_demo_refuses_a_root_that_is_not_a_directory_before_recording_anything(app, root):
    (app / "a-file").write_text("not a directory")
    line = one_line_error(relaypoint(app, "demo", "--no-console", "--root", str(app / root)))
    problem = "does not exist" if root == "missing" else "is not a readable directory"
    assert line == (f"Error: demo: the directory to audit, '{app / root}', {problem}; "
                    "give --root an existing directory")
    assert not (app / DB).exists()


def test_an_unknown_durability_is_a_typed_one_line_error_from_the_api(tmp_path):
    from relaypoint import InvalidValue

    with pytest.raises(InvalidValue, match=r"^durability must be one of full, normal, not 'bogus'$"):
        Runtime(str(tmp_path / DB), durability="bogus")
    assert not (tmp_path / DB).exists()


@pytest.mark.parametrize("given, used", [("FULL", "full"), ("Normal", "normal"), ("normal", "normal")])
@pytest.mark.parametrize("how", ["option", "env"])
def test_durability_is_read_in_any_case(app, monkeypatch, given, used, how):
    seen = []

    class Recording(Runtime):
        def __init__(self, *args, durability, **kwargs):
            seen.append(durability)
            super().__init__(*args, durability=durability, **kwargs)

    (rid,) = prepare(str(app / DB), "simple")
    monkeypatch.setattr(cli, "Runtime", Recording)
    args = ["--durability", given] if how == "option" else []
    env = {"RELAYPOINT_DURABILITY": given} if how == "env" else {}
    result = CliRunner().invoke(cli.cli, ["--db", str(app / DB), *args, "list"], env=env)
    assert result.exit_code == 0, result.output
    assert rid in result.stdout and seen == [used]
