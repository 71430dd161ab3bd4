"""What the console reads from a store, as plain values built off the UI thread.

These functions run in thread workers, each with its own :class:`~relaypoint.Runtime`; they never
touch widgets. The runs list is read a page at a time and never reads outputs; a run's detail reads
its chain without outputs, and one output is read only when a step is selected.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from relaypoint.clock import to_text
from relaypoint.errors import UnknownRun, UnknownStep
from relaypoint.models import Event, Run, RunSummary, StepRecord
from relaypoint.runtime import Runtime

PAGE_SIZE = 50

RunKey = tuple[str, str]
"""Where a run sits in the newest-first listing: (created_at store text, run_id)."""


def run_key(run: RunSummary) -> RunKey:
    """The listing position of ``run`` (what ``Runtime.list(before=...)`` continues after)."""
    return (to_text(run.created_at), run.run_id)


@dataclass(frozen=True)
class RunQuery:
    """The runs list's filters: a status (None: all) and a run id / workflow prefix (None: all)."""

    status: str | None = None
    search: str | None = None


@dataclass(frozen=True)
class RunsPage:
    """Runs read for the list. ``boundary``: the listing position down to which ``runs`` is
    complete (None: the first page); ``more``: older runs exist beyond what was read."""

    query: RunQuery
    runs: list[RunSummary]
    boundary: RunKey | None
    more: bool


@dataclass(frozen=True)
class RunDetail:
    """A run with its chain (outputs not loaded), pending checkpoint, forks, and its events."""

    run: Run
    events: list[Event]


def refresh_runs(rt: Runtime, query: RunQuery, loaded: int, boundary: RunKey | None) -> RunsPage:
    """Re-read the part of the list already shown: every run from the newest down to ``boundary``
    (the oldest row shown), or the first page when nothing is shown yet."""
    limit = loaded + PAGE_SIZE + 1
    runs = rt.list(status=query.status, limit=limit, search=query.search)
    if boundary is None:
        return RunsPage(query, runs[:PAGE_SIZE], None, len(runs) > PAGE_SIZE)
    kept = [r for r in runs if run_key(r) >= boundary]
    return RunsPage(query, kept, boundary, len(kept) < len(runs) or len(runs) == limit)


def next_page(rt: Runtime, query: RunQuery, after: RunKey) -> RunsPage:
    """The page of runs older than ``after`` (keyset pagination)."""
    runs = rt.list(status=query.status, limit=PAGE_SIZE + 1, before=after, search=query.search)
    return RunsPage(query, runs[:PAGE_SIZE], None, len(runs) > PAGE_SIZE)


@dataclass(frozen=True)
class StoreState:
    """Counts of runs per status, and why the store is read-only (None: writable)."""

    counts: dict[str, int]
    readonly_reason: str | None


def store_state(rt: Runtime) -> StoreState:
    """Number of runs per status, and whether changes can be recorded."""
    return StoreState(rt.counts(), rt.readonly_reason)


def load_detail(rt: Runtime, run_id: str) -> RunDetail | None:
    """The run's header, chain without outputs, pending checkpoint, forks and events; None when
    the run no longer exists (deleted by another process)."""
    try:
        return RunDetail(rt.get(run_id, with_outputs=False), rt.events(run_id))
    except UnknownRun:
        return None


@dataclass(frozen=True)
class StepOutput:
    """One step's output as read while the run was at ``version`` (its ``updated_at``): any later
    change to the run may have changed it. ``value`` is meaningful only when ``recorded``."""

    run_id: str
    step: str
    version: datetime
    recorded: bool
    value: Any


def load_output(rt: Runtime, run: Run, step: StepRecord) -> StepOutput | None:
    """Read one step's output (only when the chain says one is recorded); None when the run or
    the step no longer exists (deleted, or the chain rebuilt by a drift-allowed resume)."""
    try:
        value = rt.step_output(run.run_id, step.name) if step.has_output else None
    except (UnknownRun, UnknownStep):
        return None
    return StepOutput(run.run_id, step.name, run.updated_at, step.has_output, value)

