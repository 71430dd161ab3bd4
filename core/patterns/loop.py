"""The loop: one function run pass after pass until ``until(ctx)`` says stop or ``max_iterations``.

Children: the passes, agent None, iteration = pass (1-based). Sub-state: ``{"pass": n, "done": bool}``,
plus ``{"stopped": "until"}`` when ``until`` ended it (``until``'s verdict on each pass commits with
that pass's output, so a resume never asks it again). After an allowed drift that lowers
``max_iterations`` below the pass under way, the passes past it are withdrawn (cancelled) and the
loop ends at the new limit; one that raises it goes on, unless ``until`` ended the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..drivers import Turn
from ..errors import DefinitionError
from .base import Pattern, Sub, whole

if TYPE_CHECKING:
    from ..models import StepRecord
    from ..workflow import Context


class Loop(Pattern):
    """``@wf.loop(max_iterations=5, until=lambda ctx: ctx.output["score"] >= 0.9)``: see
    :meth:`relaypoint.Workflow.loop`."""

    kind = "loop"
    noun = "pass"

    def __init__(self, name: str, fn: Callable[[Context], Any], *, max_iterations: int,
                 until: Callable[[Context], Any] | None, retries: int, on_orphan: str,
                 timeout: float | None) -> None:
        super().__init__(name, {}, retries=retries, on_orphan=on_orphan, timeout=timeout, noun=None)
        if not callable(fn):
            raise DefinitionError(f"loop {name!r}: the loop's body must be a function of ctx")
        self.max_iterations = whole(max_iterations, f"loop {name!r}: max_iterations", least=1)
        if until is not None and not callable(until):
            raise DefinitionError(f"loop {name!r}: until must be a function of ctx, not {type(until).__name__}")
        self.until = until
        self._add(None, fn)  # a pass runs as no agent: it is the loop's own function

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
            ctx.output = output
            if self.until(ctx):
                return {"pass": turn.iteration, "done": True, "stopped": "until"}
        return {"pass": turn.iteration, "done": False}

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
