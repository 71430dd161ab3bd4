"""What every pattern shares: its agents and their options, a person as an agent, and the
contract the chain driver (:class:`relaypoint.drivers.ChainDriver`) drives a pattern through.

A pattern is a node of a workflow, recorded in its own planned row (the group row). Each agent
call, and each decision the pattern asks of user code (a judge, a router, a plan), is a child
execution of that row, appended and recorded at its own boundary. The pattern's state (its
"sub-state", a small JSON dict) commits with every boundary; it holds counters and decisions,
never outputs, so it stays the same size however many rounds run. When :meth:`Pattern.next` has
nothing left, the group row runs :meth:`Pattern.finish`, which records the pattern's result from
the recorded children.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..calls import check_callable
from ..defaults import RETRIES
from ..drivers import Turn
from ..errors import DefinitionError, RefusedTransition
from ..typed import check_model, described, returning
from ..workflow import NAME_RULE, StepSpec, check_options, is_name, whole

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..models import StepRecord
    from ..workflow import Context

Sub = dict[str, Any]


@dataclass(frozen=True)
class Human:
    """An agent that is a person (made by :func:`human`). Its turn pauses the run through the
    durable pause: ``kind="input"`` waits ``awaiting_input`` for ``relaypoint respond`` (the
    answer is the agent's output), ``kind="approval"`` waits ``awaiting_approval`` for
    ``relaypoint approve`` (the output is ``{"approved": True, "by", "comment", "value"}``).
    ``timeout``: seconds the pause may wait (None: the pattern's ``timeout``)."""

    prompt: str
    kind: Literal["input", "approval"] = "input"
    timeout: float | None = None

    def __call__(self, ctx: Context, noun: str = "iteration") -> Any:
        """Ask the person (``noun``: what the pattern calls an iteration, for the prompt)."""
        asked = f"{self.prompt} ({ctx.step}, {noun} {ctx.iteration}, as '{ctx.agent}')"
        return ctx.request_input(asked) if self.kind == "input" else ctx.request_approval(asked)


def human(prompt: str, *, kind: Literal["input", "approval"] = "input", timeout: float | None = None) -> Human:
    """A person as a pattern's agent: ``agents={"pro": pro, "con": human("Your rebuttal?")}``.
    See :class:`Human`. Raises ``DefinitionError`` for an empty prompt, an unknown kind or an
    invalid timeout."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise DefinitionError(f"human: the prompt must be non-empty text, not {prompt!r}")
    if kind not in ("input", "approval"):
        raise DefinitionError(f"human: kind must be 'input' or 'approval', not {kind!r}")
    check_options("human", timeout=timeout)
    return Human(prompt, kind, timeout)


@dataclass(frozen=True)
class Typed:
    """An agent whose output is the pydantic model ``output`` (made by :func:`typed`)."""

    fn: Callable[[Context], Any]
    output: type[BaseModel]


def typed(fn: Callable[[Context], Any], *, output: type[BaseModel]) -> Typed:
    """A pattern's agent whose output is a pydantic model, as ``@wf.step(output=...)`` for a step:
    ``voters={"strict": typed(strict, output=Review)}``. What ``fn`` (def or async def) returns is
    validated where it returns and stored as the model's JSON; a value that does not fit fails the
    call at once, in one line naming the field, without spending retries. Where code reads the
    agent's output it gets the model: in ``ctx.history`` (so a judge, a router, a tally function
    and a vote's ``key``), and in the records the pattern's result is made from; the pattern's
    result itself is stored, and read back by later steps, as JSON. Raises ``DefinitionError`` for
    ``fn`` not a function, a person (:func:`human`: their answer is not validated here) or an
    ``output`` that is not a pydantic model class."""
    check_callable(fn, "typed")
    if isinstance(fn, Human):
        raise DefinitionError("typed: a person's turn (human(...)) cannot be typed; type the step that reads "
                              "their answer instead")
    check_model(output, "typed")
    return Typed(fn, output)


@dataclass(frozen=True)
class AgentOptions:
    """Options every execution of a pattern runs with, as for a step: ``retries``, ``on_orphan``,
    ``timeout`` (seconds a person's turn may wait)."""

    retries: int = RETRIES
    on_orphan: Literal["retry", "hold"] = "retry"
    timeout: float | None = None


class Pattern(ABC):
    """A multi-agent pattern driven by :class:`relaypoint.drivers.ChainDriver` (see the module
    docstring). Subclasses set ``kind`` and their ``roles`` (agent labels of the pattern's own
    decisions, reserved: a user agent may not take one) and implement the state machine.

    ``max_concurrency``: at most how many of the pattern's independent calls are in flight at
    once (None: the workflow's bound, else all); recorded in the parameters only when set.

    Raises ``DefinitionError`` for an invalid name, agents or option.
    """

    kind: ClassVar[str]
    noun: ClassVar[str]
    """What one iteration of this kind is called (round, pass, turn...), in prompts and the console."""
    roles: ClassVar[tuple[str, ...]] = ()

    def __init__(self, name: str, agents: Mapping[str, Any], *, retries: int, on_orphan: str,
                 timeout: float | None, noun: str | None = "agents", max_concurrency: int | None = None) -> None:
        if not is_name(name):
            raise DefinitionError(f"a {self.kind}'s name must be {NAME_RULE}, not {name!r}")
        self.name = name
        owner = f"{self.kind} {name!r}"
        check_options(owner, retries=retries, on_orphan=on_orphan, timeout=timeout)
        self.max_concurrency = None if max_concurrency is None else whole(max_concurrency, f"{owner}: max_concurrency",
                                                                           least=1)
        self.options = AgentOptions(retries, on_orphan, timeout)  # type: ignore[arg-type]
        if noun is not None and (not isinstance(agents, Mapping) or not agents):
            raise DefinitionError(f"{owner}: {noun} must be a non-empty dict of name -> function")
        for label, fn in agents.items():
            if not is_name(label):
                raise DefinitionError(f"{owner}: an agent name must be {NAME_RULE}, not {label!r}")
            if label in self.roles:
                raise DefinitionError(f"{owner}: the agent name {label!r} is reserved for the {self.kind}'s own "
                                      "decisions; rename the agent")
            check_callable(fn.fn if isinstance(fn, Typed) else fn, f"{owner}: agent {label!r}")
        self.agents = dict(agents)
        self._specs: dict[str | None, StepSpec] = {
            label: self._spec(fn.fn, fn.output) if isinstance(fn, Typed) else self._spec(fn)
            for label, fn in self.agents.items()}

    def _spec(self, fn: Callable[[Context], Any], output: type[BaseModel] | None = None) -> StepSpec:
        o = self.options
        timeout = fn.timeout if isinstance(fn, Human) and fn.timeout is not None else o.timeout
        run = functools.partial(fn, noun=self.noun) if isinstance(fn, Human) else fn
        return StepSpec(self.name, run if output is None else returning(run, output), False, o.retries, o.on_orphan,
                        timeout, output=output)

    def _add(self, label: str | None, fn: Callable[[Context], Any], output: type[BaseModel] | None = None) -> None:
        """Register the function run as ``label``: a role, or (None) a loop's pass or a map's item,
        whose output is ``output`` (a pydantic model, see :func:`typed`; None: any JSON value)."""
        self._specs[label] = self._spec(fn, output)

    def _typed(self, fn: Callable[[Context], Any], output: type[BaseModel] | None) -> Callable[[Context], Any]:
        """The pattern's own function ``fn`` (a loop's body, a map's per-item function) validating
        its output against ``output`` (None: ``fn``), for wrapping further before :meth:`_add`."""
        if output is None:
            return fn
        check_model(output, f"{self.kind} {self.name!r}")
        return returning(fn, output)

    def spec(self, agent: str | None) -> StepSpec:
        """The step (function and options) an execution as ``agent`` runs. ``KeyError`` for an
        agent not in this definition (a drifted run)."""
        return self._specs[agent]

    def parameters(self) -> dict[str, Any]:
        """The pattern's parameters as recorded in the definition (and so in its fingerprint):
        its agents in order (persons with their kind and timeout), its own parameters and, when some
        of its calls are typed, ``"outputs": {agent (or the noun: "pass", "item"): {"name", "schema"}}``."""
        humans = {a: {"kind": fn.kind, "timeout": fn.timeout} for a, fn in self.agents.items()
                  if isinstance(fn, Human)}
        bound = {"max_concurrency": self.max_concurrency} if self.max_concurrency is not None else {}
        # typed calls only, so an untyped pattern's definition (and fingerprint) stays as it was; the
        # pattern's own function (agent None: a loop's pass, a map's item) under its noun
        outputs = {self.noun if label is None else label: described(spec.output)
                   for label, spec in self._specs.items() if spec.output is not None}
        return {"agents": list(self.agents), **({"humans": humans} if humans else {}), **self.settings(), **bound,
                **({"outputs": outputs} if outputs else {})}

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """This kind's own parameters (rounds, max_turns, ...), for :meth:`parameters`."""

    @abstractmethod
    def start(self) -> Sub:
        """The sub-state a pattern starts from."""

    @abstractmethod
    def next(self, sub: Sub) -> tuple[Turn, ...]:
        """The executions to run now (several: independent calls, each recorded on its own), or
        ``()`` when the pattern is done and its result is to be recorded."""

    def asked(self, sub: Sub, limit: int | None) -> tuple[Turn, ...]:
        """:meth:`next`, cut to its first ``limit`` turns by a pattern whose independent calls keep
        their order from one state to the next (a map's items): those calls are started in that
        order, at most ``limit`` at once, so the first ``limit`` hold every call in flight (a
        1,000-item map asks for 50 calls at a boundary, not 1,000). Default: every turn."""
        return self.next(sub)

    @abstractmethod
    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        """The sub-state after ``turn`` completed with ``output`` (``ctx``: its context, when it
        just ran here). May raise: the execution then fails as if it had raised."""

    def seen(self, turn: Turn) -> int | None:
        """The iteration bound of ``ctx.history`` for ``turn``: only calls of lower iterations are
        listed (1: none), so calls that run at once never see each other; None (the default):
        every call recorded so far."""
        return None

    def failed(self, sub: Sub, turn: Turn, error: str) -> Sub | str | None:
        """After ``turn`` failed for good: a sub-state to go on from, the run's failure reason, or
        None (the run fails with the usual reason; the default)."""
        return None

    def replan(self, sub: Sub) -> Sub:
        """The sub-state that decomposes the goal again (``resume --replan``); only a planner can."""
        raise RefusedTransition(f"'{self.name}' is a {self.kind}, not a planner, so there is nothing to re-plan; "
                                "resume without --replan")

    def fits(self, sub: Any) -> bool:
        """True when ``sub`` looks like this kind's sub-state (checked when a drifted run's state
        is carried over)."""
        return isinstance(sub, dict) and set(self.start()) <= set(sub)

    def carry(self, sub: Sub) -> Sub:
        """``sub``, recorded under an earlier definition, for this one, after an allowed drift (the
        table "Drift inside a pattern" in docs/concepts/drift.md): what a run of this definition would go on from,
        given the calls :meth:`kept`. Default: ``sub`` as it is."""
        return sub

    def kept(self, sub: Sub, turn: Turn) -> bool:
        """After an allowed drift, ``sub`` carried over (:meth:`carry`): whether the completed call
        ``turn`` is still part of the pattern. One that is not is cancelled:
        its record and output stay, but it is no longer in ``ctx.history`` or the result (a round
        past a lowered ``rounds``, a removed voter's vote). Default: True."""
        return True

    def lacking(self, sub: Sub) -> str | None:
        """Why the pattern cannot go on from ``sub`` under this definition, in words (a planner's
        subtasks for an agent an allowed drift removed), or None (the default)."""
        return None

    @abstractmethod
    def result(self, records: list[StepRecord]) -> Any:
        """The pattern's result from its completed children (seq order, roles included)."""

    def finish(self, ctx: Context) -> Any:
        """The group row's function: records :meth:`result`."""
        return self.result(ctx.history.records())  # type: ignore[attr-defined]


def qualified_name(fn: Callable[..., Any]) -> str:
    """What a definition records of a function it cannot serialize: its qualified name
    (``by_score``, ``Panel.by_score``, ``<lambda>``; for a callable object, its class's)."""
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else type(fn).__qualname__


def outputs_by_agent(records: list[StepRecord], roles: tuple[str, ...]) -> dict[str, Any]:
    """``{agent: output}`` of the agents' records (a later record of an agent wins)."""
    return {r.agent: r.output for r in records if r.agent is not None and r.agent not in roles}
