"""The map: ``items(ctx)`` lists the work once, then one call per item, all at once.

Children: ``items`` (iteration 1; its recorded output is the list), then one call per item
(agent None, iteration = the item's 1-based index, ``ctx.input`` = the item). Sub-state:
``{"items": [...] | None, "below": k, "done": [i, ...]}``: items 1..k are completed, and ``done``
lists the completed ones past k, sorted (so the state is the same whatever order the calls
finished in, and stays small while calls finish roughly in order). The list commits with the
``items`` record, so a resumed map never asks ``items`` again. Bounded by ``max_concurrency``, it
asks for the first that many items not completed (see :meth:`Pattern.asked`). An item call sees no other item in
``ctx.history``. No parameter of a map changes what it runs, so an allowed drift carries its state
as it is (the recorded list stands).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..calls import check_callable, wrap
from ..drivers import Turn
from ..errors import InvalidValue
from .base import Pattern, Sub

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..models import StepRecord
    from ..workflow import Context

ITEMS = "items"


class Map(Pattern):
    """``wf.map("summarise", summarise, items=lambda ctx: ctx.results["fetch"])``: see
    :meth:`relaypoint.Workflow.map`."""

    kind = "map"
    noun = "item"
    roles = (ITEMS,)

    def __init__(self, name: str, fn: Callable[[Context], Any], *, items: Callable[[Context], Any], retries: int,
                 on_orphan: str, timeout: float | None, max_concurrency: int | None = None,
                 output: type[BaseModel] | None = None) -> None:
        super().__init__(name, {}, retries=retries, on_orphan=on_orphan, timeout=timeout, noun=None,
                         max_concurrency=max_concurrency)
        check_callable(fn, f"map {name!r}: the function run per item")
        check_callable(items, f"map {name!r}: items")
        self._add(None, self._typed(fn, output), output)  # an item's call runs as no agent: it is the map's own function
        self._add(ITEMS, self._listing(items))

    def _listing(self, items: Callable[[Context], Any]) -> Callable[[Context], Any]:
        """The ``items`` call: ``items(ctx)`` (awaited when async), refused unless it is a list."""
        return wrap(items, after=lambda value, ctx: self._checked(value))

    def _checked(self, value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise InvalidValue(f"the items of '{self.name}' must be a list, not {type(value).__name__}")
        return value

    def settings(self) -> dict[str, Any]:
        return {}

    def start(self) -> Sub:
        return {"items": None, "below": 0, "done": []}

    def next(self, sub: Sub) -> tuple[Turn, ...]:
        return self.asked(sub, None)

    def asked(self, sub: Sub, limit: int | None) -> tuple[Turn, ...]:
        items = sub["items"]
        if items is None:
            return (Turn(1, ITEMS),)
        done = set(sub["done"])
        left = (i for i in range(sub["below"] + 1, len(items) + 1) if i not in done)  # in index order
        return tuple(Turn(i, None, input=items[i - 1]) for i in itertools.islice(left, limit))

    def seen(self, turn: Turn) -> int | None:
        return None if turn.agent == ITEMS else 1  # independent items: none sees another

    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        if turn.agent == ITEMS:
            return {**sub, "items": output}
        below, done = sub["below"], {*sub["done"], turn.iteration}
        while below + 1 in done:
            below += 1
            done.discard(below)
        return {**sub, "below": below, "done": sorted(done)}

    def result(self, records: list[StepRecord]) -> Any:
        items = next((r.output for r in records if r.agent == ITEMS), [])
        outputs = {r.iteration: r.output for r in records if r.agent is None}
        return [outputs.get(i) for i in range(1, len(items) + 1)]
