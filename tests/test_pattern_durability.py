"""The durability of patterns, proven with real processes on a real SQLite file: a debate, a
supervisor, a planner and a person's turns, each killed (SIGKILL) at a chosen instant — inside an
agent's call, or inside the transaction that records a round — and resumed by a new process, then
compared with an uninterrupted run of the same input; and the storage a round costs.

The app is tests/patternmatrix.py's (``patternapp``): every execution of user code logs one
line per call (``label attempt pid run_id state``; the label is ``name#iteration/agent``), so the
log shows which calls ran and how often, and each agent's output digests all it saw, so a wrongly
restored history or state changes the outputs. ``PATTERNAPP_HOLD=label`` makes a process wait in
that call until it is killed; ``PATTERNAPP_FAIL=label`` makes that call raise in that process.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import crashmatrix
import patternmatrix
import procs
from patternmatrix import APP, Logged
from relaypoint import Runtime, Workflow

INPUT = {"topic": "durable-debates"}


@pytest.fixture
def box(tmp_path: Path, store_url: str) -> procs.Sandbox:
    """A directory with the pattern app and its executions log, and a store of each backend. (The
    module-scoped runs below, and the kill placed inside SQLite's commit, stay on SQLite.)"""
    APP.write(tmp_path)
    return procs.Sandbox(tmp_path, APP.spec, db=store_url)


def calls(box: procs.Sandbox) -> list[Logged]:
    return patternmatrix.ledger(box.exec_log)


def start(box: procs.Sandbox, workflow: str, run_input: dict[str, Any] = INPUT, **env: str) -> procs.Done:
    return box.run("start", workflow, "--app", APP.spec, "--input", json.dumps(run_input), env=env)


def resume(box: procs.Sandbox, run_id: str, *more: str, **env: str) -> procs.Done:
    return box.run("resume", run_id, "--app", APP.spec, *more, env=env)


def killed_in(box: procs.Sandbox, label: str, *args: str, alone: bool = False) -> str:
    """Run ``relaypoint ARGS`` (start or resume) in a process that waits in the call ``label``,
    SIGKILL it there, and return the id of the run that call belongs to. ``alone``: once the calls
    running beside it have been recorded too (it is the only one running)."""
    proc = box.spawn(*args, env={"PATTERNAPP_HOLD": label})
    procs.wait_until(lambda: proc.poll() is not None or any(c.label == label and c.pid == proc.pid
                                                                for c in calls(box)), 60, f"call {label}")
    if alone:
        (run_id,) = {c.run_id for c in calls(box) if c.pid == proc.pid}
        procs.wait_until(lambda: [crashmatrix.row_label(s["idempotency_key"]) for s in procs.steps(box.db, run_id)
                                  if s["status"] == "running"] == [label], 60, f"the calls beside {label} to land")
    procs.kill(proc)
    done = procs.finish(proc)
    assert done.code == -signal.SIGKILL, done.text
    (run_id,) = {c.run_id for c in calls(box) if c.pid == proc.pid}
    return run_id


def started(box: procs.Sandbox, workflow: str, label: str, run_input: dict[str, Any] = INPUT, *,
            alone: bool = False) -> str:
    """Start ``workflow`` and kill its process inside the call ``label`` (``alone``: see
    :func:`killed_in`); returns the run id."""
    return killed_in(box, label, "start", workflow, "--app", APP.spec, "--input", json.dumps(run_input), alone=alone)


def label_of(task: dict[str, Any]) -> str:
    """The label of an execution as ``show --json`` lists it."""
    inside = task["parent"] is not None
    return crashmatrix.label_of(task["name"], task["iteration"] if inside else None, task["agent"])


def cut_open(task: dict[str, Any]) -> str:
    """The label of an execution a kill cut short, after checking it is recorded interrupted,
    with no output."""
    assert task["status"] == "interrupted" and task["output"] is None, task
    return label_of(task)


def shown(box: procs.Sandbox, run_id: str) -> dict[str, Any]:
    done = box.run("show", run_id, "--json")
    assert done.code == 0, done.text
    return json.loads(done.out)


def reference(workflow: str, run_input: dict[str, Any] = INPUT) -> crashmatrix.Reference:
    return crashmatrix.reference(APP, workflow, run_input)


def assert_same_as_uninterrupted(box: procs.Sandbox, run_id: str, workflow: str, again: Counter[str],
                                 run_input: dict[str, Any] = INPUT, *, at_once: bool = False) -> dict[str, Any]:
    """The run completed with exactly the executions and outputs of an uninterrupted run, in the
    same order, each listed once by ``show --json``; its calls ran once each, except those in
    ``again`` (the calls a kill cut short), each once more per kill, and in the same order as the
    uninterrupted run's once the repeats are left out (``at_once``: calls running at once begin in
    any order, so only the nodes' order). Returns ``show --json``."""
    run = shown(box, run_id)
    ref = reference(workflow, run_input)
    assert run["status"] == "completed", run["error"]
    assert [(label_of(t), t["output"]) for t in run["tasks"]] == list(ref.outputs.items())
    assert all(t["status"] == "completed" for t in run["tasks"])
    logged = [c.label for c in calls(box) if c.run_id == run_id]
    assert Counter(logged) == Counter(line[0] for line in ref.logged) + again
    order = [line[0] for line in ref.logged]
    if at_once:
        logged, order = [c.split("#")[0] for c in logged], [c.split("#")[0] for c in order]
    assert list(dict.fromkeys(logged)) == list(dict.fromkeys(order))
    return run


# ---- a debate killed in round 3 ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def debate_killed_in_round_3(tmp_path_factory: pytest.TempPathFactory) -> tuple[procs.Sandbox, str, dict]:
    """A 5-round debate whose process was SIGKILLed inside ``con``'s call of round 3 (the store
    as the kill left it, read with ``show --json``), then resumed to completion by a new process."""
    tmp = tmp_path_factory.mktemp("debate")
    APP.write(tmp)
    box = procs.Sandbox(tmp, APP.spec)
    run_id = started(box, "debate", "argue#3/con")
    at_kill = shown(box, run_id)
    done = resume(box, run_id)
    assert done.code == 0 and done.out.strip() == f"run {run_id} is completed", done.text
    return box, run_id, at_kill


def test_a_debate_killed_mid_call_in_round_3_resumes_to_the_uninterrupted_result(debate_killed_in_round_3):
    box, run_id, at_kill = debate_killed_in_round_3
    # what the kill left: rounds 1-2 and round 3's first call recorded, the cut call started
    assert [(label_of(t), t["status"]) for t in at_kill["tasks"][:-1]] == [("argue", "pending")] + [
        (f"argue#{r}/{a}", "completed") for r in (1, 2) for a in ("pro", "con")] + [("argue#3/pro", "completed")]
    assert cut_open(at_kill["tasks"][-1]) == "argue#3/con"
    run = assert_same_as_uninterrupted(box, run_id, "debate", again=Counter({"argue#3/con": 1}))
    assert [label_of(t) for t in run["tasks"]] == ["argue"] + [  # every execution once, in the order run
        f"argue#{r}/{a}" for r in range(1, 6) for a in ("pro", "con")] + ["argue#6/judge"]
    assert [t["attempts"] for t in run["tasks"]] == [1] * 6 + [2] + [1] * 5
    pids = list(dict.fromkeys(c.pid for c in calls(box)))
    assert len(pids) == 2 and [c.label for c in calls(box) if c.pid == pids[1]][0] == "argue#3/con"
    assert [(c.label, c.attempt) for c in calls(box) if c.label == "argue#3/con"] == [("argue#3/con", 1),
                                                                                      ("argue#3/con", 2)]


def test_events_of_a_resumed_execution_name_its_iteration(debate_killed_in_round_3):
    box, run_id, _ = debate_killed_in_round_3
    cut = [json.loads(e["detail"]) for e in procs.events(box.db, run_id)
           if e["kind"] == "step_started" and json.loads(e["detail"])["attempt"] == 2]
    assert cut == [{"attempt": 2, "iteration": 3, "agent": "con"}]


def test_a_debate_killed_inside_the_commit_of_round_3_resumes_to_the_uninterrupted_result(tmp_path):
    """The kill lands while the transaction recording round 3's last call (the 6th boundary of the
    run) holds the write lock: nothing of it is kept, so that call runs again, and only it."""
    txn_log = tmp_path / "txn.log"
    APP.write(tmp_path)
    box = procs.Sandbox(tmp_path, APP.spec, extra_env={"CRASHAPP_TXN_LOG": str(txn_log),
                                                       "CRASHAPP_TXN_DWELL": "0.05"})
    group = crashmatrix.launch(box, [("start", "debate", "--app", APP.spec, "--input", json.dumps(INPUT))])
    (done,), killed, _, _ = crashmatrix.play(group, ("txn", "_boundary", 6), 60, txn_log)
    assert killed == {done.pid}
    assert "main:_boundary" in crashmatrix.open_transactions(txn_log)[done.pid]
    run_id = done.out.strip()
    at_kill = shown(box, run_id)
    assert (label_of(at_kill["tasks"][-2]), at_kill["tasks"][-2]["status"]) == ("argue#3/pro", "completed")
    assert cut_open(at_kill["tasks"][-1]) == "argue#3/con"
    assert calls(box)[-1].label == "argue#3/con"  # the call had returned: its commit was cut
    (latest,) = procs.query(box.db, "SELECT state FROM checkpoints WHERE run_id = ? ORDER BY checkpoint_id DESC "
                                    "LIMIT 1", (run_id,))
    assert json.loads(latest["state"]) == {"next": 0, "in": {"round": 3, "spoken": ["pro"]}}  # as before the commit

    done = resume(box, run_id)
    assert done.code == 0, done.text
    assert_same_as_uninterrupted(box, run_id, "debate", again=Counter({"argue#3/con": 1}))


def test_a_debate_killed_in_round_3_and_cut_to_2_rounds_by_an_allowed_drift_ends_as_a_2_round_debate(box):
    """SIGKILLed inside con's call of round 3 of 5, resumed by a process whose definition has 2
    rounds (``--allow-drift``): round 3 is cancelled, pro's speech included, and the judge hears
    rounds 1 and 2 only, deciding exactly as in an uninterrupted 2-round debate; con's round 3,
    cut by the kill, never runs again."""
    run_id = started(box, "debate", "argue#3/con")
    done = resume(box, run_id, "--allow-drift", PATTERNAPP_ROUNDS="2")
    assert done.code == 0 and done.out.strip() == f"run {run_id} is completed", done.text
    cut = shown(box, run_id)
    assert [(label_of(t), t["status"]) for t in cut["tasks"]] == [("argue", "completed")] + [
        (f"argue#{r}/{a}", "completed") for r in (1, 2) for a in ("pro", "con")] + [
        ("argue#3/pro", "cancelled"), ("argue#3/con", "cancelled"), ("argue#3/judge", "completed")]
    assert cut["tasks"][5]["output"].startswith("argue#3/pro:")  # cancelled, its output kept
    fresh = start(box, "debate", PATTERNAPP_ROUNDS="2")
    assert fresh.code == 0, fresh.text
    ref = shown(box, fresh.out.strip())
    assert [(label_of(t), t["output"]) for t in cut["tasks"] if t["status"] == "completed"] == [
        (label_of(t), t["output"]) for t in ref["tasks"]]
    assert cut["tasks"][-1]["output"]["heard"] == 4
    assert Counter(c.label for c in calls(box) if c.run_id == run_id) == Counter(
        [f"argue#{r}/{a}" for r in (1, 2, 3) for a in ("pro", "con")] + ["argue#3/judge"])


def test_a_held_agent_killed_mid_call_waits_for_a_person_whose_output_is_recorded(box):
    """``on_orphan="hold"`` on a pattern: the resume after its agent's process died asks a person
    instead of calling the agent again; approving with an output records it as that call's output,
    and the debate goes on from there without calling that agent again."""
    run_id = started(box, "careful", "argue#2/pro")
    done = resume(box, run_id)
    assert done.code == 0 and done.out.strip() == (f"run {run_id} is awaiting_approval at step 'argue' (iteration 2, "
                                                   "agent 'pro')"), done.text
    run = shown(box, run_id)
    assert (label_of(run["tasks"][-1]), run["tasks"][-1]["status"]) == ("argue#2/pro", "interrupted")
    assert "'argue'" in run["pending"]["reason"] and run["pending"]["kind"] == "orphan"
    approved = box.run("approve", run_id, "--output", json.dumps("recorded by hand"))
    assert approved.code == 0, approved.text
    done = resume(box, run_id)
    assert done.code == 0 and done.out.strip() == f"run {run_id} is completed", done.text
    run = shown(box, run_id)
    assert [(label_of(t), t["status"]) for t in run["tasks"]] == [("argue", "completed")] + [
        (f"argue#{r}/{a}", "completed") for r in (1, 2) for a in ("pro", "con")] + [("argue#3/judge", "completed")]
    assert run["tasks"][3]["output"] == "recorded by hand"
    assert [c.label for c in calls(box)] == ["argue#1/pro", "argue#1/con", "argue#2/pro", "argue#2/con",
                                             "argue#3/judge"]


def test_the_interruption_of_a_call_names_its_iteration_and_agent(debate_killed_in_round_3):
    box, run_id, _ = debate_killed_in_round_3
    (event,) = [e for e in procs.events(box.db, run_id) if e["kind"] == "interruption_detected"]
    assert crashmatrix.event_label(event) == "argue#3/con"


@pytest.fixture(scope="module")
def poison_pill(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, list]:
    """A debate whose process was killed twice inside the same call (``argue#2/con``: the first
    run, then the resume), resumed by a runtime that allows 1 recovery: the run, its events."""
    tmp = tmp_path_factory.mktemp("poison")
    APP.write(tmp)
    box = procs.Sandbox(tmp, APP.spec)
    run_id = started(box, "debate", "argue#2/con")
    assert killed_in(box, "argue#2/con", "resume", run_id, "--app", APP.spec) == run_id
    with Runtime(str(box.db), APP.load(tmp).workflows, max_recoveries=1) as rt:
        assert rt.resume(run_id) == "failed"
        return run_id, rt.get(run_id), [(e.kind, e.step, e.detail) for e in rt.events(run_id)]


def test_a_call_that_keeps_killing_its_process_fails_the_run_as_a_poison_pill(poison_pill):
    _, run, events = poison_pill
    assert [(t.iteration, t.agent, t.status) for t in run.tasks][-1:] == [(2, "con", "failed")]
    assert "died 2 times" in run.error and "more than the 1 recoveries allowed" in run.error
    assert [detail["attempt"] for kind, _, detail in events if kind == "interruption_detected"] == [1, 2]


def test_a_poison_pill_inside_a_pattern_names_the_call(poison_pill):
    _, run, events = poison_pill
    assert "in step 'argue' (iteration 2, agent 'con')" in run.error
    (failed,) = [detail for kind, _, detail in events if kind == "run_failed"]
    assert (failed.get("iteration"), failed.get("agent")) == (2, "con")


# ---- the supervisor -----------------------------------------------------------------------------

def test_a_supervisor_killed_twice_routes_and_counts_as_an_uninterrupted_run(box):
    """Killed in an agent's call of turn 2, then in the router's call of turn 3: the routing
    decisions, the counts the router saw in ``ctx.state`` and every checkpoint's state equal an
    uninterrupted run's."""
    run_id = started(box, "supervise", "triage#2/code")
    assert killed_in(box, "triage#3/route", "resume", run_id, "--app", APP.spec) == run_id
    done = resume(box, run_id)
    assert done.code == 0, done.text
    run = assert_same_as_uninterrupted(box, run_id, "supervise",
                                       again=Counter({"triage#2/code": 1, "triage#3/route": 1}))
    ref = reference("supervise")
    routing = [t["output"] for t in run["tasks"] if t["agent"] == "route"]
    assert routing == [v for k, v in ref.outputs.items() if k.endswith("/route")]
    assert [r["choice"] for r in routing] == ["search", "code", "search", "code", None]
    seen = {c.label: c.state for c in calls(box) if c.label.endswith("/route")}  # both calls of a cut turn
    assert all(c.state == seen[c.label] for c in calls(box) if c.label in seen)
    assert seen == {c.label: c.state for c in patternmatrix.ledger(ref.logged) if c.label.endswith("/route")}
    assert seen["triage#5/route"] == {"activations": {"search": 2, "code": 2}, "idle": {"search": 1, "code": 0},
                                      "turn": 4}
    cps = [(c["kind"], c["seq"], json.loads(c["state"]) if c["state"] else None)
           for c in procs.checkpoints(box.db, run_id)]
    assert cps == ref.checkpoints
    last = [state["in"] for _, _, state in cps if "in" in state][-1]
    assert (last["activations"], last["idle"]) == ({"search": 2, "code": 2}, {"search": 1, "code": 0})


def test_a_router_that_raises_fails_the_run_in_one_line_and_a_resume_asks_only_that_turn_again(box):
    done = start(box, "supervise", PATTERNAPP_FAIL="triage#3/route")
    line = done.one_line_error()
    assert done.code == 1 and line is not None, done.text
    run_id = calls(box)[0].run_id
    assert line == (f"Error: run {run_id} failed: step 'triage' (iteration 3, agent 'route') failed: RuntimeError: "
                    "triage#3/route failed as asked")
    assert shown(box, run_id)["status"] == "failed"
    done = resume(box, run_id)
    assert done.code == 0, done.text
    run = assert_same_as_uninterrupted(box, run_id, "supervise", again=Counter({"triage#3/route": 1}))
    routers = [c.label for c in calls(box) if c.label.endswith("/route")]
    assert routers == ["triage#1/route", "triage#2/route", "triage#3/route", "triage#3/route", "triage#4/route",
                       "triage#5/route"]
    assert [t["attempts"] for t in run["tasks"] if t["agent"] == "route"] == [1, 1, 2, 1, 1]


# ---- the nodes whose calls run side by side ----------------------------------------------------

@pytest.mark.parametrize("label", ["gather#1/b", "each#3", "chorus#1/con"])
def test_a_fan_out_node_killed_mid_call_re_runs_only_that_call(box, label):
    """A parallel branch, a map's item and a concurrent debate's speaker, each SIGKILLed in its
    call once the calls beside it have landed: the resume runs that call again and no other, the
    map's items are never listed again, and the results are an uninterrupted run's. (Kills among
    calls still in flight: the concurrent crash matrix, test_pattern_crash_matrix.py.)"""
    run_id = started(box, "fanout", label, alone=True)
    done = resume(box, run_id)
    assert done.code == 0, done.text
    run = assert_same_as_uninterrupted(box, run_id, "fanout", again=Counter({label: 1}), at_once=True)
    assert [c.label for c in calls(box)].count("each#1/items") == 1
    results = {t["name"]: t["output"] for t in run["tasks"] if t["parent"] is None}
    assert list(results["gather"]) == ["a", "b", "c"]
    assert [o.split(":")[0] for o in results["each"]] == ["each#1", "each#2", "each#3", "each#4"]
    assert results["chorus"]["heard"] == 6  # the judge hears both rounds of three


# ---- the planner --------------------------------------------------------------------------------

def test_a_planner_killed_mid_subtask_resumes_its_recorded_plan(box):
    run_id = started(box, "plan", "build#2/test")
    done = resume(box, run_id)
    assert done.code == 0, done.text
    run = assert_same_as_uninterrupted(box, run_id, "plan", again=Counter({"build#2/test": 1}))
    assert [c.label for c in calls(box)].count("build#1/plan") == 1  # never decomposed again
    assert list(run["tasks"][0]["output"]) == ["t1", "t2", "t3"]


def test_a_failed_subtask_replans_once_recorded_and_resumable(box):
    """Subtask t2 fails: the re-plan (recorded, as the execution ``build#4/replan``: past the
    ordinals 1-3 the plan gave) replaces it with t2r (subtask 4); killed inside t2r, the run
    resumes at t2r with the new plan, asking nothing again."""
    failing = {**INPUT, "fail": ["t2"]}
    run_id = started(box, "plan", "build#4/code", failing)
    at_kill = shown(box, run_id)
    assert [(label_of(t), t["status"]) for t in at_kill["tasks"][:-1]] == [
        ("build", "pending"), ("build#1/plan", "completed"), ("build#1/code", "completed"),
        ("build#2/test", "failed"), ("build#4/replan", "completed")]
    assert cut_open(at_kill["tasks"][-1]) == "build#4/code"
    assert at_kill["tasks"][3]["error"] == "RuntimeError: subtask t2 cannot be done"
    assert [t["id"] for t in at_kill["tasks"][4]["output"]] == ["t2r", "t3"]

    done = resume(box, run_id)
    assert done.code == 0, done.text
    run = shown(box, run_id)
    ref = reference("plan", failing)
    assert [(label_of(t), t["status"], t["output"]) for t in run["tasks"]] == [
        (label, "failed" if label == "build#2/test" else "completed", output) for label, output in ref.outputs.items()]
    assert list(run["tasks"][0]["output"]) == ["t1", "t2r", "t3"]
    logged = Counter(c.label for c in calls(box))
    assert logged == Counter(line[0] for line in ref.logged) + Counter({"build#4/code": 1})
    assert (logged["build#1/plan"], logged["build#4/replan"], logged["build#2/test"]) == (1, 1, 1)


def test_max_replans_fails_the_run_with_the_reason(box):
    done = start(box, "plan", {**INPUT, "fail": ["t2", "t2r"]})
    run_id = calls(box)[0].run_id
    assert done.code == 1 and done.one_line_error() == (
        f"Error: run {run_id} failed: subtask 't2r' of 'build' failed: RuntimeError: subtask t2r cannot be done; "
        "the plan was already re-planned 1 times (max_replans=1)"), done.text
    assert [c.label for c in calls(box)] == ["build#1/plan", "build#1/code", "build#2/test", "build#4/replan",
                                             "build#4/code"]
    assert shown(box, run_id)["status"] == "failed"


def test_resume_replan_decomposes_again_once(box):
    """Killed inside t2; ``resume --replan`` first finishes the cut call (t2 runs again), then calls
    the plan function again (its answer repeats completed t1 and t2, which are kept, not run
    again); killed again inside t3, a plain resume keeps the new plan."""
    run_id = started(box, "plan", "build#2/test")
    assert killed_in(box, "build#4/code", "resume", run_id, "--app", APP.spec, "--replan") == run_id
    done = resume(box, run_id)
    assert done.code == 0, done.text
    run = shown(box, run_id)
    assert run["status"] == "completed"
    plans = [c for c in calls(box) if c.label.endswith("/plan")]
    assert [c.label for c in plans] == ["build#1/plan", "build#4/plan"]
    assert plans[1].state["decompose"] is True
    assert [c.label for c in calls(box) if c.label.startswith("build#2/")] == ["build#2/test", "build#2/test"]
    done_calls = {label_of(t): t["output"] for t in run["tasks"] if t["status"] == "completed"}
    assert run["tasks"][0]["output"] == {"t1": done_calls["build#1/code"], "t2": done_calls["build#2/test"],
                                         "t3": done_calls["build#4/code"]}
    assert [e["kind"] for e in procs.events(box.db, run_id)].count("replan_requested") == 1


def test_the_call_a_run_stopped_in_finishes_before_resume_replan_decomposes(box):
    run_id = started(box, "plan", "build#2/test")
    done = resume(box, run_id, "--replan")
    assert done.code == 0, done.text
    run = shown(box, run_id)
    assert run["status"] == "completed"
    assert [(label_of(t), t["status"]) for t in run["tasks"] if t["status"] != "completed"] == []
    assert [label_of(t) for t in run["tasks"][1:]] == ["build#1/plan", "build#1/code", "build#2/test", "build#4/plan",
                                                       "build#4/code"]


def test_a_decomposition_asked_by_resume_replan_has_its_own_idempotency_key(box):
    run_id = started(box, "plan", "build#1/code")
    done = resume(box, run_id, "--replan")
    assert done.code == 0, done.text
    keys = [s["idempotency_key"] for s in procs.steps(box.db, run_id) if s["agent"] == "plan"]
    assert len(keys) == 2 and len(set(keys)) == 2, keys


# ---- forks from an iteration of a killed run -------------------------------------------------------

@pytest.mark.parametrize(("workflow", "cut", "pattern", "iteration"), [
    ("debate", "argue#4/pro", "argue", 3),      # from round 3 of a debate killed in round 4
    ("supervise", "triage#4/code", "triage", 3),  # from turn 3 of a supervisor killed in turn 4
])
def test_a_fork_from_an_iteration_of_a_killed_run_runs_that_iteration_onward_only(box, workflow, cut, pattern,
                                                                                  iteration):
    parent = started(box, workflow, cut)
    forked = box.run("fork", parent, "--from", pattern, "--iteration", str(iteration))
    assert forked.code == 0, forked.text
    fork_id = forked.out.split()[0]
    done = resume(box, fork_id)
    assert done.code == 0 and done.out.strip() == f"run {fork_id} is completed", done.text
    ref = reference(workflow)
    run = shown(box, fork_id)
    assert [(label_of(t), t["output"]) for t in run["tasks"]] == list(ref.outputs.items())
    labels = [line[0] for line in ref.logged]
    first = next(i for i, label in enumerate(labels) if label.startswith(f"{pattern}#{iteration}/"))
    assert [c.label for c in calls(box) if c.run_id == fork_id] == labels[first:]  # nothing before it again
    assert shown(box, parent)["status"] == "interrupted"  # the parent is left as it was


# ---- a person as a participant ------------------------------------------------------------------

def test_a_person_in_a_debate_is_asked_on_their_turn_across_processes(box):
    done = start(box, "person")
    run_id = done.out.strip()
    assert done.code == 0 and done.err.strip() == (f"run {run_id} is awaiting_input at step 'argue' (iteration 1, "
                                                   "agent 'con')"), done.text
    answers = ["the cost is too high", "still too high"]
    for round_, answer in enumerate(answers, 1):
        run = shown(box, run_id)
        assert run["status"] == "awaiting_input"
        assert run["pending"]["reason"] == f"Your rebuttal? (argue, round {round_}, as 'con')"
        assert (label_of(run["tasks"][-1]), run["tasks"][-1]["status"]) == (f"argue#{round_}/con", "awaiting_input")
        responded = box.run("respond", run_id, "--value", json.dumps(answer), "--by", "dana")
        assert responded.code == 0, responded.text
        done = resume(box, run_id)
        assert done.code == 0, done.text
        if round_ == 1:
            assert done.out.strip() == f"run {run_id} is awaiting_input at step 'argue' (iteration 2, agent 'con')"
    assert done.out.strip() == f"run {run_id} is completed"
    run = shown(box, run_id)
    assert [(label_of(t), t["output"]) for t in run["tasks"] if t["agent"] == "con"] == [
        ("argue#1/con", answers[0]), ("argue#2/con", answers[1])]
    assert run["tasks"][0]["output"]["heard"] == 4
    assert [c.label for c in calls(box)] == ["argue#1/pro", "argue#2/pro", "argue#3/judge"]  # each asked once


def test_a_person_approving_in_a_debate_gives_the_approval_as_their_output(box):
    done = start(box, "consent")
    run_id = done.out.strip()
    assert done.code == 0 and "awaiting_approval" in done.err, done.text
    run = shown(box, run_id)
    assert (label_of(run["tasks"][-1]), run["tasks"][-1]["status"]) == ("argue#1/con", "awaiting_approval")
    approved = box.run("approve", run_id, "--by", "erin", "--comment", "fair point", "--output",
                       json.dumps({"concede": False}))
    assert approved.code == 0, approved.text
    done = resume(box, run_id)
    assert done.code == 0 and done.out.strip() == f"run {run_id} is completed", done.text
    (con,) = [t for t in shown(box, run_id)["tasks"] if t["agent"] == "con"]
    assert con["output"] == {"approved": True, "by": "erin", "comment": "fair point", "value": {"concede": False}}
    assert con["attempts"] == 2  # asked, then run again with the decision


def test_a_person_who_misses_their_turns_deadline_ends_the_run(box):
    done = start(box, "hurry")
    run_id = done.out.strip()
    assert done.code == 0, done.text
    deadline = shown(box, run_id)["pending"]["deadline_at"]
    assert deadline is not None
    text = box.run("show", run_id)
    assert text.code == 0 and "(checkpoint " in text.out and ", deadline 20" in text.out, text.text  # said in show
    time.sleep(1.1)
    late = box.run("respond", run_id, "--value", json.dumps("too late?"))
    assert late.code == 1 and late.one_line_error() is not None and "deadline" in late.err, late.text
    run = shown(box, run_id)
    assert run["status"] == "rejected"
    assert [(label_of(t), t["status"]) for t in run["tasks"]] == [("argue", "cancelled"), ("argue#1/pro", "completed"),
                                                                  ("argue#1/con", "cancelled")]
    assert any(e["kind"] == "deadline_expired" for e in procs.events(box.db, run_id))


# ---- storage per round ----------------------------------------------------------------------------

def _bytes(row: dict[str, Any]) -> int:
    return sum(len(v) if isinstance(v, (str, bytes)) else len(str(v)) for v in row.values() if v is not None)


def per_round(db: Path, run_id: str) -> tuple[list[int], list[dict[str, int]], list[int]]:
    """What each round of a debate wrote, in bytes (the sum of its rows' values) and rows per
    table: its agents' executions, their outputs, the checkpoints that started them (the earliest
    one at their seq) and their events; and the size of every checkpoint's state."""
    rounds: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    calls = {s["seq"]: s["iteration"] for s in procs.query(
        db, "SELECT seq, iteration FROM steps WHERE run_id = ? AND agent IN ('pro', 'con')", (run_id,))}
    for table, sql in (("steps", "SELECT * FROM steps WHERE run_id = ?"),
                       ("outputs", "SELECT * FROM outputs WHERE run_id = ?"),
                       ("checkpoints", "SELECT * FROM checkpoints WHERE run_id = ? AND checkpoint_id IN "
                                       "(SELECT min(checkpoint_id) FROM checkpoints WHERE run_id = ? GROUP BY seq)")):
        for row in procs.query(db, sql, (run_id,) * sql.count("?")):
            if row["seq"] in calls:
                rounds.setdefault(calls[row["seq"]], []).append((table, row))
    for row in procs.query(db, "SELECT * FROM events WHERE run_id = ?", (run_id,)):
        detail = json.loads(row["detail"]) if row["detail"] else {}
        if detail.get("agent") in ("pro", "con"):
            rounds.setdefault(detail["iteration"], []).append(("events", row))
    states = [len(r["state"]) for r in procs.query(db, "SELECT state FROM checkpoints WHERE run_id = ?", (run_id,))]
    return ([sum(_bytes(row) for _, row in rounds[n]) for n in sorted(rounds)],
            [dict(Counter(table for table, _ in rounds[n])) for n in sorted(rounds)], states)


def test_a_round_costs_the_same_storage_in_a_10_and_a_100_round_debate(tmp_path):
    def argue(rounds: int) -> Workflow:
        wf = Workflow(f"debate-{rounds}")
        wf.debate("argue", agents={"pro": lambda ctx: "p" * 200, "con": lambda ctx: {"rebuttal": "c" * 200}},
                  rounds=rounds, judge=lambda ctx: len(ctx.history))
        return wf

    with Runtime(str(tmp_path / "store.db"), [argue(10), argue(100)]) as rt:
        short, long = rt.start("debate-10"), rt.start("debate-100")
        assert rt.get(long).tasks[0].output == 200
    bytes_10, rows_10, states_10 = per_round(tmp_path / "store.db", short)
    bytes_100, rows_100, states_100 = per_round(tmp_path / "store.db", long)
    print(f"\nbytes per round: 10 rounds {bytes_10}; 100 rounds min {min(bytes_100)} max {max(bytes_100)}; "
          f"checkpoint state sizes: 10 rounds {sorted(set(states_10))}, 100 rounds {sorted(set(states_100))}")
    assert len(bytes_10) == 10 and len(bytes_100) == 100
    per_call = {"steps": 2, "outputs": 2, "checkpoints": 2, "events": 4}  # per round: 2 calls, nothing else
    assert all(rows == per_call for rows in rows_10 + rows_100)
    mean_10, mean_100 = sum(bytes_10) / 10, sum(bytes_100) / 100
    assert abs(mean_100 - mean_10) / mean_10 < 0.02, (mean_10, mean_100)
    # no round costs more for the rounds before it: only ids and counters gain digits (a state or
    # row that carried one reference per earlier round would add hundreds of bytes by round 100)
    assert max(bytes_100) <= min(bytes_100) * 1.05, bytes_100
    assert max(states_100) <= max(states_10) + 2  # a checkpoint's state: the round's digits, not the rounds before
