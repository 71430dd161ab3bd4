"""Patterns in the console, on real stores filled by running real pattern workflows: a pattern is
one expandable row of the step chain; its calls, their outputs and its summary (rounds, per-agent
counts and routing decisions, votes and tally, the judge's decision, the plan as a tree); fork
from the highlighted round or turn; a person's turn answered and approved from the console, then
resumed in another process; hostile names and outputs shown literally; snapshots of a debate, a
supervisor, a vote and a planner at fixed sizes. Also the pure functions behind the summaries
(:mod:`relaypoint.views.patterns`).

Update the snapshots after an intended change with ``pytest tests/test_console_patterns.py
--snapshot-update`` and look at them before committing the SVGs under ``tests/__snapshots__/``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from console_pilot import detail, press_to_run, rendered, screen_lines, select_run, settle, until, write_apps
from fixtures import CONSOLE_NOW, FixtureClock, counter_ids, fix_hosts, fixed_clock
from textual.pilot import Pilot
from textual.widgets import Input, Select, Static, TextArea

from relaypoint import Runtime, RunStatus, StepStatus, Workflow, human
from relaypoint.models import StepRecord
from relaypoint.store import Lookup
from relaypoint.tui import RelaypointConsole
from relaypoint.tui.screens.forms import ApproveScreen, ForkScreen, RejectScreen, RespondScreen
from relaypoint.tui.widgets.detail import CallKey
from relaypoint.views.patterns import kind_of, plan_tree, progress, summary, wanted_outputs, with_outputs

SIZE = (160, 45)
SMALL = (80, 24)
CLOCK = FixtureClock()

# ---- the workflows and the store -------------------------------------------------------------------


def speaker(words: str, seconds: float = 2) -> Any:
    """An agent that takes ``seconds`` on the fixture clock and says ``words`` (formatted with
    ``iteration``)."""

    def speak(ctx: Any) -> Any:
        CLOCK.advance(seconds=seconds)
        return words.format(iteration=ctx.iteration)

    return speak


debate = Workflow("debate")


@debate.step
def topic(ctx: Any) -> Any:
    CLOCK.advance(seconds=1)
    return {"topic": "which findings matter"}


debate.debate("argue", agents={
    "pro": speaker("round {iteration}: F1 matters, the store rewrites 96 lines at once"),
    "con": lambda ctx: (CLOCK.advance(seconds=3),
                        {"strike": f"F{ctx.iteration + 3}", "score": 0.25 * ctx.iteration})[1],
}, rounds=3, judge=lambda ctx: (CLOCK.advance(seconds=1), {"keep": ["F1", "F2"], "why": "pro's evidence held"})[1])

vote = Workflow("vote", max_concurrency=1)  # one call at a time: the fake clock reads the same each run
vote.vote("decide", voters={"impact": speaker("F1"), "effort": speaker("F2"), "reach": speaker("F1")})


def router(ctx: Any) -> Any:
    CLOCK.advance(seconds=0.5)
    return [None, "search", "fix", "search", "ops"][ctx.iteration] if ctx.iteration < 5 else None


def search(ctx: Any) -> Any:
    CLOCK.advance(seconds=2)
    return {"finding": "F1", "where": "store/sqlite.py"} if ctx.iteration == 1 else None  # then idle


supervisor = Workflow("triage")
supervisor.supervisor("triage", agents={"search": search, "fix": speaker("patched store/sqlite.py"),
                                        "ops": human("Deploy the fix?", kind="approval")},
                      route=router, max_turns=8, max_idle=2)


def make_plan(ctx: Any) -> Any:
    CLOCK.advance(seconds=1)
    return [{"id": "edit-F1", "agent": "edit", "input": {"lines": "182-278"}},
            {"id": "check-F1", "agent": "check", "after": ["edit-F1"]},
            {"id": "edit-F2", "agent": "edit", "input": {"lines": "40-52"}},
            {"id": "check-F2", "agent": "check", "after": ["edit-F2"]}]


def edit(ctx: Any) -> Any:
    CLOCK.advance(seconds=2)
    if ctx.input["lines"] == "182-278":
        raise ValueError("lines 182-278 are more than one edit rewrites; split the edit")
    return {"edited": ctx.input["lines"]}


def replan(ctx: Any) -> Any:
    CLOCK.advance(seconds=1)
    return [{"id": "edit-F1a", "agent": "edit", "input": {"lines": "182-230"}},
            {"id": "edit-F1b", "agent": "edit", "input": {"lines": "231-278"}, "after": ["edit-F1a"]},
            {"id": "check-F1", "agent": "check", "after": ["edit-F1b"]},
            {"id": "edit-F2", "agent": "edit", "input": {"lines": "40-52"}},
            {"id": "check-F2", "agent": "check", "after": ["edit-F2"]}]


planner = Workflow("plan", max_concurrency=1)  # one call at a time: the fake clock reads the same each run
planner.planner("fixes", plan=make_plan, agents={"edit": edit, "check": speaker("ok")}, replan=replan,
                max_replans=2, retries=0)

person = Workflow("debate-with-a-person")
person.debate("argue", agents={"pro": speaker("F1 matters"), "con": human("Your rebuttal?")}, rounds=2,
              judge=lambda ctx: {"heard": len(ctx.history)})

WORKFLOWS = [debate, vote, supervisor, planner, person]


def build_pattern_store(path: str) -> dict[str, str]:
    """Fill a new store at ``path`` with one run per pattern view, each really executed, with a
    clock that moves only when the agents take time and run ids from a counter, so what the
    console shows is the same on every build. Returns run ids by role: ``debate`` (completed),
    ``vote`` (completed), ``supervisor`` (paused inside, on the person's approval turn: its counts
    come from its state), ``planner`` (completed after a re-plan), ``person`` (a debate waiting for
    the person's rebuttal in round 1)."""
    CLOCK.now = CONSOLE_NOW - timedelta(hours=1)
    runs: dict[str, str] = {}
    with Runtime(path, WORKFLOWS, clock=CLOCK, id_factory=counter_ids("patterns")) as rt:
        for role, workflow in (("debate", "debate"), ("vote", "vote"), ("planner", "plan"),
                               ("supervisor", "triage"), ("person", "debate-with-a-person")):
            runs[role] = rt.start(workflow)
            CLOCK.advance(minutes=5)
    fix_hosts(path)  # as tests/fixtures.py: the executor's pid and host vary
    return runs


@pytest.fixture
def store(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    """The pattern store on each backend: its URL and its runs by role."""
    monkeypatch.chdir(tmp_path)  # where the resume log of a PostgreSQL store goes
    return db, build_pattern_store(db)


def tasks(path: str, run_id: str) -> list[StepRecord]:
    with Runtime(path, create=False) as rt:
        return rt.get(run_id).tasks


def group_and_calls(path: str, run_id: str, name: str) -> tuple[StepRecord, list[StepRecord]]:
    """A pattern's row and its calls (outputs loaded)."""
    every = tasks(path, run_id)
    group = next(t for t in every if t.name == name and t.parent is None)
    with Runtime(path, create=False) as rt:
        calls = [t.model_copy(update={"output": rt.store.output(run_id, t.seq)[1]}) for t in every
                 if t.parent == group.seq]
    return group, calls


def latest_state(path: str, run_id: str) -> Any:
    with Runtime(path, create=False) as rt:
        return rt.store.checkpoint(run_id, Lookup.LATEST).state


def squash(text: str) -> str:
    return "".join(text.split())


def form_text(screen: Any) -> str:
    """The text of a form's labels and lines (whitespace removed)."""
    return squash(" ".join(str(w.content) for w in screen.query(Static)))


def output_text(pilot: Pilot) -> str:
    return rendered(detail(pilot).query_one("#output"))


def chain_keys(pilot: Pilot) -> list[Any]:
    return detail(pilot).steps.keys()


def names(pilot: Pilot) -> list[str]:
    """The step chain's first column, row by row (scrolled into view or not)."""
    steps = detail(pilot).steps
    return [steps.get_row_at(i)[0].plain for i in range(steps.row_count)]


# ---- what the records say (pure functions) ------------------------------------------------------------


def test_each_patterns_progress_and_summary_come_from_its_records(store):
    path, runs = store
    group, calls = group_and_calls(path, runs["debate"], "argue")
    assert kind_of(group) == "debate" and progress(group, calls) == "round 3/3"
    debate_view = summary(group, calls)
    assert [(it.label, [c.agent for c in it.calls]) for it in debate_view.iterations] == [
        ("round 1", ["pro", "con"]), ("round 2", ["pro", "con"]), ("round 3", ["pro", "con"])]
    assert debate_view.judge.output == {"keep": ["F1", "F2"], "why": "pro's evidence held"}

    group, calls = group_and_calls(path, runs["vote"], "decide")
    with Runtime(path, create=False) as rt:
        result = rt.step_output(runs["vote"], "decide")
    vote_view = summary(group, calls, result=(True, result))
    assert progress(group, calls) == "3/3 votes"
    assert vote_view.votes == [("impact", "F1"), ("effort", "F2"), ("reach", "F1")]
    assert vote_view.tally == (True, {"winner": "F1", "tie": False, "majority": True, "counts": [["F1", 2], ["F2", 1]]})

    group, calls = group_and_calls(path, runs["supervisor"], "triage")
    state = latest_state(path, runs["supervisor"])
    live = summary(group, calls, state)
    assert progress(group, calls, state) == "turn 4" and live.status == StepStatus.AWAITING_APPROVAL
    assert live.counts_live
    assert [(c.agent, c.activations, c.idle) for c in live.counts] == [("search", 2, 1), ("fix", 1, 0), ("ops", 0, 0)]
    assert [(r.turn, r.choice) for r in live.routes] == [(1, "search"), (2, "fix"), (3, "search"), (4, "ops")]
    assert live.routes[0].candidates == ["search", "fix", "ops"]

    group, calls = group_and_calls(path, runs["planner"], "fixes")
    assert progress(group, calls) == "5/5 subtasks"
    roots, replans = plan_tree(calls)
    assert [(r.number, r.failed) for r in replans] == [(1, "edit-F1")]

    def shape(nodes: list) -> list:
        return [(n.task, n.status and n.status.value, n.replan, n.dropped_by, shape(n.children)) for n in nodes]

    assert shape(roots) == [
        ("edit-F1", "failed", 0, None, [("check-F1", None, 0, 1, [])]),
        ("edit-F2", None, 0, 1, [("check-F2", None, 0, 1, [])]),
        ("edit-F1a", "completed", 1, None,
         [("edit-F1b", "completed", 1, None, [("check-F1", "completed", 1, None, [])])]),
        ("edit-F2", "completed", 1, None, [("check-F2", "completed", 1, None, [])])]


def test_after_a_supervisor_finished_its_counts_are_computed_from_its_calls_as_its_state_had_them(store):
    path, runs = store
    rid = runs["supervisor"]
    with Runtime(path, WORKFLOWS) as rt:
        rt.approve(rid, by="ana")
        assert rt.resume(rid) == "completed"
        inside = [c.state["in"] for c in rt.store.checkpoints(rid) if isinstance(c.state, dict) and "in" in c.state]
    group, calls = group_and_calls(path, rid, "triage")
    state = latest_state(path, rid)
    assert "in" not in state  # the run has left the pattern: nothing to read the counts from
    counted = summary(group, calls, state)
    assert not counted.counts_live
    assert {c.agent: c.activations for c in counted.counts} == {a: n for a, n in inside[-1]["activations"].items() if n}
    assert {c.agent: c.idle for c in counted.counts} == {a: n for a, n in inside[-1]["idle"].items()
                                                         if inside[-1]["activations"][a]}


def test_a_summary_reads_only_the_outputs_it_shows(store):
    """A long debate lists its latest rounds; the outputs of the earlier rounds are not read."""
    path, _ = store
    long = Workflow("long")
    long.debate("argue", agents={"a": speaker("a{iteration}"), "b": speaker("b{iteration}")}, rounds=30,
                judge=lambda ctx: "done")
    with Runtime(path, [long]) as rt:
        rid = rt.start("long")
    group, calls = group_and_calls(path, rid, "argue")
    wanted = wanted_outputs(group, calls)
    assert {c.iteration for c in calls if c.seq in wanted} == set(range(19, 32))  # 12 rounds, and the judge
    view = summary(group, with_outputs([c.model_copy(update={"output": None}) for c in calls],
                                       {c.seq: c.output for c in calls if c.seq in wanted}))
    assert view.earlier == 18 and [it.label for it in view.iterations][0] == "round 19"


# ---- the step chain: expand, collapse, a call's output -------------------------------------------------


async def test_a_pattern_is_one_row_that_expands_into_its_calls_and_collapses_again(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["debate"])
        steps = detail(pilot).steps
        assert chain_keys(pilot) == ["topic", "argue"]
        assert "▸ argue  round 3/3 · debate" in "\n".join(screen_lines(steps))
        await pilot.press("enter")  # to the step chain, on the pattern (the last step with an output)
        assert steps.has_focus and steps.selected_key() == "argue"
        await pilot.press("enter")
        calls = [CallKey("argue", r, a) for r in (1, 2, 3) for a in ("pro", "con")] + [CallKey("argue", 4, "judge")]
        assert chain_keys(pilot) == ["topic", "argue", *calls]
        assert names(pilot) == ["topic", "▾ argue  round 3/3 · debate", "  ├ round 1 · pro", "  ├ round 1 · con",
                                "  ├ round 2 · pro", "  ├ round 2 · con", "  ├ round 3 · pro", "  ├ round 3 · con",
                                "  └ judge"]
        await pilot.press("j", "j", "j")
        assert steps.selected_key() == CallKey("argue", 2, "pro")
        await pilot.press("right", "enter", "space")  # on a call: nothing to expand or collapse
        assert steps.selected_key() == CallKey("argue", 2, "pro") and len(chain_keys(pilot)) == 9
        await pilot.press("left")  # from a call: its pattern collapses, the cursor on its row
        assert chain_keys(pilot) == ["topic", "argue"] and steps.selected_key() == "argue"
        await pilot.press("right")
        assert len(chain_keys(pilot)) == 9
        await pilot.press("space")
        assert chain_keys(pilot) == ["topic", "argue"]
        await pilot.press("k", "right", "enter")  # a chain step: nothing to expand
        assert chain_keys(pilot) == ["topic", "argue"] and steps.selected_key() == "topic"


async def test_a_calls_output_shows_when_it_is_selected_and_the_patterns_summary_above_its_result(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["debate"])
        await pilot.press("enter")
        await until(pilot, detail(pilot).output_is_current)
        shown = output_text(pilot)
        for part in ("rounds", "round1pro✔round1:F1matters", 'con✔{"strike":"F4","score":0.25}',
                     "judge'sdecision✔completed", '{"keep":["F1","F2"],"why":"pro\'sevidenceheld"}', "result"):
            assert part in shown, part
        assert shown.index("judge'sdecision") < shown.index("result")
        await pilot.press("enter", "j", "j")  # round 1, con
        await until(pilot, detail(pilot).output_is_current)
        assert detail(pilot).output.seq == detail(pilot).selected_step().seq
        assert str(detail(pilot).query_one("#output-box").border_title) == "Output of argue, round 1 · con"
        assert output_text(pilot) == squash('{"strike": "F4", "score": 0.25}')
        await pilot.press(*"jjjjj")  # the judge, the last row
        assert detail(pilot).steps.selected_key() == CallKey("argue", 4, "judge")
        await until(pilot, detail(pilot).output_is_current)
        judged = squash('{"keep": ["F1", "F2"], "why": "pro\'s evidence held"}')
        await until(pilot, lambda: output_text(pilot) == judged)  # drawn after the read lands (slow under load)


async def test_each_patterns_summary_is_shown_for_its_row(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["vote"])
        assert all(p in output_text(pilot) for p in ("impactF1", "effortF2", "reachF1", "tallywinnerF1F1×2,F2×1"))
        await press_to_run(pilot, runs["planner"])
        shown = output_text(pilot)
        for part in ("planre-planned1time", "✖edit-F1·editValueError:lines182-278", "·check-F1·checkdroppedbyre-plan1",
                     "✔edit-F1a·editre-plan1", "1.re-planafteredit-F1failed✔completed"):
            assert part in shown, part
        await press_to_run(pilot, runs["supervisor"])
        await pilot.press("enter", "left")  # the person's turn is shown first; go to the pattern's row
        await until(pilot, lambda: detail(pilot).output_is_current() and detail(pilot).output.step == "triage"
                    and detail(pilot).output.summary is not None)
        shown = output_text(pilot)
        for part in ("turn4ops(person)⏸awaiting_approval", "agents(fromthesupervisor'sstate)",
                     "search21", "fix10", "ops00", "routingdecisions", "turn1→searchofsearch,fix,ops",
                     "turn4→opsofsearch,fix,ops"):
            assert part in shown, part


# ---- fork from an iteration ----------------------------------------------------------------------------


def recorded_notifications(app: RelaypointConsole) -> list[tuple[str, str]]:
    notes: list[tuple[str, str]] = []
    app.notify = lambda message, **kw: notes.append(  # type: ignore[method-assign]
        (message, kw.get("severity", "information")))
    return notes


async def fork_from(pilot: Pilot, path: str, run_id: str, keys: tuple[str, ...], says: str) -> str:
    """With the step chain focused on ``run_id``, press ``keys`` to a call, fork from it (checking
    the form says ``says``), and return the new run's id."""
    await pilot.press(*keys)
    await pilot.press("f")
    await until(pilot, lambda: isinstance(pilot.app.screen, ForkScreen))
    await settle(pilot)
    point = pilot.app.screen.query_one("#fork-point", Static)
    assert point.display and squash(says) in rendered(point)
    await pilot.press("ctrl+s")
    with Runtime(path, create=False) as rt:
        await until(pilot, lambda: len(rt.get(run_id).forks) == 1)
        return rt.get(run_id).forks[0]


async def test_fork_from_the_highlighted_round_copies_the_rounds_before_it(store):
    path, runs = store
    app = RelaypointConsole(path)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["debate"])
        new_id = await fork_from(pilot, path, runs["debate"], ("enter", "enter", "j", "j", "j"),
                                 "fork from round 2 of argue")
    assert any(f"from round 2 of 'argue' with the parent's input as {new_id[:8]}" in m for m, _ in notes)
    with Runtime(path, WORKFLOWS) as rt:
        fork = rt.get(new_id)
        assert (fork.parent_run_id, fork.forked_from_step, fork.status) == (runs["debate"], "argue", RunStatus.QUEUED)
        copied = [(t.iteration, t.agent, t.status) for t in fork.tasks if t.parent is not None]
        assert copied == [(1, "pro", StepStatus.COMPLETED), (1, "con", StepStatus.COMPLETED)]
        assert rt.resume(new_id) == "completed"  # round 2 onward runs; the result is the parent's
        assert rt.step_output(new_id, "argue") == rt.step_output(runs["debate"], "argue")


async def test_fork_from_a_supervisor_turn_and_the_form_can_go_back_to_a_whole_step(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["supervisor"])  # paused on turn 4: the pattern is expanded
        await pilot.press("enter")
        assert detail(pilot).steps.selected_key() == CallKey("triage", 4, "ops")
        new_id = await fork_from(pilot, path, runs["supervisor"], ("k", "k", "k"), "fork from turn 3 of triage")
        with Runtime(path, create=False) as rt:
            fork = rt.get(new_id)
        assert [(t.iteration, t.agent) for t in fork.tasks if t.parent is not None] == [
            (1, "route"), (1, "search"), (2, "route"), (2, "fix")]

        await select_run(pilot, runs["debate"])  # a form that starts inside a pattern...
        assert detail(pilot).steps.has_focus
        await pilot.press("enter", "j")
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        form = app.screen
        select, point = form.query_one("#from-step", Select), form.query_one("#fork-point", Static)
        assert select.value == "argue" and point.display
        select.value = "topic"  # ...forks from a whole step when another step is chosen
        await settle(pilot)
        assert not point.display
        await pilot.press("ctrl+s")
        with Runtime(path, create=False) as rt:
            await until(pilot, lambda: len(rt.get(runs["debate"]).forks) == 1)
            fork = rt.get(rt.get(runs["debate"]).forks[0])
        assert fork.forked_from_step == "topic" and all(t.parent is None for t in fork.tasks)


# ---- a person's turn, from the console ------------------------------------------------------------------

PERSON_APP = '''
from relaypoint import Workflow, human

person = Workflow("debate-with-a-person")
person.debate("argue", agents={"pro": lambda ctx: f"pro {ctx.iteration}", "con": human("Your rebuttal?")}, rounds=2,
              judge=lambda ctx: [h["output"] for h in ctx.history])
workflows = [person]
'''


async def test_respond_to_a_persons_turn_then_resume_it_in_another_process(db, tmp_path, monkeypatch):
    write_apps(tmp_path, monkeypatch, personapp=PERSON_APP)
    monkeypatch.chdir(tmp_path)  # a PostgreSQL store's resume log goes to the current directory
    import personapp

    path = db
    with Runtime(path, personapp.workflows) as rt:
        rid = rt.start("debate-with-a-person")
    app = RelaypointConsole(path, "personapp:workflows")
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, rid)
        header = rendered(detail(pilot).query_one("#run-header"))
        assert "waitinginputatstepargue,round1·con" in header
        assert detail(pilot).steps.selected_key() == CallKey("argue", 1, "con")  # the person's turn, shown
        await pilot.press("i")
        await until(pilot, lambda: isinstance(app.screen, RespondScreen))
        assert "stepargue,round1·conasks:" in form_text(app.screen)
        app.screen.query_one("#value-json", TextArea).load_text('"F4 is noise"')
        await pilot.press("ctrl+s")
        await until(pilot, lambda: detail(pilot).run.status == RunStatus.QUEUED)
        await pilot.press("r")  # a real process resumes it: round 2 asks the person again
        await until(pilot, lambda: detail(pilot).run.status == RunStatus.AWAITING_INPUT
                    and detail(pilot).run.pending.seq != 2, timeout=30)
        await until(pilot, lambda: detail(pilot).steps.selected_key() == CallKey("argue", 2, "con"))
    with Runtime(path, create=False) as rt:
        calls = [t for t in rt.get(rid).tasks if t.parent is not None]
        assert [(t.iteration, t.agent, t.status.value) for t in calls] == [
            (1, "pro", "completed"), (1, "con", "completed"), (2, "pro", "completed"), (2, "con", "awaiting_input")]
        assert rt.store.output(rid, calls[1].seq) == (True, "F4 is noise")


async def test_approve_a_persons_approval_turn_with_a_value(store):
    path, runs = store
    rid = runs["supervisor"]
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, rid)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, ApproveScreen))
        form = app.screen
        await until(pilot, lambda: form.loaded)
        shown = form_text(form)
        assert "steptriage,turn4·ops" in shown and "Deploythefix?(triage,turn4,as'ops')" in shown
        assert squash("Value (JSON, optional; the pattern gets it with the approval") in shown
        form.query_one("#comment", Input).value = "ship it"
        form.query_one("#output-json", TextArea).load_text('{"window": "tonight"}')
        await pilot.press("ctrl+s")
        await until(pilot, lambda: detail(pilot).run.status == RunStatus.QUEUED)
        await until(pilot, lambda: "·pending" in squash(detail(pilot).steps.get_row_at(
            detail(pilot).steps.index_of(CallKey("triage", 4, "ops")))[1].plain))
    with Runtime(path, WORKFLOWS) as rt:
        assert rt.resume(rid) == "completed"
        ops = next(t for t in rt.get(rid).tasks if t.agent == "ops")
        assert ops.output == {"approved": True, "by": ops.output["by"], "comment": "ship it",
                              "value": {"window": "tonight"}}



async def test_reject_a_persons_approval_turn_ends_the_run(store):
    path, runs = store
    rid = runs["supervisor"]
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, rid)
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, RejectScreen))
        app.screen.query_one("#reason", Input).value = "not tonight"
        await pilot.press("enter")
        await until(pilot, lambda: detail(pilot).run.status == RunStatus.REJECTED)
        ops = detail(pilot).run.tasks[-1]
        assert (ops.agent, ops.status) == ("ops", StepStatus.CANCELLED)

# ---- a person's turn with a long prompt ----------------------------------------------------------------

LONG_PROMPT = "".join(f"line {n}: " + "p" * 80 + "\n" for n in range(11_500)) + "THE-END-OF-THE-PROMPT"  # 1 MB


def bounded_reason(screen: Any, db: str, run_id: str) -> str:
    """The prompt a form (or the review screen's body) shows: a page of it, with its size and the
    command that prints it whole; the widget holds that page, not the megabyte."""
    from relaypoint.views.display import PREVIEW_CHARS

    [reason] = [str(w.content) for w in screen.query(".reason").results(Static)] or [""]
    assert len(reason) < 2 * PREVIEW_CHARS and "THE-END-OF-THE-PROMPT" not in reason
    assert reason.startswith("line 0: ppp") and f"show {run_id[:8]} --json prints it whole" in reason
    assert "MiB in all" in reason and db in reason
    return reason


async def test_a_persons_turn_with_a_megabyte_prompt_shows_a_page_of_it_in_every_form_and_the_review(db):
    asked, gated = Workflow("asked"), Workflow("gated")
    asked.debate("argue", agents={"pro": lambda ctx: "pro", "con": human(LONG_PROMPT)}, rounds=1,
                 judge=lambda ctx: "judged")
    gated.debate("argue", agents={"pro": lambda ctx: "pro", "con": human(LONG_PROMPT, kind="approval")}, rounds=1,
                 judge=lambda ctx: "judged")
    with Runtime(db, [asked, gated]) as rt:
        ask, gate = rt.start("asked"), rt.start("gated")
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        for run_id, key, form in ((ask, "i", RespondScreen), (gate, "a", ApproveScreen), (gate, "x", RejectScreen)):
            await select_run(pilot, run_id)
            await pilot.press(key)
            await until(pilot, lambda: isinstance(app.screen, form))
            await settle(pilot)
            bounded_reason(app.screen, db, run_id)
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, form))
    app = RelaypointConsole(db, review=True)
    async with app.run_test(size=SIZE) as pilot:
        from relaypoint.tui.readable import READ_PAGES
        from relaypoint.tui.screens.review import ReviewScreen, header
        from relaypoint.tui.widgets.detail import HEADER_CHARS
        from relaypoint.views.display import PREVIEW_CHARS

        await until(pilot, lambda: any(isinstance(s, ReviewScreen) and s.loaded for s in app.screen_stack))
        await settle(pilot)
        screen = app.screen
        assert screen.item.run.run_id == ask
        body = "".join(str(w.content) for w in screen.query_one("#review-output").query(Static))
        assert len(body) < (READ_PAGES + 1) * PREVIEW_CHARS and "THE-END-OF-THE-PROMPT" not in body  # as an output
        assert f"show {ask[:8]} --json prints it whole" in body
        head = header(screen.item, app.clock())
        assert sum(len(str(cell)) for column in head.columns for cell in column.cells) < 2 * HEADER_CHARS


# ---- hostile text --------------------------------------------------------------------------------------

HOSTILE = "[bold red]X[/] [link=http://e]y[/link] \x1b[31mred \x1b]52;c;SGVsbG8=\x07 \x9b2J"


def hostile_store(path: str) -> dict[str, str]:
    agent = f"pro {HOSTILE}"
    wf = Workflow(f"wf {HOSTILE}")
    wf.debate(f"argue {HOSTILE}", agents={agent: lambda ctx: f"said\n{HOSTILE}", "con": lambda ctx: {"t": HOSTILE}},
              rounds=1, judge=lambda ctx: HOSTILE)
    wf.vote("decide", voters={agent: lambda ctx: HOSTILE, "b": lambda ctx: HOSTILE})
    wf.supervisor("triage", agents={agent: lambda ctx: HOSTILE},
                  route=lambda ctx: agent if ctx.iteration == 1 else None)
    wf.planner("fixes", plan=lambda ctx: [{"id": f"t {HOSTILE}", "agent": agent}], agents={agent: lambda ctx: HOSTILE})
    with Runtime(path, [wf]) as rt:
        return {"run": rt.start(wf.name)}


def literally(shown: str) -> bool:
    """True when :data:`HOSTILE` reads on the screen as stored: markup as typed, no terminal
    control, the escape character made visible (``\\x1b`` as text, ``\\u001b`` in JSON)."""
    return (not any(c in shown for c in "\x1b\x07\x9b") and "[boldred]X[/]" in shown
            and ("\\x1b[31mred" in shown or "\\u001b[31mred" in shown))


async def test_hostile_pattern_agent_and_task_names_and_outputs_are_shown_literally(db):
    path = db
    rid = hostile_store(path)["run"]
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, rid)
        pane = detail(pilot)
        for group in (f"argue {HOSTILE}", "decide", "triage", "fixes"):
            pane.steps.move_cursor(row=pane.steps.index_of(group))
            pane.expand(group, True)
            await until(pilot, lambda: pane.output_is_current() and pane.output.summary is not None)
            await settle(pilot)
            assert literally(output_text(pilot)), group
        chain = squash("".join(names(pilot)))
        assert squash(f"▾ argue {HOSTILE[:15]}") in chain and squash(f"round 1 · pro {HOSTILE[:15]}") in chain
        assert not any(c in chain for c in "\x1b\x07\x9b")
        pane.steps.move_cursor(row=pane.steps.index_of(CallKey(f"argue {HOSTILE}", 1, f"pro {HOSTILE}")))
        await until(pilot, pane.output_is_current)
        await settle(pilot)
        assert literally(output_text(pilot))
        title = squash(screen_lines(pane.query_one("#output-box"))[0])  # the border, as drawn
        assert title.startswith("─Outputofargue[boldred]X[/][link=http://e]y[/link]\\x1b[31m")
        await pilot.press("f")  # the fork form names the round and the pattern
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        await settle(pilot)
        assert literally(form_text(app.screen))
        svg = app.export_screenshot()
    assert not any(c in svg for c in "\x1b\x07\x9b") and "&#27;" not in svg


# ---- snapshots -----------------------------------------------------------------------------------------


def showing(run_id: str, *keys: str, form: type | None = None) -> Any:
    """A ``run_before``: select ``run_id``, press ``keys``, wait for ``form`` if given."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        await select_run(pilot, run_id)
        await pilot.press(*keys)
        if form is not None:
            await until(pilot, lambda: isinstance(pilot.app.screen, form))
        await settle(pilot)
        for widget in pilot.app.screen.query("Input, TextArea"):
            widget.cursor_blink = False
        await pilot.pause()

    return run_before


@pytest.fixture
def console(tmp_path: Path) -> tuple[RelaypointConsole, dict[str, str]]:
    """The console on the pattern store in a SQLite file, for snapshots (pictures, taken once)."""
    path = str(tmp_path / "store.db")
    return RelaypointConsole(path, clock=fixed_clock()), build_pattern_store(path)


def test_snapshot_of_a_supervisor_paused_on_a_persons_turn(snap_compare, console):
    """Turns, per-agent counts from its state, routing decisions; the person's approval awaited."""
    app, runs = console
    assert snap_compare(app, terminal_size=SIZE, run_before=showing(runs["supervisor"], "tab", "left"))


def test_snapshot_of_a_vote(snap_compare, console):
    """The votes and the majority tally."""
    app, runs = console
    assert snap_compare(app, terminal_size=SIZE, run_before=showing(runs["vote"]))


def test_snapshot_of_a_planner_after_a_replan(snap_compare, console):
    """The plan as a tree: the failed subtask, the ones the re-plan dropped, the ones it added."""
    app, runs = console
    assert snap_compare(app, terminal_size=SIZE, run_before=showing(runs["planner"]))


def test_snapshot_of_a_persons_turn_at_80x24(snap_compare, console):
    """A small terminal shows what the run waits for, the pattern expanded on the person's turn."""
    app, runs = console
    assert snap_compare(app, terminal_size=SMALL, run_before=showing(runs["person"]))


def test_snapshot_of_the_fork_form_from_a_round(snap_compare, console):
    app, runs = console
    assert snap_compare(app, terminal_size=(100, 30),
                        run_before=showing(runs["debate"], "tab", "enter", "j", "j", "j", "f", form=ForkScreen))


def test_an_agent_an_allowed_drift_removed_is_shown_with_a_placeholder_mark(db):
    """Reading never needs the definition: a supervisor's records name an agent an allowed drift
    removed from its definition; the summary still shows that agent's calls and counts, marked."""
    from rich.console import Console

    from relaypoint import Runtime, Workflow, human
    from relaypoint.views.patterns import summary
    from relaypoint.tui.patterns import summary_view

    def flow(agents):
        wf = Workflow("sup")
        wf.supervisor("triage", agents=agents, route=lambda c: ["ask", "search", None][c.iteration - 1])
        return wf

    with Runtime(db, [flow({"ask": human("?"), "search": human("where?")})]) as rt:
        rid = rt.start("sup")
        rt.respond(rid, "answer")
        assert rt.resume(rid) == "awaiting_input"  # search's turn: ask's is recorded
        rt.respond(rid, "here")
    with Runtime(db, [flow({"search": human("where?")})]) as rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
        run = rt.get(rid)
        group = next(t for t in run.tasks if t.name == "triage" and t.parent is None)
        assert group.options["agents"] == ["search"]
        kids = [t for t in run.tasks if t.parent == group.seq]
        console = Console(width=120, record=True)
        console.print(summary_view(summary(group, kids, rt.store.checkpoint(rid, Lookup.LATEST).state)))
        text = console.export_text()
    assert text.count("ask (not defined)") == 2 and "search (not defined)" not in text  # its turn, its counts


def drifted_vote(db: str) -> str:
    """A keyed vote whose voter ``old`` voted, then was removed by an allowed drift (and ``c``
    added): its vote is kept but no longer counted."""
    def flow(voters: dict[str, Any]) -> Workflow:
        wf = Workflow("v")
        wf.vote("decide", voters=voters, key=lambda vote: vote["score"])
        return wf

    with Runtime(db, [flow({"old": lambda c: {"score": 1, "why": "old"}, "b": human("?")})]) as rt:
        rid = rt.start("v")
        rt.respond(rid, {"score": 4, "why": "b"})
    with Runtime(db, [flow({"b": human("?"), "c": lambda c: {"score": 4, "why": "c"}})]) as rt:
        assert rt.resume(rid, allow_drift=True) == "completed"
    return rid


def test_a_votes_summary_lists_the_votes_a_drift_withdrew_marked_not_counted_and_what_each_vote_counted_as(db):
    rid = drifted_vote(db)
    group, calls = group_and_calls(db, rid, "decide")
    with Runtime(db, create=False) as rt:
        result = rt.step_output(rid, "decide")
    wanted = wanted_outputs(group, calls)
    assert [c.agent for c in calls if c.seq in wanted] == ["old", "b", "c"]  # the withdrawn vote is read too
    view = summary(group, calls, result=(True, result))
    assert view.votes == [("b", {"score": 4, "why": "b"}), ("c", {"score": 4, "why": "c"})]
    assert view.uncounted == [("old", {"score": 1, "why": "old"})]
    assert progress(group, calls) == "2/2 votes"


async def test_the_console_shows_a_withdrawn_vote_marked_and_each_votes_key(db):
    rid = drifted_vote(db)
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, rid)
        shown = output_text(pilot)
        for part in ('b→4{"score":4,"why":"b"}', 'c→4{"score":4,"why":"c"}',
                     'old(notdefined)notcounted{"score":1,"why":"old"}', "tallywinner44×2"):
            assert part in shown, part
