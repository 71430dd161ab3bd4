"""The loop: one function run pass after pass until ``until(ctx)`` says stop or ``max_iterations``.

Children: the passes, agent None, iteration = pass (1-based). Sub-state: ``{"pass": n, "done": bool}``,
plus ``{"stopped": "until"}`` when ``until`` ended it (``until``'s verdict on each pass commits with
that pass's output, so a resume never asks it again). After an allowed drift that lowers
``max_iterations`` below the pass under way, the passes past it are withdrawn (cancelled) and the
loop ends at the new limit; one that raises it goes on, unless ``until`` ended the loop.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..calls import check_callable, is_async, loop_running, wrap
from ..drivers import Turn
from .base import Pattern, Sub, whole

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..models import StepRecord
    from ..workflow import Context


class Loop(Pattern):
    """``@wf.loop(max_iterations=5, until=lambda ctx: ctx.output["score"] >= 0.9)``: see
    :meth:`relaypoint.Workflow.loop`.

    ``until`` (def or async def) is asked inside the pass's own execution, right after the body
    (with ``ctx.output`` set to the pass's output), so the executor awaits it as it awaits the
    body; its verdict is kept on the context and folded at the pass's boundary. A sync ``until``
    after an async body runs in a worker thread, never on the event loop."""

    kind = "loop"
    noun = "pass"

    def __init__(self, name: str, fn: Callable[[Context], Any], *, max_iterations: int,
                 until: Callable[[Context], Any] | None, retries: int, on_orphan: str,
                 timeout: float | None, output: type[BaseModel] | None = None) -> None:
        super().__init__(name, {}, retries=retries, on_orphan=on_orphan, timeout=timeout, noun=None)
        check_callable(fn, f"loop {name!r}: the body")
        self.max_iterations = whole(max_iterations, f"loop {name!r}: max_iterations", least=1)
        if until is not None:
            check_callable(until, f"loop {name!r}: until")
        self.until = until
        # a pass runs as no agent: it is the loop's own function, followed by until's verdict
        body = self._typed(fn, output)  # validated before until judges it: until reads the model
        self._add(None, body if until is None else wrap(body, after=self._judged), output)
        self._verdict = None if until is None else wrap(until, before=_given, after=_kept)

    def _judged(self, output: Any, ctx: Context) -> Any:
        """``output``, once ``until`` has judged it (not on the last pass: the limit ends the loop)."""
        if ctx.iteration >= self.max_iterations:
            return output
        assert self._verdict is not None
        if loop_running() and not is_async(self._verdict):
            return asyncio.to_thread(self._verdict, output, ctx)  # a sync until never blocks the event loop
        return self._verdict(output, ctx)

    def settings(self) -> dict[str, Any]:
        return {"max_iterations": self.max_iterations, "until": self.until is not None}

    def start(self) -> Sub:
        return {"pass": 0, "done": False}

    def next(self, sub: Sub) -> tuple[Turn, ...]:
        return () if sub["done"] else (Turn(sub["pass"] + 1),)

    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        if turn.iteration >= self.max_iterations:
            return {"pass": turn.iteration, "done": True}
        if self.until is not None:
            assert ctx is not None, "until is evaluated on the pass's context"
            if ctx._until is None:  # a pass recorded before this claim (no execution here asked until)
                self._recorded_verdict(output, ctx)
            if ctx._until:
                return {"pass": turn.iteration, "done": True, "stopped": "until"}
        return {"pass": turn.iteration, "done": False}

    def _recorded_verdict(self, output: Any, ctx: Context) -> None:
        """Ask ``until`` about a recorded pass from :meth:`fold` (sync): an async ``until`` (or one
        returning an awaitable) is run to completion with ``asyncio.run``, which needs a thread
        where no event loop runs; ``RuntimeError`` in a thread where one does (fold it from a
        worker thread)."""
        assert self._verdict is not None
        pending = self._verdict(output, ctx)
        if inspect.isawaitable(pending):  # a coroutine (see relaypoint.calls.wrap)
            if loop_running():
                pending.close()
                raise RuntimeError(f"loop '{self.name}': an async until of a recorded pass is asked from a thread "
                                   "whose event loop runs; fold it from a worker thread")
            asyncio.run(pending)

    def carry(self, sub: Sub) -> Sub:
        n = sub["pass"]
        if n > self.max_iterations:  # passes past the new limit: the loop ends at it
            return {"pass": self.max_iterations, "done": True}
        if n == self.max_iterations:
            return {**sub, "done": True}
        if sub["done"] and "stopped" not in sub:  # ended by a limit now raised
            return {"pass": n, "done": False}
        return sub

    def kept(self, sub: Sub, turn: Turn) -> bool:
        return turn.iteration <= self.max_iterations

    def result(self, records: list[StepRecord]) -> Any:
        return records[-1].output if records else None


def _given(output: Any, ctx: Context) -> Context:
    """The context ``until`` sees: the pass's, with ``ctx.output`` = the pass's output."""
    ctx.output = output
    return ctx


def _kept(verdict: Any, output: Any, ctx: Context) -> Any:
    """The pass's ``output``, ``until``'s ``verdict`` kept on ``ctx`` for :meth:`Loop.fold`."""
    ctx._until = bool(verdict)
    return output
