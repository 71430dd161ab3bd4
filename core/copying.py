"""Copying runs from one store to another (``relaypoint copy``): SQLite to PostgreSQL to move a
local store to a team's server, and back, or between two stores of one backend.

Every run is copied whole, with its executions (a pattern's appended ones included), outputs,
checkpoints with their decisions and answers, input, definition and events, through the storage
contract (:meth:`RunStore.export_runs`, :meth:`RunStore.import_runs`): values as stored, times in
UTC milliseconds, JSON text byte for byte. Checkpoint ids are kept when the destination holds none
of those copied, else every one is renumbered above the destination's, in the same order, with
every reference (the review queue and deadlines go by checkpoint id); event ids alike, apart (see
:meth:`RunStore.make_room`, :meth:`RunStore.import_runs`).

The copy is refused, with nothing written, when the destination already holds any of the runs
(unless asked to skip them) or when a run is executing (its owner is alive by the rule of
:func:`~relaypoint.lease.owner_gone`, the one every command follows): a copy of a run
mid-execution would let both stores execute it. A destination not made yet is made only once
there is a run to write into it. Runs go over in batches, each one transaction of the destination
in which the rows written are counted against the rows read before it commits; an interrupted copy
leaves whole runs only. The source is only read. It is a copy, not a move: both stores hold the
runs afterwards, and workers should be pointed at one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from .clock import utcnow
from .errors import RelaypointError, StoreError
from .lease import owner_gone
from .status import RunStatus
from .store import RunStore
from .store.admin import RunRows
from .store.schema import COPIED_TABLES

NUMBERED = ("checkpoints", "events")
"""The tables whose ids a store gives, which a copy keeps or renumbers (see :meth:`RunStore.make_room`)."""
BATCH_RUNS = 200
"""Runs per batch: read as one snapshot of the source, written as one transaction of the destination."""
_NAMED = 3  # run ids a message names before "..."


class CopyRefused(RelaypointError):
    """The copy cannot be made as asked (runs already in the destination, runs executing); nothing
    more was written. The message says what to do."""


@dataclass
class CopyReport:
    """What :func:`copy_runs` did: ``runs`` copied, ``skipped`` (already in the destination, with
    ``skip_existing``), ``rows`` copied per table of :data:`~relaypoint.store.schema.COPIED_TABLES`,
    each batch's rows counted in the destination equal to those read from the source."""

    runs: int = 0
    skipped: int = 0
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COPIED_TABLES, 0))

    def summary(self, source: str, destination: str) -> str:
        """One line saying what was copied, e.g. ``copied 1,204 runs (35,112 steps, ...) from A to B;
        counts verified``."""
        r = self.rows
        parts = ", ".join(f"{r[t]:,} {t}" for t in ("steps", "outputs", "calls", "checkpoints", "events"))
        skipped = f"; {self.skipped:,} already there, skipped" if self.skipped else ""
        return (f"copied {self.runs:,} run{'s' if self.runs != 1 else ''} ({parts}) from {source} to {destination}"
                f"{skipped}; counts verified")


def _named(ids: list[str]) -> str:
    return ", ".join(ids[:_NAMED]) + (", ..." if len(ids) > _NAMED else "")


def _pages(store: RunStore, size: int) -> Iterator[list[str]]:
    """Every run id of ``store``, oldest first (a fork after its parent), ``size`` at a time."""
    after = None
    while page := store.run_page(after, size):
        yield [rid for _, rid in page]
        after = page[-1]


def _executing(rows: RunRows, now: datetime) -> bool:
    """Whether the run is running and its owner is not gone (:func:`~relaypoint.lease.owner_gone`)."""
    run = rows.run
    return run["status"] == RunStatus.RUNNING and not owner_gone(
        run["lease_host"], run["lease_pid"], run["lease_pid_start"], run["lease_expires_at"], now)


def copy_runs(source: RunStore, destination: RunStore | None, *, create: Callable[[], RunStore] | None = None,
              skip_existing: bool = False, batch: int = BATCH_RUNS, started: Callable[[int], None] = lambda total: None,
              progress: Callable[[int], None] = lambda runs: None) -> CopyReport:
    """Copy every run of ``source`` into ``destination`` (see the module's docstring).

    ``destination``: None when there is no store there yet; ``create()`` then makes it, right
    before the first batch is written (a refused copy, or one with nothing to copy, makes nothing).
    ``skip_existing``: copy only the runs the destination does not hold (else any of them there
    refuses the copy). ``batch``: runs per transaction. ``started(total)`` is called with the
    number of runs to copy before the first is written, ``progress(n)`` after each batch commits
    with the number of runs it copied. Returns a :class:`CopyReport`.

    Raises :class:`CopyRefused` (runs already in the destination, a run executing in the source,
    or a run that started executing during the copy: the batches committed before stay, whole),
    :class:`~relaypoint.errors.StoreError` from either store (a batch whose counts do not match is
    rolled back with a ``StoreError`` naming the table).
    """
    if destination is None and create is None:
        raise ValueError("copy_runs: give a destination store, or create to make one")

    def held_of(ids: list[str]) -> set[str]:
        return set(destination.existing(ids)) if destination is not None else set()

    # First pass, ids only: refuse before writing anything, and see whether the destination holds any
    # of the checkpoint and event ids to copy (then every one is renumbered, in order: see make_room).
    total, skipped, there = 0, 0, []
    top, clash = dict.fromkeys(NUMBERED, 0), dict.fromkeys(NUMBERED, False)
    for ids in _pages(source, batch):
        held = held_of(ids)
        total += len(ids)
        skipped += len(held)
        if len(there) <= _NAMED:
            there.extend(rid for rid in ids if rid in held)  # named in the copy's order
        for table in NUMBERED:
            numbered = source.held_ids(table, runs=[rid for rid in ids if rid not in held])
            top[table] = max(top[table], max(numbered, default=0))
            if numbered and destination is not None and not clash[table]:
                clash[table] = bool(destination.held_ids(table, numbered))
    if skipped and not skip_existing:
        raise CopyRefused(f"{destination.where} already holds {skipped:,} of the {total:,} runs to copy "
                          f"({_named(there)}); nothing was copied. Copy into a new store or schema, or pass "
                          "--skip-existing to copy only the others")
    now = utcnow()
    executing = sorted(r.run_id for r in source.runs_in([RunStatus.RUNNING]) if (o := r.owner) is not None
                       and not owner_gone(o.host, o.pid, o.pid_start, o.expires_at, now))
    if executing:
        raise CopyRefused(f"{len(executing)} run{'s are' if len(executing) > 1 else ' is'} executing in "
                          f"{source.where} ({_named(executing)}); a copy made mid-execution would let both stores "
                          "execute it. Let it finish or cancel it (a run whose process died is interrupted: on this "
                          "host at once, from another once its lease expires), then copy again; nothing was copied")
    report = CopyReport(skipped=skipped if skip_existing else 0)
    shift: dict[str, int] | None = None  # made room for once there is a batch to write
    started(total - report.skipped)
    for ids in _pages(source, batch):
        if skip_existing:
            held = held_of(ids)
            ids = [rid for rid in ids if rid not in held]
        bundles = source.export_runs(ids) if ids else []
        now = utcnow()
        if busy := [b.run_id for b in bundles if _executing(b, now)]:
            raise CopyRefused(f"run {busy[0]} started executing in {source.where} during the copy; "
                              f"{report.runs:,} runs were copied before it, whole. Let it finish, then copy the "
                              "rest with --skip-existing")
        if not bundles:
            continue
        expected = dict.fromkeys(COPIED_TABLES, 0)
        for b in bundles:
            for table, n in b.counts().items():
                expected[table] += n
        if destination is None:
            destination = create()
        if shift is None:
            shift = {table: destination.make_room(table, top[table], clash[table]) for table in NUMBERED}
        with destination.transaction():
            destination.import_runs(bundles, shift)
            found = destination.row_counts([b.run_id for b in bundles])
            if found != expected:  # rolled back with the batch
                wrong = next(t for t in COPIED_TABLES if found[t] != expected[t])
                raise StoreError(f"copying to {destination.where}: {found[wrong]:,} {wrong} rows written where "
                                 f"{expected[wrong]:,} were read; that batch was rolled back, "
                                 f"{report.runs:,} runs were copied before it")
        report.runs += len(bundles)
        for table, n in expected.items():
            report.rows[table] += n
        progress(len(bundles))
    return report
