"""What the store and the operations around it do for patterns, on real SQLite files: the reads of a
group's children use an index and cost the same however many executions other groups have;
decisions on a pattern's execution (a held orphan, a person's approval turn) act on that row; forks
from an iteration boundary copy what came before it and refuse what they cannot copy, in one line;
and, end to end with real pattern runs: a debate forked from round 3 and a supervisor from turn 3
end as their parents without re-running what came before, ``resume --replan`` asks a planner for a
new plan, an allowed drift keeps a debate under way with a person's pending answer."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers import APP, DB, FakeClock, app_workflows, ids, one_line_error, relaypoint, store_state, write_app
from test_store_contract import DEBATE, add_debate, add_run, at, stage

from relaypoint import Runtime, Workflow, human
from relaypoint.errors import RefusedTransition
from relaypoint.status import CheckpointKind, RunStatus, StepStatus
from relaypoint.store import Lookup, NewCheckpoint, NewStep, RunStore, RunUpdate, StepEnd, open_store

# ---- reads: index use and cost ------------------------------------------------------------------


def add_group(store: RunStore, run_id: str, parent: int, name: str, first: int, count: int) -> None:
    """``count`` completed children of group ``parent`` (named ``name``), from seq ``first``, with outputs."""
    stage(store, run_id, inserted=[NewStep(seq=first + i, name=name, iteration=i + 1, agent="a", parent=parent,
                                           status=StepStatus.COMPLETED, idempotency_key=f"{run_id}/{name}#{i + 1}/a")
                                   for i in range(count)],
          outputs={first + i: json.dumps({"n": i}) for i in range(count)})


def test_pattern_reads_use_the_primary_key_or_an_index(tmp_path):
    with open_store(str(tmp_path / DB), create=True) as store:
        add_debate(store, "r1", rounds=1)
        trace: list[str] = []
        store.trace(trace.append)
        store.steps("r1", parent=1)
        store.steps("r1", parent=1, outputs=True)
        store.checkpoint("r1", Lookup.STATE_AT, 3)
        store.steps("r1")
        store.trace(None)
        plans = [" | ".join(r[3] for r in store.conn.execute(f"EXPLAIN QUERY PLAN {s}")) for s in trace]
    assert [p.split(" USING ")[1].split()[1] for p in plans] == [
        "steps_by_name", "steps_by_name", "checkpoints_by_run", "sqlite_autoindex_steps_1"], plans
    assert all("SCAN" not in p for p in plans), plans  # every table is searched, none read whole


def test_reading_a_groups_children_costs_the_same_however_many_executions_other_groups_have(tmp_path):
    costs = []
    with open_store(str(tmp_path / DB), create=True) as store:
        for run_id, others in (("few", 10), ("many", 5_000)):
            add_run(store, run_id, steps=DEBATE)
            add_group(store, run_id, 1, "argue", 3, 6)
            add_group(store, run_id, 2, "verdict", 9, others)  # a later group, larger and larger
            instructions = [0]

            def tick() -> int:
                instructions[0] += 1
                return 0

            store.conn.set_progress_handler(tick, 1)
            rows = store.rows_read
            assert len(store.steps(run_id, parent=1)) == len(store.steps(run_id, parent=1, outputs=True)) == 6
            store.conn.set_progress_handler(None, 1)
            costs.append((store.rows_read - rows, instructions[0]))
    (few_rows, few_work), (many_rows, many_work) = costs
    assert few_rows == many_rows == 12
    assert many_work < few_work * 1.5, costs  # B-tree depth only, not the other group's 5,000 rows


# ---- decisions on a pattern's execution ---------------------------------------------------------


def paused_turn(path: str, run_id: str, status: StepStatus, kind: str, deadline: float | None = None) -> int:
    """A debate run paused on its round-2 execution (seq 5, agent 'ann'), found in ``status`` behind a
    ``kind`` checkpoint (a person's approval turn, or a held orphan); 'brief' and round 1 completed.
    Returns the execution's seq."""
    with open_store(path, create=True) as store:
        add_debate(store, run_id, rounds=1)
        stage(store, run_id, 9, inserted=[NewStep(seq=5, name="argue", iteration=2, agent="ann", parent=1,
                                                  status=status, attempts=1, idempotency_key=f"{run_id}/argue#2/ann")],
              checkpoints=[NewCheckpoint(run_id, kind, 5, "argue", at(9), reason="ann's turn",
                                         state='{"next": 1, "in": {"round": 2}}',
                                         deadline_at=None if deadline is None else at(deadline), paused_seq=5)],
              run=RunUpdate(status=RunStatus.AWAITING_APPROVAL, current_step="argue", lease=None, touch=False))
    return 5


def test_approving_a_persons_turn_re_runs_it_with_the_decision_kept_in_the_checkpoint(db):
    seq = paused_turn(db, "r1", StepStatus.AWAITING_APPROVAL, CheckpointKind.APPROVAL)
    with Runtime(db) as rt:
        cp = rt.approve("r1", by="ann", comment="agreed", output={"points": 3})
        turn, group = rt.store.step("r1", seq), rt.store.step("r1", 1)
        assert (turn.status, turn.attempts, turn.has_output) == (StepStatus.PENDING, 1, False)
        assert (group.status, group.has_output) == (StepStatus.PENDING, False)
        head = rt.store.run("r1", documents=False)
        assert (head.status, head.current_step, head.steps_done) == (RunStatus.QUEUED, "argue", 1)
        decided = rt.store.checkpoint("r1", Lookup.LAST_PAUSE)
        assert decided.checkpoint_id == cp.checkpoint_id and decided.seq == seq
        assert (decided.decision, decided.decided_by, decided.comment, decided.value) == (
            "approved", "ann", "agreed", {"points": 3})
        assert rt.store.checkpoint("r1", Lookup.PENDING) is None
        assert [h.agent for h in rt.store.steps("r1", parent=1, outputs=True)] == ["pro", "con"]  # the turn has no output yet
        assert rt.events("r1")[-1].kind == "approved"


@pytest.mark.parametrize("output", [None, {"said": "pro wins"}], ids=["re-run", "recorded"])
def test_approving_a_held_orphan_inside_a_pattern_acts_on_its_own_row(db, output):
    seq = paused_turn(db, "r1", StepStatus.INTERRUPTED, CheckpointKind.ORPHAN)
    with Runtime(db) as rt:
        rt.approve("r1", by="ops", output=output)
        orphan, group = rt.store.step("r1", seq), rt.store.step("r1", 1)
        assert orphan.status == (StepStatus.PENDING if output is None else StepStatus.COMPLETED)
        assert (group.status, group.has_output) == (StepStatus.PENDING, False)  # not the pattern's row
        assert [h.output for h in rt.store.steps("r1", parent=1, outputs=True)][2:] == ([] if output is None else [output])
        head = rt.store.run("r1", documents=False)
        assert (head.status, head.current_step, head.steps_done) == (RunStatus.QUEUED, "argue", 1)  # top level only


@pytest.mark.parametrize("end", ["reject", "expire", "cancel"])
def test_ending_a_run_paused_on_a_persons_turn_cancels_the_turn(db, end):
    clock = FakeClock(at(100))
    seq = paused_turn(db, "r1", StepStatus.AWAITING_APPROVAL, CheckpointKind.APPROVAL, deadline=50)
    with Runtime(db, clock=clock) as rt:
        if end == "reject":
            clock.now = at(10)
            rt.reject("r1", "not convincing", by="ann")
        elif end == "expire":
            assert rt.expire_deadlines() == ["r1"]
        else:
            rt.cancel("r1", by="ops")
        assert [(s.seq, s.status) for s in rt.steps("r1")] == [
            (0, StepStatus.COMPLETED), (1, StepStatus.CANCELLED), (3, StepStatus.COMPLETED), (4, StepStatus.COMPLETED),
            (seq, StepStatus.CANCELLED), (2, StepStatus.CANCELLED)]
        assert rt.store.run("r1", documents=False).status == {"reject": RunStatus.REJECTED, "expire": RunStatus.REJECTED,
                                              "cancel": RunStatus.CANCELLED}[end]


# ---- forks from an iteration boundary -----------------------------------------------------------


def debate_store(db: str) -> str:
    """A store holding run 'r1': 'brief' completed, debate 'argue' through round 3 (seqs 3..8)."""
    with open_store(db, create=True) as store:
        add_debate(store, "r1", rounds=3)
    return db


def test_a_fork_from_a_round_copies_the_rounds_before_it_and_starts_from_the_state_there(db):
    with Runtime(debate_store(db), id_factory=ids("f1")) as rt:
        assert rt.fork("r1", "argue", {"topic": "new"}, iteration=2) == "f1"
        run = rt.get("f1")
        assert (run.status, run.parent_run_id, run.forked_from_step, run.current_step, run.steps_done,
                run.steps_total, run.input) == (RunStatus.QUEUED, "r1", "argue", "argue", 1, 3, {"topic": "new"})
        assert [(t.seq, t.iteration, t.agent, t.status, t.output) for t in run.tasks] == [
            (0, 1, None, StepStatus.COMPLETED, "the brief"), (1, 1, None, StepStatus.PENDING, None),
            (3, 1, "pro", StepStatus.COMPLETED, {"round": 1, "by": "pro"}),
            (4, 1, "con", StepStatus.COMPLETED, {"round": 1, "by": "con"}), (2, 1, None, StepStatus.PENDING, None)]
        fork = rt.store.checkpoint("f1", Lookup.LATEST)
        assert (fork.kind, fork.seq, fork.step) == ("fork", 5, "argue")  # round 2's first execution is appended there
        assert fork.state == {"next": 1, "in": {"round": 2, "spoken": []},
                              "fork": {"parent_run_id": "r1", "from_step": "argue", "iteration": 2}}
        forked = rt.events("f1")[0]
        assert (forked.kind, forked.step, forked.detail) == ("forked", "argue", {
            "parent_run_id": "r1", "input_replaced": True, "iteration": 2})
        assert rt.store.step("f1").seq + 1 == fork.seq


def test_forking_a_fork_from_an_iteration_it_copied_names_the_run_that_recorded_it(db):
    with Runtime(debate_store(db), id_factory=ids("f1", "f2")) as rt:
        rt.fork("r1", "argue", iteration=2)
        with pytest.raises(RefusedTransition, match="^run f1 recorded no driver state where iteration 1 of 'argue' "
                                                    r"began \(its earlier iterations were copied from another run\); "
                                                    "fork that run$"):
            rt.fork("f1", "argue", iteration=1)
        assert rt.store.list_runs(parent="f1", limit=None) == []


def test_a_fork_says_the_iteration_it_was_forked_from(db, tmp_path):
    """``show``, ``show --json`` and the console's header name the round a fork starts at, as
    ``--iteration`` gave it; a fork from a whole step names none."""
    from relaypoint.tui.widgets.detail import run_header

    with Runtime(debate_store(db), id_factory=ids("f1", "f2")) as rt:
        rt.fork("r1", "argue", iteration=2)
        rt.fork("r1", "argue")
        assert (rt.get("f1").forked_from_iteration, rt.get("f2").forked_from_iteration) == (2, None)
        header = run_header(rt.get("f1"), at(60))
    assert "forked at step argue, iteration 2" in " ".join(str(cell) for c in header.columns for cell in c.cells)
    for rid, line, iteration in (("f1", "forked from r1 at step 'argue', iteration 2\n", 2),
                                 ("f2", "forked from r1 at step 'argue'\n", None)):
        assert line in relaypoint(tmp_path, "show", rid, db=db).stdout
        shown = json.loads(relaypoint(tmp_path, "show", rid, "--json", db=db).stdout)
        assert shown["forked_from_iteration"] == iteration


@pytest.mark.parametrize(("args", "refusal"), [
    (("--from", "brief", "--iteration", "1"),
     "step 'brief' of run r1 is not a pattern, so it has no iterations; fork from it without an iteration"),
    (("--from", "argue", "--iteration", "7"),
     "pattern 'argue' of run r1 has no iteration 7; its iterations are 1, 2, 3"),
    (("--from", "verdict", "--iteration", "1"),
     "step 'argue' of run r1 has not completed, so there is no output to reuse; fork from 'argue' or earlier"),
], ids=["not-a-pattern", "no-such-iteration", "pattern-not-completed"])
def test_a_fork_from_an_iteration_it_cannot_copy_is_refused_in_one_line(db, tmp_path, args, refusal):
    debate_store(db)
    before = store_state(db)
    assert one_line_error(relaypoint(tmp_path, "fork", "r1", *args, db=db)) == f"Error: {refusal}"
    assert store_state(db) == before


def test_a_fork_from_a_round_after_an_unfinished_execution_is_refused(db, tmp_path):
    debate_store(db)
    with open_store(db) as store:
        stage(store, "r1", marked={6: StepStatus.INTERRUPTED})
    assert one_line_error(relaypoint(tmp_path, "fork", "r1", "--from", "argue", "--iteration", "3", db=db)) == (
        "Error: execution 6 of pattern 'argue' of run r1 (iteration 2, agent 'con') is interrupted, so there is no "
        "output to reuse; fork from iteration 2 or earlier")
    with open_store(db) as store:  # a failure the pattern went on from is copied as recorded
        stage(store, "r1", ended=[StepEnd(6, StepStatus.FAILED, error="boom")])
    new_id = relaypoint(tmp_path, "fork", "r1", "--from", "argue", "--iteration", "3", db=db).stdout.strip()
    with open_store(db) as store:
        assert (store.step(new_id, 6).status, store.step(new_id, 6).error) == (StepStatus.FAILED, "boom")


# ---- resume --replan ----------------------------------------------------------------------------


def test_replanning_a_run_that_is_not_inside_a_planner_is_refused_in_one_line_and_writes_nothing(db, tmp_path):
    write_app(tmp_path)
    with Runtime(db, app_workflows(), clock=FakeClock()) as rt:
        rid = rt.start("boom")  # fails at its second step: resumable
    before = store_state(db)
    assert one_line_error(relaypoint(tmp_path, "resume", rid, "--app", APP, "--replan", db=db)) == (
        "Error: this run is not inside a planner, so there is nothing to re-plan; resume it without --replan")
    assert store_state(db) == before


# ---- end to end: real pattern runs --------------------------------------------------------------


def debate_flow(calls: Counter, rounds: int = 5) -> Workflow:
    """A deterministic debate between steps: each speech names its round and what it heard; the
    judge returns every speech; ``calls`` counts each function's executions."""
    wf = Workflow("panel")

    @wf.step
    def brief(ctx):
        calls["brief"] += 1
        return {"topic": ctx.input["topic"]}

    def speaker(ctx):
        calls[ctx.agent, ctx.iteration] += 1
        return f"{ctx.agent} {ctx.iteration} on {ctx.results['brief']['topic']} after {len(ctx.history)}"

    def judge(ctx):
        calls["judge"] += 1
        return [h["output"] for h in ctx.history]

    wf.debate("argue", agents={"pro": speaker, "con": speaker}, rounds=rounds, judge=judge)

    @wf.step
    def report(ctx):
        calls["report"] += 1
        return {"speeches": len(ctx.results["argue"]), "last": ctx.results["argue"][-1]}

    return wf


def shown(rt: Runtime, rid: str) -> list[tuple]:
    return [(t.name, t.iteration, t.agent, t.parent, t.status, t.output) for t in rt.get(rid).tasks]


def test_a_debate_forked_from_round_3_re_runs_round_3_onward_and_ends_as_its_parent(db):
    calls: Counter = Counter()
    with Runtime(db, [debate_flow(calls)], id_factory=ids("parent", "fork")) as rt:
        rt.start("panel", {"topic": "tests"})
        calls.clear()
        assert rt.fork("parent", "argue", iteration=3) == "fork"
        assert rt.resume("fork") == RunStatus.COMPLETED
        assert shown(rt, "fork") == shown(rt, "parent")
        assert calls == Counter({**{(a, r): 1 for r in (3, 4, 5) for a in ("pro", "con")}, "judge": 1, "report": 1})
        keys = [t.idempotency_key for t in rt.get("fork").tasks if t.parent is not None]
        assert keys == [f"parent/argue#{r}/{a}" for r in (1, 2) for a in ("pro", "con")] + [
            f"fork/argue#{r}/{a}" for r in (3, 4, 5) for a in ("pro", "con")] + ["fork/argue#6/judge"]
        run = rt.get("fork")
        assert (run.steps_done, run.steps_total) == (3, 3)


def test_a_debate_forked_from_a_round_with_a_new_input_keeps_the_rounds_before_it(db):
    calls: Counter = Counter()
    with Runtime(db, [debate_flow(calls, rounds=3)], id_factory=ids("parent", "fork")) as rt:
        rt.start("panel", {"topic": "cats"})
        rt.fork("parent", "argue", {"topic": "dogs"}, iteration=2)
        assert rt.resume("fork") == RunStatus.COMPLETED
        assert rt.step_output("fork", "argue") == [
            "pro 1 on cats after 0", "con 1 on cats after 1",  # copied: brief's output is the parent's
            "pro 2 on cats after 2", "con 2 on cats after 3", "pro 3 on cats after 4", "con 3 on cats after 5"]
        assert rt.get("fork").input == {"topic": "dogs"} and calls["brief"] == 1


def test_a_supervisor_forked_from_turn_3_routes_as_its_parent_without_asking_turns_1_and_2_again(db):
    calls: Counter = Counter()
    wf = Workflow("sup")

    def route(ctx):
        calls["route", ctx.iteration] += 1
        return ["search", "code", "search", "code", None][ctx.state["turn"]]

    def agent(ctx):
        calls[ctx.agent, ctx.iteration] += 1
        return None if ctx.agent == "search" and ctx.state["activations"]["search"] else f"{ctx.agent} {ctx.iteration}"

    wf.supervisor("triage", agents={"search": agent, "code": agent}, route=route, max_turns=10, max_idle=3)
    with Runtime(db, [wf], id_factory=ids("parent", "fork")) as rt:
        rt.start("sup")
        calls.clear()
        rt.fork("parent", "triage", iteration=3)
        fork = rt.store.checkpoint("fork", Lookup.LATEST)
        assert fork.state["in"] == {"turn": 2, "activations": {"search": 1, "code": 1},
                                    "idle": {"search": 0, "code": 0}}
        assert rt.resume("fork") == RunStatus.COMPLETED
        assert shown(rt, "fork") == shown(rt, "parent")
        assert calls == Counter({("route", 3): 1, ("search", 3): 1, ("route", 4): 1, ("code", 4): 1, ("route", 5): 1})


def test_resume_replan_asks_the_planner_for_a_new_plan_keeping_the_completed_subtasks(db):
    calls: Counter = Counter()
    wf = Workflow("plan")

    def make_plan(ctx):
        calls["plan"] += 1
        if ctx.state["plan"] is None:
            return [{"id": "t1", "agent": "code", "input": {"file": "a.py"}},
                    {"id": "t2", "agent": "code", "input": {"file": "b.py"}, "after": ["t1"]}]
        return [{"id": "t2-alt", "agent": "code", "input": {"file": "c.py"}}]

    def code(ctx):
        calls[ctx.input["file"]] += 1
        if ctx.input["file"] == "b.py":
            raise RuntimeError("cannot edit b.py")
        return f"edited {ctx.input['file']}"

    wf.planner("build", plan=make_plan, agents={"code": code})  # no replan function: a failed subtask fails the run
    with Runtime(db, [wf], id_factory=ids("r1")) as rt:
        rt.start("plan")
        assert rt.get("r1").error == ("subtask 't2' of 'build' failed: RuntimeError: cannot edit b.py (no replan "
                                      "function to recover)")
        calls.clear()
        assert rt.resume("r1", replan=True) == RunStatus.COMPLETED
        assert calls == Counter({"plan": 1, "c.py": 1})  # t1 kept, t2 not retried
        assert rt.step_output("r1", "build") == {"t1": "edited a.py", "t2-alt": "edited c.py"}
        assert [(t.agent, t.status) for t in rt.get("r1").tasks if t.parent is not None] == [
            ("plan", "completed"), ("code", "completed"), ("code", "failed"), ("plan", "completed"),
            ("code", "completed")]
        kinds = [(e.kind, e.step) for e in rt.events("r1")]
        assert kinds.index(("replan_requested", "build")) == kinds.index(("resumed", None)) - 1


def test_an_allowed_drift_keeps_a_debate_under_way_and_the_answer_of_a_person_waiting_in_it(db):
    calls: Counter = Counter()

    def panel(with_report: bool) -> Workflow:
        wf = Workflow("panel")

        def pro(ctx):
            calls["pro", ctx.iteration] += 1
            return f"pro {ctx.iteration}"

        wf.debate("argue", agents={"pro": pro, "me": human("Your point?")}, rounds=2,
                  judge=lambda ctx: [h["output"] for h in ctx.history])
        if with_report:
            wf.step(name="report")(lambda ctx: len(ctx.results["argue"]))
        return wf

    with Runtime(db, [panel(False)], id_factory=ids("r1")) as rt:
        rt.start("panel")
        rt.respond("r1", "mine 1")
        assert rt.resume("r1") == RunStatus.AWAITING_INPUT  # round 2: my turn again
        rt.respond("r1", "mine 2")
    with Runtime(db, [panel(True)]) as rt:  # a step added after the debate: children shift by 1
        assert rt.resume("r1", allow_drift=True) == RunStatus.COMPLETED
        assert calls == Counter({("pro", 1): 1, ("pro", 2): 1})
        assert rt.step_output("r1", "argue") == ["pro 1", "mine 1", "pro 2", "mine 2"]
        assert rt.step_output("r1", "report") == 4
        assert [(t.seq, t.iteration, t.agent, t.parent) for t in rt.get("r1").tasks] == [
            (0, 1, None, None), (2, 1, "pro", 0), (3, 1, "me", 0), (4, 2, "pro", 0), (5, 2, "me", 0),
            (6, 3, "judge", 0), (1, 1, None, None)]


def test_show_lists_a_patterns_executions_after_its_row_naming_iteration_and_agent(db, tmp_path):
    debate_store(db)
    shown_text = relaypoint(tmp_path, "show", "r1", db=db).stdout
    lines = [line for line in shown_text.splitlines() if "attempts" in line]
    assert lines == ["✔ brief  completed  attempts 1", "· argue  pending  attempts 0  · round 3",
                     *[f"  ✔ argue (iteration {r}, agent '{a}')  completed  attempts 1" for r in (1, 2, 3)
                       for a in ("pro", "con")],
                     "· verdict  pending  attempts 0"]
    tasks = json.loads(relaypoint(tmp_path, "show", "r1", "--json", db=db).stdout)["tasks"]
    assert [(t["name"], t["iteration"], t["agent"], t["parent"]) for t in tasks] == [
        ("brief", 1, None, None), ("argue", 1, None, None),
        *[("argue", r, a, 1) for r in (1, 2, 3) for a in ("pro", "con")], ("verdict", 1, None, None)]
    assert tasks[2]["output"] == {"round": 1, "by": "pro"}
