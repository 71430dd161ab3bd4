"""Values: every kind a step, a run input, an approval or an answer may carry either round-trips
exactly under the one documented encoding (strict JSON) or is refused with ``InvalidValue`` naming
its path; what was recorded before stays as it was, and the store stays usable.

Also: nothing is ever pickled, evaluated or imported because the store names it.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any
from uuid import UUID

import pytest
from pydantic import BaseModel

from helpers import (APP, DB, Flow, app_workflows, asks, one_line_error, relaypoint, returns, runtime, snapshot,
                     sql, sqlite_only, write_app)
from relaypoint import InvalidValue, RunStatus, Runtime, StepStatus, UnknownRun, UnknownStep, Workflow

CORE = Path(__file__).resolve().parent.parent / "core"


# ---- the kinds of values --------------------------------------------------------------------------


def nest(levels: int) -> list:
    """``levels`` lists inside one another around an empty list."""
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


class Point(BaseModel):
    when: datetime
    id: UUID
    tags: list[str]
    price: Decimal


class Reading(BaseModel):
    x: float


@dataclass
class Pair:
    left: int
    right: int


POINT = Point(when=datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC), id=UUID(int=7), tags=["a", "é"], price=Decimal("1.10"))
UNICODE = "é ü 中文 😀 \u202e right-to-left \u200b zero-width \x00 nul \x1b[31m escape \U0010fffd"

# (id, value, what it reads back as)
ROUND_TRIPS = [
    pytest.param(2**200, 2**200, id="int-2**200"),
    pytest.param(-(2**200) - 1, -(2**200) - 1, id="negative-big-int"),
    pytest.param(10**4299, 10**4299, id="int-4300-digits"),
    pytest.param(UNICODE, UNICODE, id="unicode"),
    pytest.param(nest(150), nest(150), id="nested-150"),
    pytest.param({"a": [{"b": [{"c": [1, 2, {"d": None}]}]}]}, {"a": [{"b": [{"c": [1, 2, {"d": None}]}]}]},
                 id="nested-dicts"),
    pytest.param((1, (2, "three")), [1, [2, "three"]], id="tuple-reads-back-as-list"),
    pytest.param([0.1, -0.0, 1e308, 5e-324, -1.5], [0.1, -0.0, 1e308, 5e-324, -1.5], id="finite-floats"),
    pytest.param(POINT, POINT.model_dump(mode="json"), id="pydantic-as-its-json"),
    pytest.param(None, None, id="none"),
    pytest.param([True, False, "", 0, {}], [True, False, "", 0, {}], id="falsy"),
    pytest.param(MappingProxyType({"k": [1, "é"]}), {"k": [1, "é"]}, id="mapping-reads-back-as-object"),
]

# (id, value, the message after the value's path ``<prefix>.v``; None: not yet known, only the path)
INVALID = [
    pytest.param(datetime(2031, 1, 1, tzinfo=UTC), ": datetime is not JSON serializable", id="aware-datetime"),
    pytest.param(datetime(2031, 1, 1), ": datetime is not JSON serializable", id="naive-datetime"),
    pytest.param(date(2031, 1, 1), ": date is not JSON serializable", id="date"),
    pytest.param(UUID(int=1), ": UUID is not JSON serializable", id="uuid"),
    pytest.param(Decimal("1.10"), ": Decimal is not JSON serializable", id="decimal"),
    pytest.param({1, 2}, ": set is not JSON serializable", id="set"),
    pytest.param(frozenset({1}), ": frozenset is not JSON serializable", id="frozenset"),
    pytest.param(b"\x00\xff", ": bytes is not JSON serializable", id="bytes"),
    pytest.param(Pair(1, 2), ": Pair is not JSON serializable", id="dataclass"),
    pytest.param(object(), ": object is not JSON serializable", id="object"),
    pytest.param(1j, ": complex is not JSON serializable", id="complex"),
    pytest.param(math.nan, ": nan is not valid JSON (only finite numbers are)", id="nan"),
    pytest.param(math.inf, ": inf is not valid JSON (only finite numbers are)", id="inf"),
    pytest.param(-math.inf, ": -inf is not valid JSON (only finite numbers are)", id="-inf"),
    pytest.param("ok \ud800", ": text contains a lone surrogate and is not valid Unicode", id="lone-surrogate"),
    pytest.param(nest(300), "[0]" * 200 + ": nested deeper than 200 levels", id="nested-300"),
    pytest.param({1: "a"}, ": key 1 is not a string (JSON keys are text)", id="int-key"),
    pytest.param(MappingProxyType({1: "a"}), ": key 1 is not a string (JSON keys are text)", id="mapping-int-key"),
    pytest.param([1, "two", {"three": {3}}], "[2].three: set is not JSON serializable", id="set-deep-in-list"),
    pytest.param(Reading(x=math.nan), ".x: nan is not valid JSON (only finite numbers are)", id="pydantic-with-nan"),
    pytest.param(10**5000, None, id="int-5001-digits"),
    pytest.param({"ok": 1, "\udc80": 2}, None, id="lone-surrogate-in-key"),
    # The key is checked before its value, whose path would quote it.
    pytest.param({"\udc80": "\ud800"}, ": a key contains a lone surrogate and is not valid Unicode",
                 id="lone-surrogates-in-key-and-value"),
]


def assert_names_path(message: str, prefix: str, tail: str | None) -> None:
    """``message`` is exactly ``<prefix>.v<tail>`` (or, with tail None, starts with ``<prefix>.v: ``)."""
    assert "\n" not in message
    if tail is None:
        assert message.startswith(f"{prefix}.v: "), message
    else:
        assert message == f"{prefix}.v{tail}"


# ---- the store as a whole -------------------------------------------------------------------------


def chain(**b_options: Any) -> Flow:
    """``a`` -> ``b`` -> ``c``; ``c`` returns what it was given of ``b``."""
    flow = Flow("a", ("b", b_options), "c")
    flow.on("c", lambda ctx: {"seen": ctx.results["b"]})
    return flow


def still_usable(rt: Runtime) -> None:
    """A new run of ``flow`` completes and reads back."""
    rid = rt.start("flow", {"after": True})
    assert rt.get(rid).status == RunStatus.COMPLETED


# ---- step outputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), ROUND_TRIPS)
def test_step_output_round_trips(db: str, value: Any, expected: Any) -> None:
    flow = chain().on("b", returns({"v": value}))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        run = rt.get(rid)
        assert run.status == RunStatus.COMPLETED
        assert run.tasks[1].output == {"v": expected}
        assert rt.step_output(rid, "b") == {"v": expected}
        assert flow.seen["c"][0].results["b"] == {"v": expected}
        assert run.tasks[2].output == {"seen": {"v": expected}}
    with Runtime(db, create=False) as rt:  # and after re-opening the file
        assert rt.get(rid).tasks[1].output == {"v": expected}


@pytest.mark.parametrize(("value", "tail"), INVALID)
def test_step_output_that_cannot_be_stored_fails_the_step_naming_the_path(
        db: str, value: Any, tail: str | None) -> None:
    flow = chain(retries=2).on("a", returns({"kept": [1, "é"]}))
    with runtime(db, flow) as rt:
        earlier = rt.start("flow")
        before = snapshot(db)
        flow.on("b", returns({"v": value}))

        rid = rt.start("flow")

        run = rt.get(rid)
        assert run.status == RunStatus.FAILED
        a, b, c = run.tasks
        assert (a.status, a.output) == (StepStatus.COMPLETED, {"kept": [1, "é"]})
        assert b.status == StepStatus.FAILED and not b.has_output
        assert_names_path(b.error, "output", tail)
        assert run.error == f"step 'b' failed: {b.error}"
        assert c.status == StepStatus.PENDING and flow.calls["c"] == 1  # only the earlier run's c
        assert flow.calls["b"] == 2  # an unstorable value is not retried: once in each run
        after = snapshot(db)
        for table in ("meta", "runs", "steps", "checkpoints", "events"):
            assert [r for r in after[table] if earlier in r] == [r for r in before[table] if earlier in r]
        flow.on("b", returns({"v": 1}))
        still_usable(rt)


def test_a_step_raising_an_error_that_quotes_invalid_unicode_fails_with_the_error_readable(db: str) -> None:
    # A message made from bytes decoded with surrogateescape (a file name, say) holds lone
    # surrogates: they are recorded as their escapes, the step fails and nothing else changes.
    def raises(ctx):
        raise OSError("cannot open b'\\xff': \udcff \x00 \x1b[31mred")

    flow = chain().on("b", raises)
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        run = rt.get(rid)
        assert run.status == RunStatus.FAILED
        b = run.tasks[1]
        assert b.status == StepStatus.FAILED
        assert "\\udcff" in b.error and b.error.startswith("OSError: cannot open b'\\xff': ")
        assert "\\udcff" in b.traceback and run.error == f"step 'b' failed: {b.error}"
        [failed] = [e for e in rt.events(rid) if e.kind == "step_failed"]
        assert failed.detail["error"].replace("\x00", "\ufffd") == b.error.replace("\x00", "\ufffd")  # PostgreSQL
        flow.on("b", returns({"v": 1}))
        still_usable(rt)


def test_a_step_may_return_ctx_results_whole_or_nested_in_its_output(db: str) -> None:
    flow = Flow("a", "b", "c").on("a", returns({"x": [1, "é"]}))
    flow.on("b", lambda ctx: ctx.results)  # a lazy mapping: stored as the object it reads as
    flow.on("c", lambda ctx: {"upstream": ctx.results, "names": list(ctx.results)})
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).status == RunStatus.COMPLETED
        assert rt.step_output(rid, "b") == {"a": {"x": [1, "é"]}}
        assert rt.step_output(rid, "c") == {"upstream": {"a": {"x": [1, "é"]}, "b": {"a": {"x": [1, "é"]}}},
                                            "names": ["a", "b"]}


def test_ten_megabyte_output_round_trips(db: str, tmp_path: Path) -> None:
    big = ("0123456789abcdef" * 65536 * 10)[:-3] + "é😀"  # about 10 MB
    flow = chain().on("b", returns({"text": big}))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).status == RunStatus.COMPLETED
        assert flow.seen["c"][0].results["b"]["text"] == big
        assert rt.step_output(rid, "b") == {"text": big}
        assert rt.get(rid).tasks[2].output == {"seen": {"text": big}}
        assert [s.has_output for s in rt.steps(rid)] == [True, True, True]
    shown = relaypoint(tmp_path, "show", rid, "--json", db=db)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tasks"][1]["output"] == {"text": big}


# ---- run inputs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), ROUND_TRIPS)
def test_run_input_round_trips(db: str, value: Any, expected: Any) -> None:
    flow = chain()
    with runtime(db, flow) as rt:
        rid = rt.start("flow", input={"v": value})
        assert rt.get(rid).input == {"v": expected}
        assert [ctx.input for ctx in flow.seen["a"]] == [{"v": expected}]
        fork = rt.fork(rid, "b")
        assert rt.get(fork).input == {"v": expected}


@pytest.mark.parametrize(("value", "tail"), INVALID)
@sqlite_only
def test_run_input_that_cannot_be_stored_is_refused_naming_the_path(
        db: str, value: Any, tail: str | None) -> None:
    flow = chain()
    with runtime(db, flow) as rt:
        rt.start("flow", {"fine": 1})
        before = snapshot(db)
        with pytest.raises(InvalidValue) as refused:
            rt.start("flow", input={"v": value})
        assert_names_path(str(refused.value), "input", tail)
        parent = rt.list()[0].run_id
        with pytest.raises(InvalidValue) as refused:
            rt.fork(parent, "b", input={"v": value})
        assert_names_path(str(refused.value), "input", tail)
        assert snapshot(db) == before
        assert flow.calls["a"] == 1
        still_usable(rt)


# ---- approvals and answers ------------------------------------------------------------------------


def gated(db: str) -> tuple[Flow, Runtime, str]:
    """A run paused at the approval of ``b`` (its output ``{"draft": 1}``)."""
    flow = chain(approval=True).on("b", returns({"draft": 1}))
    rt = runtime(db, flow)
    rid = rt.start("flow")
    assert rt.get(rid).status == RunStatus.AWAITING_APPROVAL
    return flow, rt, rid


@pytest.mark.parametrize(("value", "expected"), ROUND_TRIPS)
def test_approval_output_round_trips(db: str, value: Any, expected: Any) -> None:
    flow, rt, rid = gated(db)
    with rt:
        rt.approve(rid, by="ana", output={"v": value})
        assert rt.step_output(rid, "b") == {"v": expected}
        assert rt.store.checkpoints(rid)[-1].value == {"v": expected}
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert flow.seen["c"][0].results["b"] == {"v": expected}
        assert flow.calls["b"] == 1


@pytest.mark.parametrize(("value", "tail"), INVALID)
@sqlite_only
def test_approval_output_that_cannot_be_stored_is_refused_naming_the_path(
        db: str, value: Any, tail: str | None) -> None:
    flow, rt, rid = gated(db)
    with rt:
        before = snapshot(db)
        with pytest.raises(InvalidValue) as refused:
            rt.approve(rid, by="ana", output={"v": value})
        assert_names_path(str(refused.value), "output", tail)
        assert snapshot(db) == before
        run = rt.get(rid)
        assert run.status == RunStatus.AWAITING_APPROVAL and run.pending.decision is None
        rt.approve(rid, by="ana", output={"v": "fixed"})  # the pause is still open: decide it properly
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert flow.seen["c"][0].results["b"] == {"v": "fixed"}


def asking(db: str) -> tuple[Flow, Runtime, str]:
    """A run paused awaiting the answer to step ``q``'s question."""
    flow = Flow("q", "c").on("q", asks("value?"))
    flow.on("c", lambda ctx: {"seen": ctx.results["q"]})
    rt = runtime(db, flow)
    rid = rt.start("flow")
    assert rt.get(rid).status == RunStatus.AWAITING_INPUT
    return flow, rt, rid


@pytest.mark.parametrize(("value", "expected"), ROUND_TRIPS)
def test_respond_value_round_trips(db: str, value: Any, expected: Any) -> None:
    flow, rt, rid = asking(db)
    with rt:
        rt.respond(rid, {"v": value}, by="ana")
        assert rt.store.responses(rid, 0) == [{"v": expected}]  # the answers to execution 0, q
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "q") == [{"v": expected}]
        assert flow.seen["c"][0].results["q"] == [{"v": expected}]


@pytest.mark.parametrize(("value", "tail"), INVALID)
@sqlite_only
def test_respond_value_that_cannot_be_stored_is_refused_naming_the_path(
        db: str, value: Any, tail: str | None) -> None:
    _, rt, rid = asking(db)
    with rt:
        before = snapshot(db)
        with pytest.raises(InvalidValue) as refused:
            rt.respond(rid, {"v": value}, by="ana")
        assert_names_path(str(refused.value), "value", tail)
        assert snapshot(db) == before
        assert rt.get(rid).status == RunStatus.AWAITING_INPUT
        rt.respond(rid, {"v": "fixed"}, by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "q") == [{"v": "fixed"}]


# ---- the same values through the CLI --------------------------------------------------------------

BIG = str(2**200)
CLI_ROUND_TRIPS = [
    pytest.param('{"v": %s, "w": -%s}' % (BIG, BIG), {"v": 2**200, "w": -(2**200)}, id="big-ints"),
    pytest.param('{"v": "\\u00e9\\ud83d\\ude00\\u202e\\u0000", "w": "中文 😀"}',
                 {"v": "é😀\u202e\x00", "w": "中文 😀"}, id="unicode"),
    pytest.param(json.dumps({"v": nest(150)}), {"v": nest(150)}, id="nested-150"),
    pytest.param('{"v": [0.1, -0.0, 1e308, 5e-324]}', {"v": [0.1, -0.0, 1e308, 5e-324]}, id="floats"),
]

# (JSON text, the message after ``error: ``; None: any one line naming the option)
CLI_INVALID = [
    pytest.param('{"v": NaN}', "{opt}.v: nan is not valid JSON (only finite numbers are)", id="nan"),
    pytest.param('{"v": Infinity}', "{opt}.v: inf is not valid JSON (only finite numbers are)", id="inf"),
    pytest.param('{"v": -Infinity}', "{opt}.v: -inf is not valid JSON (only finite numbers are)", id="-inf"),
    pytest.param('{"v": 1e999}', "{opt}.v: inf is not valid JSON (only finite numbers are)", id="overflowing-float"),
    pytest.param('{"v": "ok \\ud800"}', "{opt}.v: text contains a lone surrogate and is not valid Unicode",
                 id="lone-surrogate"),
    pytest.param(json.dumps({"v": nest(300)}), "{opt}.v" + "[0]" * 200 + ": nested deeper than 200 levels",
                 id="nested-300"),
    pytest.param('{"v": ', None, id="malformed"),
    pytest.param('{"v": 1%s}' % ("0" * 5000), None, id="int-5001-digits"),
    pytest.param('{"ok": 1, "\\udc80": 2}', None, id="lone-surrogate-in-key"),
    pytest.param('{"v": %s}' % ("[" * 20000 + "]" * 20000), "{opt}.v" + "[0]" * 200 + ": nested deeper than 200 levels",
                 id="nested-20000"),
    pytest.param('{"v": %s' % ("[" * 100000), "{opt}.v" + "[0]" * 200 + ": nested deeper than 200 levels",
                 id="nested-100000-unclosed"),
]


def nested_text(shape: str, levels: int) -> str:
    """JSON text nesting ``levels`` containers of ``shape`` (their other members around them), closed."""
    opening, closing = {"list": ('[1, "a]", [', "]]"), "object": ('{"k": 1, "x\\"}": {"w": ', "}}"),
                        "mixed": ('{"rows": [0, {"r": ', "}]}")}[shape]
    return opening * levels + "null" + closing * levels


@pytest.mark.parametrize("shape", ["list", "object", "mixed"])
def test_json_text_nested_past_what_python_parses_names_the_path_dumps_would(shape: str) -> None:
    """Nested 300 deep, the text parses and dumps names the first value too deep; nested 100,000 deep
    (open or closed), Python's parser gives up (RecursionError), and the path named is the same."""
    from relaypoint.encoding import parse_json_arg

    with pytest.raises(InvalidValue) as parsed:
        parse_json_arg(nested_text(shape, 300), "--value")
    assert str(parsed.value).endswith(": nested deeper than 200 levels")
    for text in (nested_text(shape, 100_000), nested_text(shape, 100_000)[:-50_000]):
        with pytest.raises(InvalidValue) as deep:
            parse_json_arg(text, "--value")
        assert str(deep.value) == str(parsed.value)


@pytest.fixture
def cli_store(tmp_path: Path, db: str) -> tuple[Path, str, dict[str, str]]:
    """The CLI test app in ``tmp_path`` and the store ``db`` with a paused review run, an ask run
    and a completed simple run: the directory, ``db`` and the runs' ids by workflow."""
    write_app(tmp_path)
    ids = {}
    with Runtime(db, app_workflows()) as rt:
        ids["review"] = rt.start("review", {"topic": "t"})
        ids["ask"] = rt.start("ask")
        ids["simple"] = rt.start("simple", {"kept": "é"})
    return tmp_path, db, ids


def cli_error_is(result, expected: str | None, option: str) -> None:
    line = one_line_error(result)
    if expected is None:
        assert option in line, line
    else:
        assert line == "Error: " + expected.format(opt=option)


@pytest.mark.parametrize(("text", "expected"), CLI_ROUND_TRIPS)
def test_cli_input_round_trips(cli_store, text: str, expected: dict) -> None:
    cwd, db, _ = cli_store
    started = relaypoint(cwd, "start", "simple", "--app", APP, "--input", text, db=db)
    assert started.returncode == 0, started.stderr
    rid = started.stdout.strip()
    shown = json.loads(relaypoint(cwd, "show", rid, "--json", db=db).stdout)
    assert shown["input"] == expected
    assert shown["tasks"][0]["output"] == expected  # the step returned ctx.input
    with Runtime(db, create=False) as rt:
        assert rt.get(rid).input == expected


@pytest.mark.parametrize(("text", "expected"), CLI_INVALID)
@sqlite_only
def test_cli_input_that_cannot_be_stored_is_one_line(cli_store, text: str, expected: str | None) -> None:
    cwd, db, _ = cli_store
    before = snapshot(db)
    cli_error_is(relaypoint(cwd, "start", "simple", "--app", APP, "--input", text, db=db), expected, "--input")
    cli_error_is(relaypoint(cwd, "fork", cli_store[2]["simple"], "--from", "only", "--input", text, db=db),
                 expected, "--input")
    assert snapshot(db) == before


@sqlite_only
def test_cli_input_must_be_an_object(cli_store) -> None:
    cwd, db, _ = cli_store
    line = one_line_error(relaypoint(cwd, "start", "simple", "--app", APP, "--input", "[1, 2]", db=db))
    assert "must be a JSON object" in line


@pytest.mark.parametrize(("text", "expected"), CLI_ROUND_TRIPS)
def test_cli_approve_output_and_respond_value_round_trip(cli_store, text: str, expected: dict) -> None:
    cwd, db, ids = cli_store
    approved = relaypoint(cwd, "approve", ids["review"], "--by", "ana", "--output", text, db=db)
    assert approved.returncode == 0, approved.stderr
    responded = relaypoint(cwd, "respond", ids["ask"], "--by", "ana", "--value", text, db=db)
    assert responded.returncode == 0, responded.stderr
    for rid in (ids["review"], ids["ask"]):
        resumed = relaypoint(cwd, "resume", rid, "--app", APP, db=db)
        assert resumed.returncode == 0, resumed.stderr
    with Runtime(db, create=False) as rt:
        assert rt.step_output(ids["review"], "check") == expected
        assert rt.step_output(ids["review"], "publish") == {"published": expected}
        assert rt.step_output(ids["ask"], "question") == {"title": expected}


@pytest.mark.parametrize(("text", "expected"), CLI_INVALID)
@sqlite_only
def test_cli_approve_output_and_respond_value_that_cannot_be_stored_are_one_line(
        cli_store, text: str, expected: str | None) -> None:
    cwd, db, ids = cli_store
    before = snapshot(db)
    cli_error_is(relaypoint(cwd, "approve", ids["review"], "--output", text, db=db), expected, "--output")
    cli_error_is(relaypoint(cwd, "respond", ids["ask"], "--value", text, db=db), expected, "--value")
    assert snapshot(db) == before
    assert relaypoint(cwd, "approve", ids["review"], "--by", "ana", db=db).returncode == 0


# ---- free text and keys: comments, who decides, prompts, ids and names looked up -------------------
#
# A command-line argument that is not UTF-8 reaches Python as lone surrogates (surrogateescape):
# given as a comment or a name of who decides, it is recorded with its escapes (``\\udcff``), as a
# step's exception message is; given as a run id, step or workflow to look up, it matches nothing.

NOT_UTF8 = "\udcff\udcfe ok"  # what Python makes of the bytes ff fe in argv
NOT_UTF8_RECORDED = "\\udcff\\udcfe ok"


def test_decisions_record_free_text_that_is_not_valid_unicode_with_its_escapes(db: str) -> None:
    flow = Flow("a", ("b", {"approval": True}), "c")
    with runtime(db, flow) as rt:
        approved, rejected, cancelled = rt.start("flow"), rt.start("flow"), rt.start("flow")
        cp = rt.approve(approved, by=NOT_UTF8, comment=NOT_UTF8)
        assert (cp.decided_by, cp.comment) == (NOT_UTF8_RECORDED, NOT_UTF8_RECORDED)
        rt.reject(rejected, comment=NOT_UTF8, by=NOT_UTF8)
        assert rt.cancel(cancelled, by=NOT_UTF8) == RunStatus.AWAITING_APPROVAL
        assert [rt.get(r).status for r in (approved, rejected, cancelled)] == [
            RunStatus.QUEUED, RunStatus.REJECTED, RunStatus.CANCELLED]
        for rid, kind in ((approved, "approved"), (rejected, "rejected"), (cancelled, "cancelled")):
            [event] = [e for e in rt.events(rid) if e.kind == kind]
            assert event.actor == NOT_UTF8_RECORDED
            if kind != "cancelled":
                assert event.detail["comment"] == NOT_UTF8_RECORDED
                [decided] = [c for c in rt.store.checkpoints(rid) if c.decision]
                assert (decided.decided_by, decided.comment) == (NOT_UTF8_RECORDED, NOT_UTF8_RECORDED)
        assert rt.resume(approved) == RunStatus.COMPLETED


def test_an_answer_given_by_a_name_that_is_not_valid_unicode_is_recorded_with_its_escapes(db: str) -> None:
    flow = Flow("a").on("a", asks("Title?"))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.respond(rid, "t", by=NOT_UTF8).decided_by == NOT_UTF8_RECORDED
        assert [e.actor for e in rt.events(rid) if e.kind == "responded"] == [NOT_UTF8_RECORDED]
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "a") == ["t"]


def test_a_prompt_that_is_not_valid_unicode_pauses_the_run_with_its_escapes(db: str) -> None:
    flow = chain().on("b", asks("file \udcff?"))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        run = rt.get(rid)
        assert run.status == RunStatus.AWAITING_INPUT
        assert run.pending.reason == "file \\udcff?"
        assert [e.detail["reason"] for e in rt.events(rid) if e.kind == "paused"] == ["file \\udcff?"]
        rt.respond(rid, "yes")
        assert rt.resume(rid) == RunStatus.COMPLETED


@pytest.mark.parametrize("key", ["\udcff", "ab\x00", "\udcff\x00"], ids=["lone-surrogate", "nul", "both"])
def test_a_key_that_no_run_step_or_workflow_can_hold_matches_nothing(db: str, key: str) -> None:
    flow = chain()
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        before = snapshot(db)
        for lookup in (lambda: rt.get(key), lambda: rt.events(key), lambda: rt.approve(key),
                       lambda: rt.cancel(key), lambda: rt.delete(key), lambda: rt.fork(key, "a")):
            with pytest.raises(UnknownRun, match="no run with id"):
                lookup()
        for lookup in (lambda: rt.fork(rid, key), lambda: rt.step_output(rid, key)):
            with pytest.raises(UnknownStep, match="its steps are: a, b, c"):
                lookup()
        assert rt.list(workflow=key) == [] and rt.list(search=key) == []
        assert snapshot(db) == before
        still_usable(rt)


def test_cli_free_text_and_keys_that_are_not_utf8_are_recorded_or_refused_in_one_line(cli_store) -> None:
    cwd, db, ids = cli_store
    rid = ids["review"]
    not_utf8 = "\udcff\udcfe ok"  # subprocess passes it as the bytes ff fe
    before = snapshot(db)
    for args, what in ((["show", not_utf8], "no run with id '\\udcff\\udcfe ok'"),
                       (["events", not_utf8], "no run with id"), (["approve", not_utf8], "no run with id"),
                       (["cancel", not_utf8], "no run with id"), (["delete", not_utf8], "no run with id"),
                       (["fork", rid, "--from", not_utf8], "no step '\\udcff\\udcfe ok'; its steps are"),
                       (["show", rid, "--output", not_utf8], "no step '\\udcff\\udcfe ok'"),
                       (["resume", not_utf8, "--app", APP], "no run with id")):
        assert what in one_line_error(relaypoint(cwd, *args, db=db)), args
    listed = relaypoint(cwd, "list", "--workflow", not_utf8, "--json", db=db)
    assert (listed.returncode, json.loads(listed.stdout)) == (0, [])
    assert snapshot(db) == before

    approved = relaypoint(cwd, "approve", rid, "--comment", not_utf8, "--by", not_utf8, db=db)
    assert approved.returncode == 0 and "Traceback" not in approved.stderr, approved.stderr
    answered = relaypoint(cwd, "respond", ids["ask"], "--value", '"t"', "--by", not_utf8, db=db)
    assert answered.returncode == 0, answered.stderr
    events = json.loads(relaypoint(cwd, "events", rid, "--json", db=db).stdout)
    [event] = [e for e in events if e["kind"] == "approved"]
    assert (event["actor"], event["detail"]["comment"]) == ("\\udcff\\udcfe ok", "\\udcff\\udcfe ok")
    assert "\\udcff\\udcfe ok" in relaypoint(cwd, "events", rid, db=db).stdout
    with Runtime(db, app_workflows()) as rt:
        other = rt.start("review")
    rejected = relaypoint(cwd, "reject", other, "--comment", not_utf8, "--by", not_utf8, db=db)
    assert rejected.returncode == 0, rejected.stderr
    cancelled = relaypoint(cwd, "cancel", ids["review"], "--by", not_utf8, db=db)
    assert cancelled.returncode == 0, cancelled.stderr
    assert [e["actor"] for e in json.loads(relaypoint(cwd, "events", rid, "--json", db=db).stdout)
            if e["kind"] == "cancelled"] == ["\\udcff\\udcfe ok"]


# ---- nothing is unpickled, evaluated or imported because the store says so ------------------------


def test_core_never_pickles_evaluates_or_imports_what_it_reads() -> None:
    sources = {str(p.relative_to(CORE)): p.read_text() for p in sorted(CORE.rglob("*.py"))}
    assert "store/sqlite.py" in sources and "encoding.py" in sources
    banned = re.compile(r"^\s*(import|from)\s+(pickle|cPickle|marshal|shelve|dill|cloudpickle|yaml)\b"
                        r"|(?<![.\w])(eval|exec|compile|__import__)\s*\(|\bpickle\.|\bmarshal\.", re.MULTILINE)
    found = {name: banned.findall(text) for name, text in sources.items() if banned.search(text)}
    assert found == {}
    importers = {name for name, text in sources.items() if re.search(r"\bimportlib\b(?!\.metadata)|import_module", text)}
    assert importers <= {"apploader.py"}  # only the operator's --app is ever imported


TRAP = "rp_trap_module"
TRAP_SOURCE = ("import pathlib\n"
               "pathlib.Path(__file__).with_name('IMPORTED').write_text('imported')\n"
               "workflows = []\n")


def test_reading_a_store_never_imports_modules_it_names(db: str, tmp_path: Path) -> None:
    (tmp_path / f"{TRAP}.py").write_text(TRAP_SOURCE)
    write_app(tmp_path)
    marker = tmp_path / "IMPORTED"
    named = Workflow(f"{TRAP}:workflows")
    named.step(name=f"{TRAP}:workflows")(lambda ctx: {"app": f"{TRAP}:workflows", "module": TRAP})
    named.step(name="os:system", approval=True)(lambda ctx: "os.system('touch pwned')")
    shell = Workflow("os:system")
    shell.step(name=TRAP)(lambda ctx: None)
    with Runtime(db, [named, shell]) as rt:
        paused = rt.start(named.name, {"app": f"{TRAP}:workflows", "callable": "os:system"})
        done = rt.start(shell.name, {"--app": TRAP})
    # a definition naming modules, as a hand edit might
    sql(db, "UPDATE runs SET workflow = ?, status = 'failed' WHERE run_id = ?", TRAP, done)
    sql(db, "INSERT INTO events (run_id, at, kind, detail) VALUES (?, ?, ?, ?)",
        done, "2031-01-01T00:00:00.000Z", f"{TRAP}:workflows", json.dumps({"app": f"{TRAP}:x"}))
    env = {"PYTHONPATH": str(tmp_path)}  # the trap is importable: only a deliberate import is missing

    for args in (["list"], ["list", "--json"], ["show", paused], ["show", paused, "--json"], ["show", done],
                 ["events", paused], ["events", done, "--json"]):
        result = relaypoint(tmp_path, *args, env=env, db=db)
        assert result.returncode == 0, (args, result.stderr)
    line = one_line_error(relaypoint(tmp_path, "resume", done, "--app", APP, env=env, db=db))
    assert f"workflow '{TRAP}' is not defined by the loaded app" in line
    assert relaypoint(tmp_path, "approve", paused, "--by", "ana", env=env, db=db).returncode == 0
    assert not marker.exists()
    assert not (tmp_path / "pwned").exists()

    from relaypoint.tui.data import PageKind, RunQuery, load_detail, read_page

    with Runtime(db, create=False) as rt:
        for rid in (paused, done):
            rt.get(rid), rt.events(rid), load_detail(rt, rid)
        read_page(rt, RunQuery(), PageKind.FIRST)
    assert TRAP not in sys.modules
    assert not marker.exists()
