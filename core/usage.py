"""What a run's model requests used: requests and tokens, and their cost when the workflow gives
prices per model (``Workflow(name, prices={"model": (input_per_mtok, output_per_mtok)})``).

Usage is summed from the recorded calls (:class:`~relaypoint.models.CallRecord`): an execution's
is its own calls' and, for a pattern's row, its calls' executions'; a run's is every execution's.
Prices are recorded with the run when it is created (started, queued or forked), so its cost does
not change when the application's prices do, and reads without the application loaded (``show``
takes no ``--app``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from .errors import DefinitionError

if TYPE_CHECKING:
    from .models import CallRecord, StepRecord

Prices = Mapping[str, tuple[float, float]]
"""Model name -> (US dollars per million input tokens, US dollars per million output tokens)."""


class Usage(BaseModel):
    """Requests, input and output tokens, and ``cost`` in US dollars: None unless every model
    that was used has a price (a partial sum would read as the whole)."""

    model_config = ConfigDict(frozen=True)

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None

    @property
    def used(self) -> bool:
        """Whether any model request was recorded."""
        return bool(self.requests or self.input_tokens or self.output_tokens)

    def as_json(self) -> dict[str, Any]:
        """``{"requests", "input_tokens", "output_tokens"}``, with ``"cost"`` when priced (what
        ``show --json`` and MCP give per execution and for the run)."""
        data = self.model_dump(exclude={"cost"})
        return data if self.cost is None else {**data, "cost": round(self.cost, 6)}

    def line(self) -> str:
        """One line, e.g. ``3 requests, 1,204 in / 388 out tokens, $0.0042``."""
        cost = "" if self.cost is None else f", ${self.cost:,.4f}"
        plural = "" if self.requests == 1 else "s"
        return f"{self.requests:,} request{plural}, {self.input_tokens:,} in / {self.output_tokens:,} out tokens{cost}"


def checked_prices(prices: Mapping[str, Any] | None, workflow: str) -> dict[str, tuple[float, float]]:
    """``prices`` as a plain dict of float pairs. Raises ``DefinitionError`` naming the model whose
    price is not a pair of finite, non-negative numbers (dollars per million tokens)."""
    out: dict[str, tuple[float, float]] = {}
    for model, price in (prices or {}).items():
        pair = tuple(price) if isinstance(price, (tuple, list)) else ()
        if (not isinstance(model, str) or not model or len(pair) != 2
                or not all(isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) and p >= 0
                           for p in pair)):
            raise DefinitionError(f"workflow {workflow!r}: the price of model {model!r} must be a pair "
                                  "(dollars per million input tokens, per million output tokens), "
                                  f"not {price!r}")
        out[model] = (float(pair[0]), float(pair[1]))
    return out


CREATED = frozenset({"run_started", "run_queued", "forked"})
"""The kinds of event that create a run, and record its prices."""


def recorded_prices(events: Iterable[Any]) -> dict[str, tuple[float, float]]:
    """The prices the run's creation event (the first of its ``events`` of a kind in
    :data:`CREATED`) recorded in its detail; empty when none, or unreadable (stored text is not
    trusted to be well formed)."""
    first = next((e for e in events if e.kind in CREATED), None)
    prices = first.detail.get("prices") if first is not None and isinstance(first.detail, dict) else None
    try:
        return checked_prices(prices, "recorded") if isinstance(prices, dict) else {}
    except DefinitionError:
        return {}


def of_calls(calls: Iterable[CallRecord], prices: Prices) -> Usage:
    """The usage of ``calls`` (model requests; other calls count nothing), priced by ``prices``."""
    requests = input_tokens = output_tokens = 0
    cost: float | None = 0.0
    for c in calls:
        if not (c.requests or c.input_tokens or c.output_tokens):
            continue
        requests += c.requests or 0
        input_tokens += c.input_tokens or 0
        output_tokens += c.output_tokens or 0
        price = prices.get(c.model or "")
        cost = None if cost is None or price is None else (
            cost + ((c.input_tokens or 0) * price[0] + (c.output_tokens or 0) * price[1]) / 1e6)
    return Usage(requests=requests, input_tokens=input_tokens, output_tokens=output_tokens,
                 cost=cost if requests or input_tokens or output_tokens else None)


def per_execution(tasks: Iterable[StepRecord], prices: Prices) -> dict[int, Usage]:
    """Each execution's usage by ``seq``: its own recorded calls' and its descendants' (a pattern's
    row sums its calls' executions)."""
    tasks = list(tasks)
    children: dict[int, list[StepRecord]] = {}
    for t in tasks:
        if t.parent is not None:
            children.setdefault(t.parent, []).append(t)

    def calls(t: StepRecord) -> list[CallRecord]:
        return [*t.calls, *(c for child in children.get(t.seq, []) for c in calls(child))]

    return {t.seq: of_calls(calls(t), prices) for t in tasks}


def of_run(tasks: Iterable[StepRecord], prices: Prices) -> Usage:
    """The run's usage: every execution's recorded calls."""
    return of_calls((c for t in tasks for c in t.calls), prices)
