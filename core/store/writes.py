"""The write half of the store contract: :class:`Change`, the one value every write to a run is, its
typed parts, and :class:`RunWrites`, the methods that commit it.

A change is what one event in a run's life writes (its start, a step boundary, a claim, a pause, a
decision, a fork, a cancel, a recovery, a lease renewal), committed at once by
:meth:`RunWrites.commit`: all of it, or nothing. Values are as the read contract says: times aware
UTC, JSON values as already-encoded JSON text.

The parts are slotted dataclasses, values by convention and not frozen: every boundary builds
several, and a frozen dataclass's ``__init__`` costs several times a plain one's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Final

from ..errors import RefusedTransition
from ..models import Lease, PendingDecision
from ..status import Decision, RunStatus, StepStatus


class Superseded(RefusedTransition):
    """A change's decision found its checkpoint decided already (by another process, meanwhile):
    nothing of the change was written."""


class _Keep:
    """The type of :data:`KEEP`."""

    _instance: _Keep | None = None

    def __new__(cls) -> _Keep:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Final = _Keep()
"""A :class:`RunUpdate` field left as it is (None, for the fields that may hold it, clears them)."""


@dataclass(slots=True)
class NewRun:
    """A run to insert, with its input and definition (JSON text; the definition is kept once per
    fingerprint). ``lease``: the claiming process's lease (None for a queued run, e.g. a fork).
    Its ``updated_at`` is ``created_at`` (UTC)."""

    run_id: str
    workflow: str
    status: RunStatus
    input: str
    definition: str
    fingerprint: str
    created_at: datetime
    steps_total: int
    current_step: str | None = None
    steps_done: int = 0
    parent_run_id: str | None = None
    forked_from_step: str | None = None
    lease: Lease | None = None


@dataclass(slots=True)
class NewStep:
    """A step execution to insert at ``seq``. ``options``: JSON text of the step's options.
    ``parent``: the ``seq`` of the execution that spawned it (None at top level). ``status`` and
    ``attempts`` are pending/0 for a fresh row."""

    seq: int
    name: str
    idempotency_key: str
    options: str = "{}"
    iteration: int = 1
    agent: str | None = None
    parent: int | None = None
    status: StepStatus = StepStatus.PENDING
    attempts: int = 0


@dataclass(slots=True)
class NewCheckpoint:
    """A checkpoint to insert. ``kind``: start, boundary, approval, input, orphan or fork.
    ``seq``: the execution the run continues with from here. ``state``: the driver state as JSON
    text (None: none). ``deadline_at``: when an undecided pause expires (UTC), or None.
    ``paused_seq``: a pause's execution (see :class:`relaypoint.models.Checkpoint`), None otherwise."""

    run_id: str
    kind: str
    seq: int
    step: str | None
    at: datetime
    reason: str | None = None
    state: str | None = None
    deadline_at: datetime | None = None
    paused_seq: int | None = None


@dataclass(slots=True)
class NewEvent:
    """An audit event (its run and time are the change's); build one with :mod:`relaypoint.events`.
    ``detail``: JSON-able. ``names_checkpoint``: the detail starts with ``checkpoint_id``, the id of
    the last checkpoint the same change inserts (unknown before the commit)."""

    kind: str
    step: str | None = None
    actor: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    names_checkpoint: bool = False


@dataclass(slots=True)
class RunUpdate:
    """Fields of the run's row to set; each left :data:`KEEP` is kept. ``lease``: a :class:`Lease`
    sets the lease columns, None clears them. ``definition``: JSON text, kept under ``fingerprint``
    (give both). ``touch``: ``updated_at`` becomes the change's time (False: a lease renewal, which
    is no progress). ``TypeError``: a definition without its fingerprint, or nothing to update."""

    status: RunStatus | _Keep = KEEP
    current_step: str | None | _Keep = KEEP
    steps_done: int | _Keep = KEEP
    steps_total: int | _Keep = KEEP
    error: str | None | _Keep = KEEP
    lease: Lease | None | _Keep = KEEP
    fingerprint: str | _Keep = KEEP
    definition: str | _Keep = KEEP
    suspect_deaths: int | _Keep = KEEP
    touch: bool = True

    def __post_init__(self) -> None:
        if (self.definition is KEEP) != (self.fingerprint is KEEP):
            raise TypeError("RunUpdate: a definition is stored under its fingerprint: give both")
        if not self.touch and not self.given():
            raise TypeError("RunUpdate: nothing to update")

    def given(self) -> dict[str, Any]:
        """The fields set (``touch`` and ``definition`` aside), by name, in declaration order."""
        return {name: v for name in _UPDATABLE if (v := getattr(self, name)) is not KEEP}


_UPDATABLE = tuple(f.name for f in fields(RunUpdate) if f.name not in ("touch", "definition"))


@dataclass(slots=True)
class StepStart:
    """The execution a change starts: ``step`` is the ``seq`` of an existing row, or a
    :class:`NewStep` to append. It becomes running with ``attempts = attempt``, ``started_at`` the
    change's time, ``finished_at``/``error``/``traceback`` cleared."""

    step: int | NewStep
    attempt: int = 1


@dataclass(slots=True)
class StepEnd:
    """Execution ``seq`` ends in ``status`` at the change's time (``finished_at``); ``error`` and
    ``traceback`` (a failure's) are set, or cleared when None."""

    seq: int
    status: StepStatus
    error: str | None = None
    traceback: str | None = field(default=None, repr=False)  # long: a Change's repr stays readable


@dataclass(slots=True)
class Decide:
    """Record the decision of checkpoint ``checkpoint_id``, decided at the change's time: only while
    it is undecided (else the change raises :class:`Superseded`). ``value_json``: an approved
    output or an answer, JSON text."""

    checkpoint_id: int
    decision: Decision
    by: str
    comment: str | None = None
    value_json: str | None = None


@dataclass(slots=True)
class ClosePauses:
    """Decide every undecided pausing checkpoint of the run as ``decision`` (e.g. cancelled), by ``by``."""

    decision: Decision
    by: str


@dataclass(slots=True)
class NewCall:
    """A recorded call of execution ``seq`` (see :meth:`relaypoint.workflow.Context.call`) at its
    ``position`` there (0-based, in the order the execution made its calls), written or replaced
    (a failed call run again), finished at the change's time. ``kind``: a
    :class:`~relaypoint.status.CallKind`; ``status``: completed or failed; ``attempt``: the
    execution's attempt that made it; ``started_at``: when it began (UTC); ``value``: the result as
    JSON text (a completed call's); ``error``: a failed call's one line; ``detail``: JSON text of
    what it shows besides (a model request's messages, a tool call's arguments), or None;
    ``model`` and the usage (``requests``, ``input_tokens``, ``output_tokens``): a model
    request's, else None."""

    seq: int
    position: int
    name: str
    kind: str
    status: StepStatus
    attempt: int
    started_at: datetime
    value: str | None = None
    error: str | None = None
    detail: str | None = None
    model: str | None = None
    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(slots=True)
class Change:
    """Everything one event in a run's life writes, committed by :meth:`RunWrites.commit` in this
    order: ``new`` (the run inserted), ``inserted`` (executions appended as given), ``replaced``
    (the top-level chain rebuilt, see below), ``decided``, ``run`` (the run's row; None: not
    updated), ``ended``, ``marked`` (executions whose status alone changes), ``cancel_open``
    (every open execution, :data:`~relaypoint.status.OPEN_STEPS`, cancelled, finished at ``at``
    unless it had a finish time), ``started``, ``outputs`` (seq -> JSON text, written or
    replaced), ``calls`` (recorded calls, written or replaced), ``progress`` (seq -> an
    execution's progress line), ``closed``, ``reopened`` (a checkpoint whose announcement is asked for again: not
    announced, failed or claimed), ``checkpoints``, ``events``. ``at``: the change's time (UTC).

    ``fence``: the lease token that must own the run when its row is updated (None: unfenced).

    ``replaced`` (an allowed drift): the run's top-level chain rebuilt from these steps (seq
    0..n-1): each whose name was recorded keeps its recorded status, attempts, times, idempotency
    key and output; others are fresh. The children of a kept step move with it: ``parent`` its new
    seq, their own seqs shifted by (new count - recorded count of top-level steps), so they stay
    after every top-level step in order, with their outputs. Checkpoints follow the executions at
    their ``seq`` and ``paused_seq``; either at no kept execution (a dropped one, a position past
    the last) becomes ``-1 - seq``, naming none. The names of the recorded top-level steps
    dropped (their outputs and children go with them) are in :attr:`Committed.dropped`."""

    run_id: str
    at: datetime
    fence: str | None = None
    new: NewRun | None = None
    inserted: Sequence[NewStep] = ()
    replaced: Sequence[NewStep] | None = None
    decided: Decide | None = None
    run: RunUpdate | None = field(default_factory=RunUpdate)
    ended: Sequence[StepEnd] = ()
    marked: Mapping[int, StepStatus] = field(default_factory=dict)
    cancel_open: bool = False
    started: StepStart | None = None
    outputs: Mapping[int, str] = field(default_factory=dict)
    calls: Sequence[NewCall] = ()
    progress: Mapping[int, str] = field(default_factory=dict)
    closed: ClosePauses | None = None
    reopened: int | None = None
    checkpoints: Sequence[NewCheckpoint] = ()
    events: Sequence[NewEvent] = ()

    def __post_init__(self) -> None:
        if self.fence is not None and self.run is None:
            raise TypeError("Change: a fence guards the run's row update; give one (run=RunUpdate())")
        if self.new is not None and self.new.run_id != self.run_id:
            raise ValueError(f"Change: the new run is {self.new.run_id}, not {self.run_id}")


@dataclass(slots=True)
class Committed:
    """What :meth:`RunWrites.commit` made: the id of the last checkpoint inserted (None without
    one), and the top-level steps a ``replaced`` chain dropped."""

    checkpoint_id: int | None = None
    dropped: list[str] = field(default_factory=list)


class RunWrites(ABC):
    """The write methods of a store (see :class:`relaypoint.store.base.RunStore`)."""

    @abstractmethod
    def transaction(self, run: str | None = None, *, skip_locked: bool = False) -> AbstractContextManager[None]:
        """A write transaction around reads that decide a change (a claim, a decision): every change
        committed inside commits with it, or none does (an exception rolls it back and
        propagates). Waits up to the busy timeout for another writer (then ``StoreBusy``). Raises
        ``StoreReadOnly`` on a read-only store, and ``RuntimeError`` when nested.

        Without ``run`` the transaction is the store's only writer while it lasts (recovery, forks
        and decisions read several runs and write what they read). With ``run`` (a run id, existing
        or about to be inserted), the transaction promises to write only that run's rows: a backend
        with concurrent writers (PostgreSQL) then lets transactions of different runs, and
        changes, commit side by side, and serializes those of one run. ``skip_locked`` (with
        ``run``): when another transaction holds that run, raise ``RunLocked`` at once (nothing
        written) instead of waiting for it, as ``SELECT ... FOR UPDATE SKIP LOCKED`` does (a worker
        going down its list of candidates). SQLite has one writer at a time and ignores both."""

    @abstractmethod
    def commit(self, change: Change) -> Committed:
        """Write ``change`` (see :class:`Change`): in its own transaction (on PostgreSQL one round
        trip to the server, a drift's ``replaced`` aside), or, inside :meth:`transaction`, as part
        of it (what it wrote is read back at once). The statements do not depend on the length of
        the run (a ``replaced`` chain aside).

        Raises ``relaypoint.errors.LeaseLost`` when ``change.fence`` no longer owns the run, and
        ``UnknownRun`` when there is no such run (a run update); :class:`Superseded` when the
        checkpoint of ``change.decided`` was decided already. Refused so, the change wrote nothing
        (it is refused before its first write, the run insert aside) and an open transaction goes
        on. ``StoreError`` when ``change.new`` names a run the store holds. ``StoreReadOnly``,
        ``StoreBusy``, ``StoreFull`` as :meth:`transaction`."""

    @abstractmethod
    def claim_announcements(self, limit: int, at: datetime, until: datetime) -> list[PendingDecision]:
        """Claim the decisions owed (as ``pending_decisions`` lists them) that are not announced,
        whose announcement did not fail, and that no claim holds at ``at`` (UTC), oldest first, at
        most ``limit``: mark each claimed until ``until`` (UTC) and return them, in one transaction
        as the store's only writer, so of claimers racing on one store each pause goes to one of
        them (``worker --on-pause``). A claim that is not settled by ``until`` (its claimer died)
        lets the next claimer take the pause. Opens that transaction itself (``RuntimeError`` when
        one is open). When nothing is to be claimed (each poll, mostly), it reads an index of the
        unannounced pauses alone (no row when every pause is announced), takes no lock and writes
        nothing. Raises ``StoreReadOnly``."""

    @abstractmethod
    def settle_announcement(self, checkpoint_id: int, until: datetime, outcome: str, at: datetime) -> bool:
        """End the claim on checkpoint ``checkpoint_id`` made until ``until`` (the claim's expiry
        names it), as ``outcome`` says (an :class:`~relaypoint.status.AnnouncementOutcome`):
        ``announced`` marks the pause announced at ``at`` (UTC), ``failed`` marks its announcement
        failed at ``at`` (no claimer takes it until a change ``reopened`` it), ``released`` makes it
        claimable at once. Returns False, nothing written, when the claim is no longer the pause's
        (expired and claimed again, or reopened). Opens its own transaction, as
        :meth:`claim_announcements`. Raises ``StoreReadOnly``."""
