"""Traces: OpenTelemetry spans for runs, their executions and the calls recorded inside them.

This is the only module of relaypoint that imports OpenTelemetry, and only its API
(``pip install 'relaypoint[otel]'``); without it every helper here is a no-op (``_tracer`` is
None). relaypoint configures no provider and no exporter: the spans go wherever the application's
OpenTelemetry set-up sends them (Logfire, an OTLP collector...); until it sets a tracer provider
none is made.

The spans, each with the attributes of :data:`RUN_ID` and the others below that apply:

- ``relaypoint run <workflow>``: one per claim of a run in this process (its start, or a resume),
  from the claim to where the run stopped (completed, paused, failed, released); status ERROR when
  the run failed or its execution raised. ``relaypoint.status`` is the status it stopped in.
- ``relaypoint enqueue <workflow>``: recording a queued run (nothing executes).
- ``relaypoint step <name>``: one per attempt of an execution (a chain step, a pattern's call, a
  pattern's finisher), a child of the run span, and the current span while the function runs (on
  the event loop, in a worker thread through the copied context, or inline), so the spans the
  function makes (an instrumented PydanticAI agent's) nest under it. Status ERROR, the exception
  recorded, when the attempt fails; a pause (``request_input``) is not an error.
- ``relaypoint call <name>``: a call recorded inside a step (:func:`call_span`), under the step.

How a resumed run's spans link to the run. A run span lives in one process; a run paused for a
day is resumed by another process, in another trace. As Temporal's tracing carries the starting
span's context in the workflow's recorded start, relaypoint records the W3C ``traceparent`` of
the span that began the run (its first run span, or its enqueue span) in the run's first event
(``run_started`` / ``run_queued`` detail, key ``traceparent``), and each later run span carries a
span Link to it (attribute ``relaypoint.link`` = ``"run"``): a backend shows every claim of the
run beside the trace it began in. A context derived from the run id instead would need no
record, but would point at a span that never existed. The first event is read (one indexed row)
only when the resuming span records. Runs begun before tracing was on, or forked, have no link.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the optional extra is not installed: every helper below is a no-op
    trace = None

if TYPE_CHECKING:
    from .drivers import Call
    from .workflow import Context

RUN_ID = "relaypoint.run_id"
WORKFLOW = "relaypoint.workflow"
STEP = "relaypoint.step"
ITERATION = "relaypoint.iteration"
"""A pattern's call only: its round, turn, pass or subtask ordinal."""
AGENT = "relaypoint.agent"
"""A pattern's call only: the agent it runs as."""
IDEMPOTENCY_KEY = "relaypoint.idempotency_key"
ATTEMPT = "relaypoint.attempt"
STATUS = "relaypoint.status"
"""A run span: the status the run stopped in."""
CALL = "relaypoint.call"
"""A recorded call: its name; ``relaypoint.call_index`` its position in the step (0-based)."""
CALL_INDEX = "relaypoint.call_index"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
"""OpenTelemetry's GenAI convention for a model request's input tokens (set on recorded requests)."""
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
"""OpenTelemetry's GenAI convention for a model request's output tokens."""

_tracer = None if trace is None else trace.get_tracer("relaypoint", version("relaypoint"))
# The attributes of the execution whose span is current: a recorded call's span takes its workflow.
_execution: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("relaypoint_execution", default={})


def _active() -> Any:
    """relaypoint's tracer while its spans can record, else None: without OpenTelemetry, or while
    the application has set no tracer provider (every span would be a no-op; skipping them saves
    their cost, some 10 µs a step)."""
    if _tracer is None or (isinstance(_tracer, trace.ProxyTracer)
                           and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)):
        return None
    return _tracer


def _recording(span: Any) -> bool:
    return span is not None and span.is_recording()


@contextmanager
def run_span(workflow: str, run_id: str) -> Iterator[Any]:
    """The current span for one claim of run ``run_id`` of ``workflow`` (see the module
    docstring), ended when the block ends; yields it (None without OpenTelemetry). An
    ``Exception`` leaving the block (``LeaseLost``, the store unreachable) is recorded on it and
    propagates."""
    with _run_span("run", workflow, run_id) as span:
        yield span


@contextmanager
def enqueue_span(workflow: str, run_id: str) -> Iterator[Any]:
    """The current span while run ``run_id`` of ``workflow`` is recorded queued; yields it (None
    without OpenTelemetry)."""
    with _run_span("enqueue", workflow, run_id) as span:
        yield span


@contextmanager
def _run_span(what: str, workflow: str, run_id: str) -> Iterator[Any]:
    tracer = _active()
    if tracer is None:
        yield None
        return
    with _span(tracer, f"relaypoint {what} {workflow}", {RUN_ID: run_id, WORKFLOW: workflow}) as span:
        yield span


def stopped(span: Any, status: str) -> None:
    """Record on run span ``span`` the status the run stopped in; a failed run marks it ERROR."""
    if _recording(span):
        span.set_attribute(STATUS, status)
        if status == "failed":
            span.set_status(trace.Status(trace.StatusCode.ERROR, "the run failed"))


def traceparent(span: Any) -> str | None:
    """The W3C ``traceparent`` of ``span`` (``00-<trace id>-<span id>-<flags>``) for the run's
    record, or None when it does not record (no OpenTelemetry, no provider, not sampled)."""
    if not _recording(span):
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
    return carrier.get("traceparent")


def wants_origin(span: Any) -> bool:
    """Whether run span ``span`` records, so reading the run's recorded ``traceparent`` for
    :func:`link_origin` is worth it."""
    return _recording(span)


def link_origin(span: Any, parent: str | None) -> None:
    """Link run span ``span`` to the span that began the run, named by ``parent`` (the
    ``traceparent`` recorded in the run's first event; None or unreadable text: no link)."""
    if not _recording(span) or not isinstance(parent, str):
        return
    context = TraceContextTextMapPropagator().extract({"traceparent": parent})
    origin = trace.get_current_span(context).get_span_context()
    if origin.is_valid:
        span.add_link(origin, {"relaypoint.link": "run"})


def execution_attributes(run_id: str, workflow: str, call: Call, attempt: int, key: str) -> dict[str, Any]:
    """The attributes of an execution's span: ``call`` (its step, and a pattern's iteration and
    agent), its ``attempt`` (1-based) and idempotency ``key``."""
    attributes: dict[str, Any] = {RUN_ID: run_id, WORKFLOW: workflow, STEP: call.name, IDEMPOTENCY_KEY: key,
                                  ATTEMPT: attempt}
    if call.parent is not None:
        attributes[ITERATION] = call.iteration
    if call.agent is not None:
        attributes[AGENT] = call.agent
    return attributes


@contextmanager
def execution_span(attributes: Mapping[str, Any]) -> Iterator[Any]:
    """The current span of one attempt of an execution (:func:`execution_attributes`) while its
    function runs; yields it (None without OpenTelemetry). Mark a failed attempt with
    :func:`failed` (an ``Exception`` leaving the block is recorded as one; a cancellation, the
    run taken from this process, is not)."""
    tracer = _active()
    if tracer is None:
        yield None
        return
    token = _execution.set(attributes)
    try:
        with _span(tracer, f"relaypoint step {attributes[STEP]}", attributes) as span:
            yield span
    finally:
        _execution.reset(token)


def failed(span: Any, exc: BaseException) -> None:
    """Mark ``span`` ERROR with ``exc`` recorded (a failed attempt; not for a pause)."""
    if _recording(span):
        span.record_exception(exc)
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}" if str(exc)
                                     else type(exc).__name__))


@contextmanager
def call_span(ctx: Context, name: str, *, index: int | None = None) -> Iterator[Any]:
    """The current span of a call named ``name`` recorded inside the step ``ctx`` belongs to (its
    ``index``: the call's position in the step, 0-based), a child of the step's span, as
    ``ctx.call`` makes it. Its attributes are the step's (run id, step, attempt, idempotency key,
    and a pattern's iteration and agent from ``ctx``; the workflow from the step's span when the
    call runs in its context), plus ``relaypoint.call`` (and ``relaypoint.call_index``). Yields
    the span (None without OpenTelemetry): set usage on it with :data:`GEN_AI_USAGE_INPUT_TOKENS`
    and :data:`GEN_AI_USAGE_OUTPUT_TOKENS`. An exception leaving the block is recorded (status
    ERROR) and propagates; a ``BaseException`` such as a pause is not an error."""
    tracer = _active()
    if tracer is None:
        yield None
        return
    step = _execution.get()
    attributes: dict[str, Any] = {**step, RUN_ID: ctx.run_id, STEP: ctx.step, IDEMPOTENCY_KEY: ctx.idempotency_key,
                                  ATTEMPT: ctx.attempt, CALL: name}
    if not step and ctx.agent is not None:  # outside the step's context: what ctx tells of a pattern's call
        attributes.update({ITERATION: ctx.iteration, AGENT: ctx.agent})
    if index is not None:
        attributes[CALL_INDEX] = index
    with _span(tracer, f"relaypoint call {name}", attributes) as span:
        yield span


def usage(span: Any, input_tokens: int | None, output_tokens: int | None) -> None:
    """Set a model request's token usage on its call's ``span`` (None: no span, or nothing known)."""
    if span is None:
        return
    if input_tokens is not None:
        span.set_attribute(GEN_AI_USAGE_INPUT_TOKENS, input_tokens)
    if output_tokens is not None:
        span.set_attribute(GEN_AI_USAGE_OUTPUT_TOKENS, output_tokens)


@contextmanager
def _span(tracer: Any, name: str, attributes: Mapping[str, Any]) -> Iterator[Any]:
    """A span current in the block; an ``Exception`` leaving it is recorded (OpenTelemetry's own
    rule: a ``BaseException`` such as a pause or Ctrl-C is left to the caller)."""
    with tracer.start_as_current_span(name, attributes=attributes) as span:
        yield span
