"""The vote: each voter runs once (independent calls, each recorded at its own boundary), then
the tally. ``tally="majority"`` is computed when the result is recorded (over ``key(vote)`` when a
``key`` is given); a function tally runs as the ``tally`` child over ``{voter: vote}``.

Children: the voters (iteration 1), then ``tally`` (iteration 1) for a function tally.
Sub-state: ``{"voted": [voters done]}`` (by name, in definition order: the voters run at once, and
the state must not depend on which finished first) plus ``{"tallied": true}``. A voter sees no
other vote in ``ctx.history``; the tally function sees them all. After an allowed
drift only the defined voters' votes count: a removed voter's vote is withdrawn (cancelled), and
a tally already run on other votes than the defined voters' is run again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..calls import check_callable, check_plain, wrap
from ..drivers import Turn
from ..errors import DefinitionError, InvalidValue
from .base import Pattern, Sub, outputs_by_agent, qualified_name

if TYPE_CHECKING:
    from ..models import StepRecord
    from ..workflow import Context


def majority(votes: Mapping[str, Any], key: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """The majority tally of ``{voter: vote}``, counting each vote, or ``key(vote)`` when a ``key``
    is given (compared as JSON values: ``key=lambda v: v["score"]`` counts votes
    ``{"score": 4, "comment": ...}`` by their score; a typed vote, a pydantic model, counts as its JSON):
    ``{"winner": value | None, "tie": bool, "majority": bool, "counts": [[value, n], ...]}``, counts
    most first (first cast first among equals), plus ``"keys": {voter: key(vote)}`` with a key.
    ``winner`` is the value with the most voters, None when several share the most (``tie``);
    ``majority``: the winner has more than half the votes. Raises ``InvalidValue`` naming the voter
    when ``key`` returns something that is not a JSON value."""
    counted = dict(votes) if key is None else {voter: key(vote) for voter, vote in votes.items()}
    counts: dict[str, list[Any]] = {}
    for voter, value in counted.items():
        try:
            same = json.dumps(value, sort_keys=True, allow_nan=False, default=_model_json)
        except (TypeError, ValueError):
            what = f"the vote's key returned {type(value).__name__} for" if key else f"a {type(value).__name__} is"
            raise InvalidValue(f"{what} the vote of {voter!r}, not a JSON value (text, a number, true/false, null, "
                               "a list or a dict)") from None
        counts.setdefault(same, [value, 0])[1] += 1
    ranked = sorted(counts.values(), key=lambda c: -c[1])
    top = ranked[0][1] if ranked else 0
    tied = [c for c in ranked if c[1] == top]
    winner = tied[0][0] if len(tied) == 1 else None
    return {"winner": winner, "tie": len(tied) > 1, "majority": len(tied) == 1 and 2 * top > len(votes),
            "counts": ranked, **({"keys": counted} if key is not None else {})}


class Vote(Pattern):
    """``wf.vote("decide", voters={"a": va, "b": vb}, tally="majority")``: see
    :meth:`relaypoint.Workflow.vote`."""

    kind = "vote"
    noun = "vote"
    roles = ("tally",)

    def __init__(self, name: str, voters: Mapping[str, Any], *, tally: str | Callable[[dict[str, Any]], Any],
                 key: Callable[[Any], Any] | None, retries: int, on_orphan: str, timeout: float | None,
                 max_concurrency: int | None = None) -> None:
        super().__init__(name, voters, retries=retries, on_orphan=on_orphan, timeout=timeout, noun="voters",
                         max_concurrency=max_concurrency)
        if tally != "majority" and not callable(tally):
            raise DefinitionError(f"vote {name!r}: tally must be 'majority' or a function of the votes, not {tally!r}")
        if callable(tally):
            check_callable(tally, f"vote {name!r}: tally")
        if key is not None:
            check_plain(key, f"vote {name!r}: key", "a vote")
        if key is not None and tally != "majority":
            raise DefinitionError(f"vote {name!r}: key picks what tally='majority' counts; a tally function is "
                                  "given the whole votes, so pick inside it")
        self.tally, self.key = tally, key
        if callable(tally):
            self._add("tally", wrap(tally, before=_votes))
        self.order = list(self.agents)

    def settings(self) -> dict[str, Any]:
        # the key by its name: a function cannot be recorded, and no key keeps the definition as it was
        return {"tally": "majority" if self.tally == "majority" else "function",
                **({"key": qualified_name(self.key)} if self.key is not None else {})}

    def start(self) -> Sub:
        return {"voted": []}

    def next(self, sub: Sub) -> tuple[Turn, ...]:
        left = [v for v in self.order if v not in sub["voted"]]
        if left:
            return tuple(Turn(1, v) for v in left)
        if callable(self.tally) and not sub.get("tallied"):
            return (Turn(1, "tally"),)
        return ()

    def carry(self, sub: Sub) -> Sub:
        voted = [v for v in sub["voted"] if v in self.agents]
        # a tally function's answer stands only if it counted exactly the defined voters' votes
        same = callable(self.tally) and voted == sub["voted"] and set(self.order) <= set(voted)
        return {"voted": voted, **({"tallied": True} if sub.get("tallied") and same else {})}

    def kept(self, sub: Sub, turn: Turn) -> bool:
        return bool(sub.get("tallied")) if turn.agent == "tally" else turn.agent in self.agents

    def seen(self, turn: Turn) -> int | None:
        return None if turn.agent == "tally" else 1  # a voter sees no other vote

    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        if turn.agent == "tally":
            return {**sub, "tallied": True}
        voted = {*sub["voted"], turn.agent}
        # definition order, whatever order the votes came in; a vote recorded before a drift removed its voter stays
        rest = [v for v in sub["voted"] if v not in self.agents]
        return {**sub, "voted": rest + [v for v in self.order if v in voted]}

    def result(self, records: list[StepRecord]) -> Any:
        votes = outputs_by_agent(records, self.roles)
        tallied = next((r.output for r in reversed(records) if r.agent == "tally"), None)
        return {"result": majority(votes, self.key) if self.tally == "majority" else tallied, "votes": votes}


def _model_json(value: Any) -> Any:
    """A typed vote (a pydantic model) as counted: its JSON, as it is stored."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(type(value).__name__)


def _votes(ctx: Context) -> dict[str, Any]:
    """What a tally function is given: ``{voter: vote}`` from the votes recorded so far."""
    return {h["agent"]: h["output"] for h in ctx.history}
