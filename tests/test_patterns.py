"""Patterns through the real runtime on a real store: what each records (one execution per agent
call and per decision, in order), what agents see (ctx.iteration, agent, history, state,
idempotency_key, output, failed), each pattern's result and stop rules, a person as an agent,
definitions refused, parameters in the fingerprint. Durability under SIGKILL is in
test_pattern_durability.py."""

from __future__ import annotations

import pytest

from relaypoint import DefinitionError, DriftError, InvalidValue, Runtime, Workflow, human
from relaypoint.patterns import majority


def rows(rt: Runtime, rid: str) -> list[tuple]:
    """(name, iteration, agent, status) of each execution, in the order shown."""
    return [(t.name, t.iteration, t.agent, t.status.value) for t in rt.get(rid).tasks]


def children(rt: Runtime, rid: str, name: str) -> list:
    run = rt.get(rid)
    group = next(t for t in run.tasks if t.name == name and t.parent is None)
    return [t for t in run.tasks if t.parent == group.seq]


def test_a_debate_records_every_speech_then_the_judge_and_its_result_reaches_later_steps(db):
    seen = []
    wf = Workflow("panel")

    @wf.step
    def brief(ctx):
        return {"topic": ctx.input["topic"]}

    def speaker(ctx):
        seen.append((ctx.iteration, ctx.agent, [(h["iteration"], h["agent"]) for h in ctx.history],
                     ctx.idempotency_key.split("/", 1)[1], dict(ctx.state), ctx.results["brief"]["topic"]))
        return f"{ctx.agent} says {ctx.iteration}"

    def judge(ctx):
        return {"heard": [h["output"] for h in ctx.history], "agent": ctx.agent}

    wf.debate("argue", agents={"pro": speaker, "con": speaker}, rounds=2, judge=judge)

    @wf.step
    def report(ctx):
        return ctx.results["argue"]["heard"][-1]

    with Runtime(db, [wf]) as rt:
        rid = rt.start("panel", {"topic": "tests"})
        run = rt.get(rid)
        assert run.status == "completed" and (run.steps_done, run.steps_total) == (3, 3)
        assert rows(rt, rid) == [
            ("brief", 1, None, "completed"), ("argue", 1, None, "completed"),
            ("argue", 1, "pro", "completed"), ("argue", 1, "con", "completed"),
            ("argue", 2, "pro", "completed"), ("argue", 2, "con", "completed"),
            ("argue", 3, "judge", "completed"), ("report", 1, None, "completed")]
        assert seen == [
            (1, "pro", [], "argue#1/pro", {"round": 1, "spoken": []}, "tests"),
            (1, "con", [(1, "pro")], "argue#1/con", {"round": 1, "spoken": ["pro"]}, "tests"),
            (2, "pro", [(1, "pro"), (1, "con")], "argue#2/pro", {"round": 2, "spoken": []}, "tests"),
            (2, "con", [(1, "pro"), (1, "con"), (2, "pro")], "argue#2/con", {"round": 2, "spoken": ["pro"]}, "tests")]
        result = {"heard": ["pro says 1", "con says 1", "pro says 2", "con says 2"], "agent": "judge"}
        assert rt.step_output(rid, "argue") == result
        assert rt.step_output(rid, "report") == "con says 2"
        started = [(e.step, e.detail.get("iteration"), e.detail.get("agent")) for e in rt.events(rid)
                   if e.kind == "step_started"]
        assert started[:3] == [("brief", None, None), ("argue", 1, "pro"), ("argue", 1, "con")]


def test_a_loop_stops_when_until_says_so_or_at_max_iterations(db):
    wf = Workflow("refine")
    verdicts = []

    def until(ctx):
        verdicts.append((ctx.iteration, ctx.output))
        return ctx.output >= 3

    @wf.loop(max_iterations=10, until=until)
    def draft(ctx):
        return ctx.iteration + len(ctx.history)  # 1, 3, ...

    capped = Workflow("capped")

    @capped.loop(max_iterations=3)
    def again(ctx):
        return [h["output"] for h in ctx.history]

    with Runtime(db, [wf, capped]) as rt:
        rid = rt.start("refine")
        assert [(t.iteration, t.output) for t in children(rt, rid, "draft")] == [(1, 1), (2, 3)]
        assert verdicts == [(1, 1), (2, 3)] and rt.step_output(rid, "draft") == 3
        rid = rt.start("capped")
        assert rt.step_output(rid, "again") == [[], [[]]]
        assert [t.idempotency_key.split("/", 1)[1] for t in children(rt, rid, "again")] == [
            "again#1", "again#2", "again#3"]


def test_a_vote_runs_each_voter_once_and_reports_a_majority_a_tie_or_a_custom_tally(db):
    wf = Workflow("vote")
    wf.vote("decide", voters={"a": lambda c: "x", "b": lambda c: {"pick": 1}, "c": lambda c: "x"})
    tie = Workflow("tie")
    tie.vote("decide", voters={"a": lambda c: "x", "b": lambda c: "y"})
    custom = Workflow("custom")
    custom.vote("decide", voters={"a": lambda c: 2, "b": lambda c: 5}, tally=lambda votes: sum(votes.values()))
    with Runtime(db, [wf, tie, custom]) as rt:
        rid = rt.start("vote")
        assert [(t.agent, t.output) for t in children(rt, rid, "decide")] == [("a", "x"), ("b", {"pick": 1}),
                                                                                ("c", "x")]
        assert rt.step_output(rid, "decide") == {
            "result": {"winner": "x", "tie": False, "majority": True, "counts": [["x", 2], [{"pick": 1}, 1]]},
            "votes": {"a": "x", "b": {"pick": 1}, "c": "x"}}
        result = rt.step_output(rt.start("tie"), "decide")["result"]
        assert (result["winner"], result["tie"], result["majority"]) == (None, True, False)
        rid = rt.start("custom")
        assert rt.step_output(rid, "decide") == {"result": 7, "votes": {"a": 2, "b": 5}}
        assert [t.agent for t in children(rt, rid, "decide")] == ["a", "b", "tally"]
    assert majority({}) == {"winner": None, "tie": False, "majority": False, "counts": []}


def score_of(vote):
    return vote["score"]


def test_a_majority_compares_whole_votes_unless_a_key_picks_what_is_counted(db):
    voters = {v: (lambda c, v=v: {"score": 4, "comment": f"{v} liked it"}) for v in "abc"}
    whole = Workflow("whole")
    whole.vote("decide", voters=voters)
    keyed = Workflow("keyed")
    keyed.vote("decide", voters={**voters, "d": lambda c: {"score": 2, "comment": "meh"}}, key=score_of)
    bad = Workflow("bad")
    bad.vote("decide", voters={"a": lambda c: 1}, key=lambda vote: {vote})
    with Runtime(db, [whole, keyed, bad]) as rt:
        result = rt.step_output(rt.start("whole"), "decide")["result"]
        assert (result["winner"], result["tie"], [n for _, n in result["counts"]]) == (None, True, [1, 1, 1])
        assert "keys" not in result
        assert rt.step_output(rt.start("keyed"), "decide") == {
            "result": {"winner": 4, "tie": False, "majority": True, "counts": [[4, 3], [2, 1]],
                       "keys": {"a": 4, "b": 4, "c": 4, "d": 2}},
            "votes": {"a": {"score": 4, "comment": "a liked it"}, "b": {"score": 4, "comment": "b liked it"},
                      "c": {"score": 4, "comment": "c liked it"}, "d": {"score": 2, "comment": "meh"}}}
        run = rt.get(rt.start("bad"))
        assert run.status == "failed" and [t.attempts for t in run.tasks if t.name == "decide"][0] == 1
        assert run.error == ("step 'decide' failed: the vote's key returned set for the vote of 'a', not a JSON value "
                             "(text, a number, true/false, null, a list or a dict)")
    assert majority({"a": [1, "x"], "b": (1, "x")}, key=lambda v: v)["counts"] == [[[1, "x"], 2]]
    with pytest.raises(InvalidValue, match="^a set is the vote of 'a', not a JSON value"):
        majority({"a": {1}})


def test_a_votes_key_is_recorded_by_name_and_a_vote_without_one_keeps_its_definition(db):
    def flow(key):
        wf = Workflow("v")
        wf.vote("decide", voters={"a": lambda c: {"score": 1}, "b": human("?")}, key=key)
        return wf

    def points_of(vote):
        return vote["points"]

    assert flow(None).definition() == [{"name": "decide", "approval": False, "retries": 0, "on_orphan": "retry",
                                        "timeout": None, "pattern": "vote", "agents": ["a", "b"],
                                        "humans": {"b": {"kind": "input", "timeout": None}}, "tally": "majority"}]
    assert flow(score_of).definition()[0]["key"] == "score_of"
    assert flow(lambda v: v).definition()[0]["key"].endswith(".<locals>.<lambda>")
    assert len({flow(None).fingerprint(), flow(score_of).fingerprint(), flow(points_of).fingerprint()}) == 3
    with Runtime(db, [flow(score_of)]) as rt:
        rid = rt.start("v")
        rt.respond(rid, {"score": 1})
    with Runtime(db, [flow(points_of)]) as rt:
        with pytest.raises(DriftError, match=r'options changed for decide \(key: "score_of" -> '
                                             r'"test_a_votes_key_is_recorded_by_name_and_a_vote_without_one_keeps_its_'
                                             r'definition.<locals>.points_of"\)'):
            rt.resume(rid)


def supervised(route, *, max_turns=20, max_idle=2, search=lambda c: None):
    wf = Workflow("sup")
    wf.supervisor("triage", agents={"search": search, "code": lambda c: f"patch {c.iteration}"}, route=route,
                  max_turns=max_turns, max_idle=max_idle)
    return wf


def test_a_supervisor_records_each_routing_decision_and_keeps_activation_and_idle_counts(db):
    states = []

    def route(ctx):
        states.append(dict(ctx.state))
        return ["search", "search", "code", "search", None][ctx.state["turn"]]

    with Runtime(db, [supervised(route)]) as rt:
        rid = rt.start("sup")
        kids = children(rt, rid, "triage")
        assert [(t.iteration, t.agent) for t in kids] == [
            (1, "route"), (1, "search"), (2, "route"), (2, "search"), (3, "route"), (3, "code"), (4, "route"),
            (4, "search"), (5, "route")]
        assert [t.output for t in kids if t.agent == "route"][2] == {"turn": 3, "candidates": ["code"],
                                                                      "choice": "code"}
        assert states[2] == {"turn": 2, "activations": {"search": 2, "code": 0}, "idle": {"search": 2, "code": 0}}
        assert states[3] == {"turn": 3, "activations": {"search": 2, "code": 1}, "idle": {"search": 2, "code": 0}}
        assert states[4]["idle"] == {"search": 3, "code": 0}  # a non-candidate may still be chosen
        assert rt.step_output(rid, "triage") is None  # the last agent call was an idle turn


def test_a_supervisor_stops_at_max_turns_and_when_every_agent_is_idle(db):
    always_code = supervised(lambda ctx: "code", max_turns=3)
    always_code.name = "turns"
    idle = Workflow("idle")
    idle.supervisor("triage", agents={"a": lambda c: None, "b": lambda c: None},
                    route=lambda ctx: "a" if ctx.state["turn"] % 2 == 0 else "b", max_idle=2)
    with Runtime(db, [always_code, idle]) as rt:
        rid = rt.start("turns")
        assert [t.agent for t in children(rt, rid, "triage")] == ["route", "code"] * 3
        assert rt.step_output(rid, "triage") == "patch 3"
        rid = rt.start("idle")
        assert [t.agent for t in children(rt, rid, "triage") if t.agent != "route"] == ["a", "b", "a", "b"]


def test_a_router_naming_an_unknown_agent_fails_the_run_with_one_line(db):
    with Runtime(db, [supervised(lambda ctx: "nobody")]) as rt:
        rid = rt.start("sup")
        run = rt.get(rid)
        assert run.status == "failed"
        assert run.error == ("step 'triage' (iteration 1, agent 'route') failed: the router of 'triage' returned "
                             "'nobody' for turn 1, not one of its agents (search, code) or None to stop")


def planner_flow(fail: set[str], *, max_replans: int = 2, replan=True):
    calls = {"plan": 0, "replan": []}
    wf = Workflow("plan")

    def make_plan(ctx):
        calls["plan"] += 1
        return [{"id": "t1", "agent": "code", "input": {"file": "a.py"}},
                {"id": "t2", "agent": "test", "after": ["t1"]},
                {"id": "t3", "agent": "code", "input": {"file": "b.py"}, "after": ["t2"]}]

    def redo(ctx):
        calls["replan"].append((ctx.failed, [t["status"] for t in ctx.state["plan"]]))
        return [{"id": f"{ctx.failed['task']['id']}b", "agent": "code", "input": {"file": "fixed.py"}}]

    def code(ctx):
        if ctx.input["file"] in fail:
            raise RuntimeError(f"cannot edit {ctx.input['file']}")
        return f"edited {ctx.input['file']} as subtask {ctx.iteration}"

    wf.planner("build", plan=make_plan, agents={"code": code, "test": lambda c: "green"},
               replan=redo if replan else None, max_replans=max_replans)
    return wf, calls


def test_a_planner_runs_subtasks_in_dependency_order_with_their_own_input(db):
    wf, calls = planner_flow(set())
    with Runtime(db, [wf]) as rt:
        rid = rt.start("plan")
        kids = children(rt, rid, "build")
        assert [(t.iteration, t.agent, t.options.get("task")) for t in kids] == [
            (1, "plan", None), (1, "code", "t1"), (2, "test", "t2"), (3, "code", "t3")]
        assert rt.step_output(rid, "build") == {"t1": "edited a.py as subtask 1", "t2": "green",
                                                 "t3": "edited b.py as subtask 3"}
        assert calls["plan"] == 1


def test_a_failed_subtask_is_re_planned_and_max_replans_is_enforced(db):
    wf, calls = planner_flow({"b.py"})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("plan")
        assert rt.get(rid).status == "completed"
        kids = children(rt, rid, "build")
        assert [(t.iteration, t.agent, t.status.value) for t in kids] == [
            (1, "plan", "completed"), (1, "code", "completed"), (2, "test", "completed"), (3, "code", "failed"),
            (4, "replan", "completed"), (4, "code", "completed")]
        failed, statuses = calls["replan"][0]
        assert failed == {"task": {"id": "t3", "agent": "code", "input": {"file": "b.py"}, "after": ["t2"]},
                          "error": "RuntimeError: cannot edit b.py"}
        assert statuses == ["completed", "completed", "failed"]
        assert rt.step_output(rid, "build")["t3b"] == "edited fixed.py as subtask 4"

    wf, _ = planner_flow({"b.py", "fixed.py"}, max_replans=1)
    with Runtime(db, [wf]) as rt:
        run = rt.get(rt.start("plan"))
        assert run.status == "failed"
        assert run.error == ("subtask 't3b' of 'build' failed: RuntimeError: cannot edit fixed.py; the plan was "
                             "already re-planned 1 times (max_replans=1)")


def test_an_invalid_plan_fails_its_execution_with_the_reason(db):
    for plan, why in [
        ([{"id": "t1", "agent": "deploy"}], "subtask 't1' names agent 'deploy', not one of: code"),
        ([{"id": "t1", "agent": "code"}, {"id": "t1", "agent": "code"}], "subtask id 't1' is used twice"),
        ([{"id": "t1", "agent": "code", "after": ["t0"]}], "subtask 't1' waits on 't0', not in the plan"),
        ([{"id": "a", "agent": "code", "after": ["b"]}, {"id": "b", "agent": "code", "after": ["a"]}],
         "subtasks 'a', 'b' wait on each other (a cycle)"),
        ({"id": "t1"}, "it must be a list of subtasks, not dict"),
    ]:
        wf = Workflow("bad")
        wf.planner("build", plan=lambda ctx, p=plan: p, agents={"code": lambda c: 1})
        with Runtime(db, [wf]) as rt:
            run = rt.get(rt.start("bad"))
            assert run.status == "failed"
            assert run.error == f"step 'build' (iteration 1, agent 'plan') failed: the plan of 'build' is not valid: {why}"


def test_a_person_in_a_debate_pauses_on_their_turn_and_their_answer_is_their_output(db):
    wf = Workflow("human")
    wf.debate("argue", agents={"pro": lambda c: f"pro {c.iteration}", "me": human("Your rebuttal?", timeout=600)},
              rounds=2, judge=lambda c: [h["output"] for h in c.history])
    approving = Workflow("approving")
    approving.supervisor("triage", agents={"ok": human("Sign off?", kind="approval"), "work": lambda c: "done"},
                         route=lambda c: [None, "work", "ok"][min(c.iteration, 2)] if c.iteration < 3 else None)
    with Runtime(db, [wf, approving]) as rt:
        rid = rt.start("human")
        run = rt.get(rid)
        assert run.status == "awaiting_input" and run.pending.kind == "input"
        assert run.pending.reason == "Your rebuttal? (argue, round 1, as 'me')"
        assert run.pending.deadline_at is not None
        rt.respond(rid, {"text": "no"})
        assert rt.resume(rid) == "awaiting_input"
        rt.respond(rid, None)  # an idle turn is an answer too
        assert rt.resume(rid) == "completed"
        assert rt.step_output(rid, "argue") == ["pro 1", {"text": "no"}, "pro 2", None]
        assert [t.status.value for t in children(rt, rid, "argue") if t.agent == "me"] == ["completed"] * 2

        rid = rt.start("approving")
        run = rt.get(rid)
        assert run.status == "awaiting_approval"
        assert [t.status.value for t in children(rt, rid, "triage")][-1] == "awaiting_approval"
        rt.approve(rid, by="ana", comment="fine", output={"note": "ship it"})
        assert rt.resume(rid) == "completed"
        assert [t.output for t in children(rt, rid, "triage") if t.agent == "ok"] == [
            {"approved": True, "by": "ana", "comment": "fine", "value": {"note": "ship it"}}]


def test_definitions_are_refused_with_one_line():
    wf = Workflow("w")
    wf.step(name="argue")(lambda c: 1)
    cases = [
        (lambda: wf.debate("argue", agents={"a": print}, rounds=1), "already has a step named 'argue'"),
        (lambda: wf.debate("d", agents={"judge": print}, rounds=1), "the agent name 'judge' is reserved"),
        (lambda: wf.debate("d", agents={}, rounds=1), "agents must be a non-empty dict"),
        (lambda: wf.debate("d", agents={"a": "nope"}, rounds=1), "agent 'a' must be a function of ctx"),
        (lambda: wf.debate("d", agents={"a": print}, rounds=0), "rounds must be a whole number >= 1"),
        (lambda: wf.vote("v", voters={"a": print}, tally="plurality"), "tally must be 'majority' or a function"),
        (lambda: wf.vote("v", voters={"a": print}, key="score"), "key must be a function of a vote, not str"),
        (lambda: wf.vote("v", voters={"a": print}, tally=len, key=len),
         "key picks what tally='majority' counts; a tally function is given the whole votes, so pick inside it"),
        (lambda: wf.supervisor("s", agents={"route": print}, route=print), "'route' is reserved"),
        (lambda: wf.supervisor("s", agents={"a": print}, route=print, max_idle=0), "max_idle must be"),
        (lambda: wf.planner("p", plan=print, agents={"a": print}, max_replans=-1), "max_replans must be"),
        (lambda: wf.loop(max_iterations=0)(print), "max_iterations must be a whole number >= 1"),
        (lambda: wf.debate("d", agents={"a": print}, rounds=1, retries=-1), "retries must be a whole number"),
        (lambda: human(""), "the prompt must be non-empty text"),
        (lambda: wf.debate("d\x00", agents={"a": print}, rounds=1), "name must be non-empty text without NUL"),
        (lambda: wf.vote("v", voters={"a\x00": print}), "an agent name must be non-empty text without NUL"),
        (lambda: human("x", kind="vote"), "kind must be 'input' or 'approval'"),
    ]
    for make, message in cases:
        with pytest.raises(DefinitionError, match=message.replace("(", r"\(").replace(")", r"\)")):
            make()
    assert [s.name for s in wf.steps] == ["argue"]  # nothing half-registered


def test_pattern_parameters_are_part_of_the_fingerprint_and_a_change_is_drift(db):
    def panel(rounds: int, gate: bool) -> Workflow:
        wf = Workflow("panel")
        agents = {"pro": lambda c: 1, "con": human("?") if gate else (lambda c: 2)}
        wf.debate("argue", agents=agents, rounds=rounds, judge=lambda c: "j")
        return wf

    base = panel(3, True)
    assert base.definition() == [{"name": "argue", "approval": False, "retries": 0, "on_orphan": "retry",
                                  "timeout": None, "pattern": "debate", "agents": ["pro", "con"],
                                  "humans": {"con": {"kind": "input", "timeout": None}}, "rounds": 3,
                                  "judge": True}]
    assert len({panel(3, True).fingerprint(), panel(4, True).fingerprint(), panel(3, False).fingerprint()}) == 3
    with Runtime(db, [base]) as rt:
        rid = rt.start("panel")
        rt.respond(rid, "x")
    with Runtime(db, [panel(4, True)]) as rt:
        with pytest.raises(DriftError, match=r"options changed for argue \(rounds: 3 -> 4\)"):
            rt.resume(rid)


def test_resuming_past_an_agent_an_allowed_drift_removed_is_refused_with_one_line(db):
    def flow(agents):
        wf = Workflow("p")
        wf.planner("build", plan=lambda c: [{"id": "t1", "agent": "code"}, {"id": "t2", "agent": "ask",
                                                                           "after": ["t1"]}], agents=agents)
        return wf

    with Runtime(db, [flow({"code": lambda c: 1, "ask": human("?")})]) as rt:
        rid = rt.start("p")
        rt.respond(rid, "x")
    with Runtime(db, [flow({"code": lambda c: 1, "other": lambda c: 2})]) as rt:
        with pytest.raises(DriftError, match=r'agents: \["code", "ask"\] -> \["code", "other"\]'):
            rt.resume(rid)
        with pytest.raises(DriftError, match=r"goes on with 'build' \(iteration 2, agent 'ask', subtask 't2'\), "
                                             "which the loaded definition does not have"):
            rt.resume(rid, allow_drift=True)
        assert rt.get(rid).status == "queued"  # nothing written


def test_an_allowed_drift_that_would_restart_a_pattern_under_way_is_refused(db):
    def flow(before: bool) -> Workflow:
        wf = Workflow("p")
        if before:
            wf.step(name="new")(lambda c: 1)
        wf.debate("argue", agents={"pro": lambda c: 1, "me": human("?")}, rounds=2)
        return wf

    with Runtime(db, [flow(False)]) as rt:
        rid = rt.start("p")
        rt.respond(rid, "x")
    with Runtime(db, [flow(True)]) as rt:
        with pytest.raises(DriftError, match="would drop or restart pattern 'argue', whose recorded executions "
                                             "would run again; fork the run instead"):
            rt.resume(rid, allow_drift=True)
        assert rt.get(rid).status == "queued" and [t.name for t in rt.get(rid).tasks if t.parent is None] == ["argue"]

    renamed = Workflow("p")
    renamed.debate("argue2", agents={"pro": lambda c: 1, "me": human("?")}, rounds=2)
    plain = Workflow("p")
    plain.step(name="argue")(lambda c: 1)
    for wf in (renamed, plain):  # the pattern dropped, or turned into a step of its name
        with Runtime(db, [wf]) as rt:
            with pytest.raises(DriftError, match="would drop or restart pattern 'argue'"):
                rt.resume(rid, allow_drift=True)
            assert len(rt.get(rid).tasks) == 3  # nothing deleted


def test_re_planning_by_the_operator_never_reuses_an_idempotency_key(db):
    wf, calls = planner_flow({"b.py"}, max_replans=0)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("plan")
        assert rt.get(rid).status == "failed"
        assert rt.resume(rid, replan=True) == "failed"  # the new plan's t3 fails again
        keys = [t.idempotency_key for t in rt.get(rid).tasks]
        assert len(keys) == len(set(keys)) and calls["plan"] == 2
        assert [(t.iteration, t.agent, t.status.value) for t in children(rt, rid, "build")][3:] == [
            (3, "code", "failed"), (4, "plan", "completed"), (4, "code", "failed")]


def test_after_an_allowed_drift_each_agent_left_speaks_once_a_round_and_an_abandoned_call_is_cancelled(db):
    def flow(agents):
        wf = Workflow("d")
        wf.debate("argue", agents=agents, rounds=2, judge=lambda c: [(h["iteration"], h["agent"]) for h in c.history])
        return wf

    with Runtime(db, [flow({"pro": lambda c: 1, "con": human("?"), "x": lambda c: 3})]) as rt:
        rid = rt.start("d")  # round 1: pro spoke, con's turn waits
        rt.respond(rid, "answer")
        assert rt.get(rid).status == "queued"
    with Runtime(db, [flow({"x": lambda c: 3, "pro": lambda c: 1})]) as rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "argue") == [[1, "pro"], [1, "x"], [2, "x"], [2, "pro"]]
        con = [t for t in rt.get(rid).tasks if t.agent == "con"]
        assert [t.status.value for t in con] == ["cancelled"]
        (resumed,) = [e for e in rt.events(rid) if e.kind == "resumed"]
        assert resumed.detail["abandoned"] == {"seq": con[0].seq, "step": "argue", "iteration": 1, "agent": "con"}


def test_re_planning_a_planner_stopped_at_an_answered_persons_turn_keeps_the_answer(db):
    wf = Workflow("p")
    asked = []

    def make_plan(ctx):
        asked.append(ctx.iteration)
        return [{"id": "ask", "agent": "person"}, {"id": "use", "agent": "code", "after": ["ask"]}]

    wf.planner("build", plan=make_plan, agents={"person": human("which file?"), "code": lambda c: c.results}, )
    with Runtime(db, [wf]) as rt:
        rid = rt.start("p")
        rt.respond(rid, "a.py")
        assert rt.resume(rid, replan=True) == "completed"
        kids = [(t.iteration, t.agent, t.status.value, t.output) for t in rt.get(rid).tasks if t.parent is not None]
        assert kids[:3] == [(1, "plan", "completed", kids[0][3]), (1, "person", "completed", "a.py"),
                            (3, "plan", "completed", kids[2][3])]  # past the ordinals the first plan gave (1, 2)
        assert [k[1] for k in kids] == ["plan", "person", "plan", "code"]  # the person is not asked again
        assert asked == [1, 3]


def test_a_router_returning_a_list_fails_its_turn_in_one_line_and_ctx_history_can_be_returned(db):
    with Runtime(db, [supervised(lambda ctx: ["search"])]) as rt:
        run = rt.get(rt.start("sup"))
        assert run.error.endswith("the router of 'triage' returned ['search'] for turn 1, not one of its agents "
                                  "(search, code) or None to stop")
    wf = Workflow("h")
    wf.debate("argue", agents={"a": lambda c: c.iteration}, rounds=2, judge=lambda c: c.history)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("h")
        assert rt.step_output(rid, "argue") == [{"iteration": 1, "agent": "a", "output": 1},
                                                {"iteration": 2, "agent": "a", "output": 2}]
