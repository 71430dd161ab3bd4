"""The supervisor: each turn a router names the next agent, and that agent runs.

Children, per turn t: ``route`` (iteration t; its recorded output is the routing decision
``{"turn": t, "candidates": [...], "choice": name | None}``), then the chosen agent (iteration t).
Sub-state: ``{"turn": completed turns, "activations": {agent: calls}, "idle": {agent: consecutive
idle turns}}``, plus ``{"choice": name}`` between a decision and its agent's call and
``{"stopped": "route"}`` once the router said stop. A decided turn is never asked again: the
choice commits with the router's record. After an allowed drift a turn is whole or not at all:
turns past a lowered ``max_turns`` are withdrawn (cancelled, decision and call), and a decided turn
whose chosen agent was removed has its decision withdrawn and is asked again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..calls import check_callable, wrap
from ..drivers import Turn
from ..errors import InvalidValue
from .base import Pattern, Sub, whole

if TYPE_CHECKING:
    from ..models import StepRecord
    from ..workflow import Context


class Supervisor(Pattern):
    """``wf.supervisor("triage", agents={...}, route=router, max_turns=20, max_idle=3)``.

    ``route(ctx)`` returns the next agent's name, or None to stop; it sees ``ctx.state``
    (``"turn"``, ``"activations"``, ``"idle"``) and ``ctx.history``. An agent call that returns
    None is an idle turn for that agent; any other output resets its idle count. The supervisor
    stops when ``route`` returns None, after ``max_turns`` turns, or when every agent has been
    idle ``max_idle`` turns in a row. Its result is the last agent call's output. A router that
    names an unknown agent fails its turn (``InvalidValue``, not retried); a router that raises
    fails the run, and a resume asks only that turn again.
    """

    kind = "supervisor"
    noun = "turn"
    roles = ("route",)

    def __init__(self, name: str, agents: Mapping[str, Any], *, route: Callable[[Context], Any], max_turns: int,
                 max_idle: int, retries: int, on_orphan: str, timeout: float | None) -> None:
        super().__init__(name, agents, retries=retries, on_orphan=on_orphan, timeout=timeout)
        check_callable(route, f"supervisor {name!r}: route")
        self.max_turns = whole(max_turns, f"supervisor {name!r}: max_turns", least=1)
        self.max_idle = whole(max_idle, f"supervisor {name!r}: max_idle", least=1)
        self.order = list(self.agents)
        self._add("route", wrap(route, after=self._decided))

    def _decided(self, choice: Any, ctx: Context) -> dict[str, Any]:
        """The decision of turn ``ctx.iteration`` as recorded, from the router's answer ``choice``."""
        if choice is not None and (not isinstance(choice, str) or choice not in self.agents):
            raise InvalidValue(f"the router of '{self.name}' returned {choice!r} for turn {ctx.iteration}, not one "
                               f"of its agents ({', '.join(self.order)}) or None to stop")
        idle = ctx.state["idle"]
        return {"turn": ctx.iteration, "candidates": [a for a in self.order if idle.get(a, 0) < self.max_idle],
                "choice": choice}

    def settings(self) -> dict[str, Any]:
        return {"max_turns": self.max_turns, "max_idle": self.max_idle}

    def start(self) -> Sub:
        return {"turn": 0, "activations": {a: 0 for a in self.order}, "idle": {a: 0 for a in self.order}}

    def next(self, sub: Sub) -> tuple[Turn, ...]:
        if "stopped" in sub:
            return ()
        turn = sub["turn"] + 1
        if sub.get("choice") in self.agents:
            return (Turn(turn, sub["choice"]),)
        if sub["turn"] >= self.max_turns or all(sub["idle"].get(a, 0) >= self.max_idle for a in self.order):
            return ()
        return (Turn(turn, "route"),)

    def carry(self, sub: Sub) -> Sub:
        if sub["turn"] >= self.max_turns:  # a turn decided past the new limit: the supervisor ends before it
            rest = {k: v for k, v in sub.items() if k not in ("choice", "stopped")}
            return {**rest, "turn": self.max_turns}
        if "choice" in sub and sub["choice"] not in self.agents:  # chose a removed agent: asked again
            return {k: v for k, v in sub.items() if k != "choice"}
        return sub

    def kept(self, sub: Sub, turn: Turn) -> bool:
        if turn.iteration > self.max_turns:
            return False
        if turn.agent == "route" and turn.iteration > sub["turn"]:  # the decision of the turn under way
            return "choice" in sub or "stopped" in sub
        return True

    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        if turn.agent == "route":
            choice = output["choice"]
            return {**sub, "stopped": "route"} if choice is None else {**sub, "choice": choice}
        a = turn.agent
        assert a is not None
        activations = {**sub["activations"], a: sub["activations"].get(a, 0) + 1}
        idle = {**sub["idle"], a: sub["idle"].get(a, 0) + 1 if output is None else 0}
        rest = {k: v for k, v in sub.items() if k != "choice"}
        return {**rest, "turn": turn.iteration, "activations": activations, "idle": idle}

    def result(self, records: list[StepRecord]) -> Any:
        return next((r.output for r in reversed(records) if r.agent not in self.roles), None)
