"""The durable PydanticAI agent (issue 22, item 2): ``RelaypointAgent(agent)`` records each model
request and tool call as a recorded call of the step running it, so a step run again (an answer to
``request_input``, a kill -9 in its third model request) sends only what it had not finished. On
both backends, with FunctionModel only (no network) and real processes killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from relaypoint import Runtime, Workflow
from relaypoint.integrations.pydantic_ai import OutsideStep, RelaypointAgent, RelaypointDurability
from relaypoint.recorded import PROGRESS_SECONDS
from relaypoint.status import RunStatus


def searching_agent(sent: list[int]) -> RelaypointAgent:
    """An agent that calls web_search once, then answers; ``sent`` counts its model requests."""

    def model(messages, info):
        sent.append(len(messages))
        if len(sent) % 2 == 1:
            return ModelResponse(parts=[ToolCallPart("web_search", {"query": "relaypoint"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("relaypoint is durable")])

    agent = Agent(FunctionModel(model), name="writer")

    @agent.tool_plain
    def web_search(query: str) -> list[str]:
        return [f"{query}: a result"]

    return RelaypointAgent(agent)


def test_a_step_records_the_agents_model_requests_and_tool_calls_in_order_with_usage(db):
    sent: list[int] = []
    agent = searching_agent(sent)
    wf = Workflow("w")

    @wf.step
    async def draft(ctx):
        return (await agent.run("What is relaypoint?")).output

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).tasks[0].output == "relaypoint is durable"
        calls = rt.store.calls(rid)
    assert [(c.position, c.name, str(c.kind)) for c in calls] == [
        (0, "model request", "model"), (1, "tool web_search", "tool"), (2, "model request", "model")]
    first, tool, second = calls
    call_part = first.value["parts"][0]
    assert (call_part["part_kind"], call_part["tool_name"], call_part["args"]) == ("tool-call", "web_search",
                                                                                   {"query": "relaypoint"})
    assert second.value["parts"][0]["content"] == "relaypoint is durable"
    assert tool.value["result"] == ["relaypoint: a result"]
    assert tool.detail == {"tool": "web_search", "args": {"query": "relaypoint"}}
    # detail: only what each request added, not the whole history again
    assert [p["part_kind"] for m in first.detail for p in m["parts"]] == ["user-prompt"]
    assert first.detail[0]["parts"][0]["content"] == "What is relaypoint?"
    assert [p["part_kind"] for m in second.detail for p in m["parts"]] == ["tool-return"]
    for call in (first, second):
        assert call.model == "function:model:" and call.requests == 1
        assert call.input_tokens > 0 and call.output_tokens > 0
        assert (call.input_tokens, call.output_tokens) == (call.value["usage"]["input_tokens"],
                                                           call.value["usage"]["output_tokens"])
    assert (tool.model, tool.requests, tool.input_tokens) == (None, None, None)


def test_an_answer_to_request_input_after_the_agent_ran_does_not_ask_the_model_again(db):
    sent: list[int] = []
    agent = searching_agent(sent)
    wf = Workflow("w")

    @wf.step
    async def draft(ctx):
        text = (await agent.run("What is relaypoint?")).output
        return {"text": text, "title": ctx.request_input("Title?")}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == RunStatus.AWAITING_INPUT and len(sent) == 2
        rt.respond(rid, "Durable", by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert len(sent) == 2, "the model was not called again"
        assert rt.get(rid).tasks[0].output == {"text": "relaypoint is durable", "title": "Durable"}
        assert len(rt.store.calls(rid)) == 3


def test_a_tool_asking_the_model_to_retry_is_recorded_and_the_run_again_keeps_its_usage(db):
    searched: list[str] = []

    def model(messages, info):
        answered = sum(1 for m in messages if m.kind == "response")
        if answered < 2:
            return ModelResponse(parts=[ToolCallPart("web_search", {"query": "q"}, tool_call_id=f"c{answered}")])
        return ModelResponse(parts=[TextPart("found")])

    base = Agent(FunctionModel(model), name="writer")

    @base.tool_plain
    def web_search(query: str) -> str:
        searched.append(query)
        if len(searched) == 1:
            raise ModelRetry("too vague, narrow it")
        return "a result"

    agent = RelaypointAgent(base)
    wf = Workflow("w")
    usages: list[tuple[int, int]] = []

    @wf.step
    async def draft(ctx):
        result = await agent.run("search")
        usages.append((result.usage.requests, result.usage.input_tokens))
        return {"text": result.output, "title": ctx.request_input("Title?")}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        rt.respond(rid, "T", by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        calls = rt.store.calls(rid)
    assert searched == ["q", "q"], "each search ran once: the retry, then the result"
    assert [(c.name, c.value.get("kind")) for c in calls if c.name.startswith("tool")] == [
        ("tool web_search", "model_retry"), ("tool web_search", "tool_return")]
    assert calls[1].value["message"] == "too vague, narrow it"
    assert len(usages) == 2 and usages[0] == usages[1] and usages[0][0] == 3, "the run again sees the same usage"


def test_run_sync_and_iter_record_as_run_does(db):
    sent: list[int] = []
    agent = searching_agent(sent)
    wf = Workflow("w")

    @wf.step
    def synced(ctx):
        return agent.run_sync("What is relaypoint?").output

    @wf.step
    async def iterated(ctx):
        async with agent.iter("What is relaypoint?") as run:
            kinds = [type(node).__name__ async for node in run]
        return {"output": run.result.output, "nodes": kinds[-1]}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        run = rt.get(rid)
        assert run.status == RunStatus.COMPLETED, run.error
        assert [t.output for t in run.tasks] == ["relaypoint is durable",
                                                 {"output": "relaypoint is durable", "nodes": "End"}]
        assert [(c.seq, c.name) for c in rt.store.calls(rid)] == [
            (0, "model request"), (0, "tool web_search"), (0, "model request"),
            (1, "model request"), (1, "tool web_search"), (1, "model request")]


def test_the_capability_attached_to_an_agent_records_in_a_step_and_stays_out_of_the_way_outside_one(db):
    sent: list[int] = []

    def model(messages, info):
        sent.append(len(messages))
        return ModelResponse(parts=[TextPart("plain answer")])

    agent = Agent(FunctionModel(model), name="plain", capabilities=[RelaypointDurability()])
    wf = Workflow("w")

    @wf.step
    async def ask(ctx):
        return (await agent.run("hello")).output

    assert agent.run_sync("hello").output == "plain answer"  # outside a step: the agent as it is
    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).tasks[0].output == "plain answer"
        assert [(c.name, str(c.kind)) for c in rt.store.calls(rid)] == [("model request", "model")]
    assert len(sent) == 2


def test_the_agent_refuses_to_run_outside_a_step_in_one_line():
    agent = searching_agent([])
    with pytest.raises(OutsideStep) as raised:
        agent.run_sync("What is relaypoint?")
    assert str(raised.value) == ("agent 'writer' (RelaypointAgent) runs only inside a relaypoint step: call it from "
                                 "the function of a step that a Runtime executes")


APP = """
import os, sys, time
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from relaypoint import Runtime, Workflow
from relaypoint.integrations.pydantic_ai import RelaypointAgent

LOG = os.environ["REQUESTS_LOG"]

def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")

def model(messages, info):
    n = sum(1 for m in messages if m.kind == "response") + 1
    log(f"request {n}")
    if n == int(os.environ.get("HANG_AT", "0")):
        time.sleep(60)  # killed here
    if n < 5:
        return ModelResponse(parts=[ToolCallPart("web_search", {"query": f"q{n}"}, tool_call_id=f"c{n}")])
    return ModelResponse(parts=[TextPart("done after 4 searches")])

base = Agent(FunctionModel(model), name="researcher")

@base.tool_plain
def web_search(query: str) -> str:
    log(f"search {query}")
    return query.upper()

agent = RelaypointAgent(base)
wf = Workflow("research")

@wf.step
async def research(ctx):
    return (await agent.run("research relaypoint")).output

if __name__ == "__main__":
    with Runtime(sys.argv[1], [wf]) as rt:
        if sys.argv[2] == "start":
            rt.start("research")
        else:
            print(rt.resume(rt.list()[0].run_id))
"""


def test_a_kill_in_the_third_model_request_resumes_sending_only_it_and_later_ones(db, tmp_path: Path):
    app = tmp_path / "researchapp.py"
    app.write_text(textwrap.dedent(APP))
    log = tmp_path / "requests.log"
    env = {**os.environ, "REQUESTS_LOG": str(log), "HANG_AT": "3"}
    proc = subprocess.Popen([sys.executable, str(app), db, "start"], env=env, cwd=tmp_path)
    limit = time.monotonic() + 60
    while "request 3" not in (log.read_text().splitlines() if log.exists() else []):
        assert time.monotonic() < limit and proc.poll() is None, "the app never got to request 3"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = log.read_text().splitlines()
    assert before == ["request 1", "search q1", "request 2", "search q2", "request 3"]
    done = subprocess.run([sys.executable, str(app), db, "resume"], env={**env, "HANG_AT": "0"}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "completed", done.stderr
    after = log.read_text().splitlines()[len(before):]
    assert after == ["request 3", "search q3", "request 4", "search q4", "request 5"], "only request 3 on"
    with Runtime(db, []) as rt:
        rid = rt.list()[0].run_id
        assert rt.get(rid).tasks[0].output == "done after 4 searches"
        calls = rt.store.calls(rid)
    assert [(c.name, c.attempt) for c in calls] == [
        ("model request", 1), ("tool web_search", 1), ("model request", 1), ("tool web_search", 1),
        ("model request", 2), ("tool web_search", 2), ("model request", 2), ("tool web_search", 2),
        ("model request", 2)]


def test_each_model_request_sets_the_steps_progress_line_with_its_number(db):
    """The line the console shows on the running step: "model request N", N counted in the agent's run."""
    seen: list[str | None] = []

    def model(messages, info):
        time.sleep(PROGRESS_SECONDS + 0.3)  # the line is written from a timer thread
        with Runtime(db, create=False) as other:  # what another process (the console) reads
            seen.append(other.steps(rid[0])[0].progress)
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart("web_search", {"query": "q"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), name="writer")

    @agent.tool_plain
    def web_search(query: str) -> str:
        return "a result"

    wrapped = RelaypointAgent(agent)
    wf = Workflow("w")
    rid: list[str] = []

    @wf.step
    async def draft(ctx):
        return (await wrapped.run("go")).output

    with Runtime(db, [wf]) as rt:
        rt.start("w", on_created=rid.append)
        assert rt.get(rid[0]).status == RunStatus.COMPLETED
    assert seen == ["model request 1", "model request 2"]
