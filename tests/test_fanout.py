"""The nodes whose calls are independent (``wf.parallel``, ``wf.map``, a vote's voters,
``wf.debate(concurrent=True)``, a planner's ready subtasks) through the real runtime on a real
store of each backend: their results, what each call sees, ``max_concurrency``, and that a
pattern's state after a set of calls does not depend on the order they finished in (the executor
folds them in completion order). Kills and resumes of these nodes are in
test_pattern_durability.py; their drift rules in test_pattern_drift.py."""

from __future__ import annotations

import itertools
import json

import pytest

import stores
from relaypoint import DefinitionError, Runtime, Workflow
from relaypoint.drivers import Call, RunStep, RunSteps

FINGERPRINT_BEFORE_FANOUT = "41356de792145ce4"
"""The fingerprint of :func:`every_kind` as the code before max_concurrency and the new nodes
computed it: a definition that sets none of the new options keeps it, so its runs resume."""


def every_kind(**bound: int) -> Workflow:
    wf = Workflow("fp", **bound)
    wf.step(name="s")(lambda c: 1)
    from relaypoint import human
    wf.debate("d", agents={"a": print, "b": human("?")}, rounds=2, judge=print)
    wf.vote("v", voters={"a": print, "b": print}, tally=print)
    wf.planner("p", plan=print, agents={"a": print}, replan=print)
    wf.supervisor("u", agents={"a": print}, route=print)
    wf.loop(max_iterations=3)(print)
    return wf


def kids(rt: Runtime, rid: str, name: str) -> list[tuple]:
    run = rt.get(rid)
    group = next(t for t in run.tasks if t.name == name and t.parent is None)
    return [(t.iteration, t.agent, t.status.value) for t in run.tasks if t.parent == group.seq]


def test_a_parallel_runs_each_branch_once_none_seeing_another_and_gives_their_outputs_by_name(db):
    seen = []
    wf = Workflow("w")
    wf.step(name="brief")(lambda c: "b")

    def branch(ctx):
        seen.append((ctx.agent, ctx.iteration, list(ctx.history), ctx.results["brief"],
                     ctx.idempotency_key.split("/", 1)[1]))
        return f"{ctx.agent}!"

    wf.parallel("gather", branches={"web": branch, "docs": branch, "code": branch})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == "completed"
        assert rt.step_output(rid, "gather") == {"web": "web!", "docs": "docs!", "code": "code!"}
        assert list(rt.step_output(rid, "gather")) == ["web", "docs", "code"]  # the given order
        assert kids(rt, rid, "gather") == [(1, "web", "completed"), (1, "docs", "completed"), (1, "code", "completed")]
        # the branches run at once (in any order), none seeing another
        assert sorted(seen) == [("code", 1, [], "b", "gather#1/code"), ("docs", 1, [], "b", "gather#1/docs"),
                                ("web", 1, [], "b", "gather#1/web")]


def test_a_map_lists_its_items_once_and_runs_one_call_per_item_in_item_order(db):
    listed, seen = [], []
    wf = Workflow("w")
    wf.step(name="fetch")(lambda c: ["x", {"y": 1}, 3])

    def items(ctx):
        listed.append(ctx.agent)
        return ctx.results["fetch"]

    def each(ctx):
        seen.append((ctx.input, ctx.iteration, ctx.agent, list(ctx.history), ctx.results["fetch"][0]))
        return {"item": ctx.input, "i": ctx.iteration}

    wf.map("summarise", each, items=items)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("w", {"run": "input"})
        assert rt.get(rid).status == "completed"
        assert rt.step_output(rid, "summarise") == [{"item": "x", "i": 1}, {"item": {"y": 1}, "i": 2},
                                                    {"item": 3, "i": 3}]
        assert listed == ["items"]
        assert sorted(seen, key=lambda s: s[1]) == [("x", 1, None, [], "x"), ({"y": 1}, 2, None, [], "x"),
                                                    (3, 3, None, [], "x")]  # run at once, in any order
        assert kids(rt, rid, "summarise") == [(1, "items", "completed"), (1, None, "completed"),
                                              (2, None, "completed"), (3, None, "completed")]
        keys = [t.idempotency_key.split("/", 1)[1] for t in rt.get(rid).tasks if t.parent is not None]
        assert keys == ["summarise#1/items", "summarise#1", "summarise#2", "summarise#3"]


def test_a_map_of_no_items_gives_an_empty_list_and_items_that_are_not_a_list_fail_in_one_line(db):
    wf = Workflow("w")
    wf.map("none", lambda c: 1 / 0, items=lambda c: [])
    bad = Workflow("bad")
    bad.map("m", lambda c: 1, items=lambda c: {"a": 1}, retries=3)
    with Runtime(db, [wf, bad]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == "completed" and rt.step_output(rid, "none") == []
        rid = rt.start("bad")
        run = rt.get(rid)
        assert run.status == "failed"
        assert run.error == "step 'm' (iteration 1, agent 'items') failed: the items of 'm' must be a list, not dict"
        assert kids(rt, rid, "m") == [(1, "items", "failed")]
        failed = next(t for t in run.tasks if t.agent == "items")
        assert failed.attempts == 1  # an InvalidValue is not retried


def test_a_map_resumed_after_a_failed_item_never_lists_its_items_again(db):
    listed, failing = [], [True]
    wf = Workflow("w")

    def items(ctx):
        listed.append(1)
        return ["a", "b", "c"]

    def each(ctx):
        if ctx.input == "b" and failing[0]:
            raise RuntimeError("b is not ready")
        return ctx.input.upper()

    wf.map("m", each, items=items)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == "failed"
        failing[0] = False
        assert rt.resume(rid) == "completed"
        assert rt.step_output(rid, "m") == ["A", "B", "C"] and listed == [1]
        assert kids(rt, rid, "m") == [(1, "items", "completed"), (1, None, "completed"), (2, None, "completed"),
                                      (3, None, "completed")]


def test_a_concurrent_debate_s_speakers_hear_only_the_rounds_before(db):
    heard = []
    wf = Workflow("w")

    def speaker(ctx):
        heard.append((ctx.iteration, ctx.agent, [(h["iteration"], h["agent"]) for h in ctx.history]))
        return f"{ctx.agent} {ctx.iteration}"

    def judge(ctx):
        return [h["output"] for h in ctx.history]

    wf.debate("argue", agents={"pro": speaker, "con": speaker}, rounds=2, judge=judge, concurrent=True)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.step_output(rid, "argue") == ["pro 1", "con 1", "pro 2", "con 2"]
        # a round's speakers speak at once (in any order), hearing only the rounds before
        assert sorted(heard) == [(1, "con", []), (1, "pro", []), (2, "con", [(1, "pro"), (1, "con")]),
                                 (2, "pro", [(1, "pro"), (1, "con")])]
        assert kids(rt, rid, "argue")[-1] == (3, "judge", "completed")


def test_max_concurrency_is_the_node_s_else_the_workflow_s_and_recorded_only_when_set():
    wf = Workflow("w", max_concurrency=4)
    wf.parallel("p", branches={"a": print, "b": print}, max_concurrency=2)
    wf.map("m", print, items=print)
    wf.vote("v", voters={"a": print}, max_concurrency=1)
    wf.debate("d", agents={"a": print}, rounds=1, concurrent=True, max_concurrency=3)
    wf.planner("pl", plan=print, agents={"a": print}, max_concurrency=5)
    driver = wf.driver()
    bounds = {s.name: driver.max_concurrency(Call(s.name, 1, "a", parent=i)) for i, s in enumerate(wf.steps)}
    assert bounds == {"p": 2, "m": 4, "v": 1, "d": 3, "pl": 5}
    assert driver.max_concurrency(Call("p")) == 4  # a top-level row: the workflow's
    options = {d["name"]: d for d in wf.definition()}
    assert options["p"]["max_concurrency"] == 2 and "max_concurrency" not in options["m"]
    assert options["d"]["concurrent"] is True
    assert Workflow("x").driver().max_concurrency(Call("s")) is None


def test_definitions_that_set_no_new_option_keep_their_fingerprint_and_the_workflow_bound_is_not_drift():
    assert every_kind().fingerprint() == FINGERPRINT_BEFORE_FANOUT
    assert every_kind(max_concurrency=3).fingerprint() == FINGERPRINT_BEFORE_FANOUT
    wf = every_kind()
    wf.max_concurrency = 2  # set after the driver was built: the driver is built again
    assert wf.driver().max_concurrency(Call("v", 1, "a", parent=2)) == 2
    changed = Workflow("fp")
    changed.vote("v", voters={"a": print}, max_concurrency=2)
    plain = Workflow("fp")
    plain.vote("v", voters={"a": print})
    assert changed.fingerprint() != plain.fingerprint()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_max_concurrency_must_be_a_whole_number_of_at_least_one(value):
    wf = Workflow("w")
    cases = [lambda: Workflow("x", max_concurrency=value),
             lambda: wf.parallel("p", branches={"a": print}, max_concurrency=value),
             lambda: wf.map("m", print, items=print, max_concurrency=value),
             lambda: wf.vote("v", voters={"a": print}, max_concurrency=value),
             lambda: wf.debate("d", agents={"a": print}, rounds=1, max_concurrency=value),
             lambda: wf.planner("pl", plan=print, agents={"a": print}, max_concurrency=value)]
    for make in cases:
        with pytest.raises(DefinitionError, match=rf"max_concurrency must be a whole number >= 1, not {value!r}$"):
            make()
    assert wf.steps == []


def test_new_nodes_refuse_invalid_definitions_in_one_line():
    wf = Workflow("w")
    cases = [(lambda: wf.parallel("p", branches={}), "parallel 'p': branches must be a non-empty dict"),
             (lambda: wf.parallel("p", branches={"a": 3}), "agent 'a' must be a function of ctx"),
             (lambda: wf.map("m", "nope", items=print), "map 'm': the function run per item must be a function"),
             (lambda: wf.map("m", print, items=None), "map 'm': items must be a function"),
             (lambda: wf.debate("d", agents={"a": print}, rounds=1, concurrent="yes"),
              "debate 'd': concurrent must be True or False")]
    for make, message in cases:
        with pytest.raises(DefinitionError, match=message):
            make()
    assert wf.steps == []


# ---- the state after a set of calls, whatever order they finished in ------------------------------


def folded(wf: Workflow, order: list[Call], state: dict) -> dict:
    driver = wf.driver()
    for call in order:
        state = driver.fold(state, call, f"out {call.agent} {call.iteration}")
    return state


def asked(wf: Workflow, state: dict) -> tuple[Call, ...]:
    """The calls the driver asks for in ``state`` (none when it pauses or finishes)."""
    action = wf.driver().next(state)
    return action.calls if isinstance(action, RunSteps) else (action.call,) if isinstance(action, RunStep) else ()


def every_order_gives_one_state(wf: Workflow, state: dict) -> dict:
    """Fold the calls the driver asks for in ``state`` in every order: the same state each time
    (and each call is asked for under the same turn until it is folded). Returns that state."""
    calls = asked(wf, state)
    assert len(calls) > 1
    results = set()
    for order in itertools.permutations(calls):
        s = state
        for k, call in enumerate(order):
            assert set(order[k:]) <= set(asked(wf, s)), "a call not yet folded is no longer asked for as it was"
            s = folded(wf, [call], s)
        results.add(json.dumps(s, sort_keys=True))
    assert len(results) == 1, results
    return json.loads(results.pop())


def test_vote_parallel_map_and_a_concurrent_debate_fold_a_set_of_calls_to_one_state():
    wf = Workflow("w")
    wf.vote("v", voters={"a": print, "b": print, "c": print})
    wf.parallel("p", branches={"x": print, "y": print, "z": print})
    wf.map("m", print, items=print)
    wf.debate("d", agents={"pro": print, "con": print, "mid": print}, rounds=2, concurrent=True)
    assert every_order_gives_one_state(wf, {"next": 0}) == {"next": 0, "in": {"voted": ["a", "b", "c"]}}
    assert every_order_gives_one_state(wf, {"next": 1}) == {"next": 1, "in": {"done": ["x", "y", "z"]}}
    items = {"next": 2, "in": {"items": ["i", "j", "k", "l"], "below": 0, "done": []}}
    assert every_order_gives_one_state(wf, items)["in"] == {"items": ["i", "j", "k", "l"], "below": 4, "done": []}
    part = folded(wf, [Call("m", 3, input="k", parent=2), Call("m", 1, input="i", parent=2)], items)
    assert part["in"] == {**items["in"], "below": 1, "done": [3]}  # only the finished prefix is a counter
    assert [c.iteration for c in asked(wf, part)] == [2, 4]
    assert [c.input for c in asked(wf, part)] == ["j", "l"]
    round_two = every_order_gives_one_state(wf, {"next": 3})
    assert round_two == {"next": 3, "in": {"round": 2, "spoken": []}}
    assert {(c.iteration, c.agent) for c in asked(wf, round_two)} == {(2, "pro"), (2, "con"), (2, "mid")}


def test_a_bounded_map_asks_for_its_first_items_not_done_so_every_call_in_flight_comes_back():
    wf = Workflow("w", max_concurrency=3)
    wf.map("m", print, items=print)
    state = {"next": 0, "in": {"items": list("abcdefg"), "below": 0, "done": []}}
    assert [c.iteration for c in asked(wf, state)] == [1, 2, 3]  # the executor starts 1, 2, 3
    state = folded(wf, [Call("m", 2, input="b", parent=0)], state)
    assert [c.iteration for c in asked(wf, state)] == [1, 3, 4]  # 1 and 3 still in flight: asked again
    state = folded(wf, [Call("m", 1, input="a", parent=0), Call("m", 4, input="d", parent=0)], state)
    assert state["in"]["below"] == 2 and state["in"]["done"] == [4]
    assert [(c.iteration, c.input) for c in asked(wf, state)] == [(3, "c"), (5, "e"), (6, "f")]


def test_a_planner_asks_for_every_ready_subtask_at_once_under_ordinals_that_do_not_change():
    wf = Workflow("w")
    wf.planner("b", plan=print, agents={"code": print, "test": print})
    plan = [{"id": "t1", "agent": "code"}, {"id": "t2", "agent": "test"},
            {"id": "t3", "agent": "code", "after": ["t1", "t2"]}, {"id": "t4", "agent": "test"}]
    state = wf.driver().fold({"next": 0}, Call("b", 1, "plan", parent=0), plan)
    assert [(c.iteration, c.agent, c.task) for c in asked(wf, state)] == [(1, "code", "t1"), (2, "test", "t2"),
                                                                          (3, "test", "t4")]
    after = every_order_gives_one_state(wf, state)
    assert [(c.iteration, c.task) for c in asked(wf, after)] == [(4, "t3")]  # numbered when the plan was folded
    assert after["in"]["ordinal"] == 4


def test_a_planner_state_recorded_before_ordinals_were_given_goes_on_as_it_would_have():
    """A state as the planner wrote it before: no ``n`` on its subtasks, ``ordinal`` the last
    subtask run. The subtask its run had in flight (the first ready one, at ordinal + 1) is asked
    for under that same ordinal, so a resume meets its recorded row."""
    wf = Workflow("w")
    wf.planner("b", plan=print, agents={"code": print, "test": print})
    old = {"next": 0, "in": {"replans": 0, "ordinal": 1, "plan": [
        {"id": "t1", "agent": "code", "input": None, "after": [], "status": "completed"},
        {"id": "t3", "agent": "code", "input": None, "after": ["t2"], "status": "pending"},
        {"id": "t2", "agent": "test", "input": {"k": 2}, "after": ["t1"], "status": "pending"}]}}
    (call,) = asked(wf, old)
    assert (call.iteration, call.agent, call.task, call.input) == (2, "test", "t2", {"k": 2})
    state = wf.driver().fold(old, call, "done")
    assert [(c.iteration, c.task) for c in asked(wf, state)] == [(3, "t3")] and state["in"]["ordinal"] == 3


def test_a_run_whose_planner_state_was_recorded_before_ordinals_resumes_the_subtask_it_stopped_in(db):
    """A real run stopped at a person's subtask, its checkpoint's state rewritten as the code
    before ordinals wrote it: the resume runs that subtask's own row (same iteration and key) and
    goes on to the same rows as an uninterrupted run."""
    from relaypoint import human

    wf = Workflow("w")
    # one chain t1 -> t2 -> t3 -> t4, listed out of order: t3 is subtask 3, not t4
    wf.planner("b", plan=lambda c: [{"id": "t1", "agent": "code"}, {"id": "t4", "agent": "code", "after": ["t3"]},
                                    {"id": "t2", "agent": "ask", "after": ["t1"]},
                                    {"id": "t3", "agent": "code", "after": ["t2"]}],
               agents={"code": lambda c: f"code {c.iteration}", "ask": human("?")})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == "awaiting_input"
        cp = stores.query(db, "SELECT checkpoint_id, state FROM checkpoints WHERE run_id = ? ORDER BY checkpoint_id DESC "
                            "LIMIT 1", (rid,))[0]
        state = json.loads(cp["state"])
        legacy = {**state["in"], "ordinal": 1,
                  "plan": [{k: v for k, v in t.items() if k != "n"} for t in state["in"]["plan"]]}
        stores.execute(db, "UPDATE checkpoints SET state = ? WHERE checkpoint_id = ?", json.dumps({**state, "in": legacy}),
                       cp["checkpoint_id"])
        rt.respond(rid, "yes")
        assert rt.resume(rid) == "completed"
        assert kids(rt, rid, "b") == [(1, "plan", "completed"), (1, "code", "completed"), (2, "ask", "completed"),
                                      (3, "code", "completed"), (4, "code", "completed")]
        assert rt.step_output(rid, "b") == {"t1": "code 1", "t2": "yes", "t3": "code 3", "t4": "code 4"}
        keys = [t.idempotency_key.split("/", 1)[1] for t in rt.get(rid).tasks if t.parent is not None]
        assert len(set(keys)) == len(keys)


# ---- how the console and `show` describe them ------------------------------------------------------


def test_parallel_and_map_rows_progress_and_summaries_come_from_their_records(db):
    from relaypoint.views.patterns import call_label, fork_point, progress, summary, tree

    wf = Workflow("w")
    wf.parallel("gather", branches={"web": lambda c: 1, "docs": lambda c: 2})
    wf.map("each", lambda c: c.input * 10, items=lambda c: [1, 2, 3])
    fresh = Workflow("fresh")
    fresh.parallel("gather", branches={"web": lambda c: 1, "docs": lambda c: 2, "x": lambda c: 3})
    fresh.map("each", print, items=print)
    with Runtime(db, [wf, fresh]) as rt:
        rid = rt.start("w")
        groups = {top.name: (top, calls) for top, calls in tree(rt.get(rid).tasks)}
        (top, calls), (mtop, mcalls) = groups["gather"], groups["each"]
        assert [call_label("parallel", c) for c in calls] == ["branch · web", "branch · docs"]
        assert [call_label("map", c) for c in mcalls] == ["items", "item 1", "item 2", "item 3"]
        assert [fork_point("map", c) for c in mcalls[:2]] == ["the items", "item 1"]
        assert fork_point("parallel", calls[1]) == "the branches"
        assert progress(top, calls) == "2/2 branches" and progress(mtop, mcalls) == "3/3 items"
        assert [(it.label, [c.agent for c in it.calls]) for it in summary(top, calls).iterations] == [
            ("branches", ["web", "docs"])]
        assert [it.label for it in summary(mtop, mcalls).iterations] == ["item 1", "item 2", "item 3"]
        assert rt.step_output(rid, "each") == [10, 20, 30]
        from rich.console import Console

        from relaypoint.tui.patterns import summary_view
        console = Console(width=60, record=True)
        console.print(summary_view(summary(top, calls)), summary_view(summary(mtop, mcalls)))
        text = [line.split() for line in console.export_text().splitlines()]
        assert text == [["branches"], ["branches", "web", "✔", "1"], ["docs", "✔", "2"], ["items"],
                        ["item", "1", "✔", "10"], ["item", "2", "✔", "20"], ["item", "3", "✔", "30"]]
        # before they run: what they will do
        (gtop, _), (etop, _) = tree(rt.get(rt.enqueue("fresh")).tasks)
        assert (progress(gtop, []), progress(etop, [])) == ("3 branches", "not listed yet")


def test_a_pattern_row_with_several_calls_running_says_how_many_of_its_calls_run():
    from relaypoint import StepStatus
    from relaypoint.models import StepRecord
    from relaypoint.views.patterns import progress, shown_status

    def row(seq, status, agent=None, iteration=1, parent=0, **options):
        return StepRecord(seq=seq, name="n", iteration=iteration, agent=agent, parent=parent, status=status,
                          attempts=1, options=options, idempotency_key=f"k{seq}")

    run, done, failed = StepStatus.RUNNING, StepStatus.COMPLETED, StepStatus.FAILED
    vote = row(0, StepStatus.PENDING, parent=None, pattern="vote", agents=["a", "b", "c", "d", "e"])
    calls = [row(1, done, "a"), row(2, run, "b"), row(3, run, "c"), row(4, run, "d")]
    assert progress(vote, calls) == "3 of 5 running" and shown_status(vote, calls) == run
    # the last call finished, one beside it is still running: the pattern is running
    assert shown_status(vote, calls[:2] + [row(5, done, "e")]) == run
    assert progress(vote, calls[:2]) == "1/5 votes"  # one call running: the usual words
    mapped = row(0, StepStatus.PENDING, parent=None, pattern="map")
    items = [row(1, done, "items")] + [row(1 + i, run, None, i) for i in (1, 2)]
    assert progress(mapped, items, {"next": 0, "in": {"items": list(range(7)), "below": 0, "done": []}}) == (
        "2 of 7 running")
    planner = row(0, StepStatus.PENDING, parent=None, pattern="planner", agents=["x"])
    plan = [{"id": i, "status": s} for i, s in (("t1", "pending"), ("t2", "pending"), ("t3", "failed"))]
    subtasks = [row(1, done, "plan"), row(2, run, "x", 1), row(3, run, "x", 2), row(4, failed, "x", 3)]
    assert progress(planner, subtasks, {"next": 0, "in": {"plan": plan}}) == "2 of 2 running"
    assert shown_status(planner, subtasks) == run
