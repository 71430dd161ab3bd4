"""The rules of an allowed drift inside a pattern under way (the table in docs/concepts/drift.md, "Drift inside a
pattern"), one test per row, on both backends: a run stops inside a pattern (a call asks a person
and waits, and is answered), the pattern's definition changes, and the run is resumed with
``allow_drift``. What a user expects: a debate's round, and a supervisor's turn, is whole or not
at all, and past a lowered limit not at all; only the defined voters' votes count; the pattern
ends as a run of the new definition would have. (A debate cut by a real SIGKILL is in
test_pattern_durability.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from relaypoint import DriftError, Runtime, Workflow
from relaypoint.views.patterns import progress


def calls(rt: Runtime, rid: str, name: str) -> list[tuple[int, str | None, str]]:
    """(iteration, agent, status) of pattern ``name``'s executions, in order."""
    run = rt.get(rid)
    group = next(t for t in run.tasks if t.name == name and t.parent is None)
    return [(t.iteration, t.agent, t.status.value) for t in run.tasks if t.parent == group.seq]


def progress_of(rt: Runtime, rid: str, name: str) -> str:
    """What the console shows of pattern ``name``'s progress."""
    run = rt.get(rid)
    group = next(t for t in run.tasks if t.name == name and t.parent is None)
    return progress(group, [t for t in run.tasks if t.parent == group.seq])


def asks(at: int, answer: Any = None):
    """An agent that asks a person on iteration ``at`` (the run waits there) and otherwise says
    ``agent iteration``; the person's answer is its output then."""
    def agent(ctx):
        if ctx.iteration == at:
            return ctx.request_input(f"{ctx.agent}, iteration {at}?")
        return f"{ctx.agent or 'pass'} {ctx.iteration}"
    return agent


def said(ctx):
    return f"{ctx.agent} {ctx.iteration}"


def heard(ctx):
    """A judge: who it heard in which round, and the state it was asked in."""
    return {"heard": [f"{h['agent']} {h['iteration']}" for h in ctx.history], "state": dict(ctx.state)}


def stopped_then_drifted(db: str, old: Workflow, new: Workflow, answer: Any = "answer") -> tuple[Runtime, str]:
    """A run of ``old`` stopped at its first person's question, answered; then a runtime of
    ``new`` (the caller resumes with ``allow_drift`` and closes it)."""
    with Runtime(db, [old]) as rt:
        rid = rt.start(old.name)
        assert rt.get(rid).status == "awaiting_input"
        rt.respond(rid, answer)
    return Runtime(db, [new]), rid


def released_after(db: str, old: Workflow, new: Workflow, decided: list[bool]) -> tuple[Runtime, str]:
    """A run of ``old`` stopped at its first person's question and answered, then resumed by an
    executor asked to stop (a worker's graceful stop) at the boundary where ``decided[0]`` has
    turned true: the pattern's last call (a judge, a tally, a pass) is recorded, its result not
    yet. Then a runtime of ``new``, as :func:`stopped_then_drifted`."""
    rt, rid = stopped_then_drifted(db, old, old)
    with rt:
        assert rt.resume(rid, should_stop=lambda: decided[0]) == "queued"
    return Runtime(db, [new]), rid


# ---- debate ---------------------------------------------------------------------------------------


def debate(rounds: int, con: Any = said, *, agents: dict[str, Any] | None = None, judge: Any = heard) -> Workflow:
    wf = Workflow("d")
    wf.debate("argue", agents=agents or {"pro": said, "con": con}, rounds=rounds, judge=judge)
    return wf


def fresh_result(rt: Runtime) -> Any:
    """The result of a new, uninterrupted run of the debate ``rt`` defines (its person never asked)."""
    rid = rt.start("d")
    assert rt.get(rid).status == "completed"
    return rt.step_output(rid, "argue")


def test_rounds_raised_mid_debate_go_on_to_the_new_number(db):
    rt, rid = stopped_then_drifted(db, debate(2, asks(2)), debate(3, asks(2)))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "argue")["heard"] == [f"{a} {r}" for r in (1, 2, 3) for a in ("pro", "con")]
        assert calls(rt, rid, "argue")[-1] == (4, "judge", "completed")


def test_rounds_lowered_but_not_below_the_round_under_way_finish_that_round(db):
    rt, rid = stopped_then_drifted(db, debate(4, asks(2)), debate(2, asks(2)))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "argue")["heard"] == ["pro 1", "con 1", "pro 2", "con 2"]
        assert all(status == "completed" for _, _, status in calls(rt, rid, "argue"))


def test_rounds_lowered_below_the_round_under_way_cancel_that_round_and_the_judge_hears_whole_rounds(db):
    # 4 rounds -> 2 in round 3: pro has spoken, con's turn was asked and answered
    rt, rid = stopped_then_drifted(db, debate(4, asks(3)), debate(2, asks(3)))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        result = rt.step_output(rid, "argue")
        assert result["heard"] == ["pro 1", "con 1", "pro 2", "con 2"]
        assert result == fresh_result(rt)  # what a 2-round debate gives
        assert calls(rt, rid, "argue") == [(r, a, "completed") for r in (1, 2) for a in ("pro", "con")] + [
            (3, "pro", "cancelled"), (3, "con", "cancelled"), (3, "judge", "completed")]
        run = rt.get(rid)
        pro3 = next(t for t in run.tasks if (t.iteration, t.agent) == (3, "pro"))
        assert rt.store.output(rid, pro3.seq) == (True, "pro 3")  # cancelled, its output still recorded
        (drift,) = [e for e in rt.events(rid) if e.kind == "drift_allowed"]
        assert drift.detail["cancelled"] == [{"seq": pro3.seq, "step": "argue", "iteration": 3, "agent": "pro"}]
        (resumed,) = [e for e in rt.events(rid) if e.kind == "resumed"]
        assert resumed.detail["abandoned"]["agent"] == "con"  # the turn it stopped in
        assert progress_of(rt, rid, "argue") == "round 2/2"


def test_rounds_lowered_below_whole_rounds_already_spoken_cancel_those_rounds_too(db):
    rt, rid = stopped_then_drifted(db, debate(5, asks(4)), debate(2, asks(4)))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "argue") == fresh_result(rt)
        assert [(i, a, s) for i, a, s in calls(rt, rid, "argue") if i > 2] == [
            (3, "pro", "cancelled"), (3, "con", "cancelled"), (4, "pro", "cancelled"), (4, "con", "cancelled"),
            (3, "judge", "completed")]


def test_rounds_raised_while_a_person_judges_cancel_that_judgement_and_the_judge_hears_every_round(db):
    person_judge = asks(3)
    rt, rid = stopped_then_drifted(db, debate(2, judge=person_judge), debate(3, judge=person_judge))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"  # round 3, then the judge (no longer asking)
        assert calls(rt, rid, "argue")[4:] == [(3, "judge", "cancelled"), (3, "pro", "completed"),
                                               (3, "con", "completed"), (4, "judge", "completed")]
        assert rt.step_output(rid, "argue") == "judge 4"


def test_rounds_raised_after_the_judge_decided_but_before_the_result_have_the_judge_decide_again(db):
    decided = [False]

    def judge(ctx):
        decided[0] = True
        return heard(ctx)

    rt, rid = released_after(db, debate(2, asks(1), judge=judge), debate(3, asks(1), judge=judge), decided)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "argue")["heard"] == [f"{a} {r}" for r in (1, 2, 3) for a in ("pro", "con")]
        assert calls(rt, rid, "argue")[4:] == [(3, "judge", "cancelled"), (3, "pro", "completed"),
                                               (3, "con", "completed"), (4, "judge", "completed")]


def test_an_agent_added_mid_debate_speaks_from_the_round_under_way(db):
    old = debate(2, agents={"pro": said, "con": asks(1)})
    new = debate(2, agents={"pro": said, "con": asks(1), "new": said})
    rt, rid = stopped_then_drifted(db, old, new)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "argue")["heard"] == [f"{a} {r}" for r in (1, 2) for a in ("pro", "con", "new")]


def test_an_agent_removed_mid_debate_speaks_no_more_and_what_it_said_stays_heard(db):
    old = debate(2, agents={"pro": said, "gone": said, "con": asks(2)})
    new = debate(2, agents={"pro": said, "con": asks(2)})
    rt, rid = stopped_then_drifted(db, old, new)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "argue")["heard"] == ["pro 1", "gone 1", "con 1", "pro 2",
                                                         "gone 2", "con 2"]
        assert all(status == "completed" for _, _, status in calls(rt, rid, "argue"))


# ---- vote -----------------------------------------------------------------------------------------


def vote(voters: dict[str, Any], tally: Any = "majority") -> Workflow:
    wf = Workflow("v")
    wf.vote("decide", voters=voters, tally=tally)
    return wf


def test_voters_replaced_mid_vote_count_only_the_defined_voters(db):
    # a, b, c -> x, y: a and c have voted (beside b), b's vote was asked and answered
    old = vote({"a": lambda c: "ship", "b": asks(1), "c": lambda c: "ship"})
    new = vote({"x": lambda c: "wait", "y": lambda c: "ship"})
    rt, rid = stopped_then_drifted(db, old, new, answer="ship")
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "decide") == {
            "result": {"winner": None, "tie": True, "majority": False, "counts": [["wait", 1], ["ship", 1]]},
            "votes": {"x": "wait", "y": "ship"}}
        assert calls(rt, rid, "decide") == [(1, "a", "cancelled"), (1, "b", "cancelled"), (1, "c", "cancelled"),
                                            (1, "x", "completed"), (1, "y", "completed")]
        (drift,) = [e for e in rt.events(rid) if e.kind == "drift_allowed"]
        assert [c["agent"] for c in drift.detail["cancelled"]] == ["a", "c"]


def test_a_voter_removed_mid_vote_is_not_counted_by_a_tally_function(db):
    tally = lambda votes: sorted(votes.items())  # noqa: E731
    old = vote({"a": lambda c: 1, "b": lambda c: 2, "c": asks(1)}, tally)
    new = vote({"b": lambda c: 2, "c": asks(1)}, tally)
    rt, rid = stopped_then_drifted(db, old, new, answer=3)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "decide") == {"result": [["b", 2], ["c", 3]], "votes": {"b": 2, "c": 3}}
        assert calls(rt, rid, "decide")[0] == (1, "a", "cancelled")


def test_a_voter_added_after_the_tally_but_before_the_result_has_the_tally_count_again(db):
    decided = [False]

    def tally(votes):
        decided[0] = True
        return sorted(votes.items())

    old = vote({"a": lambda c: 1, "b": asks(1)}, tally)
    rt, rid = released_after(db, old, vote({"a": lambda c: 1, "b": asks(1), "c": lambda c: 3}, tally), decided)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "decide") == {"result": [["a", 1], ["b", "answer"], ["c", 3]],
                                                 "votes": {"a": 1, "b": "answer", "c": 3}}
        assert calls(rt, rid, "decide") == [(1, "a", "completed"), (1, "b", "completed"), (1, "tally", "cancelled"),
                                            (1, "c", "completed"), (1, "tally", "completed")]


def test_a_voter_added_mid_vote_votes_and_is_counted(db):
    old = vote({"a": lambda c: "ship", "b": asks(1)})
    new = vote({"a": lambda c: "ship", "b": asks(1), "c": lambda c: "wait"})
    rt, rid = stopped_then_drifted(db, old, new, answer="ship")
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "decide")["votes"] == {"a": "ship", "b": "ship", "c": "wait"}


def test_a_key_added_mid_vote_picks_what_the_majority_counts(db):
    def new_vote(key):
        wf = Workflow("v")
        wf.vote("decide", voters={"a": lambda c: {"score": 4, "why": "a"}, "b": asks(1)}, key=key)
        return wf

    rt, rid = stopped_then_drifted(db, new_vote(None), new_vote(lambda v: v["score"]), answer={"score": 4, "why": "b"})
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "decide")["result"]["winner"] == 4


# ---- parallel and map -----------------------------------------------------------------------------


def parallel(branches: dict[str, Any], **options: Any) -> Workflow:
    wf = Workflow("par")
    wf.parallel("gather", branches=branches, **options)
    return wf


def test_branches_removed_from_a_parallel_under_way_are_cancelled_and_out_of_its_result(db):
    # a ran, b asked a person (answered), c had not run: b and a removed, d added
    old = parallel({"a": said, "b": asks(1), "c": said})
    new = parallel({"c": said, "d": said})
    rt, rid = stopped_then_drifted(db, old, new)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "gather") == {"c": "c 1", "d": "d 1"}
        assert calls(rt, rid, "gather") == [(1, "a", "cancelled"), (1, "b", "cancelled"), (1, "c", "completed"),
                                            (1, "d", "completed")]


def test_a_branch_added_or_the_branches_reordered_runs_what_is_left_and_the_result_follows_the_new_order(db):
    old = parallel({"a": said, "b": asks(1)})
    new = parallel({"b": asks(1), "c": said, "a": said}, max_concurrency=2)  # the bound changed too
    rt, rid = stopped_then_drifted(db, old, new)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert list(rt.step_output(rid, "gather").items()) == [("b", "answer"), ("c", "c 1"), ("a", "a 1")]
        assert calls(rt, rid, "gather") == [(1, "a", "completed"), (1, "b", "completed"), (1, "c", "completed")]


def test_a_map_s_recorded_items_stand_when_its_items_function_changes(db):
    def mapped(items: list[Any], **options: Any) -> Workflow:
        wf = Workflow("m")
        wf.map("each", asks(2), items=lambda c: items, **options)
        return wf

    rt, rid = stopped_then_drifted(db, mapped(["x", "y", "z"]), mapped(["other"], max_concurrency=3))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "each") == ["pass 1", "answer", "pass 3"]
        assert calls(rt, rid, "each") == [(1, "items", "completed"), (1, None, "completed"), (2, None, "completed"),
                                          (3, None, "completed")]


# ---- loop -----------------------------------------------------------------------------------------


def loop(max_iterations: int, asks_at: int) -> Workflow:
    wf = Workflow("l")
    wf.loop(max_iterations=max_iterations, name="refine")(asks(asks_at))
    return wf


def test_max_iterations_raised_mid_loop_gives_more_passes(db):
    rt, rid = stopped_then_drifted(db, loop(3, 2), loop(5, 2))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "refine") == "pass 5"


def test_max_iterations_raised_after_the_last_pass_but_before_the_result_gives_more_passes(db):
    decided = [False]

    def refine(ctx):
        decided[0] = ctx.iteration == 3
        return asks(1)(ctx)

    def capped(max_iterations):
        wf = Workflow("l")
        wf.loop(max_iterations=max_iterations, until=lambda ctx: False)(refine)
        return wf

    rt, rid = released_after(db, capped(3), capped(5), decided)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "refine") == "pass 5"


def test_a_loop_until_ended_stays_ended_when_max_iterations_is_raised(db):
    decided = [False]

    def until(ctx):
        decided[0] = ctx.iteration == 2
        return decided[0]

    def capped(max_iterations):
        wf = Workflow("l")
        wf.loop(max_iterations=max_iterations, until=until, name="refine")(asks(1))
        return wf

    rt, rid = released_after(db, capped(3), capped(5), decided)
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "refine") == "pass 2"
        assert len(calls(rt, rid, "refine")) == 2


def test_max_iterations_lowered_to_the_pass_under_way_finishes_that_pass(db):
    rt, rid = stopped_then_drifted(db, loop(5, 4), loop(4, 4))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "refine") == "answer"  # pass 4's output: the person's answer
        assert [s for _, _, s in calls(rt, rid, "refine")] == ["completed"] * 4


def test_max_iterations_lowered_below_the_pass_under_way_ends_the_loop_at_the_new_limit(db):
    # 5 passes -> 2 while in pass 4: passes 3 and 4 are past the limit
    rt, rid = stopped_then_drifted(db, loop(5, 4), loop(2, 4))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "refine") == "pass 2"
        assert calls(rt, rid, "refine") == [(1, None, "completed"), (2, None, "completed"), (3, None, "cancelled"),
                                            (4, None, "cancelled")]
        assert progress_of(rt, rid, "refine") == "pass 2/2"


# ---- supervisor -----------------------------------------------------------------------------------


def supervisor(max_turns: int, agents: dict[str, Any], route: Any) -> Workflow:
    wf = Workflow("s")
    wf.supervisor("triage", agents=agents, route=route, max_turns=max_turns, max_idle=10)
    return wf


def test_max_turns_raised_mid_supervisor_gives_more_turns(db):
    agents = {"work": asks(2)}
    rt, rid = stopped_then_drifted(db, supervisor(2, agents, lambda c: "work"),
                                   supervisor(4, agents, lambda c: "work"))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "triage") == "work 4"


def test_max_turns_lowered_below_the_turn_under_way_cancels_the_turns_past_it(db):
    agents = {"work": asks(4)}
    rt, rid = stopped_then_drifted(db, supervisor(6, agents, lambda c: "work"),
                                   supervisor(2, agents, lambda c: "work"))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert rt.step_output(rid, "triage") == "work 2"
        assert [(i, a, s) for i, a, s in calls(rt, rid, "triage") if i > 2] == [
            (3, "route", "cancelled"), (3, "work", "cancelled"), (4, "route", "cancelled"), (4, "work", "cancelled")]


def test_a_router_that_failed_is_asked_that_turn_again_after_max_turns_is_raised(db):
    failing = [True]

    def route(ctx):
        if ctx.iteration == 2 and failing[0]:
            raise RuntimeError("router down")
        return "work" if ctx.iteration <= 3 else None

    with Runtime(db, [supervisor(3, {"work": said}, route)]) as rt:
        rid = rt.start("s")
        assert rt.get(rid).status == "failed"
    failing[0] = False
    with Runtime(db, [supervisor(5, {"work": said}, route)]) as rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert [(i, a, s) for i, a, s in calls(rt, rid, "triage")][2:4] == [(2, "route", "completed"),
                                                                            (2, "work", "completed")]
        assert [t.attempts for t in rt.get(rid).tasks if (t.iteration, t.agent) == (2, "route")] == [2]
        (drift,) = [e for e in rt.events(rid) if e.kind == "drift_allowed"]
        assert "cancelled" not in drift.detail  # the failed decision was not withdrawn: it is the one retried
        assert rt.step_output(rid, "triage") == "work 3"


def test_the_agent_a_decided_turn_chose_removed_cancels_that_decision_and_the_router_is_asked_again(db):
    rt, rid = stopped_then_drifted(db, supervisor(5, {"work": said, "ask": asks(1)}, lambda c: "ask"),
                                   supervisor(5, {"work": said}, lambda c: None if c.state["turn"] >= 2 else "work"))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        assert calls(rt, rid, "triage") == [(1, "route", "cancelled"), (1, "ask", "cancelled"),
                                            (1, "route", "completed"), (1, "work", "completed"),
                                            (2, "route", "completed"), (2, "work", "completed"),
                                            (3, "route", "completed")]
        assert rt.step_output(rid, "triage") == "work 2"


def test_an_agent_removed_after_it_ran_keeps_its_calls_and_a_router_naming_it_fails_its_turn(db):
    def route(ctx):
        return {0: "ask", 1: "work"}.get(ctx.state["turn"], "ask")

    rt, rid = stopped_then_drifted(db, supervisor(5, {"ask": said, "work": asks(2)}, route),
                                   supervisor(5, {"work": asks(2)}, route))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "failed"
        assert calls(rt, rid, "triage") == [(1, "route", "completed"), (1, "ask", "completed"),
                                            (2, "route", "completed"), (2, "work", "completed"),
                                            (3, "route", "failed")]
        assert rt.get(rid).error.endswith("the router of 'triage' returned 'ask' for turn 3, not one of its agents "
                                          "(work) or None to stop")


# ---- planner --------------------------------------------------------------------------------------


def planner(agents: dict[str, Any]) -> Workflow:
    wf = Workflow("p")
    wf.planner("build", plan=lambda c: [{"id": "t1", "agent": "ask"}, {"id": "t2", "agent": "code", "after": ["t1"]},
                                        {"id": "t3", "agent": "deploy", "after": ["t2"]}],
               agents=agents, replan=lambda c: [])
    return wf


def test_an_agent_removed_that_the_plan_still_needs_is_refused_at_the_resume_naming_its_subtasks(db):
    rt, rid = stopped_then_drifted(db, planner({"ask": asks(1), "code": said, "deploy": said}),
                                   planner({"ask": asks(1), "code": said}))
    with rt:
        with pytest.raises(DriftError, match=r"the plan of 'build' still has subtask 't3' for agent 'deploy', which "
                                             r"the loaded definition does not have \(an allowed drift removed it\); "
                                             r"restore it, resume with --replan to plan again, or fork the run"):
            rt.resume(rid, allow_drift=True)
        run = rt.get(rid)
        assert run.status == "queued" and run.tasks[0].options["agents"] == ["ask", "code", "deploy"]  # nothing written
        assert calls(rt, rid, "build") == [(1, "plan", "completed"), (1, "ask", "pending")]


def test_an_agent_removed_that_the_plan_needs_is_planned_around_with_replan(db):
    def agents(deploy: bool) -> dict[str, Any]:
        return {"ask": asks(1), "code": said, **({"deploy": said} if deploy else {})}

    old = planner(agents(True))
    new = Workflow("p")
    new.planner("build", plan=lambda c: [{"id": "t2", "agent": "code"}], agents=agents(False), replan=lambda c: [])
    rt, rid = stopped_then_drifted(db, old, new)
    with rt:
        assert rt.resume(rid, allow_drift=True, replan=True) == "completed"
        # the new plan's t2 is subtask 4: the first plan gave ordinals 1-3, never given again
        assert rt.step_output(rid, "build") == {"t1": "answer", "t2": "code 4"}


def test_max_replans_lowered_mid_plan_applies_at_the_next_failed_subtask(db):
    def failing(max_replans: int) -> Workflow:
        def code(ctx):
            raise RuntimeError("cannot edit")

        wf = Workflow("p")
        wf.planner("build", plan=lambda c: [{"id": "t1", "agent": "ask"}, {"id": "t2", "agent": "code", "after": ["t1"]}],
                   agents={"ask": asks(1), "code": code}, replan=lambda c: [{"id": "t3", "agent": "ask"}],
                   max_replans=max_replans)
        return wf

    rt, rid = stopped_then_drifted(db, failing(2), failing(0))
    with rt:
        assert rt.resume(rid, allow_drift=True) == "failed"
        assert rt.get(rid).error == ("subtask 't2' of 'build' failed: RuntimeError: cannot edit; the plan was already "
                                     "re-planned 0 times (max_replans=0)")
