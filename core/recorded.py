"""Recorded calls inside a step execution (``ctx.call``, ``await ctx.acall``): each call's result
is recorded at its own boundary as it returns, so an execution that runs again (after a crash, a
retry, an answer to ``request_input``, an orphan re-run) gets its recorded results back instead of
calling again, matched by order and name.

A call takes the next position of its execution when it is made (synchronously, also for
``acall``: calls gathered at once are numbered in the order they were made). A call that raises is
recorded failed, with its line, and runs again at its position when the execution does. The
record is fenced on the run's lease, like a boundary: a process that lost the run records nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from contextlib import contextmanager
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import encoding, tracing
from .calls import is_async
from .clock import Clock
from .errors import DriftError
from .models import CallRecord
from .recovery import now_of
from .status import CallKind, StepStatus
from .store import Change, NewCall, RunStore, RunUpdate

if TYPE_CHECKING:
    from .workflow import Context


_running: contextvars.ContextVar[Context | None] = contextvars.ContextVar("relaypoint_context", default=None)


@contextmanager
def running(ctx: Context) -> Iterator[None]:
    """``ctx`` is the context of the execution running in this block (and in what it starts: tasks,
    worker threads with the context copied): what :func:`current` returns."""
    token = _running.set(ctx)
    try:
        yield
    finally:
        _running.reset(token)


def current() -> Context:
    """The context of the step execution running here, for code the step calls without passing it
    (an integration's agent). Raises ``TypeError`` outside a step's execution."""
    ctx = _running.get()
    if ctx is None:
        raise TypeError("not inside a relaypoint step: run this from the function of a step (or of a pattern's "
                        "agent) that a Runtime executes")
    return ctx


async def acall_as(kind: CallKind, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``await ctx.acall(name, fn, *args, **kwargs)`` on the execution running here (:func:`current`),
    recorded as ``kind`` (an integration's model request or tool call). Raises as :func:`current`
    and :meth:`Recorder.acall` do."""
    ctx = current()
    return await ctx._calls().acall(ctx, str(name), fn, args, kwargs, kind=kind)


@dataclass(frozen=True)
class Result:
    """What a recorded function returns when it records more than its result (an integration's model
    request or tool call): ``value`` (the result, JSON-able: what the call returns), ``detail``
    (JSON-able, shown beside it: a request's messages, a tool call's arguments), ``model`` and the
    usage of a model request (``requests``, ``input_tokens``, ``output_tokens``)."""

    value: Any
    detail: Any = None
    model: str | None = None
    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


PROGRESS_CHARS = 200
"""The longest progress line kept (characters)."""
PROGRESS_SECONDS = 0.5
"""Progress lines of one execution are written at most this often (seconds)."""


class CallDrift(DriftError):
    """An execution run again made a call other than the one recorded at that position (its code
    changed): it fails without retries."""


class Recorder:
    """The recorded calls of execution ``seq`` of run ``run_id`` (its ``attempt``, named ``step``),
    written to ``store`` fenced on ``fence`` (the lease token), timed by ``clock``. Reads what the
    execution recorded before once, at its first call."""

    def __init__(self, store: RunStore, clock: Clock, run_id: str, seq: int, attempt: int, fence: str,
                 step: str) -> None:
        self._store, self._clock = store, clock
        self._run_id, self._seq, self._attempt, self._fence, self._step = run_id, seq, attempt, fence, step
        self._lock = threading.Lock()
        self._recorded: dict[int, CallRecord] | None = None
        self._next = 0
        self._line: str | None = None  # the progress line not written yet
        self._flush: threading.Timer | None = None
        self._written = float("-inf")  # when the last progress line was written (time.monotonic())

    # ---- the two ways in

    def call(self, ctx: Context, name: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any],
             *, kind: CallKind = CallKind.CALL) -> Any:
        """``fn(*args, **kwargs)`` once, its result recorded; run again, the recorded result. A call
        that runs is a span (:func:`relaypoint.tracing.call_span`) under the step ``ctx`` runs. Raises
        ``TypeError`` for an async ``fn`` (``acall`` awaits it), :class:`CallDrift`,
        ``InvalidValue`` for a result that is not JSON, and what ``fn`` raises."""
        if is_async(fn):
            raise TypeError(f"ctx.call: {name!r} is an async function; use `await ctx.acall(...)`")
        position = self._take()
        recorded = self._done(position, name, self._load())
        if recorded is not None:
            return recorded.value
        started = now_of(self._clock)
        with tracing.call_span(ctx, name, index=position) as span:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                self._store.commit(self._failed(position, name, kind, started, exc))
                raise
            change, value = self._completed(position, name, kind, started, result, span)
        self._store.commit(change)
        return value

    async def acall(self, ctx: Context, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                    kwargs: Mapping[str, Any], *, kind: CallKind = CallKind.CALL) -> Any:
        """As :meth:`call`, from async code: an async ``fn`` awaited, a sync one run in a worker
        thread; the store read and written from worker threads, so the loop never waits on it."""
        position = self._take()  # before any await: the order the calls were made in
        recorded = self._done(position, name, self._recorded if self._recorded is not None
                              else await asyncio.to_thread(self._load))
        if recorded is not None:
            return recorded.value
        started = now_of(self._clock)
        with tracing.call_span(ctx, name, index=position) as span:
            try:
                result = await fn(*args, **kwargs) if is_async(fn) else await asyncio.to_thread(fn, *args, **kwargs)
            except Exception as exc:
                await asyncio.to_thread(self._store.commit, self._failed(position, name, kind, started, exc))
                raise
            change, value = self._completed(position, name, kind, started, result, span)
        await asyncio.to_thread(self._store.commit, change)
        return value

    def progress(self, text: str) -> None:
        """Set the execution's progress line to ``text`` (one line, at most
        :data:`PROGRESS_CHARS`), written from a timer thread at most every
        :data:`PROGRESS_SECONDS` (the latest line wins), so it never waits on the store. Best
        effort: a line that cannot be written (the run lost, the store away) is dropped."""
        line = encoding.readable(" ".join(str(text).split()))
        line = line if len(line) <= PROGRESS_CHARS else line[:PROGRESS_CHARS - 1] + "…"
        with self._lock:
            self._line = line
            if self._flush is None:
                wait = max(0.0, self._written + PROGRESS_SECONDS - time.monotonic())
                self._flush = threading.Timer(wait, self._write_progress)
                self._flush.daemon = True
                self._flush.start()

    def _write_progress(self) -> None:
        with self._lock:
            line, self._line, self._flush = self._line, None, None
            self._written = time.monotonic()
        try:
            self._store.commit(Change(self._run_id, now_of(self._clock), fence=self._fence, run=RunUpdate(),
                                      progress={self._seq: line}))
        except Exception:
            pass  # a progress line is no record: the run's own writes say what went wrong

    # ---- positions and records

    def _take(self) -> int:
        with self._lock:
            position, self._next = self._next, self._next + 1
        return position

    def _load(self) -> dict[int, CallRecord]:
        with self._lock:
            if self._recorded is None:
                self._recorded = {c.position: c for c in self._store.calls(self._run_id, self._seq, strict=True)}
            return self._recorded

    def _done(self, position: int, name: str, recorded: Mapping[int, CallRecord]) -> CallRecord | None:
        """The completed record at ``position`` (None: call it); a record of another name is drift."""
        found = recorded.get(position)
        if found is not None and found.name != name:
            raise CallDrift(f"step '{self._step}' made call {position + 1} '{name}' where its recorded execution "
                            f"made '{found.name}' (its code changed since); restore it, or fork the run from an "
                            "earlier step")
        return found if found is not None and found.status == StepStatus.COMPLETED else None

    def _completed(self, position: int, name: str, kind: CallKind, started: Any, result: Any,
                   span: Any) -> tuple[Change, Any]:
        parts = result if isinstance(result, Result) else Result(result)
        tracing.usage(span, parts.input_tokens, parts.output_tokens)
        text = encoding.dumps(parts.value, f"the result of call '{name}'")
        detail = None if parts.detail is None else encoding.dumps(parts.detail, f"the detail of call '{name}'")
        call = NewCall(self._seq, position, name, str(kind), StepStatus.COMPLETED, self._attempt, started, value=text,
                       detail=detail, model=parts.model, requests=parts.requests, input_tokens=parts.input_tokens,
                       output_tokens=parts.output_tokens)
        return self._change(call), encoding.loads(text)  # what a run again returns: the recorded value

    def _failed(self, position: int, name: str, kind: CallKind, started: Any, exc: Exception) -> Change:
        line = encoding.readable(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        return self._change(NewCall(self._seq, position, name, str(kind), StepStatus.FAILED, self._attempt, started,
                                    error=line))

    def _change(self, call: NewCall) -> Change:
        return Change(self._run_id, now_of(self._clock), fence=self._fence, run=RunUpdate(), calls=[call])
