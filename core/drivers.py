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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

from .status import CheckpointKind

if TYPE_CHECKING:
    from .models import Checkpoint
    from .workflow import StepSpec, Workflow

State = dict[str, Any]


@dataclass(frozen=True)
class Call:
    """One step execution a driver asks for: the step ``name``, its ``iteration`` (1-based: a name
    repeats once per iteration in a pattern), the ``agent`` it runs as (None for a chain step), an
    ``input`` of its own (JSON, or None) and the seq of the execution that spawned it (``parent``)."""

    name: str
    iteration: int = 1
    agent: str | None = None
    input: Any = None
    parent: int | None = None


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
    """Pause the run for a decision: ``kind`` approval (a person approves ``step``'s output) or
    input; ``reason`` is what the person is asked; ``timeout`` seconds until the pause is expired
    (None: no deadline)."""

    kind: Literal["approval", "input"]
    step: str
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
    def fold(self, state: State, call: Call, output: Any, *, recorded: bool = False) -> State:
        """The state after ``call`` completed with ``output``. ``recorded``: the result was recorded
        before this claim of the run (the executor meets it again on resume), so any pause it led
        to was decided then."""

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


def idempotency_key(run_id: str, call: Call) -> str:
    """The key a step execution hands to external services: ``run/name`` for a first iteration
    without an agent (so chain runs keep their keys), else ``run/name#iteration`` and ``/agent``."""
    if call.iteration == 1 and call.agent is None:
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


class ChainDriver(Driver):
    """An ordered chain of uniquely named steps (a :class:`relaypoint.Workflow`).

    State: ``{"next": i}``, the index of the next step, plus ``{"gate": name}`` while the approval
    gate after step ``i - 1`` is open. ``next``: an open gate pauses for approval; ``i`` past the
    last step finishes; otherwise step ``i`` runs.
    """

    def __init__(self, workflow: Workflow) -> None:
        self.steps = list(workflow.steps)
        self._names = [s.name for s in self.steps]
        self._index = {name: i for i, name in enumerate(self._names)}

    def definition(self) -> list[dict[str, Any]]:
        """``[{"name", "approval", "retries", "on_orphan", "timeout"}, ...]`` in chain order."""
        return [{"name": s.name, **s.options()} for s in self.steps]

    def planned(self) -> list[StepSpec]:
        return self.steps

    def spec(self, call: Call) -> StepSpec:
        return self.steps[self._index[call.name]]

    def seq_of(self, call: Call) -> int | None:
        return self._index.get(call.name)

    def initial_state(self) -> State:
        return {"next": 0}

    def next(self, state: State) -> Action:
        gate = state.get("gate")
        if gate is not None:
            spec = self.steps[self._index[gate]]
            return Pause(CheckpointKind.APPROVAL, gate, f"approve the output of step '{gate}'", spec.timeout)
        i = state["next"]
        if i >= len(self.steps):
            return Finish()
        return RunStep(Call(self.steps[i].name))

    def fold(self, state: State, call: Call, output: Any, *, recorded: bool = False) -> State:
        i = self._index[call.name]
        if self.steps[i].approval and not recorded:
            return {"next": i + 1, "gate": call.name}
        return {"next": i + 1}

    def decided(self, state: State, checkpoint: Checkpoint) -> State:
        return {"next": state["next"]}

    def restore(self, state: Any, checkpoint: Checkpoint) -> State:
        if isinstance(state, dict) and isinstance(state.get("next"), int):
            return dict(state)
        # Written before drivers: the checkpoint's seq is the step the run continues with (a run
        # is resumed only once its pauses are decided, so no gate is open).
        return {"next": checkpoint.seq}

    def upstream(self, state: State) -> Sequence[str]:
        return _Prefix(self._names, self._index, state["next"])
