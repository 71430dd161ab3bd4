"""The storage contract: :class:`RunStore` (its writes in :mod:`.writes`), and the errors it raises.

Everything outside ``relaypoint.store`` reads and writes runs through these methods; only a backend
module speaks SQL. Conventions shared by every method:

- Times are aware UTC :class:`~datetime.datetime` values, going in and coming out.
- JSON values go in as already-encoded JSON *text* (the caller encodes with
  :mod:`relaypoint.encoding`, so an unstorable value is refused naming its path) and come out
  decoded. Reads for display are lenient (damage reads ``{"unreadable": <raw text>}``); reads of
  what a step will consume are strict and raise :class:`StoreDamaged` naming what is damaged.
- A backend's own exceptions never leave a method: they are translated to the :class:`StoreError`
  subclasses below (each message one line a person can act on).
- Every write is one :class:`~relaypoint.store.writes.Change`, committed by :meth:`RunStore.commit`.
"""

from __future__ import annotations

from abc import abstractmethod
import json
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, NamedTuple

from ..errors import InvalidValue, RefusedTransition, StoreError
from ..models import Checkpoint, Event, OwnedRun, Owner, PendingDecision, RunHead, RunSummary, StepRecord
from ..status import RunStatus, StepStatus
from .writes import RunWrites

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


# ---- read models ---------------------------------------------------------------------------------


class StepBrief(NamedTuple):
    """What starting an execution needs of its row (:meth:`RunStore.step_brief`)."""

    name: str
    status: StepStatus
    attempts: int
    idempotency_key: str


# ---- a run's raw rows, for copying between stores ------------------------------------------------

# The state and comment RunStore.inherit_approval writes (both backends write the same text).
_INHERITED_STATE = re.compile(r'\{"inherited_from":\{"run_id":(".*"),"checkpoint_id":(\d+)\}\}')
_INHERITED_COMMENT = re.compile(r"inherited from checkpoint (\d+) of run ")


@dataclass(frozen=True)
class RunRows:
    """Everything a store holds of one run, as raw backend-neutral values, to copy it to another
    store (:meth:`RunStore.export_runs`, :meth:`RunStore.import_runs`).

    Each row is a dict of the columns named by :data:`~.schema.RUN_ROW`, :data:`~.schema.STEP_ROW`, :data:`~.schema.OUTPUT_ROW`,
    :data:`~.schema.CHECKPOINT_ROW`, :data:`~.schema.EVENT_ROW`: times are aware UTC datetimes (milliseconds), JSON
    values the stored text, never decoded. ``input``/``definition``: the stored JSON text (None when
    the store has none). ``steps``, ``outputs`` in ``seq`` order; ``checkpoints``, ``events`` in id
    order. ``parent_checkpoints``: the ids of the parent run's checkpoints in the source store, in
    order ([] for a run that is no fork): a copy that renumbers the parent's checkpoints maps the
    references to them (an inherited approval's origin) by their position."""

    run: dict[str, Any]
    input: str | None
    definition: str | None
    steps: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    events: list[dict[str, Any]]
    parent_checkpoints: list[int] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run["run_id"]

    def counts(self) -> dict[str, int]:
        """Rows per table of :data:`~.schema.COPIED_TABLES` this run has (what :meth:`RunStore.row_counts`
        must find once it is imported)."""
        return {"runs": 1, "run_inputs": int(self.input is not None), "steps": len(self.steps),
                "outputs": len(self.outputs), "checkpoints": len(self.checkpoints), "events": len(self.events)}

    def renumbered(self, checkpoints: Mapping[int, int], events: Mapping[int, int],
                   parent: Mapping[int, int]) -> RunRows:
        """These rows with new ids: ``checkpoints``/``events`` map this run's old ids to new ones
        (ids not in them are kept), ``parent`` maps the parent run's checkpoint ids. Every reference
        follows: an event's ``checkpoint_id`` (this run's) and ``parent_checkpoint_id`` (the
        parent's), an inherited approval's ``state`` and ``comment`` (the parent's). Text holding
        no changed id is kept byte for byte."""
        if not any(k != v for m in (checkpoints, events, parent) for k, v in m.items()):
            return self
        cps = [{**c, "checkpoint_id": checkpoints.get(c["checkpoint_id"], c["checkpoint_id"]),
                **_inherited(c, self.run["parent_run_id"], parent)} for c in self.checkpoints]
        evs = [{**e, "event_id": events.get(e["event_id"], e["event_id"]),
                "detail": _detail_renumbered(e["detail"], checkpoints, parent)} for e in self.events]
        return RunRows(run=self.run, input=self.input, definition=self.definition, steps=self.steps,
                       outputs=self.outputs, checkpoints=cps, events=evs, parent_checkpoints=self.parent_checkpoints)


def _inherited(c: dict[str, Any], parent_run: str | None, parent: Mapping[int, int]) -> dict[str, Any]:
    """The ``state`` and ``comment`` of an inherited approval naming the parent's checkpoint by its
    new id ({} when ``c`` is no inherited approval of ``parent_run`` or its origin keeps its id)."""
    m = _INHERITED_STATE.fullmatch(c["state"] or "")
    if m is None or parent_run is None or json.loads(m.group(1)) != parent_run:
        return {}
    old = int(m.group(2))
    new = parent.get(old, old)
    if new == old:
        return {}
    changed = {"state": f'{{"inherited_from":{{"run_id":{m.group(1)},"checkpoint_id":{new}}}}}'}
    comment = c["comment"] or ""
    if (cm := _INHERITED_COMMENT.match(comment)) is not None and int(cm.group(1)) == old:
        changed["comment"] = f"inherited from checkpoint {new} of run {comment[cm.end():]}"
    return changed


def _detail_renumbered(text: str | None, checkpoints: Mapping[int, int], parent: Mapping[int, int]) -> str | None:
    """An event's detail with its ``checkpoint_id`` and ``parent_checkpoint_id`` mapped; the text
    unchanged when neither changes (or it is not a JSON object)."""
    if not text or "checkpoint_id" not in text:
        return text
    try:
        detail = json.loads(text)
    except ValueError:
        return text
    if not isinstance(detail, dict):
        return text
    changed = False
    for key, ids in (("checkpoint_id", checkpoints), ("parent_checkpoint_id", parent)):
        old = detail.get(key)
        if isinstance(old, int) and not isinstance(old, bool) and ids.get(old, old) != old:
            detail[key] = ids[old]
            changed = True
    # Both backends write an event's detail as json.dumps(detail, ensure_ascii=False).
    return json.dumps(detail, ensure_ascii=False) if changed else text


def renumbered_batch(batch: Sequence[RunRows], shift: Mapping[str, int], held: Callable[[str, list[int]], set[int]],
                     allocate: Callable[[str, int], list[int]],
                     parent_ids: Callable[[list[str]], dict[str, list[int]]]) -> list[RunRows]:
    """A batch of runs to import, renumbered as :meth:`RunStore.import_runs` says, by three
    queries of the destination: ``held(table, ids)`` (which of ``ids`` the table holds, table
    "checkpoints" or "events"), ``allocate(table, count)`` (``count`` new ids in increasing order,
    above every id the table holds or gave), ``parent_ids(run_ids)`` (each run's checkpoint ids in
    order). ``shift``: what each table's ids move up by (a table left out: 0). A parent in the same
    batch is matched through its own map."""
    moved: dict[str, dict[int, int]] = {}  # table -> old id -> new id, the whole batch's
    for table, key in (("checkpoints", "checkpoint_id"), ("events", "event_id")):
        old = sorted(x[key] for r in batch for x in getattr(r, table))
        new = [i + shift.get(table, 0) for i in old]
        if old and held(table, new):  # taken meanwhile by another writer: above every id there, in order
            new = allocate(table, len(old))
        moved[table] = dict(zip(old, new))

    def own(r: RunRows, table: str, key: str) -> dict[int, int]:
        return {x[key]: moved[table][x[key]] for x in getattr(r, table)}

    by_id = {r.run_id: r for r in batch}
    elsewhere = [r.run["parent_run_id"] for r in batch if r.parent_checkpoints and r.run["parent_run_id"] not in by_id]
    found = parent_ids(elsewhere) if elsewhere else {}
    out = []
    for r in batch:
        parent: dict[int, int] = {}
        pid = r.run["parent_run_id"]
        if pid in by_id:
            parent = own(by_id[pid], "checkpoints", "checkpoint_id")
        elif r.parent_checkpoints and len(found.get(pid, [])) == len(r.parent_checkpoints):
            parent = dict(zip(r.parent_checkpoints, found[pid]))  # else the parent is not (all) here: kept as is
        out.append(r.renumbered(own(r, "checkpoints", "checkpoint_id"), own(r, "events", "event_id"), parent))
    return out


# ---- the contract -------------------------------------------------------------------------------


class RunStore(RunWrites):
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

    def grant(self, role: str, *, writes: bool) -> None:
        """Let the database role ``role`` use this store: read it, and with ``writes`` record in it
        (every command and the worker), now and after later migrations by this user. Only a store
        on a database server has roles: here it raises :class:`InvalidValue` (a SQLite store is
        guarded by its file's permissions)."""
        raise InvalidValue(f"roles belong to a database server; {self.where} is a SQLite file, guarded by its "
                           "file permissions")

    @abstractmethod
    def data_version(self) -> Hashable:
        """A value that changes whenever anything is committed to the store, by this process or
        another (another process's commit may be seen a moment later: on PostgreSQL it arrives as a
        notification). Only comparable between calls on the same store object (from any thread)."""

    # ---- reads: runs

    @abstractmethod
    def resolve(self, run_id: str) -> str:
        """The full run id for a full id or a unique prefix. Raises ``UnknownRun`` for an empty id,
        no match, or a prefix matching several runs (the message names up to two)."""

    @abstractmethod
    def exists(self, run_id: str) -> bool:
        """True when a run with exactly this id is in the store."""

    @abstractmethod
    def run(self, run_id: str) -> RunHead:
        """The run's own row (input and definition lenient). Raises ``UnknownRun``;
        :class:`StoreDamaged` when the row cannot be read (status outside the vocabulary, time)."""

    @abstractmethod
    def run_input(self, run_id: str) -> dict[str, Any]:
        """The run's input, strictly decoded ({} when null). Raises ``UnknownRun``,
        :class:`StoreDamaged` (not valid JSON)."""

    @abstractmethod
    def run_definition(self, run_id: str) -> Any:
        """The run's recorded definition, strictly decoded (None when none). Raises ``UnknownRun``,
        :class:`StoreDamaged`."""

    @abstractmethod
    def owner_of(self, run_id: str) -> Owner | None:
        """The process whose lease holds the run when its status is running, else None. Reads only
        the status and lease columns, so a run damaged elsewhere can still be checked (and deleted).
        Raises ``UnknownRun``."""

    @abstractmethod
    def list_runs(self, *, status: str | None = None, workflow: str | None = None, limit: int = 100,
                  before: tuple[str, str] | None = None, after: tuple[str, str] | None = None,
                  within: tuple[tuple[str, str], tuple[str, str]] | None = None, oldest_first: bool = False,
                  search: str | None = None) -> list[RunSummary]:
        """A page of runs, newest first (``oldest_first``: oldest first), at most ``limit``.

        Positions are (created_at store text, run_id). ``before``/``after``: only runs older/newer
        than that position (keyset paging: cost independent of the offset); ``within``: between two
        positions (newest, oldest), both included. ``search``: a run id prefix or a workflow name
        prefix. Reads the runs alone (never an output); a row damaged by hand is skipped."""

    @abstractmethod
    def count_by_status(self) -> dict[str, int]:
        """Number of runs per status (statuses with none left out), in time independent of the
        number of runs."""

    @abstractmethod
    def forks(self, run_id: str) -> list[str]:
        """Ids of the runs forked from this one, oldest first."""

    @abstractmethod
    def running_owners(self) -> list[Owner]:
        """The distinct owner processes named by the leases of running runs."""

    @abstractmethod
    def owned_runs(self, owner: Owner) -> list[OwnedRun]:
        """The running runs whose lease names this owner process (host, pid, pid_start)."""

    @abstractmethod
    def runnable(self, workflows: Iterable[str], limit: int) -> list[tuple[str, RunStatus]]:
        """Up to ``limit`` (run id, status) of queued and interrupted runs of these workflows,
        least recently updated first."""

    @abstractmethod
    def prunable(self, statuses: Iterable[str], before: datetime) -> list[tuple[str, Owner | None]]:
        """(run id, owner) of runs in ``statuses`` last updated before ``before`` (UTC); the owner as
        :meth:`owner_of` gives it (None unless running)."""

    # ---- reads: steps and outputs

    @abstractmethod
    def steps(self, run_id: str) -> list[StepRecord]:
        """The run's step executions in tree order, without outputs (``has_output`` set): top-level
        executions in ``seq`` order, each followed by its children in ``seq`` order."""

    @abstractmethod
    def step(self, run_id: str, seq: int) -> StepRecord | None:
        """One execution (without output), or None."""

    @abstractmethod
    def step_named(self, run_id: str, name: str) -> StepRecord | None:
        """The top-level execution (no parent) named ``name`` with the highest iteration, or None."""

    @abstractmethod
    def step_output(self, run_id: str, seq: int) -> Any:
        """The execution's output decoded leniently for display (None when it has none)."""

    @abstractmethod
    def output_of(self, run_id: str, name: str) -> tuple[bool, Any]:
        """(True, output) of the latest completed top-level execution named ``name``, strictly
        decoded; (False, None) when there is none. Raises :class:`StoreDamaged`."""

    # ---- reads: checkpoints and events

    @abstractmethod
    def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        """The run's newest checkpoint of any kind, or None."""

    @abstractmethod
    def pending_checkpoint(self, run_id: str) -> Checkpoint | None:
        """The newest pausing checkpoint (approval, input, orphan) still undecided, or None. A
        decision outside the vocabulary reads as undecided (never taken as an approval)."""

    @abstractmethod
    def last_pause(self, run_id: str) -> Checkpoint | None:
        """The newest pausing checkpoint, decided or not, or None."""

    @abstractmethod
    def fork_checkpoint(self, run_id: str) -> Checkpoint | None:
        """The checkpoint a fork was made with (kind ``fork``: its ``state`` names the parent, the
        step and, for a fork from an iteration of a pattern, the iteration under ``"fork"``), or
        None for a run that is no fork."""

    @abstractmethod
    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """All of the run's checkpoints, oldest first."""

    @abstractmethod
    def responses(self, run_id: str, seq: int) -> list[Any]:
        """The answers recorded to execution ``seq``'s input requests (the input pauses whose
        ``paused_seq`` is ``seq``), in the order asked, strictly decoded. Raises :class:`StoreDamaged`."""

    @abstractmethod
    def latest_approval(self, run_id: str, seq: int) -> Checkpoint | None:
        """The newest approval checkpoint of execution ``seq`` (its ``paused_seq``; decided or not),
        or None."""

    @abstractmethod
    def due_pauses(self, now: datetime) -> list[Checkpoint]:
        """Undecided checkpoints whose deadline is at or before ``now`` (UTC)."""

    @abstractmethod
    def pending_decisions(self, limit: int) -> list[PendingDecision]:
        """The decisions owed across all runs, oldest first (by checkpoint id), at most ``limit``: for
        each paused run (awaiting_approval, awaiting_input), its newest undecided pausing checkpoint.
        Reads the paused runs through the status index; never reads outputs."""

    @abstractmethod
    def events(self, run_id: str) -> list[Event]:
        """The run's audit trail, oldest first (detail decoded leniently)."""

    @abstractmethod
    def delete_runs(self, run_ids: Iterable[str]) -> None:
        """Delete runs with everything of them (steps, outputs, checkpoints, events)."""

    @abstractmethod
    def copy_for_fork(self, parent: str, child: str, cut_seq: int, children_before: int | None = None) -> None:
        """Copy the parent's executions into the child (which must exist), keeping their seqs:
        top-level executions before ``cut_seq`` as recorded, with all their children, and their
        outputs as stored text (never decoded); with ``children_before``, also the children of
        execution ``cut_seq`` whose seq is below it (a fork inside a pattern); top-level executions
        from ``cut_seq`` on pending, attempts 0, no output, with the child's idempotency keys."""

    @abstractmethod
    def inherit_approval(self, parent_checkpoint_id: int, child: str, at: datetime) -> int:
        """Copy a decided approval checkpoint into ``child`` (created at ``at``, the decision keeping
        its author and time, the comment naming where it came from, ``state`` naming the origin);
        returns the new checkpoint's id."""

    # ---- copying between stores

    @abstractmethod
    def run_page(self, after: tuple[Any, str] | None, limit: int) -> list[tuple[Any, str]]:
        """Positions (created_at as the backend keeps it, run_id) of up to ``limit`` runs, oldest
        first, after the position ``after`` (None: from the first): every run, damaged or not, so a
        copy misses none; a fork comes after its parent. Positions are opaque to the caller."""

    @abstractmethod
    def existing(self, run_ids: Sequence[str]) -> list[str]:
        """Which of ``run_ids`` (exact ids) the store holds, in no particular order."""

    @abstractmethod
    def export_runs(self, run_ids: Sequence[str]) -> list[RunRows]:
        """The raw rows of these runs (ids not in the store are left out), read as one consistent
        snapshot: a run being written meanwhile is read as of one instant. Must not be called inside
        :meth:`transaction`. Raises :class:`StoreDamaged` naming a run whose times cannot be read."""

    @abstractmethod
    def copied_ids(self, table: str, run_ids: Sequence[str]) -> list[int]:
        """The ids of these runs' rows of ``table`` ("checkpoints" or "events"), in no particular
        order: what a copy of the runs to another store numbers."""

    @abstractmethod
    def held_ids(self, table: str, ids: Sequence[int]) -> set[int]:
        """Which of ``ids`` the store's ``table`` ("checkpoints" or "events") holds."""

    @abstractmethod
    def make_room(self, table: str, top: int, renumber: bool) -> int:
        """Room for ids of ``table`` ("checkpoints" or "events") up to ``top`` copied in from another
        store, kept as they are (returns 0) or, with ``renumber``, moved above every id this store
        holds or has given (returns what is added to each: their order is kept). On PostgreSQL the
        identity moves past the room, so the ids the store gives later (another writer's, while
        the copy goes on) are above it; SQLite gives max + 1, and :meth:`import_runs` renumbers a
        batch holding an id taken meanwhile."""

    @abstractmethod
    def import_runs(self, batch: Sequence[RunRows], shift: Mapping[str, int] | None = None) -> None:
        """Insert runs exported from another store (inside :meth:`transaction`), values as given, a
        fork after its parent. Every checkpoint id moves up by ``shift["checkpoints"]`` and every
        event id by ``shift["events"]`` (see :meth:`make_room`; None or a table left out: kept),
        every reference following (an event's checkpoint, an inherited approval's origin; see
        :func:`renumbered_batch`); a batch holding an id the store holds by then (another writer's)
        is numbered above every id there instead, in the same order. Raises :class:`StoreError`
        when the store already holds one of the runs (nothing imported)."""

    @abstractmethod
    def row_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """Rows per table of :data:`~.schema.COPIED_TABLES` that these runs have in the store."""

    # ---- helpers shared by backends

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- added for the engine

    @abstractmethod
    def max_seq(self, run_id: str) -> int:
        """The highest ``seq`` of the run's executions (-1 when it has none): where a driver's
        appended execution goes. Read once per claim, and only when an execution is appended."""

    def head(self, run_id: str) -> RunHead:
        """The run's own row without its input and definition (both None): what a claim reads, in
        time independent of the definition's size. Raises as :meth:`run`. Backends should
        override this default, which reads them."""
        return self.run(run_id).model_copy(update={"input": None, "definition": None})

    def step_brief(self, run_id: str, seq: int) -> StepBrief | None:
        """Execution ``seq``'s name, status, attempts and key, or None: what a resumed run reads
        at each boundary, without building a :class:`StepRecord`. Raises :class:`StoreDamaged` for
        a status outside the vocabulary. Backends should override this default, which reads the row."""
        s = self.step(run_id, seq)
        return None if s is None else StepBrief(s.name, s.status, s.attempts, s.idempotency_key)

    def definition_text(self, run_id: str) -> str:
        """The run's recorded definition as stored JSON text, never decoded (a fork copies it).
        Raises ``UnknownRun``, :class:`StoreDamaged`. Backends should override this default."""
        from .. import encoding

        return encoding.dumps(self.run_definition(run_id), "definition")

    def open_before(self, run_id: str, seq: int) -> StepRecord | None:
        """The first top-level execution before ``seq`` that has not completed, or None (a fork
        reuses the outputs before its cut). Backends should override this default, which reads
        every step."""
        return next((s for s in self.steps(run_id) if s.seq < seq and s.parent is None
                     and s.status != StepStatus.COMPLETED), None)

    def gates_before(self, run_id: str, seq: int) -> list[StepRecord]:
        """The top-level executions before ``seq`` whose options ask for approval, in order (the
        gates a fork carries over). Backends should override this default, which reads every step."""
        return [s for s in self.steps(run_id) if s.seq < seq and s.parent is None and s.options.get("approval")]

    # ---- added for patterns

    @abstractmethod
    def children(self, run_id: str, parent_seq: int) -> list[StepRecord]:
        """The executions whose parent is ``parent_seq`` (a pattern's agent calls and decisions,
        which carry its name), in seq order, without outputs (``has_output`` set); [] when none."""

    @abstractmethod
    def history(self, run_id: str, parent_seq: int) -> list[StepRecord]:
        """The completed children of ``parent_seq`` in seq order, each with its ``output`` strictly
        decoded (what a pattern's next call and its finisher consume). Raises :class:`StoreDamaged`
        naming the execution whose output cannot be read."""

    @abstractmethod
    def checkpoint_at(self, run_id: str, seq: int) -> Checkpoint | None:
        """The earliest start, boundary or fork checkpoint whose ``seq`` is ``seq``: the driver
        state at the boundary that started execution ``seq`` (a fork inside a pattern resumes from
        it), or None. Its ``state`` is decoded strictly: raises :class:`StoreDamaged` naming the
        checkpoint when it cannot be read."""
