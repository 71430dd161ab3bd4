"""Workflow definitions (decorator forms, options, definition and fingerprint) and the one
encoding of stored values."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from relaypoint import DefinitionError, InvalidValue, Workflow
from relaypoint.encoding import MAX_DEPTH, dumps, loads, parse_json_arg
from relaypoint.workflow import Context, InputRequested


def build(*steps: tuple[str, dict]) -> Workflow:
    wf = Workflow("w")
    for name, options in steps:
        wf.step(name=name, **options)(lambda ctx: None)
    return wf


# ---- decorator forms ------------------------------------------------------------------------------


def test_the_three_decorator_forms_register_steps_in_order():
    wf = Workflow("w")

    @wf.step
    def draft(ctx):
        return "d"

    @wf.step(approval=True, retries=2, on_orphan="hold")
    def review(ctx):
        return "r"

    def anything(ctx):
        return "p"

    returned = wf.step(name="publish")(anything)

    assert [s.name for s in wf.steps] == ["draft", "review", "publish"]
    assert draft(None) == "d" and returned is anything  # the functions stay callable as written
    assert [s.fn for s in wf.steps] == [draft, review, anything]
    first, second, third = (wf.get(n) for n in ("draft", "review", "publish"))
    assert (first.approval, first.retries, first.on_orphan) == (False, 0, "retry")
    assert (second.approval, second.retries, second.on_orphan) == (True, 2, "hold")
    assert third.approval is False
    assert wf.get("missing") is None


@pytest.mark.parametrize("options, message", [
    ({"on_orphan": "ignore"}, "on_orphan must be 'retry' or 'hold'"),
    ({"retries": -1}, "retries must be a whole number"),
    ({"retries": 1.5}, "retries must be a whole number"),
    ({"timeout": 0}, "timeout must be a number of seconds > 0"),
    ({"timeout": "60"}, "timeout must be a number of seconds > 0"),
    ({"timeout": 1e12}, "at most 315,360,000"),  # a deadline past what a UTC datetime holds
    ({"timeout": float("inf")}, "at most 315,360,000"),
    ({"timeout": float("nan")}, "timeout must be a number of seconds > 0"),
    ({"timeout": True}, "timeout must be a number of seconds > 0"),
    ({"retries": True}, "retries must be a whole number"),
    ({"approval": "yes"}, "approval must be True or False"),
    ({"name": ""}, "a step name must be non-empty text"),
    ({"name": "  "}, "a step name must be non-empty text"),
    ({"name": "boom\x00nul"}, "a step name must be non-empty text without NUL characters"),
    ({"name": "boom\udcff"}, "a step name must be non-empty text without NUL characters or lone surrogates"),
])
def test_invalid_options_are_refused_at_definition(options, message):
    wf = Workflow("w")
    with pytest.raises(DefinitionError, match=message):
        wf.step(**{"name": "s", **options})(lambda ctx: None)
    assert wf.steps == []


@pytest.mark.parametrize("name", ["", "   ", None, "a\x00b", "a\udcffb"])
def test_a_workflow_needs_a_name(name):
    with pytest.raises(DefinitionError, match="a workflow name must be non-empty text"):
        Workflow(name)


def test_a_duplicate_name_from_the_decorator_is_refused():
    wf = Workflow("w")

    @wf.step
    def same(ctx):
        return 1

    with pytest.raises(DefinitionError, match="'same'"):
        wf.step(name="same")(lambda ctx: 2)


# ---- definition and fingerprint -------------------------------------------------------------------


def test_definition_lists_names_and_options_in_order():
    wf = build(("a", {}), ("b", {"approval": True, "retries": 3, "on_orphan": "hold"}))
    a, b = wf.definition()
    assert {"name": "a", "approval": False, "retries": 0, "on_orphan": "retry"}.items() <= a.items()
    assert {"name": "b", "approval": True, "retries": 3, "on_orphan": "hold"}.items() <= b.items()
    json.dumps(wf.definition())  # it is stored as JSON


def test_fingerprint_is_stable_for_equal_definitions_and_ignores_function_bodies():
    one = build(("a", {}), ("b", {"approval": True}))
    two = Workflow("w")
    two.step(name="a")(lambda ctx: "other body")
    two.step(name="b", approval=True)(lambda ctx: 42)
    assert one.fingerprint() == two.fingerprint()
    assert len(one.fingerprint()) == 16 and int(one.fingerprint(), 16) >= 0


@pytest.mark.parametrize("changed", [
    [("a", {}), ("b", {"approval": False})],
    [("a", {}), ("b", {"approval": True, "retries": 1})],
    [("a", {}), ("b", {"approval": True, "on_orphan": "hold"})],
    [("a", {}), ("b", {"approval": True, "timeout": 30})],
    [("a", {}), ("c", {"approval": True})],
    [("b", {"approval": True}), ("a", {})],
    [("a", {})],
    [("a", {}), ("b", {"approval": True}), ("c", {})],
])
def test_definition_and_fingerprint_change_with_any_option_name_or_order(changed):
    base = build(("a", {}), ("b", {"approval": True}))
    other = build(*changed)
    assert other.definition() != base.definition()
    assert other.fingerprint() != base.fingerprint()


# ---- request_input ordering -----------------------------------------------------------------------


def test_request_input_returns_recorded_answers_in_call_order_then_asks():
    ctx = Context(run_id="r", step="s", attempt=1, idempotency_key="r/s", input={}, results={},
                  responses=["first", {"n": 2}])
    assert ctx.request_input("one?") == "first"
    assert ctx.request_input("two?") == {"n": 2}
    with pytest.raises(InputRequested) as asked:
        ctx.request_input("three?")
    assert (asked.value.prompt, asked.value.index) == ("three?", 2)
    assert not isinstance(asked.value, Exception)  # a step's `except Exception` cannot swallow the pause


# ---- encoding -------------------------------------------------------------------------------------


class Inner(BaseModel):
    n: int


class Outer(BaseModel):
    name: str
    items: list[Inner]


@pytest.mark.parametrize("value, stored", [
    (None, None), (True, True), (0, 0), (-1.5, -1.5), ("é ✓ 日本", "é ✓ 日本"),
    ((1, [2, (3,)]), [1, [2, [3]]]),
    ({"a": {"b": [None, {}]}}, {"a": {"b": [None, {}]}}),
    (Outer(name="x", items=[Inner(n=1)]), {"name": "x", "items": [{"n": 1}]}),
    ([Inner(n=2)], [{"n": 2}]),
])
def test_storable_values_round_trip(value, stored):
    text = dumps(value)
    assert loads(text) == stored
    assert "\\u" not in text  # non-ASCII is stored as text, not escaped


@pytest.mark.parametrize("value, message", [
    ({"a": [0, 1, {"b": object()}]}, "output.a[2].b: object is not JSON serializable"),
    ({"obj": object()}, "output.obj: object is not JSON serializable"),
    ([{1, 2}], "output[0]: set is not JSON serializable"),
    ({"when": b"bytes"}, "output.when: bytes is not JSON serializable"),
    ({"x": [float("nan")]}, "output.x[0]: nan is not valid JSON"),
    ({"x": float("inf")}, "output.x: inf is not valid JSON"),
    (-float("inf"), "output: -inf is not valid JSON"),
    ({"s": "\ud800"}, "output.s: text contains a lone surrogate"),
    ({1: "one"}, "output: key 1 is not a string"),
    ({"a": {None: 1}}, "output.a: key None is not a string"),
    ({"a": {(1, 2): 1}}, "output.a: key (1, 2) is not a string"),
    ({True: 1}, "output: key True is not a string"),
])
def test_unstorable_values_name_the_path(value, message):
    with pytest.raises(InvalidValue) as refused:
        dumps(value)
    assert str(refused.value).startswith(message)


def test_the_path_root_is_the_name_given():
    with pytest.raises(InvalidValue, match=r"^input\.k: object is not JSON serializable$"):
        dumps({"k": object()}, "input")


def test_nesting_deeper_than_the_limit_is_refused():
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(InvalidValue, match=f"nested deeper than {MAX_DEPTH}"):
        dumps(deep)


@pytest.mark.parametrize("text, what", [("{bad", "--input"), ("yes", "--value"), ("", "--output")])
def test_bad_json_from_a_person_is_one_line_naming_the_option(text, what):
    with pytest.raises(InvalidValue) as refused:
        parse_json_arg(text, what)
    message = str(refused.value)
    assert message.startswith(f"{what} is not valid JSON (") and "\n" not in message


def test_json_from_a_person_obeys_the_storage_rules():
    assert parse_json_arg('{"a": [1, "x"]}', "--value") == {"a": [1, "x"]}
    with pytest.raises(InvalidValue, match="--value: nan is not valid JSON"):
        parse_json_arg("NaN", "--value")


def test_the_driver_and_fingerprint_follow_steps_added_after_first_use():
    wf = build(("a", {}))
    first, driver = wf.fingerprint(), wf.driver()
    assert wf.driver() is driver  # built once per set of steps
    wf.step(name="b")(lambda ctx: None)
    assert wf.fingerprint() != first and wf.fingerprint() == build(("a", {}), ("b", {})).fingerprint()
    assert [s.name for s in wf.driver().planned()] == ["a", "b"]
