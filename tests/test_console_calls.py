"""What the person deciding sees of a step's recorded calls and usage: each call's messages sent and
what came back (PydanticAI's and the OpenAI Agents SDK's shapes, any other call's detail and result),
bounded, shown literally; the step's usage (a pattern's row: its calls' sum) and the run's, with the
cost when the workflow gives prices. The console is driven by real key presses on each backend."""

from __future__ import annotations

import html
import io
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console
from console_pilot import detail, rendered, select_run, settle, until
from textual.pilot import Pilot

from relaypoint import Runtime, Workflow
from relaypoint.models import CallRecord
from relaypoint.status import StepStatus
from relaypoint.tui import RelaypointConsole
from relaypoint.tui.calls import CALLS_CHARS, CALLS_SHOWN, PART_CHARS, calls_blocks
from relaypoint.tui.readable import Block
from relaypoint.tui.screens.review import ReviewScreen
from relaypoint.tui.widgets.readable_output import ReadableOutput, SafeMarkdown
from relaypoint.usage import Usage
from relaypoint.views.calls import PARTS, read_calls

pytest.importorskip("pydantic_ai")
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from relaypoint.examples import research  # noqa: E402
from relaypoint.integrations.pydantic_ai import RelaypointAgent  # noqa: E402

SIZE = (160, 45)
PROMPT = "Revise this draft as the reviewers ask."


def squeezed(text: str) -> str:
    """``text`` without whitespace, as :func:`console_pilot.rendered` draws it."""
    return "".join(text.split())


def plain(blocks: tuple[Block, ...]) -> str:
    """What ``blocks`` draw on a terminal 200 columns wide, as plain text."""
    console = Console(width=200, record=True, file=io.StringIO())
    for block in blocks:
        console.print(block.text if block.text is not None else block.markdown)
    return console.export_text()


def parts(read: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    return [(p.label, p.value) for p in read.sent], [(p.label, p.value) for p in read.received]


def call(position: int, kind: str, value: Any = None, detail: Any = None, status: StepStatus = StepStatus.COMPLETED,
         error: str | None = None, **usage: Any) -> CallRecord:
    at = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)
    return CallRecord(seq=0, position=position, name=f"{kind} {position}", kind=kind, status=status, attempt=1,
                      value=value, detail=detail, error=error, started_at=at, finished_at=at, **usage)


# ---- each call as it reads (relaypoint.views.calls) ---------------------------------------------------------


def test_a_pydantic_ai_agents_calls_read_as_the_messages_sent_and_what_came_back(tmp_path):
    with Runtime(str(tmp_path / "r.db"), research.workflows) as rt:
        run = rt.get(rt.start("research"))
        revised = rt.step_output(run.run_id, "revise")
    revise = next(t for t in run.tasks if t.name == "revise")
    first, search, last = read_calls(revise.calls)
    sent, received = parts(first)
    assert [label for label, _ in sent] == ["instructions", "user"]
    assert sent[0][1] == "You write short, sourced posts. Search before you write."
    assert sent[1][1].startswith(PROMPT)
    assert received == [("tool call web_search", {"query": "who approves a post before it is published"})]
    sent, received = parts(search)
    assert sent == [("arguments", {"query": "who approves a post before it is published"})]
    assert received == [("result", [{"url": "https://notes.example/approval",
                                     "title": "A person approves before anything is published",
                                     "snippet": research.CORPUS[3]["text"]}])]  # PydanticAI's wrapping taken off
    # the same instructions are not repeated; the tool return is the search's result, said so
    assert [(p.label, p.same_as) for p in last.sent] == [("tool return web_search", 1)]
    assert [p.label for p in last.received] == ["tool call final_result"]
    assert last.received[0].value == revised  # the structured output, as the model sent it


def test_an_openai_agents_sdk_runs_calls_read_as_its_items(tmp_path):
    pytest.importorskip("agents")
    from agents import Agent as SdkAgent, function_tool, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from relaypoint.integrations.openai_agents import RelaypointRunner

    set_tracing_disabled(True)
    answers = iter([[function_call("web_search", {"query": "durable runs"}, call_id="c1")],
                    [assistant_message("Durable runs survive a crash.")]])

    @function_tool
    def web_search(query: str) -> list[str]:
        """Search the web."""
        return [f"{query}: result"]

    writer = SdkAgent(name="writer", instructions="Be brief.", tools=[web_search],
                      model=ScriptedModel([ModelStep.respond(lambda _: next(answers))] * 2))
    wf = Workflow("post")

    @wf.step
    async def draft(ctx):
        return (await RelaypointRunner.run(writer, "Write one line on durable runs")).final_output

    with Runtime(str(tmp_path / "oa.db"), [wf]) as rt:
        calls = rt.get(rt.start("post")).tasks[0].calls
    request, tool, answer = (parts(r) for r in read_calls(calls))
    assert request == ([("instructions", "Be brief."), ("user", "Write one line on durable runs")],
                       [("tool call web_search", {"query": "durable runs"})])  # its JSON text parsed
    assert tool == ([("arguments", {"query": "durable runs"})], [("result", ["durable runs: result"])])
    # the tool output is named by the call id's tool; the instructions are not repeated
    assert answer == ([("tool return web_search", "['durable runs: result']")],
                      [("text", "Durable runs survive a crash.")])


def test_any_other_call_reads_as_its_detail_and_result_and_a_strange_shape_is_never_dropped():
    plain, failed, odd, many = read_calls([
        call(0, "call", {"rows": 3}),
        call(1, "model", detail={"input": "hi"}, status=StepStatus.FAILED, error="rate limited"),
        call(2, "model", {"parts": "not a list"}, detail=[{"parts": 5}]),
        call(3, "model", {"parts": []}, detail=[{"parts": [{"part_kind": "user-prompt", "content": str(n)}
                                                           for n in range(PARTS + 3)]}]),
    ])
    assert parts(plain) == ([], [("result", {"rows": 3})])
    assert parts(failed) == ([("user", "hi")], [("error", "rate limited")])
    assert parts(odd) == ([("detail", [{"parts": 5}])], [("result", {"parts": "not a list"})])
    assert len(many.sent) == PARTS and many.more_sent == 3


def test_the_calls_listed_are_bounded_and_say_how_many_more_and_where_to_see_them():
    whole = "relaypoint --db x.db show 1234abcd --json"
    few = calls_blocks(tuple(call(n, "call", n) for n in range(CALLS_SHOWN + 7)), Usage(), {}, whole)
    text = plain(few)
    assert f"recorded calls ({CALLS_SHOWN + 7})" in text and f"▸ {CALLS_SHOWN} call" in text
    assert f"▸ {CALLS_SHOWN + 1} " not in text and f"… 7 more recorded calls not shown; {whole} prints them all" in text
    # built again from the same calls, equal: an output read again unchanged is not drawn again
    assert calls_blocks(tuple(call(n, "call", n) for n in range(CALLS_SHOWN + 7)), Usage(), {}, whole) == few
    big = "x" * 100_000
    request = ({"parts": [{"part_kind": "text", "content": big}] * 3},
               [{"parts": [{"part_kind": "user-prompt", "content": big}] * 3}])
    heavy = calls_blocks(tuple(call(n, "model", *request) for n in range(CALLS_SHOWN)), Usage(), {}, whole)
    shown = plain(heavy)
    # a character budget, whatever each value's size: it runs out at most one call's parts late
    assert len(squeezed(shown)) < CALLS_CHARS + 2 * PARTS * PART_CHARS
    assert "more recorded calls not shown" in shown and f"97.7 KiB in all; {whole} prints it whole" in shown


# ---- the console, by key presses on each backend ------------------------------------------------------------


def research_run(db: str) -> tuple[str, dict[int, Usage], Usage]:
    """A research run waiting at its gate, each execution's usage by seq, and the run's."""
    with Runtime(db, research.workflows) as rt:
        rid = rt.start("research")
        run = rt.get(rid, with_outputs=False)
        return rid, {t.seq: rt.execution_usage(rid, t.seq) for t in run.tasks}, rt.run_usage(rid)


def output_text(pilot: Pilot) -> str:
    return rendered(detail(pilot).query_one("#output", ReadableOutput))


def seq_of(pilot: Pilot, name: str) -> int:
    return next(t.seq for t in detail(pilot).run.tasks if t.name == name and t.parent is None)


async def test_the_runs_detail_lists_the_steps_calls_and_its_usage_and_a_patterns_sum(db):
    rid, each, total = research_run(db)
    assert total.cost is not None and total.cost > 0  # research gives prices per model
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, rid)
        header = rendered(detail(pilot).query_one("#run-header"))
        assert squeezed(f"usage {total.line()}") in header
        assert detail(pilot).steps.selected_key() == "revise"  # the gated step, where the run waits
        shown = output_text(pilot)
        for needle in (f"usage {each[seq_of(pilot, 'revise')].line()}", "recorded calls (3)",
                       "▸ 1 model request · canned-writer ✔ completed",
                       "instructions You write short, sourced posts.", f"user {PROMPT}",
                       '→ tool call web_search {"query": "who approves a post before it is published"}',
                       "▸ 2 tool web_search", '"url": "https://notes.example/approval"',
                       "tool return web_search the result of call 2, above", "→ tool call final_result"):
            assert squeezed(needle) in shown, needle
        await pilot.press("enter", "k")  # into the step chain, up to the vote: its calls' sum
        await until(pilot, lambda: detail(pilot).steps.selected_key() == "review" and detail(pilot).output_is_current())
        await settle(pilot)
        voted = each[seq_of(pilot, "review")]
        assert voted.requests == 3 and squeezed(f"usage {voted.line()}") in output_text(pilot)
        assert "recordedcalls" not in output_text(pilot)  # the vote's row recorded none itself
        await pilot.press("k")
        await until(pilot, lambda: detail(pilot).steps.selected_key() == "draft" and detail(pilot).output_is_current())
        await settle(pilot)
        assert "recordedcalls(5)" in output_text(pilot)


async def test_the_review_screen_shows_the_gated_steps_calls_and_the_runs_usage(db):
    rid, each, total = research_run(db)
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, rid)
        await pilot.press("n")  # the review queue
        await until(pilot, lambda: isinstance(app.screen, ReviewScreen) and app.screen.loaded)
        await settle(pilot)
        screen = app.screen
        assert screen.item.run.run_id == rid
        assert squeezed(f"usage {total.line()} (the run so far)") in rendered(screen.query_one("#review-head"))
        body = rendered(screen.query_one("#review-output"))
        revise = next(t.seq for t in screen.item.run.tasks if t.name == "revise")
        for needle in ('"title": "Durable agent runs: what survives a crash"', f"usage {each[revise].line()}",
                       "recorded calls (3)", "▸ 1 model request · canned-writer", f"user {PROMPT}",
                       "▸ 3 model request"):
            assert squeezed(needle) in body, needle
        assert body.index(squeezed("recorded calls")) > body.index(squeezed('"title"'))  # under the output


many = Workflow("many")


@many.step(approval=True)
def fetch_all(ctx):
    return len([ctx.call("fetch", lambda n: {"n": n, "text": "y" * 2_000}, n) for n in range(300)])


async def test_a_step_with_many_calls_lists_the_first_and_says_how_to_see_them_all(db):
    with Runtime(db, [many]) as rt:
        rid = rt.start("many")
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, rid)
        output = detail(pilot).query_one("#output", ReadableOutput)
        shown = output_text(pilot)
        assert squeezed("recorded calls (300)") in shown and squeezed(f"▸ {CALLS_SHOWN} fetch") in shown
        assert squeezed(f"▸ {CALLS_SHOWN + 1} fetch") not in shown
        assert squeezed(f"… {300 - CALLS_SHOWN} more recorded calls not shown; relaypoint --db") in shown
        assert squeezed(f"show {rid[:8]} --json prints them all") in shown
        assert len(output.children) < 5  # a few widgets, however many calls
        await pilot.press("enter", "pagedown", "pagedown")  # still answering keys
        await settle(pilot)
        assert detail(pilot).query_one("#output-box").scroll_y > 0


HOSTILE = "[bold red]loud[/] \x1b[31mred\x1b[0m \x1b]52;c;SGVsbG8=\x07 \u202eevil"
MARKDOWN = f"# Findings [bold]x[/bold]\n\n- one \x1b[2J\n- two\n- three <b>html</b>"


def hostile_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(parts=[TextPart(HOSTILE), ToolCallPart("lookup", {"q": HOSTILE})])
    return ModelResponse(parts=[TextPart(MARKDOWN)])


_agent = Agent(FunctionModel(hostile_model, model_name="canned [i]model[/i]"), name="hostile")


@_agent.tool_plain
def lookup(q: str) -> str:
    return f"found {q}"


hostile_agent = RelaypointAgent(_agent)
hostile = Workflow("hostile")


@hostile.step(approval=True)
async def answer(ctx):
    return (await hostile_agent.run(f"Say {HOSTILE}")).output


async def test_hostile_text_in_a_calls_messages_is_shown_literally_and_markdown_rendered_inert(db):
    with Runtime(db, [hostile]) as rt:
        rid = rt.start("hostile")
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, rid)
        await pilot.press("enter", "pagedown", "pagedown")
        await settle(pilot)
        output = detail(pilot).query_one("#output", ReadableOutput)
        # the step's output and the model's text in its second request: rendered, cleaned
        rendered_markdown = [m for m in output.query(SafeMarkdown) if "[bold]x[/bold]" in m.source]
        assert len(rendered_markdown) == 2 and all("\\x1b[2J" in m.source for m in rendered_markdown)
        svg = app.export_screenshot()
        shown = output_text(pilot)
    assert not {c for c in svg if c in "\x1b\x07\u202e"}, "a raw control reached the screen"
    for needle in ("[bold red]loud[/]", "\\x1b[31mred\\x1b[0m", "\\x1b]52;c;SGVsbG8=\\x07", "\\u202eevil",
                   "canned [i]model[/i]", "→ tool call lookup"):
        assert squeezed(needle) in shown, needle
    text = html.unescape(re.sub(r"<[^>]+>", "", svg)).replace("\xa0", " ")
    assert "[bold red]loud[/]" in text  # drawn as typed: markup never styles it
