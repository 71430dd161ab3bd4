"""The storage contract: :class:`RunStore`, the write models it takes, and the errors it raises.

Everything outside ``relaypoint.store`` reads and writes runs through these methods; only a backend
module speaks SQL. Conventions shared by every method:

- Times are aware UTC :class:`~datetime.datetime` values, going in and coming out.
- JSON values go in as already-encoded JSON *text* (the caller encodes with
  :mod:`relaypoint.encoding`, so an unstorable value is refused naming its path) and come out
  decoded. Reads for display are lenient (damage reads ``{"unreadable": <raw text>}``); reads of
  what a step will consume are strict and raise :class:`StoreDamaged` naming what is damaged.
- A backend's own exceptions never leave a method: they are translated to the :class:`StoreError`
  subclasses below (each message one line a person can act on).
- Writes other than :meth:`RunStore.commit_boundary` are made inside :meth:`RunStore.transaction`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from ..errors import RefusedTransition, StoreError
from ..models import Lease, PendingDecision
from ..status import RunStatus, StepStatus
from .admin import RunAdmin
from .reads import RunReads

# ---- errors -------------------------------------------------------------------------------------


class StoreMissing(StoreError):
    """No store at the URL (and ``create`` was not asked)."""


class NotAStore(StoreError):
    """The URL names something that is not a relaypoint store: a directory, an empty or foreign
    file, a corrupt database, or a store whose tables do not match its schema version."""


class StoreBusy(StoreError):
    """Another process held the store's write lock longer than the busy timeout."""


class RunLocked(RefusedTransition):
    """``transaction(run, skip_locked=True)``: another process holds the run in a transaction of its
    own (claiming it, committing its boundary); nothing was written."""


class StoreReadOnly(StoreError):
    """The store was opened read-only (or cannot be written) and a write was asked for."""


class StoreDamaged(StoreError):
    """A stored value or row cannot be read (damaged, or edited by hand); the message names it."""


class StoreNewer(StoreError):
    """The store was written by a newer relaypoint (a schema version this one does not know)."""


class StoreFull(StoreError):
    """The disk or the store is full; nothing was recorded."""


class StoreUnreachable(StoreError):
    """The database server cannot be reached: the connection was refused, timed out, or was lost
    (a write under way when it was lost is rolled back by the server)."""


class StoreDenied(StoreError):
    """The database server refused this user: bad credentials, or a permission the store needs."""


class BackendUnavailable(StoreError):
    """The URL names a backend this version of relaypoint does not provide (or an unknown scheme)."""


# ---- write models ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewRun:
    """A run to insert. ``input``/``definition``: JSON text. ``lease``: the claiming process's
    lease (None for a queued run, e.g. a fork). Times UTC."""

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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class NewEvent:
    """An audit event of a boundary (its run and time are the boundary's). ``detail``: JSON-able.
    ``names_checkpoint``: the detail starts with ``checkpoint_id``, the id of the checkpoint the same
    boundary inserts (unknown before the commit)."""

    kind: str
    step: str | None = None
    actor: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    names_checkpoint: bool = False


@dataclass(frozen=True)
class StepEnd:
    """How the execution ``seq`` ended at a boundary (``finished_at`` is the boundary's time).
    ``output_json``: the output as JSON text, written once to the outputs (None: no output, e.g.
    a failure; a step that returned None has ``"null"``). ``error``/``traceback``: for a failure;
    both are cleared otherwise."""

    seq: int
    status: StepStatus
    output_json: str | None = None
    error: str | None = None
    traceback: str | None = None


@dataclass(frozen=True)
class StepStart:
    """The execution a boundary starts: ``step`` is the ``seq`` of an existing (pending) row, or a
    :class:`NewStep` to append. It becomes running with ``attempts = attempt``, ``started_at`` the
    boundary's time, ``finished_at``/``error``/``traceback`` cleared."""

    step: int | NewStep
    attempt: int = 1


@dataclass(frozen=True)
class Boundary:
    """Everything one step boundary writes, committed as one transaction by
    :meth:`RunStore.commit_boundary`. ``fence``: the lease token that must still own the run (None:
    unfenced). ``at``: the boundary's time (UTC). ``run``: :meth:`RunStore.update_run` fields
    (``updated_at`` defaults to ``at``). Every part is optional but ``run_id``, ``at``."""

    run_id: str
    at: datetime
    fence: str | None = None
    ended: StepEnd | None = None
    started: StepStart | None = None
    checkpoint: NewCheckpoint | None = None
    run: dict[str, Any] = field(default_factory=dict)
    events: list[NewEvent] = field(default_factory=list)


@dataclass(frozen=True)
class BoundaryResult:
    """What :meth:`RunStore.commit_boundary` made: the new checkpoint's id (None without one)."""

    checkpoint_id: int | None = None


# ---- the contract -------------------------------------------------------------------------------


class RunStore(RunReads, RunAdmin):
    """A relaypoint store: runs, their step executions, outputs, checkpoints and events.

    Open one with :func:`relaypoint.store.open_store`. A store object may be used by many threads at
    once: each works on a connection of its own, and a :meth:`transaction` belongs to the thread that
    opened it (see :mod:`relaypoint.store.connections`). Every method may raise :class:`StoreBusy`,
    :class:`StoreFull` or :class:`StoreDamaged` besides what its docstring names.
    """

    schema_version: ClassVar[int]
    """The schema version of the stores this backend writes (each backend numbers its own)."""
    upgraded_from: int | None = None
    """The schema version this store had before opening it migrated it (0: opening made it); None
    when it was at ``schema_version`` already."""

    # ---- properties and lifecycle

    @property
    @abstractmethod
    def url(self) -> str:
        """The URL the store was opened with, as given (to hand to another process)."""

    @property
    @abstractmethod
    def where(self) -> str:
        """What messages name the store by (for SQLite: the file's path)."""

    @property
    @abstractmethod
    def readonly_reason(self) -> str | None:
        """Why writes are unavailable (opened read-only, file not writable...), or None."""

    @abstractmethod
    def close(self) -> None:
        """Release every thread's connection. The store is unusable afterwards: its methods raise
        :class:`StoreError`. Call it once the threads using the store are done."""

    def read_only_error(self, consequence: str = "actions that record something are unavailable") -> StoreReadOnly:
        """The error for a write this read-only store refuses (a :class:`StoreReadOnly`): where it
        is, why it is read-only (``readonly_reason``), and ``consequence``."""
        return StoreReadOnly(f"{self.where} is read-only ({self.readonly_reason}); {consequence}")

    @abstractmethod
    def transaction(self, run: str | None = None, *, skip_locked: bool = False) -> AbstractContextManager[None]:
        """A write transaction: everything written inside commits together, or nothing does (an
        exception rolls it back and propagates). Waits up to the busy timeout for another writer
        (then :class:`StoreBusy`). Raises :class:`StoreReadOnly` on a read-only store, and
        ``RuntimeError`` when nested.

        Without ``run`` the transaction is the store's only writer while it lasts (recovery, forks
        and decisions read several runs and write what they read). With ``run`` (a run id, existing
        or about to be inserted), the transaction promises to write only that run's rows: a backend
        with concurrent writers (PostgreSQL) then lets transactions of different runs, and
        boundaries, commit side by side, and serializes those of one run. ``skip_locked`` (with
        ``run``): when another transaction holds that run, raise :class:`RunLocked` at once (nothing
        written) instead of waiting for it, as ``SELECT ... FOR UPDATE SKIP LOCKED`` does (a worker
        going down its list of candidates). SQLite has one writer at a time and ignores both."""

    @abstractmethod
    def data_version(self) -> Hashable:
        """A value that changes whenever anything is committed to the store, by this process or
        another (another process's commit may be seen a moment later: on PostgreSQL it arrives as a
        notification). Only comparable between calls on the same store object (from any thread)."""

    # ---- announcements

    @abstractmethod
    def claim_announcements(self, limit: int, at: datetime, until: datetime) -> list[PendingDecision]:
        """Claim the decisions owed (as :meth:`pending_decisions` lists them) that are not announced,
        whose announcement did not fail, and that no claim holds at ``at`` (UTC), oldest first, at
        most ``limit``: mark each claimed until ``until`` (UTC) and return them, in one transaction
        as the store's only writer, so of claimers racing on one store each pause goes to one of
        them (``worker --on-pause``). A claim that is not settled by ``until`` (its claimer died)
        lets the next claimer take the pause. Opens that transaction itself (``RuntimeError`` when
        one is open). When nothing is to be claimed (each poll, mostly), it reads an index of the
        unannounced pauses alone (no row when every pause is announced), takes no lock and writes
        nothing. Raises :class:`StoreReadOnly`."""

    @abstractmethod
    def settle_announcement(self, checkpoint_id: int, until: datetime, outcome: str, at: datetime) -> bool:
        """End the claim on checkpoint ``checkpoint_id`` made until ``until`` (the claim's expiry
        names it), as ``outcome`` says (an :class:`~relaypoint.status.AnnouncementOutcome`):
        ``announced`` marks the pause announced at ``at`` (UTC), ``failed`` marks its announcement
        failed at ``at`` (no claimer takes it until :meth:`reopen_announcement`), ``released`` makes it
        claimable at once. Returns False, nothing written, when the claim is no longer the pause's
        (expired and claimed again, or reopened). Opens its own transaction, as
        :meth:`claim_announcements`. Raises :class:`StoreReadOnly`."""

    @abstractmethod
    def reopen_announcement(self, checkpoint_id: int) -> None:
        """Make checkpoint ``checkpoint_id`` claimable for announcement again, at once, whatever
        became of its announcements: not announced, not failed, not claimed
        (``relaypoint announce``). A write: inside :meth:`transaction`."""

    # ---- writes (inside transaction())

    @abstractmethod
    def insert_run(self, run: NewRun) -> None:
        """Insert a run (its updated_at is its created_at). Raises :class:`StoreError` when the id exists."""

    @abstractmethod
    def insert_steps(self, run_id: str, steps: Iterable[NewStep]) -> None:
        """Insert step executions."""

    @abstractmethod
    def replace_steps(self, run_id: str, steps: list[NewStep]) -> list[str]:
        """Rebuild the run's top-level chain (allowed drift) from ``steps`` (seq 0..n-1): each new
        step whose name was recorded keeps its recorded status, attempts, times, idempotency key and
        output; others are fresh. The children of a kept step move with it: ``parent`` its new seq,
        their own seqs shifted by (new count - recorded count of top-level steps), so they stay
        after every top-level step in the same order, with their outputs. Checkpoints follow the
        executions at their ``seq`` and ``paused_seq``; either at no kept execution (a dropped one,
        a position past the last) becomes ``-1 - seq``, naming none. Returns the names of recorded
        top-level steps dropped (their outputs and children go with them)."""

    @abstractmethod
    def update_run(self, run_id: str, *, fence: str | None = None, **fields: Any) -> bool:
        """Set fields of a run: status, updated_at, current_step, steps_done, steps_total, error,
        lease (a :class:`Lease` sets the lease columns, None clears them), definition (JSON text),
        fingerprint, suspect_deaths. With ``fence`` (a lease token) applies only while that token
        owns the run. Returns False when nothing was updated (fence refused, or no such run).
        Raises ``TypeError`` for an unknown field."""

    @abstractmethod
    def update_step(self, run_id: str, seq: int, **fields: Any) -> None:
        """Set fields of one execution: status, attempts, error, traceback, started_at, finished_at.
        Raises ``TypeError`` for an unknown field."""

    @abstractmethod
    def set_output(self, run_id: str, seq: int, json_text: str) -> None:
        """Record (or replace) an execution's output, given as JSON text."""

    @abstractmethod
    def add_checkpoint(self, checkpoint: NewCheckpoint) -> int:
        """Insert a checkpoint; returns its id (ids grow with time)."""

    @abstractmethod
    def decide(self, checkpoint_id: int, decision: str, by: str, at: datetime, comment: str | None = None,
               value_json: str | None = None) -> bool:
        """Record the decision of an undecided checkpoint, once. Returns False (nothing written) when
        it was already decided."""

    @abstractmethod
    def close_pauses(self, run_id: str, decision: str, by: str, at: datetime) -> int:
        """Decide every undecided pausing checkpoint of the run (e.g. cancelled); returns how many."""

    @abstractmethod
    def add_event(self, run_id: str, at: datetime, kind: str, *, step: str | None = None,
                  actor: str | None = None, **detail: Any) -> None:
        """Append an audit event; ``detail`` (JSON-able) is stored with it."""

    @abstractmethod
    def cancel_open_steps(self, run_id: str, at: datetime) -> None:
        """Mark every open execution (:data:`~relaypoint.status.OPEN_STEPS`: pending, running,
        awaiting input or approval, interrupted) cancelled, finished at ``at`` unless it already had
        a finish time."""

    # ---- the hot path

    @abstractmethod
    def commit_boundary(self, boundary: Boundary) -> BoundaryResult:
        """Commit one step boundary in its own transaction, with a number of statements that does
        not depend on the length of the run: the run update (fenced first), the ended execution
        and its output, the started execution, the checkpoint, the events.

        Raises ``relaypoint.errors.LeaseLost`` (nothing written) when ``boundary.fence`` no longer
        owns the run; :class:`StoreReadOnly`, :class:`StoreBusy`, :class:`StoreFull` as
        :meth:`transaction`. Must not be called inside :meth:`transaction`."""

    @abstractmethod
    def start_run(self, run: NewRun, steps: Sequence[NewStep], start: NewCheckpoint,
                  boundary: Boundary) -> BoundaryResult:
        """Record a new run and its first boundary in one transaction: the run's row (with its input
        and definition, see :meth:`insert_run`), its planned executions ``steps``, its ``start``
        checkpoint, then what ``boundary`` writes (see :meth:`commit_boundary`; fenced on the lease
        the new run is inserted with). On PostgreSQL this is one round trip to the server.

        Raises :class:`StoreError` when the run id exists (nothing written); :class:`StoreReadOnly`,
        :class:`StoreBusy`, :class:`StoreFull` as :meth:`transaction`. Must not be called inside
        :meth:`transaction`."""

    # ---- helpers shared by backends

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
