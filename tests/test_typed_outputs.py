"""Typed outputs (``@wf.step(output=Model)``, :func:`relaypoint.typed` for a pattern's agents,
``output=`` on ``wf.loop`` and ``wf.map``): validated where they are returned, stored as the model's
JSON, read back as the model; an approval's edited output checked against the recorded schema
(the app not loaded: the CLI in a subprocess, a Runtime without workflows) or the loaded model,
with nothing recorded when it does not fit."""

from __future__ import annotations

import asyncio
import json

import pytest
from helpers import one_line_error, relaypoint, runtime
from pydantic import BaseModel

from relaypoint import DefinitionError, DriftError, InvalidValue, Runtime, Workflow, typed
from relaypoint.status import RunStatus
from relaypoint.typed import check_recorded, described, fields


class Section(BaseModel):
    heading: str


class Draft(BaseModel):
    title: str
    words: int = 0
    sections: list[Section] = []


class Review(BaseModel):
    score: int
    note: str = ""


def typed_flow(returned, *, retries: int = 0, approval: bool = False, seen: list | None = None) -> Workflow:
    """``draft`` (typed Draft, returning ``returned(ctx)``), then ``publish``, which records what
    ``ctx.results["draft"]`` gave it in ``seen`` and returns its title."""
    wf = Workflow("typed")

    @wf.step(output=Draft, retries=retries, approval=approval)
    def draft(ctx):
        return returned(ctx)

    @wf.step
    def publish(ctx):
        got = ctx.results["draft"]
        if seen is not None:
            seen.append(got)
        return {"published": got.title, "words": got.words}

    return wf


def stored_output(db: str, rid: str, step: str):
    with Runtime(db, create=False) as rt:
        return rt.step_output(rid, step)


# ---- steps ----------------------------------------------------------------------------------------


def test_a_typed_step_round_trips_its_model_to_the_next_step(db):
    seen: list = []
    wf = typed_flow(lambda ctx: Draft(title="Caching", words=3, sections=[Section(heading="Why")]), seen=seen)
    with runtime(db, wf) as rt:
        rid = rt.start("typed")
        assert rt.get(rid).status == RunStatus.COMPLETED
    assert stored_output(db, rid, "draft") == {"title": "Caching", "words": 3, "sections": [{"heading": "Why"}]}
    assert stored_output(db, rid, "publish") == {"published": "Caching", "words": 3}
    (got,) = seen
    assert type(got) is Draft and got.sections == [Section(heading="Why")]


def test_a_dict_returned_by_an_async_typed_step_is_validated_into_the_model(db):
    seen: list = []

    async def returned(ctx):
        await asyncio.sleep(0)
        return {"title": "Async"}  # words and sections from the model's defaults

    with runtime(db, typed_flow(returned, seen=seen)) as rt:
        rid = rt.start("typed")
        assert rt.get(rid).status == RunStatus.COMPLETED
    assert stored_output(db, rid, "draft") == {"title": "Async", "words": 0, "sections": []}
    assert seen == [Draft(title="Async")]


def test_a_value_that_does_not_fit_fails_the_step_once_without_its_retries(db):
    calls = []

    def returned(ctx):
        calls.append(ctx.attempt)
        return {"words": 3}

    with runtime(db, typed_flow(returned, retries=3)) as rt:
        rid = rt.start("typed")
        run = rt.get(rid)
        failures = [e for e in rt.events(rid) if e.kind == "step_failed"]
    assert run.status == RunStatus.FAILED
    assert calls == [1], "a value that does not fit would not fit again: no retry"
    draft = run.tasks[0]
    assert (draft.status, draft.attempts) == ("failed", 1)
    assert draft.error == "output does not fit Draft: field 'title': Field required"
    assert run.error == "step 'draft' failed: output does not fit Draft: field 'title': Field required"
    assert len(failures) == 1 and not draft.has_output


def test_the_field_named_is_the_nested_one_and_further_ones_are_counted(db):
    wf = typed_flow(lambda ctx: {"title": "x", "words": "many", "sections": [{"head": "?"}]})
    with runtime(db, wf) as rt:
        rid = rt.start("typed")
        error = rt.get(rid).tasks[0].error
    assert error.startswith("output does not fit Draft: field 'words': Input should be a valid integer")
    assert error.endswith(" (and 1 more)") and "\n" not in error


def test_a_step_without_output_keeps_its_definition_and_fingerprint():
    plain, typed_wf = Workflow("w"), Workflow("w")
    plain.step(name="draft")(lambda ctx: None)
    typed_wf.step(name="draft", output=Draft)(lambda ctx: None)
    assert plain.definition() == [{"name": "draft", "approval": False, "retries": 0, "on_orphan": "retry",
                                   "timeout": None}]
    (entry,) = typed_wf.definition()
    assert entry["output"] == {"name": "Draft", "schema": Draft.model_json_schema()}
    assert plain.fingerprint() != typed_wf.fingerprint()


def test_a_changed_model_is_drift_named_by_the_model(db):
    wf = typed_flow(lambda ctx: {"title": "x"}, approval=True)
    with runtime(db, wf) as rt:
        rid = rt.start("typed")
        rt.approve(rid)

    class Draft(BaseModel):  # same name, another schema
        title: str
        summary: str = ""

    changed = Workflow("typed")
    changed.step(name="draft", output=Draft, approval=True)(lambda ctx: {"title": "x"})
    changed.step(name="publish")(lambda ctx: None)
    with runtime(db, changed) as rt, pytest.raises(DriftError) as e:
        rt.resume(rid)
    assert "options changed for draft (output: \"Draft\" -> \"Draft\" (schema changed))" in str(e.value)


def test_output_must_be_a_pydantic_model_class():
    wf = Workflow("w")
    with pytest.raises(DefinitionError, match="step 'draft': output must be a pydantic model class"):
        wf.step(name="draft", output=dict)(lambda ctx: None)
    with pytest.raises(DefinitionError, match="typed: output must be a pydantic model class"):
        typed(lambda ctx: None, output=Draft(title="an instance"))


# ---- approvals ------------------------------------------------------------------------------------


def gated(db: str) -> str:
    """A run of the typed flow waiting at draft's gate, with draft's output recorded."""
    with runtime(db, typed_flow(lambda ctx: {"title": "First", "words": 2}, approval=True)) as rt:
        rid = rt.start("typed")
        assert rt.get(rid).status == RunStatus.AWAITING_APPROVAL
    return rid


def assert_nothing_recorded(db: str, rid: str) -> None:
    with Runtime(db, create=False) as rt:
        run = rt.get(rid)
        assert run.status == RunStatus.AWAITING_APPROVAL
        assert run.pending is not None and run.pending.decision is None
        assert run.tasks[0].output == {"title": "First", "words": 2, "sections": []}
        assert not [e for e in rt.events(rid) if e.kind == "approved"]


@pytest.mark.parametrize("loaded", [False, True], ids=["recorded-schema", "loaded-model"])
def test_an_edit_that_does_not_fit_is_refused_with_nothing_recorded(db, loaded):
    rid = gated(db)
    flows = [typed_flow(lambda ctx: None, approval=True)] if loaded else []
    with runtime(db, *flows) as rt:
        with pytest.raises(InvalidValue) as missing:
            rt.approve(rid, output={"words": 5})
        with pytest.raises(InvalidValue) as nested:
            rt.approve(rid, output={"title": "t", "sections": [{"heading": 1}]})
    assert str(missing.value) == "the edited output of step 'draft' does not fit Draft: field 'title': Field required"
    assert str(nested.value).startswith("the edited output of step 'draft' does not fit Draft: "
                                        "field 'sections[0].heading': Input should be")
    assert_nothing_recorded(db, rid)


def test_an_edit_that_does_not_fit_is_refused_by_the_cli_without_the_app(tmp_path, db):
    rid = gated(db)
    done = relaypoint(tmp_path, "approve", rid, "--output", '{"words": 5}', db=db)
    assert one_line_error(done) == ("Error: the edited output of step 'draft' does not fit Draft: "
                                    "field 'title': Field required")
    assert_nothing_recorded(db, rid)

    done = relaypoint(tmp_path, "approve", rid, "--output", '{"title": "Edited"}', db=db)
    assert done.returncode == 0, done.stderr
    seen: list = []
    with runtime(db, typed_flow(lambda ctx: None, approval=True, seen=seen)) as rt:
        assert rt.resume(rid) == RunStatus.COMPLETED
    assert seen == [Draft(title="Edited")]
    assert stored_output(db, rid, "draft") == {"title": "Edited"}, "recorded as given (checked by its schema)"


def test_a_good_edit_is_accepted_and_the_next_step_reads_it_as_the_model(db):
    rid = gated(db)
    seen: list = []
    with runtime(db, typed_flow(lambda ctx: None, approval=True, seen=seen)) as rt:
        cp = rt.approve(rid, output={"title": "Edited", "words": "7"})  # pydantic's lax int, the app loaded
        assert cp.decision == "approved"
        assert rt.resume(rid) == RunStatus.COMPLETED
    assert seen == [Draft(title="Edited", words=7)]
    assert stored_output(db, rid, "draft") == {"title": "Edited", "words": 7, "sections": []}
    assert stored_output(db, rid, "publish") == {"published": "Edited", "words": 7}


def test_an_untyped_gate_takes_any_edit(db):
    wf = Workflow("plain")
    wf.step(name="draft", approval=True)(lambda ctx: {"title": "x"})
    with runtime(db, wf) as rt:
        rid = rt.start("plain")
    with Runtime(db, create=False) as rt:
        rt.approve(rid, output=[1, "anything"])
        assert rt.step_output(rid, "draft") == [1, "anything"]


# ---- patterns -------------------------------------------------------------------------------------


def test_typed_voters_are_models_where_code_reads_them_and_json_in_the_result(db):
    wf = Workflow("panel")
    seen: dict = {}

    def strict(ctx):
        return Review(score=3, note="thin")

    async def kind(ctx):
        return {"score": 3}

    def count(review):
        seen.setdefault("key", []).append(type(review))
        return review.score

    wf.vote("score", voters={"strict": typed(strict, output=Review), "kind": typed(kind, output=Review)},
            key=count)

    @wf.step
    def report(ctx):
        seen["result"] = ctx.results["score"]
        return None

    with runtime(db, wf) as rt:
        rid = rt.start("panel")
        run = rt.get(rid)
    assert run.status == RunStatus.COMPLETED
    assert seen["key"] == [Review, Review]
    assert seen["result"]["votes"] == {"strict": {"score": 3, "note": "thin"}, "kind": {"score": 3, "note": ""}}
    assert seen["result"]["result"]["winner"] == 3
    voter_rows = {t.agent: t for t in run.tasks if t.agent in ("strict", "kind")}
    assert voter_rows["kind"].options["output"] == described(Review)
    definition = {d["name"]: d for d in run.definition}
    assert definition["score"]["outputs"] == {"strict": described(Review), "kind": described(Review)}


def test_a_typed_agent_that_does_not_fit_fails_its_call_without_retries(db):
    wf = Workflow("debate")
    calls = []

    def pro(ctx):
        calls.append(ctx.attempt)
        return {"note": "no score"}

    def judge(ctx):
        return [type(h["output"]).__name__ for h in ctx.history]

    wf.debate("argue", agents={"pro": typed(pro, output=Review)}, rounds=1, judge=judge, retries=2)
    with runtime(db, wf) as rt:
        rid = rt.start("debate")
        run = rt.get(rid)
    assert run.status == RunStatus.FAILED and calls == [1]
    assert run.error == ("step 'argue' (iteration 1, agent 'pro') failed: output does not fit Review: "
                         "field 'score': Field required")


def test_the_judge_and_until_read_typed_outputs_as_models(db):
    wf = Workflow("typed-patterns")
    wf.debate("argue", agents={"pro": typed(lambda ctx: {"score": ctx.iteration}, output=Review)}, rounds=2,
              judge=lambda ctx: [h["output"].score for h in ctx.history])

    @wf.loop(max_iterations=5, until=lambda ctx: ctx.output.score >= 2, output=Review)
    def refine(ctx):
        return Review(score=ctx.iteration)

    wf.map("each", lambda ctx: {"score": ctx.input}, items=lambda ctx: [4, 5], output=Review)
    with runtime(db, wf) as rt:
        rid = rt.start("typed-patterns")
        assert rt.get(rid).status == RunStatus.COMPLETED
        assert rt.step_output(rid, "argue") == [1, 2]
        assert rt.step_output(rid, "refine") == {"score": 2, "note": ""}
        assert rt.step_output(rid, "each") == [{"score": 4, "note": ""}, {"score": 5, "note": ""}]
        definition = {d["name"]: d for d in rt.get(rid).definition}
    assert definition["refine"]["outputs"] == {"pass": described(Review)}
    assert definition["each"]["outputs"] == {"item": described(Review)}


def test_a_person_cannot_be_typed():
    from relaypoint import human

    with pytest.raises(DefinitionError, match="a person's turn"):
        typed(human("Your view?"), output=Review)


# ---- the recorded schema --------------------------------------------------------------------------


def test_the_recorded_schema_lists_fields_and_refuses_in_the_same_shape():
    entry = json.loads(json.dumps(described(Draft)))  # as read back from a store
    assert fields(entry) == [("title", "string", True), ("words", "integer", False),
                             ("sections", "array of Section", False)]
    with pytest.raises(InvalidValue, match=r"^output does not fit Draft: field 'words': Input should be of type "
                                           r"integer$"):
        check_recorded(entry, {"title": "t", "words": "x"}, "output")
    with pytest.raises(InvalidValue, match="is not a valid JSON Schema"):
        check_recorded({"name": "Draft", "schema": {"type": 12}}, {}, "output")
    check_recorded(entry, {"title": "t", "sections": [{"heading": "h"}]}, "output")


# ---- the console ----------------------------------------------------------------------------------


async def test_the_console_approve_form_lists_the_model_and_its_refusal_is_one_line(db, tmp_path, monkeypatch):
    from console_pilot import open_form, settle, until
    from textual.widgets import Static, TextArea

    from relaypoint.tui import RelaypointConsole
    from relaypoint.tui.screens.forms import ApproveScreen

    monkeypatch.chdir(tmp_path)
    rid = gated(db)
    app = RelaypointConsole(db)
    notes: list[tuple[str, str]] = []
    app.notify = lambda message, **kw: notes.append((message, kw.get("severity", "information")))
    async with app.run_test(size=(160, 45)) as pilot:
        await open_form(pilot, rid, "a", ApproveScreen)
        await until(pilot, lambda: app.screen.loaded)
        model = str(app.screen.query_one("#output-model", Static).content)
        assert model == ("Output model Draft: title string required · words integer · "
                         "sections array of Section")
        app.screen.query_one("#output-json", TextArea).load_text('{"words": 9}')
        await pilot.press("ctrl+s")  # the diff first
        await settle(pilot)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(severity == "error" for _, severity in notes))
    assert ("the edited output of step 'draft' does not fit Draft: field 'title': Field required", "error") in notes
    assert_nothing_recorded(db, rid)


async def test_the_mcp_approve_refuses_an_edit_that_does_not_fit_and_takes_one_that_does(db, tmp_path):
    from test_mcp import call, refused, server

    rid = gated(db)
    async with server(tmp_path, db) as session:
        said = await refused(session, "approve", run_id=rid, output='{"title": 5}')
        assert_nothing_recorded(db, rid)
        await call(session, "approve", run_id=rid, output='{"title": "By an agent"}')
    assert said.endswith("the edited output of step 'draft' does not fit Draft: field 'title': "
                         "Input should be of type string")
    assert stored_output(db, rid, "draft") == {"title": "By an agent"}


def test_a_held_orphan_approved_with_an_output_must_fit_its_model(db):
    from helpers import kill_owner

    wf = Workflow("orphan")
    wf.step(name="ask", approval=True)(lambda ctx: None)
    wf.step(name="draft", output=Draft, on_orphan="hold")(lambda ctx: {"title": "never run"})
    with runtime(db, wf) as rt:
        rid = rt.start("orphan")
        rt.approve(rid)
    kill_owner(db, rid, "draft")  # its executor died in draft
    with runtime(db, wf) as rt:
        assert rt.resume(rid) == RunStatus.AWAITING_APPROVAL
        assert rt.get(rid).pending.kind == "orphan"
    with Runtime(db, create=False) as rt:
        with pytest.raises(InvalidValue, match=r"^the edited output of step 'draft' does not fit Draft: field 'title'"):
            rt.approve(rid, output={})
        assert rt.get(rid).pending.decision is None and not rt.get(rid).tasks[1].has_output
        rt.approve(rid, output={"title": "what it did"})
        assert rt.step_output(rid, "draft") == {"title": "what it did"}


# ---- a model's own validators and its string formats, where the app is loaded and where it is not --

VALIDATED_APP = '''
from datetime import datetime

from pydantic import BaseModel, field_validator

from relaypoint import Workflow


class Post(BaseModel):
    title: str
    words: int
    when: datetime

    @field_validator("words")
    @classmethod
    def positive(cls, words: int) -> int:
        if words <= 0:
            raise ValueError("words must be positive")
        return words


posts = Workflow("posts")


@posts.step(output=Post, approval=True)
def write(ctx):
    return {"title": "First", "words": 2, "when": "2026-12-06T10:00:00Z"}
'''

NEGATIVE = '{"title": "t", "words": -5, "when": "2026-12-06T10:00:00Z"}'


@pytest.fixture
def validated_app(tmp_path, db, monkeypatch):
    """``posts.py`` in ``tmp_path`` (the current directory), and the id of a run of it at write's gate."""
    (tmp_path / "posts.py").write_text(VALIDATED_APP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    from relaypoint.apploader import load_workflows

    with runtime(db, *load_workflows("posts:posts")) as rt:
        rid = rt.start("posts")
        assert rt.get(rid).status == RunStatus.AWAITING_APPROVAL
    return rid


def approvals(db: str, rid: str) -> int:
    with Runtime(db, create=False) as rt:
        return len([e for e in rt.events(rid) if e.kind == "approved"])


def test_the_cli_checks_an_edit_with_the_models_own_validators_when_given_the_app(tmp_path, db, validated_app):
    done = relaypoint(tmp_path, "approve", validated_app, "--app", "posts:posts", "--output", NEGATIVE, db=db)
    assert one_line_error(done) == ("Error: the edited output of step 'write' does not fit Post: field 'words': "
                                    "Value error, words must be positive")
    # Without the app, the recorded schema still checks the formats pydantic writes, as pydantic reads them.
    done = relaypoint(tmp_path, "approve", validated_app, "--output",
                      '{"title": "t", "words": 3, "when": "next tuesday"}', db=db)
    assert one_line_error(done) == ("Error: the edited output of step 'write' does not fit Post: field 'when': "
                                    "'next tuesday' is not a 'date-time'")
    assert approvals(db, validated_app) == 0
    done = relaypoint(tmp_path, "approve", validated_app, "--output",
                      '{"title": "t", "words": 3, "when": "2026-12-06T10:00:00"}', db=db)  # no offset: pydantic takes it
    assert done.returncode == 0, done.stderr
    assert approvals(db, validated_app) == 1


async def test_the_console_given_the_app_checks_an_edit_with_the_models_own_validators(db, validated_app):
    from console_pilot import open_form, settle, until
    from textual.widgets import TextArea

    from relaypoint.tui import RelaypointConsole
    from relaypoint.tui.screens.forms import ApproveScreen

    app = RelaypointConsole(db, "posts:posts")
    notes: list[tuple[str, str]] = []
    app.notify = lambda message, **kw: notes.append((message, kw.get("severity", "information")))
    async with app.run_test(size=(160, 45)) as pilot:
        await open_form(pilot, validated_app, "a", ApproveScreen)
        await until(pilot, lambda: app.screen.loaded)
        app.screen.query_one("#output-json", TextArea).load_text(NEGATIVE)
        await pilot.press("ctrl+s")  # the diff first
        await settle(pilot)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(severity == "error" for _, severity in notes))
    assert ("the edited output of step 'write' does not fit Post: field 'words': Value error, words must be positive",
            "error") in notes
    assert approvals(db, validated_app) == 0


async def test_the_mcp_server_given_the_app_checks_an_edit_with_the_models_own_validators(tmp_path, db, validated_app):
    from test_mcp import refused, server

    async with server(tmp_path, db, "--app", "posts:posts") as session:
        said = await refused(session, "approve", run_id=validated_app, output=NEGATIVE)
    assert said.endswith("does not fit Post: field 'words': Value error, words must be positive")
    assert approvals(db, validated_app) == 0
