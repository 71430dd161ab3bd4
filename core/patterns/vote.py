"""The vote: each voter runs once (independent calls, each recorded at its own boundary), then
the tally. ``tally="majority"`` is computed when the result is recorded; a function tally runs as
the ``tally`` child over ``{voter: vote}``.

Children: the voters (iteration 1), then ``tally`` (iteration 1) for a function tally.
Sub-state: ``{"voted": [voters done]}`` (by name) plus ``{"tallied": true}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..drivers import Turn
from ..errors import DefinitionError
from .base import Pattern, Sub, outputs_by_agent

if TYPE_CHECKING:
    from ..models import StepRecord
    from ..workflow import Context


def majority(votes: Mapping[str, Any]) -> dict[str, Any]:
    """The majority tally of ``{voter: vote}`` (votes compared as JSON values):
    ``{"winner": vote | None, "tie": bool, "majority": bool, "counts": [[vote, n], ...]}``, counts
    most first (first cast first among equals). ``winner`` is the vote with the most voters, None
    when several share the most (``tie``); ``majority``: the winner has more than half the votes."""
    counts: dict[str, list[Any]] = {}
    for vote in votes.values():
        counts.setdefault(json.dumps(vote, sort_keys=True), [vote, 0])[1] += 1
    ranked = sorted(counts.values(), key=lambda c: -c[1])
    top = ranked[0][1] if ranked else 0
    tied = [c for c in ranked if c[1] == top]
    winner = tied[0][0] if len(tied) == 1 else None
    return {"winner": winner, "tie": len(tied) > 1, "majority": len(tied) == 1 and 2 * top > len(votes),
            "counts": ranked}


class Vote(Pattern):
    """``wf.vote("decide", voters={"a": va, "b": vb}, tally="majority")``: see
    :meth:`relaypoint.Workflow.vote`."""

    kind = "vote"
    noun = "vote"
    roles = ("tally",)

    def __init__(self, name: str, voters: Mapping[str, Any], *, tally: str | Callable[[dict[str, Any]], Any],
                 retries: int, on_orphan: str, timeout: float | None) -> None:
        super().__init__(name, voters, retries=retries, on_orphan=on_orphan, timeout=timeout, noun="voters")
        if tally != "majority" and not callable(tally):
            raise DefinitionError(f"vote {name!r}: tally must be 'majority' or a function of the votes, not {tally!r}")
        self.tally = tally
        if callable(tally):
            self._add("tally", lambda ctx: tally({h["agent"]: h["output"] for h in ctx.history}))
        self.order = list(self.agents)

    def settings(self) -> dict[str, Any]:
        return {"tally": "majority" if self.tally == "majority" else "function"}

    def start(self) -> Sub:
        return {"voted": []}

    def next(self, sub: Sub) -> tuple[Turn, ...]:
        left = [v for v in self.order if v not in sub["voted"]]
        if left:
            return tuple(Turn(1, v) for v in left)
        if callable(self.tally) and not sub.get("tallied"):
            return (Turn(1, "tally"),)
        return ()

    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        if turn.agent == "tally":
            return {**sub, "tallied": True}
        return {**sub, "voted": [*sub["voted"], turn.agent]}

    def result(self, records: list[StepRecord]) -> Any:
        votes = outputs_by_agent(records, self.roles)
        tallied = next((r.output for r in reversed(records) if r.agent == "tally"), None)
        return {"result": majority(votes) if self.tally == "majority" else tallied, "votes": votes}
