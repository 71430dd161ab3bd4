"""The debate: every agent speaks once per round, in order, for ``rounds`` rounds; then a judge.
With ``concurrent=True`` the speakers of a round speak at once, each hearing only the rounds before.

Children: the agents' turns (iteration = round), then ``judge`` (iteration = rounds + 1).
Sub-state: ``{"round": r, "spoken": [agents who spoke in round r]}`` (by name, in definition
order whatever order they finished in, so a run resumed
after an allowed drift that removed or reordered agents still gives each agent one turn a round)
plus ``{"judged": true}`` once the judge has spoken. After an allowed drift a round is whole or
not at all: rounds past a lowered ``rounds`` are withdrawn (cancelled), so the judge hears rounds
1..``rounds`` only, and a judgement given on other rounds than those is given again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..calls import check_callable
from ..drivers import Turn
from ..errors import DefinitionError
from .base import Pattern, Sub, outputs_by_agent, whole

if TYPE_CHECKING:
    from ..models import StepRecord
    from ..workflow import Context


class Debate(Pattern):
    """``wf.debate("argue", agents={"pro": pro, "con": con}, rounds=3, judge=judge)``: see
    :meth:`relaypoint.Workflow.debate`."""

    kind = "debate"
    noun = "round"
    roles = ("judge",)

    def __init__(self, name: str, agents: Mapping[str, Any], *, rounds: int, judge: Callable[[Context], Any] | None,
                 retries: int, on_orphan: str, timeout: float | None, concurrent: bool = False,
                 max_concurrency: int | None = None) -> None:
        super().__init__(name, agents, retries=retries, on_orphan=on_orphan, timeout=timeout,
                         max_concurrency=max_concurrency)
        self.rounds = whole(rounds, f"debate {name!r}: rounds", least=1)
        if not isinstance(concurrent, bool):
            raise DefinitionError(f"debate {name!r}: concurrent must be True or False, not {concurrent!r}")
        self.concurrent = concurrent
        if judge is not None:
            check_callable(judge, f"debate {name!r}: judge")
        self.judge = judge
        if judge is not None:
            self._add("judge", judge)
        self.order = list(self.agents)

    def settings(self) -> dict[str, Any]:
        # recorded only when set, so the definitions (and fingerprints) of in-order debates stay as they were
        return {"rounds": self.rounds, "judge": self.judge is not None, **({"concurrent": True} if self.concurrent else {})}

    def start(self) -> Sub:
        return {"round": 1, "spoken": []}

    def next(self, sub: Sub) -> tuple[Turn, ...]:
        r, spoken = sub["round"], sub["spoken"]
        left = [a for a in self.order if a not in spoken]
        if not left:  # every agent spoke (an allowed drift may have removed the one still to speak)
            r, spoken, left = r + 1, [], self.order
        if r <= self.rounds:
            return tuple(Turn(r, a) for a in left) if self.concurrent else (Turn(r, left[0]),)
        if self.judge is not None and not sub.get("judged"):
            return (Turn(r + 1 if spoken else r, "judge"),)  # after every round spoken, even a cut one
        return ()

    def carry(self, sub: Sub) -> Sub:
        r, spoken = sub["round"], sub["spoken"]
        if (r if spoken else r - 1) > self.rounds:  # a round begun past the new number: the debate ends before it
            return {"round": self.rounds + 1, "spoken": []}
        speaking = (r if any(a not in spoken for a in self.order) else r + 1) <= self.rounds
        if sub.get("judged") and (speaking or self.judge is None):  # judged on fewer rounds, or no judge now
            return {k: v for k, v in sub.items() if k != "judged"}
        return sub

    def kept(self, sub: Sub, turn: Turn) -> bool:
        return bool(sub.get("judged")) if turn.agent == "judge" else turn.iteration <= self.rounds

    def seen(self, turn: Turn) -> int | None:
        # a concurrent round's speakers hear the rounds before, never a speech of their own round
        return turn.iteration if self.concurrent and turn.agent != "judge" else None

    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        if turn.agent == "judge":
            return {**sub, "judged": True}
        before = sub["spoken"] if sub["round"] == turn.iteration else []
        heard = {*before, turn.agent}
        spoken = [a for a in before if a not in self.agents] + [a for a in self.order if a in heard]
        if all(a in spoken for a in self.order):
            return {"round": turn.iteration + 1, "spoken": []}
        return {"round": turn.iteration, "spoken": spoken}

    def result(self, records: list[StepRecord]) -> Any:
        if self.judge is not None:
            return next((r.output for r in reversed(records) if r.agent == "judge"), None)
        last = max((r.iteration for r in records), default=0)
        return outputs_by_agent([r for r in records if r.iteration == last], self.roles)
