"""The read half of the storage contract: :class:`RunReads`, what a store answers about runs, their
executions, checkpoints and events, and the small types its methods take and give.

Reads never write and may run outside a transaction; inside one they see its writes. JSON values
come out decoded: leniently for display (damage reads ``{"unreadable": <raw text>}``), strictly
for what a step will consume (damage raises :class:`~relaypoint.store.base.StoreDamaged` naming it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, NamedTuple

from ..models import CallRecord, Checkpoint, Event, Owner, PendingDecision, RunHead, RunSummary, StepRecord
from ..status import RunStatus, StepStatus
from ..usage import Usage


class Lookup(StrEnum):
    """Which one checkpoint of a run :meth:`RunReads.checkpoint` reads."""

    LATEST = "latest"
    """The newest checkpoint of any kind."""
    PENDING = "pending"
    """The newest pausing checkpoint (approval, input, orphan) still undecided. A decision outside
    the vocabulary reads as undecided (never taken as an approval)."""
    LAST_PAUSE = "last_pause"
    """The newest pausing checkpoint, decided or not."""
    FORK = "fork"
    """The checkpoint a fork was made with (kind ``fork``: its ``state`` names the parent, the step
    and, for a fork from an iteration of a pattern, the iteration under ``"fork"``)."""
    APPROVAL = "approval"
    """The newest approval checkpoint of execution ``seq`` (its ``paused_seq``), decided or not."""
    STATE_AT = "state_at"
    """The earliest start, boundary or fork checkpoint whose ``seq`` is ``seq``: the driver state at
    the boundary that started execution ``seq`` (a fork inside a pattern resumes from it). Its
    ``state`` is decoded strictly."""


class StepBrief(NamedTuple):
    """What starting an execution needs of its row (:meth:`RunReads.step_brief`)."""

    name: str
    status: StepStatus
    attempts: int
    idempotency_key: str


class RunState(NamedTuple):
    """A run as :meth:`RunReads.runs_in` lists it: its id, status and, when it is running, the
    process its lease names and the lease's token (the fence), else None for both."""

    run_id: str
    status: RunStatus
    owner: Owner | None
    token: str | None = None


class RunReads(ABC):
    """The reads of a :class:`~relaypoint.store.base.RunStore`. Unless a docstring says otherwise, a
    read of a run that is not in the store returns nothing (None, [] or {}) rather than raising."""

    # ---- runs

    @abstractmethod
    def resolve(self, run_id: str) -> str:
        """The full run id for a full id or a unique prefix. Raises ``UnknownRun`` for an empty id,
        no match, or a prefix matching several runs (the message names up to two)."""

    @abstractmethod
    def existing(self, run_ids: Sequence[str]) -> list[str]:
        """Which of ``run_ids`` (exact ids) the store holds, in no particular order."""

    def exists(self, run_id: str) -> bool:
        """True when a run with exactly this id is in the store."""
        return bool(self.existing([run_id]))

    @abstractmethod
    def run(self, run_id: str, *, documents: bool = True) -> RunHead:
        """The run's own row, its input and definition decoded leniently; without ``documents``,
        both None and neither read (what a claim reads, in time independent of the definition's
        size). Raises ``UnknownRun``; :class:`StoreDamaged` when the row cannot be read (status
        outside the vocabulary, time)."""

    @abstractmethod
    def run_document(self, run_id: str, name: Literal["input", "definition"], *, text: bool = False) -> Any:
        """The run's input or recorded definition, strictly decoded: the input a dict ({} when
        null), the definition None when there is none. With ``text``: as stored JSON text, never
        decoded ("null" when there is none; a fork copies it). Raises ``UnknownRun``,
        :class:`StoreDamaged` (not valid JSON, an input that is not an object); ``ValueError`` for
        another ``name``."""

    @abstractmethod
    def list_runs(self, *, status: str | None = None, workflow: str | None = None, limit: int | None = 100,
                  before: tuple[str, str] | None = None, after: tuple[str, str] | None = None,
                  within: tuple[tuple[str, str], tuple[str, str]] | None = None, oldest_first: bool = False,
                  search: str | None = None, parent: str | None = None) -> list[RunSummary]:
        """A page of runs, newest first (``oldest_first``: oldest first), at most ``limit`` (None:
        every one).

        Positions are (created_at store text, run_id). ``before``/``after``: only runs older/newer
        than that position (keyset paging: cost independent of the offset); ``within``: between two
        positions (newest, oldest), both included. ``search``: a run id prefix or a workflow name
        prefix. ``parent``: only the runs forked from that run (read through its forks' index).
        Reads the runs alone (never an output); a row damaged by hand is skipped."""

    @abstractmethod
    def count_by_status(self) -> dict[str, int]:
        """Number of runs per status (statuses with none left out), in time independent of the
        number of runs."""

    @abstractmethod
    def runs_in(self, statuses: Iterable[str], *, run_ids: Sequence[str] | None = None,
                workflows: Iterable[str] | None = None, owner: Owner | None = None,
                updated_before: datetime | None = None, limit: int | None = None) -> list[RunState]:
        """The runs in ``statuses``, among ``run_ids`` (exact ids; None: any), of ``workflows``
        (None: any), whose lease names ``owner`` (host, pid, pid_start; None: any), last updated
        before ``updated_before`` (UTC; None: whenever): with ``limit``, at most that many, least
        recently updated first (a worker's candidates); without, all of them in no particular
        order (what retention prunes, what recovery sweeps). Reads the status and lease columns
        alone, so a run damaged elsewhere is still listed."""

    # ---- executions and outputs

    @abstractmethod
    def steps(self, run_id: str, *, parent: int | None = None, before: int | None = None,
              outputs: bool = False) -> list[StepRecord]:
        """The run's executions without outputs (``has_output`` set). By default all of them in tree
        order: top-level executions in ``seq`` order, each followed by its children in ``seq``
        order. With ``parent``: the children of execution ``parent`` (a pattern's calls and
        decisions, which carry its name) in ``seq`` order, read by the group's name; with
        ``outputs`` as well, only the completed ones, each with its ``output`` strictly decoded
        (what a pattern's next call and its finisher consume: :class:`StoreDamaged` names an
        execution whose output cannot be read). With ``before``: of the top-level executions before
        that ``seq``, in order, those a fork looks at: each not completed, and each whose options
        ask for approval (:func:`~relaypoint.store.rows.asks_approval`: the gates). Raises ``ValueError`` for ``parent`` with
        ``before``, or ``outputs`` without ``parent``."""

    @abstractmethod
    def step(self, run_id: str, seq: int | None = None, *, name: str | None = None) -> StepRecord | None:
        """One execution without output, or None: execution ``seq``, or the top-level execution
        (no parent) named ``name`` with the highest iteration, or with neither the run's last
        execution (the highest ``seq``: where a driver's appended execution goes after it). Raises
        ``ValueError`` when both ``seq`` and ``name`` are given."""

    @abstractmethod
    def step_brief(self, run_id: str, seq: int) -> StepBrief | None:
        """Execution ``seq``'s name, status, attempts and key, or None: what a resumed run reads
        at each boundary, without building a :class:`StepRecord`. Raises :class:`StoreDamaged` for
        a status outside the vocabulary."""

    @abstractmethod
    def output(self, run_id: str, seq: int | None = None, *, name: str | None = None) -> tuple[bool, Any]:
        """(True, output) of one execution, (False, None) when it has none: execution ``seq``'s,
        decoded leniently for display; or, by ``name``, the latest completed top-level execution's
        of that name, strictly decoded (what a step consumes: raises :class:`StoreDamaged`). Raises
        ``ValueError`` unless exactly one of ``seq`` and ``name`` is given."""

    @abstractmethod
    def calls(self, run_id: str, seq: int | None = None, *, strict: bool = False) -> list[CallRecord]:
        """The calls the run's executions recorded, in (``seq``, ``position``) order; with ``seq``,
        execution ``seq``'s alone (read by its key). Values are decoded leniently for display, or
        with ``strict`` as a step consumes them (:class:`StoreDamaged` names a call whose result
        cannot be read)."""

    @abstractmethod
    def usage(self, run_ids: Sequence[str]) -> dict[str, Usage]:
        """Each of ``run_ids``' token usage (requests, input and output tokens summed over the
        recorded calls it made itself, see :func:`relaypoint.usage.own`; no cost: prices are the
        run's, see :mod:`relaypoint.usage`), in one grouped query per 500 runs through the calls'
        key; a run without model requests of its own is left out."""

    # ---- checkpoints and events

    @abstractmethod
    def checkpoint(self, run_id: str, lookup: Lookup, seq: int | None = None) -> Checkpoint | None:
        """The run's one checkpoint that ``lookup`` names (see :class:`Lookup`; ``seq`` for
        ``APPROVAL`` and ``STATE_AT``), or None. ``STATE_AT`` raises :class:`StoreDamaged` naming the
        checkpoint whose state cannot be read; ``ValueError`` when ``seq`` is missing or not wanted."""

    @abstractmethod
    def checkpoints(self, run_id: str | None = None, *, due: datetime | None = None) -> list[Checkpoint]:
        """All of the run's checkpoints, oldest first; or with ``due`` (UTC) instead of a run, the
        undecided checkpoints of every run whose deadline is at or before it, oldest first (read
        through the deadlines' index). Raises ``ValueError`` unless exactly one is given."""

    @abstractmethod
    def responses(self, run_id: str, seq: int) -> list[Any]:
        """The answers recorded to execution ``seq``'s input requests (the input pauses whose
        ``paused_seq`` is ``seq``), in the order asked, strictly decoded. Raises :class:`StoreDamaged`."""

    @abstractmethod
    def pending_decisions(self, limit: int) -> list[PendingDecision]:
        """The decisions owed across all runs, oldest first (by checkpoint id), at most ``limit``: for
        each paused run (awaiting_approval, awaiting_input), its newest undecided pausing checkpoint.
        Reads the paused runs through the status index; never reads outputs."""

    @abstractmethod
    def events(self, run_id: str, *, limit: int | None = None) -> list[Event]:
        """The run's audit trail, oldest first (detail decoded leniently); ``limit``: only its first
        that many events (read through the run's events index)."""
