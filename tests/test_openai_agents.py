"""The durable OpenAI Agents SDK run (issue 22, item 2): ``RelaypointRunner`` records each model
request and function tool call as a recorded call of the step running it, so a step run again (an
answer to ``request_input``, a kill -9 in its third model request) sends only what it had not
finished. On both backends, with the SDK's offline ``ScriptedModel`` only (no network) and real
processes killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from agents import (Agent, LocalShellTool, ModelProvider, ModelSettings, RunConfig, Usage, function_tool, handoff,
                    set_tracing_disabled)
from agents.retry import ModelRetrySettings
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from relaypoint import Runtime, Workflow
from relaypoint.integrations.openai_agents import OutsideStep, RelaypointRunner, Unsupported
from relaypoint.recorded import PROGRESS_SECONDS
from relaypoint.status import RunStatus

set_tracing_disabled(True)  # the SDK's tracing would export to OpenAI


def usage(input_tokens: int, output_tokens: int) -> Usage:
    return Usage(requests=1, input_tokens=input_tokens, output_tokens=output_tokens,
                 total_tokens=input_tokens + output_tokens)


def searching_model(sent: list[int]) -> ScriptedModel:
    """Calls web_search, then answers, again and again; ``sent`` counts its requests."""

    def respond(call):
        sent.append(len(call.input))
        if len(sent) % 2 == 1:
            return ModelStep(output=[function_call("web_search", {"query": "relaypoint"}, call_id="c1")],
                             usage=usage(10, 3))
        return ModelStep(output=[assistant_message("relaypoint is durable")], usage=usage(20, 5))
    return ScriptedModel([ModelStep.respond(respond)] * 20)


@function_tool
def web_search(query: str) -> list[str]:
    """Search the web."""
    return [f"{query}: a result"]


class Named(ModelProvider):
    """Resolves model names to the scripted models given."""

    def __init__(self, **models: ScriptedModel) -> None:
        self.models = models

    def get_model(self, model_name: str | None):
        return self.models[model_name]


def test_a_step_records_the_runs_model_requests_and_tool_calls_in_order_with_usage(db):
    sent: list[int] = []
    provider = Named(**{"gpt-test": searching_model(sent)})
    writer = Agent(name="writer", instructions="Be brief.", model="gpt-test", tools=[web_search])
    wf = Workflow("w")

    @wf.step
    async def draft(ctx):
        result = await RelaypointRunner.run(writer, "What is relaypoint?", run_config=RunConfig(model_provider=provider))
        return {"text": result.final_output, "input_tokens": result.context_wrapper.usage.input_tokens}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).tasks[0].output == {"text": "relaypoint is durable", "input_tokens": 30}
        calls = rt.store.calls(rid)
    assert [(c.position, c.name, str(c.kind)) for c in calls] == [
        (0, "model request", "model"), (1, "tool web_search", "tool"), (2, "model request", "model")]
    first, tool, second = calls
    (item,) = first.value["output"]
    assert (item["type"], item["name"], item["arguments"]) == ("function_call", "web_search", '{"query":"relaypoint"}')
    assert second.value["output"][0]["content"][0]["text"] == "relaypoint is durable"
    assert tool.value == ["relaypoint: a result"]
    assert tool.detail == {"tool": "web_search", "args": {"query": "relaypoint"}}
    # detail: the instructions and only what each request added, not the whole history again
    assert first.detail == {"instructions": "Be brief.", "input": [{"content": "What is relaypoint?", "role": "user"}]}
    assert [i["type"] for i in second.detail["input"]] == ["function_call_output"]
    assert second.detail["input"][0]["output"] == "['relaypoint: a result']"
    assert [(c.model, c.requests, c.input_tokens, c.output_tokens) for c in (first, second)] == [
        ("gpt-test", 1, 10, 3), ("gpt-test", 1, 20, 5)]
    assert (tool.model, tool.requests, tool.input_tokens) == (None, None, None)
    assert writer.tools == [web_search] and writer.model == "gpt-test", "the agent given is left as it was"


def test_an_answer_to_request_input_after_the_run_does_not_ask_the_model_again(db):
    sent: list[int] = []
    searched: list[str] = []

    @function_tool
    def web_search(query: str) -> str:
        searched.append(query)
        return "a result"

    writer = Agent(name="writer", model=searching_model(sent), tools=[web_search])
    wf = Workflow("w")
    usages: list[int] = []

    @wf.step
    async def draft(ctx):
        result = await RelaypointRunner.run(writer, "What is relaypoint?")
        usages.append(result.context_wrapper.usage.output_tokens)
        return {"text": result.final_output, "title": ctx.request_input("Title?")}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == RunStatus.AWAITING_INPUT and sent == [1, 3]
        rt.respond(rid, "Durable", by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert sent == [1, 3] and searched == ["relaypoint"], "neither the model nor the tool was called again"
        assert rt.get(rid).tasks[0].output == {"text": "relaypoint is durable", "title": "Durable"}
        assert len(rt.store.calls(rid)) == 3
    assert usages == [8, 8], "the run again sees the same usage"


def test_handed_off_agents_are_recorded_too_each_copied_once(db):
    """A handoff to an agent (listed, or through handoff()) records that agent's requests and tools;
    agents handing off to each other are wrapped once (no endless copying)."""
    triage_sent: list[int] = []
    billing_sent: list[int] = []

    def triage_respond(call):
        triage_sent.append(len(call.input))
        return ModelStep(output=[function_call("transfer_to_billing", {}, call_id="h1")], usage=usage(5, 1))

    triage = Agent(name="triage", model=ScriptedModel([ModelStep.respond(triage_respond)] * 5))
    billing = Agent(name="billing", model=searching_model(billing_sent), tools=[web_search], handoffs=[triage])
    triage.handoffs = [handoff(billing)]
    wf = Workflow("w")

    @wf.step
    async def route(ctx):
        result = await RelaypointRunner.run(triage, "Refund me")
        return {"text": result.final_output, "by": result.last_agent.name, "title": ctx.request_input("Title?")}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        rt.respond(rid, "T", by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.get(rid).tasks[0].output == {"text": "relaypoint is durable", "by": "billing", "title": "T"}
        names = [c.name for c in rt.store.calls(rid)]
    assert names == ["model request", "model request", "tool web_search", "model request"]
    assert (len(triage_sent), len(billing_sent)) == (1, 2), "each request sent once, the run again included"
    assert triage.handoffs[0].agent_name == "billing" and billing.handoffs == [triage]


def test_run_sync_records_as_run_does(db):
    sent: list[int] = []
    writer = Agent(name="writer", model=searching_model(sent), tools=[web_search])
    wf = Workflow("w")

    @wf.step
    def synced(ctx):
        return RelaypointRunner.run_sync(writer, "What is relaypoint?").final_output

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        run = rt.get(rid)
        assert run.status == RunStatus.COMPLETED, run.error
        assert run.tasks[0].output == "relaypoint is durable"
        assert [c.name for c in rt.store.calls(rid)] == ["model request", "tool web_search", "model request"]


def test_a_streamed_run_streams_live_and_its_run_again_streams_the_recorded_responses(db):
    """Live, the model's own events reach the stream; run again, each recorded request is one
    response.completed event, and the run ends as it did."""
    sent: list[int] = []
    writer = Agent(name="writer", model=searching_model(sent), tools=[web_search])
    wf = Workflow("w")
    seen: list[list[str]] = []

    @wf.step
    async def draft(ctx):
        result = RelaypointRunner.run_streamed(writer, "What is relaypoint?")
        seen.append([e.data.type async for e in result.stream_events() if e.type == "raw_response_event"])
        return {"text": result.final_output, "output_tokens": result.context_wrapper.usage.output_tokens,
                "title": ctx.request_input("Title?")}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        rt.respond(rid, "T", by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.get(rid).tasks[0].output == {"text": "relaypoint is durable", "output_tokens": 8, "title": "T"}
        calls = rt.store.calls(rid)
    assert len(sent) == 2
    live, again = seen
    assert "response.output_text.delta" in live and live.count("response.completed") == 2
    assert again == ["response.completed", "response.completed"]
    assert [(c.name, c.input_tokens, c.output_tokens) for c in calls] == [
        ("model request", 10, 3), ("tool web_search", None, None), ("model request", 20, 5)]
    assert calls[2].value["output"][0]["content"][0]["text"] == "relaypoint is durable"


def test_the_runner_refuses_to_run_outside_a_step_in_one_line():
    writer = Agent(name="writer", model=searching_model([]), tools=[web_search])
    with pytest.raises(OutsideStep) as raised:
        RelaypointRunner.run_sync(writer, "What is relaypoint?")
    assert str(raised.value) == ("agent 'writer' (RelaypointRunner) runs only inside a relaypoint step: call it from "
                                 "the function of a step that a Runtime executes")


def test_what_cannot_be_recorded_is_refused_in_one_line_before_anything_is_sent(db):
    sent: list[int] = []
    shell = Agent(name="sh", model=searching_model(sent), tools=[LocalShellTool(executor=lambda request: "")])
    retrying = Agent(name="r", model=searching_model(sent),
                     model_settings=ModelSettings(retry=ModelRetrySettings(max_retries=2)))
    wf = Workflow("w")
    errors: list[str] = []

    @wf.step
    async def go(ctx):
        for agent in (shell, retrying):
            try:
                await RelaypointRunner.run(agent, "hello")
            except Unsupported as e:
                errors.append(str(e))
        return len(errors)

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).tasks[0].output == 2
        assert rt.store.calls(rid) == []
    assert errors == [
        "agent 'sh' has tool 'local_shell' (LocalShellTool), which runs outside a function tool: relaypoint records "
        "function tools' calls only",
        "runner-managed model retries (ModelSettings.retry) cannot be recorded in a relaypoint step: remove them; a "
        "failed model request fails the step, which @wf.step(retries=...) runs again"]
    assert sent == []


def test_each_model_request_and_tool_call_sets_the_steps_progress_line(db):
    """The line the console shows on the running step: "model request N", N counted in the run."""
    seen: list[str | None] = []
    rid: list[str] = []

    def read() -> None:
        time.sleep(PROGRESS_SECONDS + 0.3)  # the line is written from a timer thread
        with Runtime(db, create=False) as other:  # what another process (the console) reads
            seen.append(other.steps(rid[0])[0].progress)

    def respond(call):
        read()
        if not seen[1:]:
            return [function_call("lookup", {}, call_id="c1")]
        return [assistant_message("done")]

    @function_tool
    def lookup() -> str:
        """Look it up."""
        read()
        return "found"

    writer = Agent(name="writer", model=ScriptedModel([ModelStep.respond(respond)] * 2), tools=[lookup])
    wf = Workflow("w")

    @wf.step
    async def draft(ctx):
        return (await RelaypointRunner.run(writer, "go")).final_output

    with Runtime(db, [wf]) as rt:
        rt.start("w", on_created=rid.append)
        assert rt.get(rid[0]).status == RunStatus.COMPLETED
    assert seen == ["model request 1", "tool lookup", "model request 2"]


APP = """
import os, sys, time
from agents import Agent, Usage, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from relaypoint import Runtime, Workflow
from relaypoint.integrations.openai_agents import RelaypointRunner

set_tracing_disabled(True)
LOG = os.environ["REQUESTS_LOG"]

def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")

def respond(call):
    n = sum(1 for item in call.input if item.get("type") == "function_call") + 1
    log(f"request {n}")
    if n == int(os.environ.get("HANG_AT", "0")):
        time.sleep(60)  # killed here
    used = Usage(requests=1, input_tokens=10 * n, output_tokens=n, total_tokens=11 * n)
    if n < 5:
        return ModelStep(output=[function_call("web_search", {"query": f"q{n}"}, call_id=f"c{n}")], usage=used)
    return ModelStep(output=[assistant_message("done after 4 searches")], usage=used)

@function_tool
def web_search(query: str) -> str:
    \"\"\"Search the web.\"\"\"
    log(f"search {query}")
    return query.upper()

agent = Agent(name="researcher", model=ScriptedModel([ModelStep.respond(respond)] * 5), tools=[web_search])
wf = Workflow("research")

@wf.step
async def research(ctx):
    return (await RelaypointRunner.run(agent, "research relaypoint")).final_output

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
    assert [c.input_tokens for c in calls if c.name == "model request"] == [10, 20, 30, 40, 50]
