"""Drivers: what a run does next, decided from a small JSON state.

The run loop (:mod:`relaypoint.execution`) never walks a list of steps. At each turn it asks the
run's driver ``next(state)`` and gets an action: run one step execution (:class:`RunStep`), run
several independent ones (:class:`RunSteps`, each with its own boundary), pause for a person
(:class:`Pause`) or finish (:class:`Finish`). After each recorded result it asks ``fold`` for the
new state, and commits that state in the same transaction as the boundary (``checkpoints.state``);
a resume restores it from the latest checkpoint (``restore``), never by replaying steps.

A driver is pure: it reads nothing and writes nothing; every method returns a new state.
:class:`ChainDriver` is today's ordered chain of named steps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

from .errors import RefusedTransition
from .status import CheckpointKind

if TYPE_CHECKING:
    from .models import Checkpoint, StepRecord
    from .patterns.base import Pattern
    from .workflow import Context, StepSpec, Workflow

State = dict[str, Any]


@dataclass(frozen=True)
class Call:
    """One step execution a driver asks for: the step ``name``, its ``iteration`` (1-based: a name
    repeats once per iteration in a pattern), the ``agent`` it runs as (None for a chain step), an
    ``input`` of its own (JSON, or None), the seq of the pattern's group row it belongs to
    (``parent``; None at top level) and, for a planner's subtask, its ``task`` id."""

    name: str
    iteration: int = 1
    agent: str | None = None
    input: Any = None
    parent: int | None = None
    task: str | None = None

    @classmethod
    def of(cls, step: StepRecord) -> Call:
        """The call a recorded execution ran."""
        return cls(step.name, step.iteration, step.agent, parent=step.parent, task=step.options.get("task"))


@dataclass(frozen=True)
class RunStep:
    """Run one execution."""

    call: Call


@dataclass(frozen=True)
class RunSteps:
    """Run independent executions, one after another, each recorded at its own boundary (a crash
    re-runs only those not yet recorded). The executor runs the first call and folds its result;
    the driver's next state answers with the calls still to run."""

    calls: tuple[Call, ...]


@dataclass(frozen=True)
class Pause:
    """Pause the run for a decision: ``kind`` approval (a person approves the output of ``step``,
    the execution ``seq``, which has completed) or input; ``reason`` is what the person is asked;
    ``timeout`` seconds until the pause is expired (None: no deadline)."""

    kind: Literal["approval", "input"]
    step: str
    seq: int
    reason: str
    timeout: float | None = None


@dataclass(frozen=True)
class Finish:
    """Nothing left to run: the run completes."""


Action = RunStep | RunSteps | Pause | Finish


class Driver(ABC):
    """What a run does next. States are JSON-able dicts; methods never mutate the one given."""

    @abstractmethod
    def definition(self) -> list[Any] | dict[str, Any]:
        """The JSON definition (steps, options, pattern parameters): what a run records to detect
        drift, hashed into the workflow's fingerprint."""

    @abstractmethod
    def planned(self) -> list[StepSpec]:
        """The executions recorded ``pending`` when a run starts, in order (execution seq = index)."""

    @abstractmethod
    def spec(self, call: Call) -> StepSpec:
        """The step (function and options) a call runs. Raises ``KeyError`` for an unknown name."""

    def model(self, call: Call) -> Any:
        """The pydantic model ``call``'s output is (its step's ``output``, see :mod:`relaypoint.typed`),
        or None: untyped, or a call this definition no longer has (its output is read as stored)."""
        try:
            return self.spec(call).output
        except KeyError:
            return None

    @abstractmethod
    def seq_of(self, call: Call) -> int | None:
        """The seq of the planned execution ``call`` runs, or None when it is appended."""

    @abstractmethod
    def initial_state(self) -> State:
        """The state a new run starts from."""

    @abstractmethod
    def next(self, state: State) -> Action:
        """What to do now."""

    @abstractmethod
    def fold(self, state: State, call: Call, output: Any, *, recorded: bool = False,
             ctx: Context | None = None) -> State:
        """The state after ``call`` completed with ``output``. ``recorded``: the result was recorded
        before this claim of the run (the executor meets it again on resume), so any pause it led
        to was decided then. ``ctx``: the execution's context (``ctx.output`` set), on which a
        pattern evaluates its own user code, such as a loop's ``until``; an exception raised here
        fails the execution as if the step had raised it."""

    @abstractmethod
    def decided(self, state: State, checkpoint: Checkpoint) -> State:
        """The state once a pause the driver asked for was decided (approved or responded)."""

    @abstractmethod
    def restore(self, state: Any, checkpoint: Checkpoint) -> State:
        """The state to go on from ``checkpoint``, whose stored state is ``state`` (None, or not
        a state of this driver, for checkpoints written before drivers existed)."""

    @abstractmethod
    def upstream(self, state: State) -> Sequence[str]:
        """The names ``ctx.results`` offers to the execution the driver asks for in ``state``
        (membership should be cheap: it is tested on every read)."""

    def failed(self, state: State, call: Call, error: str) -> State | str:
        """After ``call`` failed with ``error`` and its retries are used up: the state to go on from
        (the execution stays recorded ``failed``; a planner re-plans), or the run's failure reason
        (the default: the run fails)."""
        return f"step '{call.name}'{where(call)} failed: {error}"

    def max_concurrency(self, call: Call) -> int | None:
        """At most how many of the independent calls ``call`` is one of (a :class:`RunSteps`) may
        be in flight at once; None: all of them (the default)."""
        return None

    def view(self, state: State) -> Mapping[str, Any]:
        """What ``ctx.state`` shows an execution asked for in ``state`` (default: the state)."""
        return state

    def history_of(self, call: Call) -> tuple[int, frozenset[str]] | tuple[int, frozenset[str], int] | None:
        """Whose recorded results ``ctx.history`` lists for ``call``: the seq of a pattern's group
        row, the agent labels to leave out (the pattern's own decisions) and, when given, an
        iteration bound (only calls of lower iterations are listed, so a call running beside
        others never sees one of them that finishes while it runs), or None (no history)."""
        return None

    def replan(self, state: State) -> State:
        """The state that makes a planner decompose its goal again (``resume --replan``). Raises
        ``RefusedTransition`` when the run is not inside a planner (the default)."""
        raise RefusedTransition("this run is not inside a planner, so there is nothing to re-plan; resume it without "
                                "--replan")

    def remap(self, state: State, recorded: Sequence[str]) -> State | None:
        """``state`` (recorded when the workflow's nodes were named ``recorded``, in order) for the
        current definition, after an allowed drift; None when it cannot be carried over."""
        return None

    def kept(self, state: State, call: Call) -> bool:
        """After an allowed drift, ``state`` carried over by :meth:`remap`: whether the completed call
        ``call`` of the pattern under way is still part of the run; one that is not is cancelled
        (default: every call is kept)."""
        return True

    def lacking(self, state: State) -> str | None:
        """Why the run cannot go on from ``state`` under this definition, in words (a planner whose
        plan names an agent an allowed drift removed), or None (the default)."""
        return None


def located(call: Call) -> dict[str, Any]:
    """What an event adds to name a pattern's execution: its ``iteration``, ``agent`` and ``task``
    (nothing for a top-level step)."""
    if call.parent is None:
        return {}
    return {"iteration": call.iteration, "agent": call.agent, **({"task": call.task} if call.task else {})}


def where(call: Call) -> str:
    """`` (round 3, agent 'pro')``-style words locating a pattern's execution, '' at top level."""
    if call.parent is None:
        return ""
    parts = [f"iteration {call.iteration}"] + ([f"agent '{call.agent}'"] if call.agent else []) + (
        [f"subtask '{call.task}'"] if call.task else [])
    return f" ({', '.join(parts)})"


CallKey = tuple[str, int, str | None, str | None]


def call_key(call: Call) -> CallKey:
    """What tells a call apart from the others of its run (its name, iteration, agent and task),
    hashable: a driver asks for the same call again, with the same key, until it is folded."""
    return call.name, call.iteration, call.agent, call.task


def idempotency_key(run_id: str, call: Call) -> str:
    """The key a step execution hands to external services: ``run/name`` at top level (so chain
    runs keep their keys), ``run/name#iteration`` and ``/agent`` inside a pattern (a planner's
    iteration is its subtask's ordinal, so every execution of a run has its own key)."""
    if call.parent is None and call.iteration == 1 and call.agent is None:
        return f"{run_id}/{call.name}"
    return f"{run_id}/{call.name}#{call.iteration}" + (f"/{call.agent}" if call.agent else "")


class _Prefix(Sequence[str]):
    """The first ``n`` names of a chain, without copying them; ``in`` is one dict lookup."""

    def __init__(self, names: list[str], index: dict[str, int], n: int) -> None:
        self._names, self._index, self._n = names, index, n

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> Any:
        return self._names[:self._n][i]

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        return iter(self._names[:self._n])

    def __contains__(self, name: object) -> bool:
        return self._index.get(name, self._n) < self._n  # type: ignore[call-overload]


@dataclass(frozen=True)
class Turn:
    """One execution a pattern asks for, within its group: ``iteration`` (round, turn, pass, or
    the subtask's ordinal), ``agent`` (None for a loop's pass) and, for a planner, the ``task`` id
    and the subtask's ``input`` (what ``ctx.input`` is for it; None: the run's input)."""

    iteration: int
    agent: str | None = None
    task: str | None = None
    input: Any = None

    @classmethod
    def of(cls, call: Call) -> Turn:
        """The turn a pattern's ``call`` runs."""
        return cls(call.iteration, call.agent, call.task, call.input)


class ChainDriver(Driver):
    """An ordered chain of uniquely named nodes (a :class:`relaypoint.Workflow`): steps, and
    patterns (:mod:`relaypoint.patterns`), each recorded in its own planned row.

    State: ``{"next": i}``, the index of the next node, plus ``{"gate": name}`` while the approval
    gate after node ``i - 1`` is open, plus ``{"in": sub}`` while pattern ``i`` is under way (its
    own state). ``next``: an open gate pauses for approval; ``i`` past the last node finishes; a
    step runs; a pattern asks for its next executions (children of its row, appended), and once it
    has nothing left its row runs its finisher, which records the pattern's result.
    """

    def __init__(self, workflow: Workflow) -> None:
        self.steps = list(workflow.steps)
        self._max_concurrency = workflow.max_concurrency
        self._names = [s.name for s in self.steps]
        self._index = {name: i for i, name in enumerate(self._names)}

    def definition(self) -> list[dict[str, Any]]:
        """``[{"name", "approval", "retries", "on_orphan", "timeout"}, ...]`` in chain order; a
        pattern's entry adds ``"pattern"`` (its kind) and its parameters."""
        return [{"name": s.name, **s.options()} for s in self.steps]

    def planned(self) -> list[StepSpec]:
        return self.steps

    def _pattern(self, call: Call) -> Pattern | None:
        return self.steps[self._index[call.name]].pattern

    def spec(self, call: Call) -> StepSpec:
        node = self.steps[self._index[call.name]]
        if call.parent is None:
            return node
        assert node.pattern is not None
        return node.pattern.spec(call.agent)

    def seq_of(self, call: Call) -> int | None:
        return None if call.parent is not None else self._index.get(call.name)

    def initial_state(self) -> State:
        return {"next": 0}

    def next(self, state: State) -> Action:
        gate = state.get("gate")
        if gate is not None:
            i = self._index[gate]
            return Pause(CheckpointKind.APPROVAL, gate, i, f"approve the output of step '{gate}'", self.steps[i].timeout)
        i = state["next"]
        if i >= len(self.steps):
            return Finish()
        node = self.steps[i]
        if node.pattern is None:
            return RunStep(Call(node.name))
        bound = node.pattern.max_concurrency if node.pattern.max_concurrency is not None else self._max_concurrency
        turns = node.pattern.asked(self._sub(state, node.pattern), bound)
        calls = tuple(Call(node.name, t.iteration, t.agent, t.input, parent=i, task=t.task) for t in turns)
        if not calls:
            return RunStep(Call(node.name))  # the pattern's result, recorded in its own row
        return RunStep(calls[0]) if len(calls) == 1 else RunSteps(calls)

    def fold(self, state: State, call: Call, output: Any, *, recorded: bool = False,
             ctx: Context | None = None) -> State:
        i = self._index[call.name]
        node = self.steps[i]
        if call.parent is not None:
            assert node.pattern is not None
            return {"next": i, "in": node.pattern.fold(self._sub(state, node.pattern), Turn.of(call), output, ctx)}
        if node.approval and not recorded:
            return {"next": i + 1, "gate": call.name}
        return {"next": i + 1}

    def failed(self, state: State, call: Call, error: str) -> State | str:
        pattern = self._pattern(call) if call.parent is not None else None
        if pattern is not None:
            i = self._index[call.name]
            sub = pattern.failed(self._sub(state, pattern), Turn.of(call), error)
            if isinstance(sub, str):
                return sub
            if sub is not None:
                return {"next": i, "in": sub}
        return super().failed(state, call, error)

    def decided(self, state: State, checkpoint: Checkpoint) -> State:
        return {k: v for k, v in state.items() if k != "gate"}

    def restore(self, state: Any, checkpoint: Checkpoint) -> State:
        if isinstance(state, dict) and isinstance(state.get("next"), int):
            return {k: v for k, v in state.items() if k != "fork"}  # a fork's origin is not state
        # Written before drivers: the checkpoint's seq is the step the run continues with (a run
        # is resumed only once its pauses are decided, so no gate is open).
        return {"next": checkpoint.seq}

    def upstream(self, state: State) -> Sequence[str]:
        return _Prefix(self._names, self._index, state["next"])

    def view(self, state: State) -> Mapping[str, Any]:
        i = state["next"]
        pattern = self.steps[i].pattern if i < len(self.steps) else None
        return state if pattern is None else self._sub(state, pattern)

    @staticmethod
    def _sub(state: State, pattern: Pattern) -> dict[str, Any]:
        """Pattern ``pattern``'s sub-state in ``state`` (its start before its first execution)."""
        return state["in"] if "in" in state else pattern.start()

    def history_of(self, call: Call) -> tuple[int, frozenset[str]] | tuple[int, frozenset[str], int] | None:
        i = self._index[call.name]
        pattern = self.steps[i].pattern
        if pattern is None:
            return None
        bound = None if call.parent is None else pattern.seen(Turn.of(call))  # the finisher reads every call
        return (i, frozenset(pattern.roles)) if bound is None else (i, frozenset(pattern.roles), bound)

    def max_concurrency(self, call: Call) -> int | None:
        """The pattern's own ``max_concurrency``, else the workflow's, else None (all at once)."""
        pattern = self._pattern(call) if call.parent is not None else None
        own = pattern.max_concurrency if pattern is not None else None
        return own if own is not None else self._max_concurrency

    def replan(self, state: State) -> State:
        i = state.get("next")
        pattern = self.steps[i].pattern if isinstance(i, int) and i < len(self.steps) else None
        if pattern is None:
            return super().replan(state)
        return {"next": i, "in": pattern.replan(self._sub(state, pattern))}

    def remap(self, state: State, recorded: Sequence[str]) -> State | None:
        i = state.get("next")
        if not isinstance(i, int):
            return None
        if i >= len(recorded):
            return {"next": len(self.steps)}
        j = self._index.get(recorded[i])
        if j is None:
            return None
        pattern = self.steps[j].pattern
        if "in" not in state:
            return {**state, "next": j}
        if pattern is None or not pattern.fits(state["in"]):
            return None
        return {**state, "next": j, "in": pattern.carry(state["in"])}

    def kept(self, state: State, call: Call) -> bool:
        pattern = self._pattern(call) if call.parent is not None else None
        return pattern is None or "in" not in state or pattern.kept(state["in"], Turn.of(call))

    def lacking(self, state: State) -> str | None:
        i = state.get("next")
        pattern = self.steps[i].pattern if isinstance(i, int) and i < len(self.steps) else None
        return None if pattern is None else pattern.lacking(self._sub(state, pattern))
