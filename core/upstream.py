"""What a step consumes, read from the store only when the step uses it: ``ctx.results``,
``ctx.responses`` and ``ctx.history`` (and ``ctx.state``, copied only when used). A step that reads nothing reads
nothing; each value is read and strictly decoded once, then kept.

A typed execution's output (see :mod:`relaypoint.typed`) is read back as its model: ``ctx.results``
of a typed step, ``ctx.history`` and the records of a pattern's typed agents.

A damaged value raises :class:`relaypoint.store.StoreDamaged` to the step and is also kept in
``damage``, so the executor ends the run's claim even if the step swallowed the error.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, overload

from .errors import StoreError
from .models import StepRecord
from .status import CheckpointKind, Decision
from .store import Lookup, RunStore
from .typed import read_back

T = TypeVar("T")
Model = Callable[[Any], Any]
"""What gives the pydantic model of an execution's output (None: untyped), from its name
(``ctx.results``) or its record (``ctx.history``)."""


class _StoreReads:
    """Reads of run ``run_id`` in ``store`` that keep the first :class:`StoreError` in ``damage``
    (the executor ends the run's claim on it even if the step swallowed the error)."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self._store, self._run_id = store, run_id
        self.damage: StoreError | None = None

    def _read(self, read: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return read(self._run_id, *args, **kwargs)
        except StoreError as e:
            self.damage = e
            raise


class _LazyList(_StoreReads, Sequence[Any]):
    """A sequence read from the store on first use (:meth:`_load`)."""

    def _load(self) -> list[Any]:
        raise NotImplementedError

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Any]: ...

    def __getitem__(self, i: int | slice) -> Any:
        return self._load()[i]

    def __len__(self) -> int:
        return len(self._load())


class LazyResults(_StoreReads, Mapping[str, Any]):
    """``name -> output`` of the upstream steps ``names`` of run ``run_id`` (the names the driver
    offers), each read with :meth:`RunStore.output` on first access; a typed step's output as
    its model (``model(name)``, see :mod:`relaypoint.typed`). Raises ``KeyError`` for a name not
    offered, ``StoreDamaged`` for an output that cannot be decoded, ``InvalidValue`` for a typed
    output that no longer fits its model (the model changed since)."""

    def __init__(self, store: RunStore, run_id: str, names: Sequence[str], model: Model = lambda name: None) -> None:
        super().__init__(store, run_id)
        self._names, self._model = names, model
        self._values: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        if name not in self._names:
            raise KeyError(name)
        found, value = self._read(self._store.output, name=name)
        if not found:
            raise KeyError(name)
        value = read_back(self._model(name), value, f"the recorded output of '{name}'")
        self._values[name] = value
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __repr__(self) -> str:
        return f"LazyResults({list(self._names)!r}, read={sorted(self._values)!r})"


class LazyResponses(_LazyList):
    """The recorded answers to execution ``seq``'s input requests, in the order asked, read with
    :meth:`RunStore.responses` on first use (``request_input`` is the only reader)."""

    def __init__(self, store: RunStore, run_id: str, seq: int) -> None:
        super().__init__(store, run_id)
        self._seq = seq
        self._values: list[Any] | None = None

    def _load(self) -> list[Any]:
        if self._values is None:
            self._values = self._read(self._store.responses, self._seq)
        return self._values

    def approval(self) -> dict[str, Any] | None:
        """The approval recorded for execution ``seq`` (a person's turn of kind approval), as
        ``{"approved": True, "by", "comment", "value"}``, or None: read from the run's latest
        pause, which is that turn's while the turn is re-run after the approval."""
        cp = self._read(self._store.checkpoint, Lookup.LAST_PAUSE)
        if (cp is None or cp.kind != CheckpointKind.APPROVAL or cp.paused_seq != self._seq
                or cp.decision != Decision.APPROVED):
            return None
        return {"approved": True, "by": cp.decided_by, "comment": cp.comment, "value": cp.value}


class LazyHistory(_LazyList):
    """``ctx.history``: the recorded results of a pattern (the completed children of group row
    ``parent`` of run ``run_id``, in order) as ``{"iteration", "agent", "output"}`` dicts, plus
    ``"task"`` for a planner's subtask; the pattern's own decisions (agent labels ``roles``) left
    out; with ``before``, only the calls of iterations below it (a call running beside others of its
    iteration must not see those that finish while it runs). A typed agent's output is its model
    (``model(record)``), in the entries and in :meth:`records`. Read with :meth:`RunStore.history`
    on first use; a damaged output raises ``StoreDamaged``, a typed one that no longer fits its
    model ``InvalidValue``."""

    def __init__(self, store: RunStore, run_id: str, parent: int, roles: frozenset[str],
                 before: int | None = None, *, model: Model = lambda record: None) -> None:
        super().__init__(store, run_id)
        self._parent, self._roles, self._before, self._model = parent, roles, before, model
        self._records: list[StepRecord] | None = None
        self._entries: list[dict[str, Any]] | None = None

    def records(self) -> list[StepRecord]:
        """Every completed child, decisions included, as recorded (read once)."""
        if self._records is None:
            records = self._read(lambda rid: self._store.steps(rid, parent=self._parent, outputs=True))
            before = self._before
            records = records if before is None else [r for r in records if r.iteration < before]
            self._records = [self._typed(r) for r in records]
        return self._records

    def _typed(self, record: StepRecord) -> StepRecord:
        model = self._model(record)
        if model is None:
            return record
        what = f"the recorded output of '{record.name}' (iteration {record.iteration}, agent '{record.agent}')"
        return record.model_copy(update={"output": read_back(model, record.output, what)})

    def _load(self) -> list[dict[str, Any]]:
        if self._entries is None:
            self._entries = [{"iteration": r.iteration, "agent": r.agent, "output": r.output,
                              **({"task": r.options["task"]} if "task" in r.options else {})}
                             for r in self.records() if r.agent not in self._roles]
        return self._entries


class LazyState(Mapping[str, Any]):
    """A read-only view of the driver's ``state`` for ``ctx.state``: a deep copy, so a step cannot
    change the run's state through a nested value, made on first use (most steps never look)."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        self._state = state
        self._copy: Mapping[str, Any] | None = None

    def _view(self) -> Mapping[str, Any]:
        if self._copy is None:
            self._copy = MappingProxyType(copy.deepcopy(dict(self._state)))
        return self._copy

    def __getitem__(self, key: str) -> Any:
        return self._view()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._view())

    def __len__(self) -> int:
        return len(self._view())

    def __repr__(self) -> str:
        return f"LazyState({dict(self._view())!r})"


def upstream_of(tasks: Sequence[StepRecord], execution: StepRecord) -> list[StepRecord]:
    """The executions whose outputs ``execution`` was built from, in order: those a chain offers it
    in ``ctx.results`` (:meth:`relaypoint.drivers.ChainDriver.upstream`: the top-level steps before
    its own, its pattern's row for a pattern's call), then, for a pattern's call, its pattern's
    calls before it (what ``ctx.history`` holds, and the pattern's own decisions: for a person's
    turn, what they answer); each with a recorded output. ``tasks``: the run's executions (outputs
    need not be loaded)."""
    top = execution.seq if execution.parent is None else execution.parent
    before = [s for s in tasks if s.parent is None and s.seq < top and s.has_output]
    if execution.parent is None:
        return before
    return before + sorted((s for s in tasks if s.parent == execution.parent and s.seq < execution.seq
                            and s.has_output), key=lambda s: s.seq)
