"""What the console reads from a store, as plain values built off the UI thread.

These functions run in thread workers on the console's one long-lived connection
(:class:`StoreReader`); they never touch widgets. The runs list is a contiguous window of the
listing read a page at a time (keyset pages, at either end, or the oldest page at once) and never
reads outputs; a live refresh reads nothing but the store's version unless it changed, and then
only the rows on screen, the runs added above them, the counts and the selected run. A run's detail
reads its chain without outputs (and, for a run with a pattern, its latest driver state), and one
output is read only when a step is selected: for a pattern's group row, the outputs its summary
uses (see :func:`relaypoint.views.patterns.wanted_outputs`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from relaypoint.clock import to_text
from relaypoint.errors import RelaypointError, StoreError, UnknownRun, UnknownStep
from relaypoint.models import CallRecord, Event, PendingDecision, Run, RunSummary, StepRecord
from relaypoint.runtime import Runtime
from relaypoint.upstream import upstream_of
from relaypoint.usage import Usage, of_calls
from relaypoint.views.patterns import (PatternSummary, describe, kind_of, paused_execution, summary,
                                       wanted_outputs, with_outputs)

from .calls import calls_blocks
from .output import editor_json, output_view, show_command
from .readable import READ_PAGES, Block, Readable, readable

REFRESH_SECONDS = 1.0
"""How often the console looks for changes made elsewhere (it reads only the store's version
unless it changed)."""
PAGE_SIZE = 50
NEWER_LIMIT = 500
"""Most runs added above the newest loaded one in one refresh; past it the list stops there and
says newer runs exist (they are read as the cursor goes up, or with ``g``)."""

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


class PageKind(StrEnum):
    """Which page of the listing to read: the newest runs, the runs older than the oldest loaded,
    newer than the newest loaded, or the oldest runs."""

    FIRST = "first"
    OLDER = "older"
    NEWER = "newer"
    LAST = "last"


@dataclass(frozen=True)
class RunsPage:
    """One page of runs for the list, newest first. ``anchor``: the loaded position it continues
    from (OLDER: the oldest loaded run; NEWER: the newest), None for FIRST and LAST. ``more``: runs
    exist beyond the page in its direction (older for FIRST and OLDER, newer for NEWER and LAST)."""

    query: RunQuery
    kind: PageKind
    anchor: RunKey | None
    runs: list[RunSummary]
    more: bool


def read_page(rt: Runtime, query: RunQuery, kind: PageKind, anchor: RunKey | None = None,
              limit: int = PAGE_SIZE) -> RunsPage:
    """Read one page by keyset on (created_at, run_id): cost does not depend on how deep it is."""
    towards_newer = kind in (PageKind.NEWER, PageKind.LAST)
    runs = rt.list(status=query.status, search=query.search, limit=limit + 1, oldest_first=towards_newer,
                   before=anchor if kind == PageKind.OLDER else None,
                   after=anchor if kind == PageKind.NEWER else None)
    page = runs[:limit]
    if towards_newer:
        page.reverse()
    return RunsPage(query, kind, anchor, page, len(runs) > limit)


Version = tuple[Any, ...]
"""A store version as the console's reader sees it: (connection number, *the store's data_version())."""


@dataclass(frozen=True)
class RefreshRequest:
    """What one live refresh must read, decided on the UI thread from what is shown.

    ``version``: the store version the list was last read at (None: never). ``sweep``: runs are
    running, so look for owners that died (a death writes nothing, so it does not change the
    version). ``window``: positions (newest, oldest) of the rows on screen and a margin around
    them, the only rows re-read; ``window_stale``: some of them were read before the last change.
    ``top``: the newest loaded run when it is the newest of the listing (runs added since are read
    above it); ``first_page``: nothing is loaded for this query yet. ``selected``: the run whose
    detail is re-read when the store changed."""

    query: RunQuery
    version: Version | None
    sweep: bool
    window: tuple[RunKey, RunKey] | None
    window_stale: bool
    top: RunKey | None
    first_page: bool
    selected: str | None


@dataclass(frozen=True)
class RefreshRead:
    """What a live refresh read. ``changed``: the store changed since ``request.version`` (when it
    did not, nothing but the version was read and every other field is None). ``state``: runs per
    status and whether the store is read-only; ``first``: the first page (``first_page``
    requests); ``window``: the runs now between the window's positions; ``newer``: runs added
    above ``top``; ``detail``: the selected run."""

    request: RefreshRequest
    version: Version
    changed: bool
    state: StoreState | None = None
    first: RunsPage | None = None
    window: list[RunSummary] | None = None
    newer: RunsPage | None = None
    detail: RunDetail | None = None


WINDOW_LIMIT = 10_000
"""Most runs a window re-read returns (a window is about a hundred rows; runs are added above it,
not inside it, so this only bounds a store rewritten under the console)."""


def read_refresh(rt: Runtime, connection: int, request: RefreshRequest) -> RefreshRead:
    """One live refresh on the console's long-lived connection (number ``connection``): the store
    version first, then only what may have changed (see :class:`RefreshRequest`)."""
    if request.sweep:
        rt.sweep()  # its own changes move total_changes, so they count as a change below
    version = (connection, *rt.data_version())
    changed = version != request.version
    query = request.query
    if not changed and not request.window_stale:
        return RefreshRead(request, version, changed=False)
    read = RefreshRead(request, version, changed,
                       state=StoreState(rt.counts(), rt.readonly_reason) if changed else None)
    if request.first_page:
        return replace(read, first=read_page(rt, query, PageKind.FIRST),
                       detail=load_detail(rt, request.selected) if request.selected else None)
    if request.window is not None:
        runs = rt.list(status=query.status, search=query.search, within=request.window, limit=WINDOW_LIMIT)
        read = replace(read, window=runs)
    if changed and request.top is not None:
        read = replace(read, newer=read_page(rt, query, PageKind.NEWER, request.top, limit=NEWER_LIMIT))
    if changed and request.selected:
        read = replace(read, detail=load_detail(rt, request.selected))
    return read


class StoreReader:
    """The console's one long-lived reader (a :class:`Runtime`), shared by its thread workers one at
    a time. One runtime, because its ``data_version`` values compare only with its own. A store
    failure closes it; the next read opens a new one (with a new number, so its versions never
    compare equal to the old one's); other errors (a run deleted meanwhile) leave it open."""

    def __init__(self, open_runtime: Callable[[], Runtime]) -> None:
        self._open = open_runtime
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()
        self.connection = 0

    @contextmanager
    def runtime(self) -> Iterator[Runtime]:
        """The runtime, held for the ``with`` block (other workers wait). Raises what opening the
        store raises (``StoreError``)."""
        with self._lock:
            if self._runtime is None:
                self._runtime = self._open()
                self.connection += 1
            try:
                yield self._runtime
            except StoreError:  # the store failed: start again on a new connection
                self._runtime.close()
                self._runtime = None
                raise

    def close(self) -> None:
        """Close the connection (waits for a read in progress)."""
        with self._lock:
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None


@dataclass(frozen=True)
class RunDetail:
    """A run with its chain (outputs not loaded), pending checkpoint, forks, and its events;
    ``state``: the driver state of its latest checkpoint when it has a pattern (its progress
    reads it), else None; ``usage``: the run's (see :meth:`Runtime.run_usage`)."""

    run: Run
    events: list[Event]
    state: Any = None
    usage: Usage = Usage()


@dataclass(frozen=True)
class StoreState:
    """Counts of runs per status, and why the store is read-only (None: writable)."""

    counts: dict[str, int]
    readonly_reason: str | None


def load_detail(rt: Runtime, run_id: str) -> RunDetail | None:
    """The run's header, chain without outputs, pending checkpoint, forks, events and usage; None
    when the run no longer exists (deleted by another process)."""
    try:
        run = rt.get(run_id, with_outputs=False)
        return RunDetail(run, rt.events(run_id), _state(rt, run), rt.run_usage(run.run_id))
    except UnknownRun:
        return None


def _state(rt: Runtime, run: Run) -> Any:
    """The driver state of the run's latest checkpoint, read only when the run has a pattern."""
    if not any(kind_of(s) for s in run.tasks):
        return None
    checkpoint = rt.latest_checkpoint(run.run_id)
    return None if checkpoint is None else checkpoint.state


@dataclass(frozen=True)
class StepOutput:
    """One execution's output as read while the run was at ``version`` (its ``updated_at``): any
    later change to the run may have changed it. ``step``: the execution's name, ``seq`` its
    sequence number (what identifies it: a pattern's calls share its name). ``value`` is
    meaningful only when ``recorded``. ``summary``: for a pattern's group row, what its records
    say (rounds, counts, votes, plan...), shown above its result. ``readable``: the output as it
    reads (None: not recorded), ``pages`` pages of it, its long lists whole when ``expanded``
    (bounded; see :func:`relaypoint.tui.readable.readable`); ``view``: what the output box shows
    (see :func:`relaypoint.tui.output.output_view`); ``more``: the output goes on past them;
    ``editor``: the output as JSON for the approve form (None: not recorded, or too long to
    edit); ``whole``: the command that prints it whole; ``calls``: what the execution recorded
    inside it (:meth:`~relaypoint.workflow.Context.call`), in order, and ``calls_view`` its usage
    and those calls as they read (see :func:`relaypoint.tui.calls.calls_blocks`)."""

    run_id: str
    step: str
    seq: int
    version: datetime
    recorded: bool
    value: Any
    summary: PatternSummary | None = None
    view: Readable = Readable(())
    pages: int = 1
    expanded: bool = False
    more: bool = False
    editor: str | None = None
    whole: str = ""
    readable: Readable | None = None
    calls: tuple[CallRecord, ...] = ()
    calls_view: tuple[Block, ...] = ()

    def paged(self, db: str, step: StepRecord, pages: int, expanded: bool = False) -> StepOutput:
        """This output with ``pages`` pages of it as it reads (``expanded``: its long lists whole)
        for ``step`` (its error and traceback included) of a run in store ``db`` (named in the
        command that prints it whole). Costly for a big output: call it in a thread worker, never
        on the UI thread."""
        whole = show_command(db, self.run_id, step)
        shown = readable(self.value, whole, expanded, pages) if self.recorded else None
        view = output_view(step, shown, pages, self.summary, self.calls_view)
        editor = editor_json(self.value) if self.recorded else None
        return replace(self, view=view, pages=pages, expanded=expanded, more=view.cut, editor=editor, whole=whole,
                       readable=shown)


def load_output(rt: Runtime, run: Run, step: StepRecord, pages: int = 1, state: Any = None,
                expanded: bool = False) -> StepOutput | None:
    """Read one execution's output (only when the chain says one is recorded) and format ``pages``
    pages of it (``expanded``: its long lists whole), with its recorded calls and usage (for a
    pattern's group row, its calls' sum); for a pattern's group row, also the outputs its summary
    uses, which it builds with ``state`` (the run's latest driver state, :attr:`RunDetail.state`).
    None when the run or the execution no longer exists (deleted, or the chain rebuilt by a
    drift-allowed resume)."""
    try:
        if step.parent is None:
            value = rt.step_output(run.run_id, step.name) if step.has_output else None
        elif rt.execution(run.run_id, step.seq) is None:
            return None
        else:
            value = rt.execution_output(run.run_id, step.seq) if step.has_output else None
        calls = tuple(rt.execution_calls(run.run_id, step.seq))
        used = rt.execution_usage(run.run_id, step.seq) if kind_of(step) else of_calls(calls, run.prices)
        found = None
        if kind_of(step):
            children = [c for c in run.tasks if c.parent == step.seq]
            wanted = wanted_outputs(step, children, state)
            outputs = {seq: rt.execution_output(run.run_id, seq) for seq in wanted}
            found = summary(step, with_outputs(children, outputs), state, (step.has_output, value))
    except (UnknownRun, UnknownStep):
        return None
    calls_view = calls_blocks(calls, used, run.prices, show_command(rt.url, run.run_id))
    return StepOutput(run.run_id, step.name, step.seq, run.updated_at, step.has_output, value, found,
                      calls=calls, calls_view=calls_view).paged(rt.url, step, pages, expanded)


QUEUE_LIMIT = 500
"""Most pending decisions the review screen reads at once (oldest first)."""


@dataclass(frozen=True)
class ReviewWant:
    """Which pending decision the review screen asks for: ``current`` (the checkpoint id shown,
    None: none yet), ``move`` (0: the same, 1: the next newer, -1: the next older) and ``seen``:
    the queue as last read (checkpoint ids, oldest first), to move on from a decision made
    meanwhile. ``expanded``: show long lists whole."""

    current: int | None = None
    move: int = 0
    seen: tuple[int, ...] = ()
    expanded: bool = False


def pick(queue: list[int], want: ReviewWant) -> int | None:
    """The position in ``queue`` (checkpoint ids, oldest first) of the decision to show: from the
    one shown, ``want.move`` along (kept at the ends); when it is no longer pending (decided), the
    first one after it in the queue as seen that still is, else the oldest. With nothing shown
    yet: the oldest (the newest when moving back). None for an empty queue."""
    if not queue:
        return None
    if want.current is None:
        return len(queue) - 1 if want.move < 0 else 0
    if want.current in queue:
        return min(max(queue.index(want.current) + want.move, 0), len(queue) - 1)
    later = want.seen[want.seen.index(want.current) + 1:] if want.current in want.seen else ()
    return next((queue.index(c) for c in later if c in queue), 0)


@dataclass(frozen=True)
class ReviewItem:
    """One pending decision as the review screen shows it. ``decision``: the queue's entry (the
    checkpoint, its run's workflow and status); ``run``: the run read with it (outputs not
    loaded; ``run.pending`` is the checkpoint a decision cites); ``execution``: the step it is
    about (None: not in the chain); ``output``: that step's output (None: none recorded);
    ``queue``: the checkpoint ids pending, oldest first (``full``: there may be more past
    :data:`QUEUE_LIMIT`); ``position``: this one's in it; ``calls``: the step's usage and recorded
    calls as they read (see :attr:`StepOutput.calls_view`), recorded output or not; ``usage``: the
    run's."""

    decision: PendingDecision
    run: Run
    execution: StepRecord | None
    output: StepOutput | None
    queue: tuple[int, ...]
    full: bool
    position: int
    calls: tuple[Block, ...] = ()
    usage: Usage = Usage()


@dataclass(frozen=True)
class ReviewRead:
    """What the review screen read: the ``item`` to show (None: nothing to review), why the store
    is read-only (None: writable), and what was asked."""

    want: ReviewWant
    item: ReviewItem | None
    readonly_reason: str | None


def read_review(rt: Runtime, want: ReviewWant) -> ReviewRead:
    """Read the review queue and the decision ``want`` picks (see :func:`pick`), with its run and
    the output it gates (one page of it formatted, and as it reads). A run decided between the two
    reads is skipped: the queue is read again."""
    for _ in range(3):
        queue = rt.pending_decisions(QUEUE_LIMIT)
        ids = [d.checkpoint_id for d in queue]
        position = pick(ids, want)
        if position is None:
            return ReviewRead(want, None, rt.readonly_reason)
        decision = queue[position]
        try:
            run = rt.get(decision.run_id, with_outputs=False)
        except UnknownRun:
            continue
        if run.pending is None or run.pending.checkpoint_id != decision.checkpoint_id:
            continue
        execution = paused_execution(run.tasks, run.pending)
        # A step that asks for input has recorded no output, but may have recorded calls.
        loaded = load_output(rt, run, execution, READ_PAGES, expanded=want.expanded) if execution else None
        output = loaded if loaded is not None and loaded.recorded else None
        item = ReviewItem(decision, run, execution, output, tuple(ids), len(ids) >= QUEUE_LIMIT, position,
                          loaded.calls_view if loaded is not None else (), rt.run_usage(run.run_id))
        return ReviewRead(want, item, rt.readonly_reason)
    raise RelaypointError("the review queue kept changing while it was read; press n to read it again")


@dataclass(frozen=True)
class Upstream:
    """The outputs a pending decision's step was built from (see
    :func:`relaypoint.upstream.upstream_of`), each as it reads, in order, for run ``run_id`` at
    checkpoint ``checkpoint_id``."""

    run_id: str
    checkpoint_id: int
    outputs: tuple[tuple[str, Readable], ...]


def read_upstream(rt: Runtime, item: ReviewItem, expanded: bool = False) -> Upstream:
    """Read the upstream outputs of ``item``'s step (bounded as it reads, one per step;
    ``expanded``: their long lists whole)."""
    run = item.run
    outputs: list[tuple[str, Readable]] = []
    if item.execution is not None:
        for step in upstream_of(run.tasks, item.execution):
            try:
                value = rt.execution_output(run.run_id, step.seq)
            except UnknownStep:
                continue
            outputs.append((describe(step, run.tasks),
                            readable(value, show_command(rt.url, run.run_id, step), expanded)))
    assert run.pending is not None
    return Upstream(run.run_id, run.pending.checkpoint_id, tuple(outputs))
