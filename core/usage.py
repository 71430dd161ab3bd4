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
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
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
        # Rounded past any price's precision, so float noise (0.0063200000000000001) is not printed.
        return data if self.cost is None else {**data, "cost": round(self.cost, 12)}

    def line(self) -> str:
        """One line, e.g. ``3 requests, 1,204 in / 388 out tokens, $0.0042``."""
        cost = "" if self.cost is None else f", {dollars(self.cost)}"
        plural = "" if self.requests == 1 else "s"
        return f"{self.requests:,} request{plural}, {self.input_tokens:,} in / {self.output_tokens:,} out tokens{cost}"


def dollars(cost: float) -> str:
    """``cost`` (US dollars) for a person: 4 decimals (``$0.0042``), or 2 significant digits of a
    smaller cost (``$0.000033``) rather than ``$0.0000``."""
    places = 4 if cost == 0 or cost >= 0.001 else 1 - math.floor(math.log10(cost))
    return f"${cost:,.{places}f}"


MAX_PRICE = 1_000_000.0
"""The highest price taken, in dollars per million tokens (a dollar a token): a cost stays finite."""


def checked_prices(prices: Any, workflow: str) -> dict[str, tuple[float, float]]:
    """``prices`` (a mapping of model name to a pair of prices, or None) as a plain dict of float
    pairs. Raises ``DefinitionError`` for what is no such mapping, naming the model whose name is
    not text or whose price is not a pair of numbers from 0 to :data:`MAX_PRICE`."""
    if prices is None:
        return {}
    if not isinstance(prices, Mapping):
        raise DefinitionError(f"workflow {workflow!r}: prices must map model names to (input, output) prices "
                              f"in dollars per million tokens, not {prices!r}")
    out: dict[str, tuple[float, float]] = {}
    for model, price in prices.items():
        if not isinstance(model, str) or not model:
            raise DefinitionError(f"workflow {workflow!r}: prices are by model name (non-empty text), not {model!r}")
        pair = tuple(price) if isinstance(price, (tuple, list)) else ()
        if len(pair) != 2 or not all(isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p)
                                     and 0 <= p <= MAX_PRICE for p in pair):
            raise DefinitionError(f"workflow {workflow!r}: the price of model {model!r} must be a pair of numbers "
                                  f"from 0 to {MAX_PRICE:,.0f} (dollars per million input tokens, per million "
                                  f"output tokens), not {price!r}")
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


def forked_at(created_at: datetime, parent_run_id: str | None) -> datetime | None:
    """When a run was created as a fork (``created_at`` when it has a parent), else None: what
    :func:`own` takes."""
    return created_at if parent_run_id is not None else None


def own(calls: Iterable[CallRecord], forked_at: datetime | None) -> Iterator[CallRecord]:
    """The ``calls`` a run made itself: all of them, or for a fork (``forked_at``: when it was
    created) those recorded since, not the ones it copied from its parent with the executions
    before its fork point (recorded there, before the fork existed), which its parent's usage counts."""
    return iter(calls) if forked_at is None else (c for c in calls if c.started_at >= forked_at)


def of_run(tasks: Iterable[StepRecord], prices: Prices, forked_at: datetime | None = None) -> Usage:
    """The run's usage: its executions' recorded calls that it made itself (see :func:`own`)."""
    return of_calls(own((c for t in tasks for c in t.calls), forked_at), prices)
