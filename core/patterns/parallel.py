"""The parallel node: every branch runs once, all at once, each recorded as it finishes.

Children: the branches (agent = the branch's name, iteration 1). Sub-state: ``{"done": [branches
completed]}``, by name in definition order (so it does not depend on which branch finished first).
A branch sees no other branch in ``ctx.history``. After an allowed drift only the defined branches
count: a removed branch's output is withdrawn (cancelled) and its call the run stopped in is
cancelled; an added branch runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..drivers import Turn
from .base import Pattern, Sub, outputs_by_agent

if TYPE_CHECKING:
    from ..models import StepRecord
    from ..workflow import Context


class Parallel(Pattern):
    """``wf.parallel("gather", branches={"web": web, "docs": docs})``: see
    :meth:`relaypoint.Workflow.parallel`."""

    kind = "parallel"
    noun = "branch"

    def __init__(self, name: str, branches: Mapping[str, Any], *, retries: int, on_orphan: str,
                 timeout: float | None, max_concurrency: int | None = None) -> None:
        super().__init__(name, branches, retries=retries, on_orphan=on_orphan, timeout=timeout, noun="branches",
                         max_concurrency=max_concurrency)
        self.order = list(self.agents)

    def settings(self) -> dict[str, Any]:
        return {}

    def start(self) -> Sub:
        return {"done": []}

    def next(self, sub: Sub) -> tuple[Turn, ...]:
        return tuple(Turn(1, b) for b in self.order if b not in sub["done"])

    def seen(self, turn: Turn) -> int | None:
        return 1  # independent branches: none sees another

    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        done = {*sub["done"], turn.agent}
        return {"done": [b for b in self.order if b in done]}

    def carry(self, sub: Sub) -> Sub:
        return {"done": [b for b in self.order if b in sub["done"]]}

    def kept(self, sub: Sub, turn: Turn) -> bool:
        return turn.agent in self.agents

    def result(self, records: list[StepRecord]) -> Any:
        outputs = outputs_by_agent(records, self.roles)
        return {b: outputs[b] for b in self.order if b in outputs}
