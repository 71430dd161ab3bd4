"""Usage (issue 22, item 4): the requests and tokens a run's model requests used, per execution,
per pattern and per run, and their cost when the workflow gives prices per model. Prices are
recorded with the run when it is created, so a run keeps its cost when the application's prices
change, and forks carry their parent's. Read by ``show`` (text and ``--json``), ``list --tokens``
and the Runtime, on both backends."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from relaypoint import Runtime, Workflow
from relaypoint.cli import cli
from relaypoint.errors import DefinitionError
from relaypoint.recorded import Result, acall_as
from relaypoint.status import CallKind, RunStatus
from relaypoint.usage import dollars

PRICES = {"big": (3.0, 15.0), "small": (0.5, 1.0)}  # dollars per million input, output tokens


def request(model: str, input_tokens: int, output_tokens: int, text: str = "ok"):
    """A model request's recorded result, as an integration records it."""
    return lambda: Result(text, detail={"input": [{"role": "user", "content": "hi"}]}, model=model, requests=1,
                          input_tokens=input_tokens, output_tokens=output_tokens)


def priced_workflow(prices=PRICES) -> Workflow:
    wf = Workflow("priced", prices=prices)

    @wf.step
    async def draft(ctx):  # recorded as an integration records a model request
        await acall_as(CallKind.MODEL, "model request", request("big", 1_000, 100))
        ctx.call("search", lambda: ["a result"])  # not a model request: counts nothing
        return await acall_as(CallKind.MODEL, "model request", request("small", 2_000, 300))

    def voter(tokens):
        def vote(ctx):
            ctx.call("model request", request("small", tokens, 10))
            return "yes"
        return vote

    wf.vote("decide", voters={"a": voter(400), "b": voter(600)}, tally="majority")
    return wf


def cli_json(db: str, *args: str):
    result = CliRunner().invoke(cli, ["--db", db, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_usage_is_summed_per_execution_per_pattern_and_per_run_and_priced(db):
    with Runtime(db, [priced_workflow()]) as rt:
        rid = rt.start("priced")
        assert rt.get(rid).status == RunStatus.COMPLETED
        total = rt.run_usage(rid)
    draft_cost = (1_000 * 3.0 + 100 * 15.0 + 2_000 * 0.5 + 300 * 1.0) / 1e6
    votes_cost = ((400 + 600) * 0.5 + 20 * 1.0) / 1e6
    assert (total.requests, total.input_tokens, total.output_tokens) == (4, 4_000, 420)
    assert total.cost == pytest.approx(draft_cost + votes_cost)

    shown = cli_json(db, "show", rid, "--json")
    by_name = {(t["name"], t["agent"]): t["usage"] for t in shown["tasks"]}
    assert by_name[("draft", None)] == {"requests": 2, "input_tokens": 3_000, "output_tokens": 400,
                                        "cost": round(draft_cost, 6)}
    assert by_name[("decide", "a")] == {"requests": 1, "input_tokens": 400, "output_tokens": 10,
                                        "cost": round((400 * 0.5 + 10) / 1e6, 6)}
    # The pattern's row sums its calls' executions.
    assert by_name[("decide", None)] == {"requests": 2, "input_tokens": 1_000, "output_tokens": 20,
                                         "cost": round(votes_cost, 6)}
    assert shown["usage"] == {"requests": 4, "input_tokens": 4_000, "output_tokens": 420,
                              "cost": round(draft_cost + votes_cost, 6)}

    text = CliRunner().invoke(cli, ["--db", db, "show", rid]).output
    assert "usage: 4 requests, 4,000 in / 420 out tokens, $0.0063" in text
    assert "usage: 2 requests, 3,000 in / 400 out tokens, $0.0058" in text
    assert "user: hi" in text, "a model request's messages are shown as messages"


def test_a_run_without_model_requests_shows_zero_usage_and_no_cost(db):
    wf = Workflow("plain", prices=PRICES)
    wf.step(lambda ctx: ctx.call("search", lambda: 1), name="only")
    with Runtime(db, [wf]) as rt:
        rid = rt.start("plain")
    shown = cli_json(db, "show", rid, "--json")
    assert shown["usage"] == {"requests": 0, "input_tokens": 0, "output_tokens": 0}
    assert "usage:" not in CliRunner().invoke(cli, ["--db", db, "show", rid]).output


def test_a_model_without_a_price_leaves_the_cost_unknown_rather_than_partial(db):
    with Runtime(db, [priced_workflow({"big": (3.0, 15.0)})]) as rt:
        rid = rt.start("priced")
    shown = cli_json(db, "show", rid, "--json")
    assert shown["usage"] == {"requests": 4, "input_tokens": 4_000, "output_tokens": 420}
    draft = next(t for t in shown["tasks"] if t["name"] == "draft")
    assert "cost" not in draft["usage"], "'small' has no price: a cost of 'big' alone would read as the whole"


def test_prices_are_the_runs_from_its_creation_and_a_fork_keeps_its_parents(db):
    with Runtime(db, [priced_workflow()]) as rt:
        rid = rt.enqueue("priced")
    # The application's prices change before a worker executes the run: the run keeps its own.
    with Runtime(db, [priced_workflow({"big": (100.0, 100.0), "small": (100.0, 100.0)})]) as rt:
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.prices(rid) == PRICES
        before = rt.run_usage(rid).cost
        child = rt.fork(rid, "decide")
        assert rt.resume(child) == RunStatus.COMPLETED
        assert rt.prices(child) == PRICES
        # The fork copies draft with its calls and runs the vote again: its usage is the vote's alone
        # (its parent's counts draft's), while the copied execution still shows what it used.
        forked = rt.run_usage(child)
        assert (forked.requests, forked.input_tokens, forked.output_tokens) == (2, 1_000, 20)
        assert forked.cost == pytest.approx(((400 + 600) * 0.5 + 20 * 1.0) / 1e6) and before > forked.cost
    shown = cli_json(db, "show", child, "--json")
    assert shown["usage"]["input_tokens"] == 1_000
    assert next(t["usage"] for t in shown["tasks"] if t["name"] == "draft")["input_tokens"] == 3_000
    assert [r["usage"]["input_tokens"] for r in cli_json(db, "list", "--tokens", "--json")] == [1_000, 4_000]
    unpriced = Workflow("priced")
    unpriced.step(lambda ctx: None, name="x")
    with Runtime(db, [unpriced]) as rt:
        assert rt.prices(rt.start("priced")) == {}


def test_list_tokens_adds_each_runs_usage_read_in_one_query_per_page(db):
    with Runtime(db, [priced_workflow()]) as rt:
        used = rt.start("priced")
        rt.enqueue("priced")  # nothing executed: no usage
    listed = cli_json(db, "list", "--tokens", "--json")
    assert [r["usage"] for r in listed] == [{"requests": 0, "input_tokens": 0, "output_tokens": 0},
                                            {"requests": 4, "input_tokens": 4_000, "output_tokens": 420}]
    assert "usage" not in cli_json(db, "list", "--json")[0]
    text = CliRunner().invoke(cli, ["--db", db, "list", "--tokens"]).output.splitlines()
    assert "tokens (in / out)" in text[0]
    assert any(line.startswith(used) and "4,000 / 420" in line for line in text)
    assert "tokens" not in CliRunner().invoke(cli, ["--db", db, "list"]).output


@pytest.mark.parametrize("prices, said", [
    ({"big": (1.0,)}, "the price of model 'big' must be a pair of numbers from 0 to 1,000,000"),
    ({"big": (-1.0, 2.0)}, "the price of model 'big' must be"), ({"big": (float("nan"), 1.0)}, "model 'big' must"),
    ({"big": (1e308, 1e308)}, "model 'big' must"), ({"big": (True, 1.0)}, "model 'big' must"),
    ({"big": "1,2"}, "model 'big' must"), ({"": (1.0, 1.0)}, "prices are by model name (non-empty text), not ''"),
    ({1: (1, 1)}, "by model name (non-empty text), not 1"), ([1, 2], "prices must map model names to")])
def test_prices_that_are_not_pairs_of_numbers_by_model_name_are_refused_in_one_line(prices, said):
    with pytest.raises(DefinitionError) as refused:
        Workflow("w", prices=prices)
    assert said in str(refused.value)


@pytest.mark.parametrize("cost, shown", [(0.0, "$0.0000"), (0.0063, "$0.0063"), (12.5, "$12.5000"),
                                         (3.3e-05, "$0.000033"), (6.6e-06, "$0.0000066"), (0.00099, "$0.00099")])
def test_a_small_cost_is_shown_with_its_digits_not_as_zero(cost, shown):
    assert dollars(cost) == shown


def test_show_prints_a_pydantic_ai_agents_requests_as_messages_literally(db):
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from relaypoint.integrations.pydantic_ai import RelaypointAgent

    def model(messages, info):
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("web_search", {"query": "\x1b[31mred"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("[bold]relaypoint[/bold] is \x1b[31mdurable")])

    agent = Agent(FunctionModel(model, model_name="big"), name="writer", instructions="Be brief.")

    @agent.tool_plain
    def web_search(query: str) -> list[str]:
        return [f"{query}: a result"]

    durable = RelaypointAgent(agent)
    wf = Workflow("agentic", prices=PRICES)

    @wf.step
    async def draft(ctx):
        return (await durable.run("What is relaypoint?")).output

    with Runtime(db, [wf]) as rt:
        rid = rt.start("agentic")
        cost = rt.run_usage(rid).cost
    assert cost is not None and cost > 0
    text = CliRunner().invoke(cli, ["--db", db, "show", rid]).output
    for line in ["instructions: Be brief.", "user: What is relaypoint?",
                 '→ tool call web_search: {"query": "\\u001b[31mred"}',
                 "tool return web_search: the result of call 2, above",
                 "→ text: [bold]relaypoint[/bold] is \\x1b[31mdurable"]:
        assert line in text, line
    assert "\x1b" not in text
