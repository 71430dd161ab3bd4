"""Traces (issue 22, item 5): with OpenTelemetry's API installed, each claim of a run, each attempt
of an execution and each recorded call is a span with relaypoint's attributes; the spans a step's
function makes nest under its step span (async on the loop, sync in a worker thread, sync inline);
a failed attempt is ERROR and a pause is not; a run resumed in another process links to the span
that began it. Without OpenTelemetry every helper is a no-op and runs go on as before.

Spans are caught by the SDK's in-memory exporter: in this process through a provider of the
test's own handed to relaypoint's tracer (the global provider can be set once per process), in
subprocesses through the global provider, as an application sets it up."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from relaypoint import Runtime, Workflow, tracing
from relaypoint.drivers import Call
from relaypoint.status import EventKind, RunStatus
from relaypoint.workflow import Context, InputRequested

PROVIDER = TracerProvider()
EXPORTER = InMemorySpanExporter()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
APP = PROVIDER.get_tracer("app")  # what the user's own code (an instrumented agent) traces with


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """relaypoint's tracer on the test's provider; the exporter, emptied."""
    monkeypatch.setattr(tracing, "_tracer", PROVIDER.get_tracer("relaypoint"))
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def inner(name: str, **attributes: Any) -> None:
    """A span the user's function makes, as an instrumented agent would."""
    with APP.start_as_current_span(name, attributes=attributes):
        pass


# ---- a chain, inline (a lone sync call from the sync API)


def test_a_chain_is_a_run_span_over_its_step_spans(db, spans):
    wf = Workflow("chain")

    @wf.step
    def draft(ctx):
        inner("agent run draft")
        return {"text": "t"}

    @wf.step
    def publish(ctx):
        assert threading.current_thread() is threading.main_thread()  # the inline path
        inner("agent run publish")
        return "done"

    with Runtime(db, [wf]) as rt:
        rid = rt.start("chain", {"topic": "x"})
        started = next(e for e in rt.events(rid) if e.kind == EventKind.RUN_STARTED)
    (run,) = named(spans, "relaypoint run")
    assert run.name == "relaypoint run chain" and run.parent is None
    assert dict(run.attributes) == {tracing.RUN_ID: rid, tracing.WORKFLOW: "chain", tracing.STATUS: "completed"}
    assert run.status.status_code == StatusCode.UNSET
    ctx = run.get_span_context()
    assert started.detail["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
    steps = named(spans, "relaypoint step")
    assert [s.name for s in steps] == ["relaypoint step draft", "relaypoint step publish"]
    for step in steps:
        assert parent_of(step) == ctx.span_id
        name = step.attributes[tracing.STEP]
        assert dict(step.attributes) == {tracing.RUN_ID: rid, tracing.WORKFLOW: "chain", tracing.STEP: name,
                                         tracing.IDEMPOTENCY_KEY: f"{rid}/{name}", tracing.ATTEMPT: 1}
        (agent,) = named(spans, f"agent run {name}")
        assert parent_of(agent) == step.context.span_id
        assert agent.start_time >= step.start_time and agent.end_time <= step.end_time


# ---- a vote: pattern calls at once, each the parent of what its voter traces


def test_a_votes_calls_run_at_once_each_the_parent_of_its_voters_spans(db, spans):
    met = threading.Barrier(3, timeout=30)

    def voter(name):
        def vote(ctx):
            met.wait()  # all three in flight at once, each in its own worker thread
            inner("agent run", voter=name)
            return "ship"
        return vote

    wf = Workflow("panel")
    wf.vote("decide", voters={n: voter(n) for n in ("a", "b", "c")})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("panel")
        assert rt.get(rid).status == RunStatus.COMPLETED
    (run,) = named(spans, "relaypoint run")
    calls = [s for s in named(spans, "relaypoint step") if tracing.AGENT in s.attributes]
    assert sorted(s.attributes[tracing.AGENT] for s in calls) == ["a", "b", "c"]
    agents = named(spans, "agent run")
    for call in calls:
        assert call.name == "relaypoint step decide" and parent_of(call) == run.context.span_id
        assert call.attributes[tracing.ITERATION] == 1 and call.attributes[tracing.ATTEMPT] == 1
        assert call.attributes[tracing.RUN_ID] == rid and call.attributes[tracing.WORKFLOW] == "panel"
        (mine,) = [a for a in agents if parent_of(a) == call.context.span_id]
        assert mine.attributes["voter"] == call.attributes[tracing.AGENT]
    assert max(c.start_time for c in calls) < min(c.end_time for c in calls), "the voters' spans overlap"
    finisher = [s for s in named(spans, "relaypoint step") if tracing.AGENT not in s.attributes]
    assert [tracing.ITERATION in s.attributes for s in finisher] == [False]  # the pattern's own row


# ---- async steps, and a sync step in a worker thread


async def test_an_async_step_from_the_async_api_traces_under_its_step(db, spans):
    wf = Workflow("asyncwf")

    @wf.step
    async def fetch(ctx):
        await asyncio.sleep(0)
        inner("agent run")
        return 1

    with Runtime(db, [wf]) as rt:
        rid = await rt.astart("asyncwf")
    (run,), (step,), (agent,) = named(spans, "relaypoint run"), named(spans, "relaypoint step"), named(spans, "agent")
    assert run.attributes[tracing.RUN_ID] == rid
    assert parent_of(step) == run.context.span_id and parent_of(agent) == step.context.span_id


@pytest.mark.parametrize("kind", ["async", "sync in a worker thread"])
def test_a_step_on_the_runtimes_loop_traces_under_the_run_span_of_the_sync_api(db, spans, kind):
    """From the sync API, an async step runs on the runtime's own loop and a sync one with a timeout
    in a worker thread: the caller's current span carries over to both."""
    wf = Workflow("onloop")
    threads = []

    if kind == "async":
        @wf.step
        async def work(ctx):
            inner("agent run")
            return 1
    else:
        @wf.step(timeout=30)
        def work(ctx):
            threads.append(threading.current_thread().name)
            inner("agent run")
            return 1

    with APP.start_as_current_span("request") as request, Runtime(db, [wf]) as rt:
        rt.start("onloop")
    (run,), (step,), (agent,) = named(spans, "relaypoint run"), named(spans, "relaypoint step"), named(spans, "agent")
    assert parent_of(run) == request.get_span_context().span_id  # the application's span, e.g. a request's
    assert parent_of(step) == run.context.span_id and parent_of(agent) == step.context.span_id
    assert len(threads) == (kind != "async") and all(t.startswith("relaypoint-call") for t in threads)


# ---- a failed attempt, retried


def test_a_failed_attempt_is_an_error_span_and_its_retry_another(db, spans):
    wf = Workflow("flaky")

    @wf.step(retries=1)
    def call(ctx):
        if ctx.attempt == 1:
            raise ValueError("upstream 503")
        return "ok"

    with Runtime(db, [wf]) as rt:
        rt.start("flaky")
    first, second = named(spans, "relaypoint step")
    assert (first.attributes[tracing.ATTEMPT], second.attributes[tracing.ATTEMPT]) == (1, 2)
    assert first.status.status_code == StatusCode.ERROR and first.status.description == "ValueError: upstream 503"
    (raised,) = first.events
    assert raised.name == "exception" and raised.attributes["exception.type"] == "ValueError"
    assert second.status.status_code == StatusCode.UNSET and second.events == ()
    assert first.attributes[tracing.IDEMPOTENCY_KEY] == second.attributes[tracing.IDEMPOTENCY_KEY]


def test_a_run_failed_for_good_is_an_error_run_span(db, spans):
    wf = Workflow("broken")

    @wf.step
    def call(ctx):
        raise RuntimeError("no")

    with Runtime(db, [wf]) as rt:
        rt.start("broken")
    (run,) = named(spans, "relaypoint run")
    assert run.status.status_code == StatusCode.ERROR and run.attributes[tracing.STATUS] == "failed"


# ---- paused, then resumed in another process


RESUMER = textwrap.dedent("""
    import json, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from relaypoint import Runtime, Workflow

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)   # as an application sets OpenTelemetry up

    wf = Workflow("asks")

    @wf.step
    def ask(ctx):
        return ctx.request_input("Title?")

    with Runtime(sys.argv[1], [wf]) as rt:
        print(rt.resume(sys.argv[2]))
    print(json.dumps([{"name": s.name, "span": s.context.span_id, "trace": s.context.trace_id,
                       "parent": s.parent.span_id if s.parent else None, "attributes": dict(s.attributes),
                       "links": [{"trace": l.context.trace_id, "span": l.context.span_id,
                                  "attributes": dict(l.attributes)} for l in s.links]}
                      for s in exporter.get_finished_spans()]))
""")


def resumed_elsewhere(db: str, rid: str) -> tuple[str, list[dict[str, Any]]]:
    """Resume ``rid`` in a process of its own whose application sets up OpenTelemetry; the status
    it stopped in and the spans it made."""
    done = subprocess.run([sys.executable, "-c", RESUMER, db, rid], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    status, shown = done.stdout.strip().splitlines()
    return status, json.loads(shown)


def test_a_paused_run_resumed_in_another_process_links_to_its_first_run_span(db, spans):
    wf = Workflow("asks")

    @wf.step
    def ask(ctx):
        return ctx.request_input("Title?")

    with Runtime(db, [wf]) as rt:
        rid = rt.start("asks")
        assert rt.get(rid).status == RunStatus.AWAITING_INPUT
        (first,), (paused,) = named(spans, "relaypoint run"), named(spans, "relaypoint step")
        assert first.attributes[tracing.STATUS] == "awaiting_input" and first.status.status_code == StatusCode.UNSET
        assert paused.status.status_code == StatusCode.UNSET and paused.events == ()  # a pause is no error
        rt.respond(rid, "Final title")
    status, made = resumed_elsewhere(db, rid)
    assert status == "completed"
    (run,) = [s for s in made if s["name"] == "relaypoint run asks"]
    began = first.get_span_context()
    assert run["trace"] != began.trace_id, "a trace of its own, in the resuming process"
    assert run["links"] == [{"trace": began.trace_id, "span": began.span_id, "attributes": {"relaypoint.link": "run"}}]
    assert run["attributes"] == {tracing.RUN_ID: rid, tracing.WORKFLOW: "asks", tracing.STATUS: "completed"}
    (step,) = [s for s in made if s["name"] == "relaypoint step ask"]
    assert step["parent"] == run["span"] and step["attributes"][tracing.ATTEMPT] == 2


def test_a_queued_run_claimed_elsewhere_links_to_its_enqueue_span(db, spans):
    wf = Workflow("asks")
    wf.step(name="ask")(lambda ctx: "no question")
    with Runtime(db, [wf]) as rt:
        rid = rt.enqueue("asks")
    (enqueued,) = named(spans, "relaypoint enqueue")
    assert enqueued.name == "relaypoint enqueue asks" and enqueued.attributes[tracing.RUN_ID] == rid
    status, made = resumed_elsewhere(db, rid)
    assert status == "awaiting_input"  # the resumer's own definition of "asks" asks
    (run,) = [s for s in made if s["name"] == "relaypoint run asks"]
    assert [(link["trace"], link["span"]) for link in run["links"]] == [
        (enqueued.context.trace_id, enqueued.context.span_id)]


async def test_a_run_resumed_from_the_async_api_links_to_its_first_run_span(db, spans):
    wf = Workflow("asks")
    wf.step(name="ask")(lambda ctx: ctx.request_input("Title?"))
    with Runtime(db, [wf]) as rt:
        rid = await rt.astart("asks")
        await rt.arespond(rid, "t")
        assert await rt.aresume(rid) == RunStatus.COMPLETED  # as the worker resumes its runs
    first, again = named(spans, "relaypoint run")
    assert [(link.context.span_id, dict(link.attributes)) for link in again.links] == [
        (first.context.span_id, {"relaypoint.link": "run"})]
    assert again.attributes[tracing.STATUS] == "completed" and first.links == ()
    ask = named(spans, "relaypoint step ask")
    assert [parent_of(s) for s in ask] == [first.context.span_id, again.context.span_id]


def test_a_run_begun_untraced_resumes_without_a_link(db, spans, monkeypatch):
    wf = Workflow("asks")
    wf.step(name="ask")(lambda ctx: ctx.request_input("Title?"))
    with Runtime(db, [wf]) as rt:
        with monkeypatch.context() as untraced:
            untraced.setattr(tracing, "_tracer", None)
            rid = rt.start("asks")
        rt.respond(rid, "t")
        assert rt.resume(rid) == RunStatus.COMPLETED
    (run,) = named(spans, "relaypoint run")
    assert run.links == () and run.attributes[tracing.RUN_ID] == rid


# ---- without OpenTelemetry


def test_without_opentelemetry_the_helpers_are_no_ops_and_runs_go_on(db, spans, monkeypatch):
    monkeypatch.setattr(tracing, "_tracer", None)
    with tracing.run_span("w", "r") as span:
        assert span is None and tracing.traceparent(span) is None and not tracing.wants_origin(span)
        tracing.link_origin(span, "00-" + "1" * 32 + "-" + "2" * 16 + "-01")
        tracing.stopped(span, "failed")
    with tracing.call_span(ctx_of(), "web_search") as span:
        assert span is None
    wf = Workflow("plain")

    @wf.step(retries=1)
    def flaky(ctx):
        if ctx.attempt == 1:
            raise ValueError("once")
        return ctx.request_input("ok?")

    wf.vote("decide", voters={"a": lambda ctx: 1, "b": lambda ctx: 1})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("plain")
        rt.respond(rid, "yes")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert all("traceparent" not in (e.detail or {}) for e in rt.events(rid))
    assert spans.get_finished_spans() == ()


def test_the_import_guard_leaves_relaypoint_working_when_opentelemetry_cannot_be_imported(tmp_path):
    code = textwrap.dedent("""
        import sys
        sys.modules["opentelemetry"] = None   # `import opentelemetry` raises ImportError, as when not installed
        from relaypoint import Runtime, Workflow, tracing
        assert tracing.trace is None and tracing._tracer is None
        wf = Workflow("w")
        wf.step(name="a")(lambda ctx: 1)
        with Runtime(sys.argv[1], [wf]) as rt:
            print(rt.get(rt.start("w")).status)
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store.db")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["completed", "['opentelemetry']"]  # only the blocked name itself


# ---- a recorded call's span (the helper ctx.call uses)


def ctx_of(**fields: Any) -> Context:
    base: dict[str, Any] = dict(run_id="r1", step="draft", attempt=2, idempotency_key="r1/draft", input={},
                                results={})
    return Context(**{**base, **fields})


def test_a_call_span_nests_under_the_step_with_the_steps_attributes(spans):
    attributes = tracing.execution_attributes("r1", "research", Call("draft", iteration=3, agent="writer", parent=0), 2, "k")
    with tracing.execution_span(attributes) as step:
        with tracing.call_span(ctx_of(agent="writer", iteration=3), "model request", index=0) as call:
            call.set_attribute(tracing.GEN_AI_USAGE_INPUT_TOKENS, 120)
            inner("http POST")
    (made,) = named(spans, "relaypoint call")
    assert made.name == "relaypoint call model request" and parent_of(made) == step.get_span_context().span_id
    assert dict(made.attributes) == {tracing.RUN_ID: "r1", tracing.WORKFLOW: "research", tracing.STEP: "draft",
                                     tracing.ITERATION: 3, tracing.AGENT: "writer", tracing.IDEMPOTENCY_KEY: "r1/draft",
                                     tracing.ATTEMPT: 2, tracing.CALL: "model request", tracing.CALL_INDEX: 0,
                                     "gen_ai.usage.input_tokens": 120}
    (http,) = named(spans, "http POST")
    assert parent_of(http) == made.context.span_id


def test_a_call_span_outside_a_steps_context_takes_what_ctx_tells(spans):
    with tracing.call_span(ctx_of(agent="a", iteration=3), "tool web_search"):
        pass
    (made,) = named(spans, "relaypoint call")
    assert made.parent is None and tracing.WORKFLOW not in made.attributes
    assert (made.attributes[tracing.AGENT], made.attributes[tracing.ITERATION]) == ("a", 3)
    assert tracing.CALL_INDEX not in made.attributes


def test_a_call_that_raises_is_an_error_span_and_a_pause_is_not(spans):
    with pytest.raises(ValueError), tracing.call_span(ctx_of(), "tool web_search"):
        raise ValueError("timeout")
    with pytest.raises(InputRequested), tracing.call_span(ctx_of(), "ask"):
        raise InputRequested("Title?", 0)
    raised, paused = named(spans, "relaypoint call")
    assert raised.status.status_code == StatusCode.ERROR and [e.name for e in raised.events] == ["exception"]
    assert paused.status.status_code == StatusCode.UNSET and paused.events == ()



def test_a_recorded_call_is_a_span_under_its_step_with_its_usage_and_a_replay_is_none(db, spans):
    from relaypoint.recorded import Result

    wf = Workflow("agent")

    @wf.step
    async def think(ctx):
        answer = await ctx.acall("model", lambda: Result({"text": "hi"}, input_tokens=12, output_tokens=3))
        ctx.call("tool", lambda: inner("inside the tool") or 1)
        return {"answer": answer, "title": ctx.request_input("Title?")}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("agent")
        [step] = named(spans, "relaypoint step think")
        model, tool = named(spans, "relaypoint call model") + named(spans, "relaypoint call tool")
        assert parent_of(model) == parent_of(tool) == step.context.span_id
        assert (model.attributes[tracing.CALL_INDEX], tool.attributes[tracing.CALL_INDEX]) == (0, 1)
        assert model.attributes[tracing.RUN_ID] == rid and model.attributes[tracing.WORKFLOW] == "agent"
        assert (model.attributes[tracing.GEN_AI_USAGE_INPUT_TOKENS],
                model.attributes[tracing.GEN_AI_USAGE_OUTPUT_TOKENS]) == (12, 3)
        [within] = named(spans, "inside the tool")
        assert parent_of(within) == tool.context.span_id
        spans.clear()
        rt.respond(rid, "Hello", by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert named(spans, "relaypoint call") == [], "recorded results came back: nothing was called again"
