"""The review screen: the pending decisions of all runs (approvals, input requests, orphan holds),
oldest first, one at a time, with what a reviewer judges: the gated output as it reads, the
step's recorded calls under it (its model requests' messages, its tool calls' arguments and
results) and usage, the upstream outputs it was built from (``u``), the run's input, its usage so
far and why it waits. ``a`` opens the
approve form with its Approve button focused (``enter`` records), ``x`` rejects, ``i`` answers;
each decision cites the checkpoint shown (a stale view is refused) and the next pending decision
comes into view. ``n`` / ``N`` move along the queue.

Like the runs list, the screen follows changes made elsewhere: every second it reads the store's
version and, only when it changed, the queue again (in a thread worker, never two at once, not
while a form or help is open over it, a read the reviewer asked for is in flight or a decision
made here is being recorded). The decision shown stays in view, scrolled where it was, with the
pending count updated; when it was decided elsewhere, the screen says so in one line and shows the
next pending one.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static
from textual.worker import Worker, get_current_worker

from relaypoint.models import Run
from relaypoint.status import CheckpointKind
from relaypoint.upstream import upstream_of
from relaypoint.views.display import literal, preview
from relaypoint.views.patterns import describe

from .. import format as fmt
from ..actions import GENERAL_BINDINGS, QUEUE_BINDINGS, REVIEW_BINDINGS, RUN_ACTIONS
from ..data import ReviewItem, ReviewRead, ReviewWant, Upstream, Version, read_review, read_upstream
from ..messages import RefreshFailed, ReviewLoaded, UpstreamLoaded
from ..output import show_command
from ..readable import Block, Readable, plain_text
from ..widgets.detail import HEADER_CHARS
from ..widgets.footer import ConsoleFooter
from ..widgets.readable_output import ReadableOutput
from .base import BaseScreen, LiveRead
from .forms import ApproveScreen

DECISIONS = ("approve", "reject", "respond")
"""The run actions the review screen offers (the registry's)."""
DECISION_ACTIONS = tuple(a for a in RUN_ACTIONS if a.name in DECISIONS)
KIND_STYLES = {CheckpointKind.APPROVAL: "yellow", CheckpointKind.INPUT: "magenta", CheckpointKind.ORPHAN: "dark_orange"}
INPUT_CHARS = 300
"""Most characters of the run's input shown in the header (``o``: the run, its input whole)."""

_KEPT_GENERAL = {"help", "quit"}
REVIEW_SCREEN_BINDINGS: list[Binding] = [
    *(a.binding() for a in DECISION_ACTIONS), *QUEUE_BINDINGS, *REVIEW_BINDINGS,
    Binding("escape", "back", "Runs", id="back", tooltip="Back to the runs list"),
    *(b for b in GENERAL_BINDINGS if b.id in _KEPT_GENERAL),
]
OWN_ACTIONS = frozenset(b.action for b in REVIEW_SCREEN_BINDINGS)


def waiting_line(item: ReviewItem, now: Any) -> Text:
    """What the decision is about and how long it has waited: kind, step, checkpoint, since when,
    and its deadline."""
    cp = item.run.pending
    assert cp is not None
    step = describe(item.execution, item.run.tasks) if item.execution is not None else cp.step or "?"
    line = Text.assemble((cp.kind, f"bold {KIND_STYLES.get(CheckpointKind(cp.kind), '')}"), " at step ",
                         literal(step, "bold"), (f"  checkpoint {cp.checkpoint_id}", "dim"),
                         "  waiting ", (fmt.duration(cp.created_at, now), "bold"),
                         (f" (since {fmt.utc(cp.created_at)})", "dim"), "  deadline ")
    if cp.deadline_at is None:
        line.append("none", style="dim")
    else:
        line.append(fmt.ahead(cp.deadline_at, now), style="bold red")
        line.append(f" ({fmt.utc(cp.deadline_at)})", style="dim")
    return line


def header(item: ReviewItem, now: Any) -> Table:
    """The review screen's header: where in the queue, the run, why it waits, its input and,
    when it made model requests, its usage so far."""
    run, cp = item.run, item.run.pending
    assert cp is not None
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(ratio=1)
    total = f"{len(item.queue)}{'+' if item.full else ''}"
    grid.add_row("pending", Text.assemble((f"{item.position + 1} of {total}", "bold"), "   run ",
                                          literal(fmt.short_id(run.run_id), "bold"), "  ",
                                          literal(run.workflow, "bold"), "  ", fmt.run_status(run.status)))
    grid.add_row("waits", waiting_line(item, now))
    reason = cp.reason or "-"
    grid.add_row("reason", literal(reason[:HEADER_CHARS] + ("…" if len(reason) > HEADER_CHARS else ""),
                                   multiline=True))
    shown = preview(json.dumps(run.input, ensure_ascii=False), chars=INPUT_CHARS, lines=1)
    grid.add_row("input", literal(shown.head + ("…" if shown.cut else "")))
    if item.usage.used:
        grid.add_row("usage", Text(f"{item.usage.line()} (the run so far)", style="dim"))
    return grid


def body_title(item: ReviewItem, upstream: bool) -> Text:
    """The body's border title: whose output it shows, and the key to the other view."""
    if upstream:
        return Text("Upstream outputs it was built from · u: the output itself")
    cp = item.run.pending
    assert cp is not None
    what = describe(item.execution, item.run.tasks) if item.execution is not None else cp.step or "?"
    if item.output is None:
        title = Text.assemble("Step ", literal(what), " asks" if cp.kind == CheckpointKind.INPUT else " has no output")
    else:
        title = Text.assemble("Output of ", literal(what), " as it reads")
    if item.execution is not None and upstream_of(item.run.tasks, item.execution):
        title.append(" · u: upstream outputs")
    return title


def unrecorded(item: ReviewItem, db: str) -> Text:
    """What the body says when the decision's step has no output: the question asked (input),
    or what approving does (an orphan, a person's turn); its first pages, as an output's (``db``:
    the store, named in the command that prints it whole)."""
    cp = item.run.pending
    assert cp is not None
    reason = plain_text(cp.reason or "", show_command(db, item.run.run_id))
    if cp.kind == CheckpointKind.INPUT:
        return Text.assemble(("The step asks:\n", "bold"), reason, ("\n\ni: answer with a JSON value", "dim"))
    return Text.assemble(("No output recorded for this step. ", "dim"), reason, ("\n\na: approve  x: reject", "dim"))


class ReviewScreen(BaseScreen):
    """The review queue, one pending decision at a time (see the module's doc). ``move``: start
    at the oldest (0, 1) or the newest (-1) pending decision."""

    BINDINGS = REVIEW_SCREEN_BINDINGS
    GREYABLE = {b.key: b.action for b in REVIEW_SCREEN_BINDINGS
                if b.id not in (*_KEPT_GENERAL, "back") and b.action != "next_pending"}  # n also reads again

    def __init__(self, move: int = 0) -> None:
        super().__init__()
        self.item: ReviewItem | None = None
        self.readonly_reason: str | None = None
        self.loaded = False
        self.upstream: Upstream | None = None
        self.showing_upstream = False
        self._first = ReviewWant(move=move)
        self._version: Version | None = None  # the store version the queue shown was read at
        self._reading: Worker[None] | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text("reading the review queue…", style="dim"), id="review-head")
        with VerticalScroll(id="review-body"):
            yield ReadableOutput(id="review-output")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self._title_head(Text())
        self.query_one("#review-body").border_title = "Output"
        self._ask(self._first)
        self.schedule()

    def _title_head(self, what: Text) -> None:
        """Title the head "Review", then ``what`` is shown, then the name decisions made here are
        recorded under, when the console was given one."""
        title = Text.assemble("Review", what)
        if self.app.by is not None:
            title.append_text(Text.assemble(" · as ", literal(self.app.by)))
        self.query_one("#review-head").border_title = title

    # ---- reads --------------------------------------------------------------------------------

    def _want(self, move: int = 0, expanded: bool = False) -> ReviewWant:
        """The decision ``move`` along from the one shown (or, once it is decided, the one after it)."""
        current = self.item.run.pending.checkpoint_id if self.item and self.item.run.pending else None
        return ReviewWant(current, move, self.item.queue if self.item is not None else (), expanded)

    def read_again(self, move: int = 0, expanded: bool = False) -> None:
        """Read the queue again and show the decision ``move`` along from the one shown (or, once
        it is decided, the one after it)."""
        self._ask(self._want(move, expanded))

    def _ask(self, want: ReviewWant) -> None:
        """Read the queue as the reviewer asked; a look under way is dropped."""
        self.supersede()
        self.cancel_look()
        self._reading = self._read(want)

    @work(thread=True, exclusive=True, exit_on_error=False, group="review")
    def _read(self, want: ReviewWant) -> None:
        reader = self.app.reader
        with reader.runtime() as rt:
            version = (reader.connection, *rt.data_version())
            read = read_review(rt, want)
        if not get_current_worker().is_cancelled:
            self.post_message(ReviewLoaded(read, version))

    # ---- live refresh (see the base screen) ---------------------------------------------------

    def look(self) -> LiveRead | None:
        """Read the store's version and, when it changed, the queue (the decision shown kept in view
        if it is still pending); not while a read or a decision is under way."""
        reading = self._reading is not None and not self._reading.is_finished
        if reading or self.deciding:
            return None
        if self.item is not None:  # how long it has waited goes on, changed or not
            self.query_one("#review-head", Static).update(header(self.item, self.app.clock()))
        version, generation, want = self._version, self.generation, self._want()

        def read(rt: Any, connection: int) -> ReviewLoaded | None:
            now = (connection, *rt.data_version())
            if now == version:
                return None
            return ReviewLoaded(read_review(rt, want), now, live=generation, shown=want.current)

        return read

    def changed(self) -> None:
        self.read_again()

    def on_refresh_failed(self, message: RefreshFailed) -> None:
        self.query_one("#review-head").border_subtitle = Text.assemble(("refresh failed: ", "bold red"),
                                                                        literal(message.error, "red"))

    def _kept(self, read: ReviewRead) -> bool:
        """Take a live refresh's ``read`` in: when it shows the decision on screen, update the
        header (position, pending count) and keep the body as it is, scrolled where it was, and
        return True; when that decision was decided elsewhere, say so in one line (the caller
        shows what was read)."""
        shown, item = self.item, read.item
        if shown is None or shown.run.pending is None:
            return False
        if (item is not None and item.run.pending is not None
                and (item.run.run_id, item.run.pending.checkpoint_id)
                == (shown.run.run_id, shown.run.pending.checkpoint_id)):
            self.item, self.readonly_reason = replace(item, output=shown.output, calls=shown.calls), \
                read.readonly_reason
            self.refresh_bindings()
            self.query_one("#review-head", Static).update(header(self.item, self.app.clock()))
            return True
        cp = shown.run.pending
        step = describe(shown.execution, shown.run.tasks) if shown.execution is not None else cp.step or "?"
        then = "showing the next pending decision" if item is not None else "nothing left to review"
        done = "answered" if cp.kind == CheckpointKind.INPUT else "decided"
        self.say(f"run {fmt.short_id(shown.run.run_id)}: its {cp.kind} at step {step} was {done} elsewhere; {then}")
        return False

    async def on_review_loaded(self, message: ReviewLoaded) -> None:
        read = message.read
        if message.live is not None:
            if self.is_stale(message.live) or message.shown != self._want().current:
                # superseded (or read for a decision no longer shown: a read the reviewer asked for
                # landed meanwhile), or something is open over the screen: the next look reads again
                return
            self._version = message.version
            self.query_one("#review-head").border_subtitle = ""
            if self._kept(read):
                return
        else:
            self._version = message.version
        self.item, self.readonly_reason, self.loaded = read.item, read.readonly_reason, True
        self.showing_upstream = False
        self.refresh_bindings()
        head = self.query_one("#review-head", Static)
        body = self.query_one("#review-body", VerticalScroll)
        body.scroll_home(animate=False)
        output = self.query_one("#review-output", ReadableOutput)
        item = read.item
        if item is None:
            self._title_head(Text(" · nothing to review"))
            head.update(Text.assemble(("Nothing to review: ", "bold"), "no run waits for a decision (approval, "
                                      "input or orphan hold).\n", ("escape", "bold"), ": the runs list  ",
                                      ("n", "bold"), ": look again  ", ("q", "bold"), ": quit"))
            body.border_title = "Output"
            await output.show(Text(""))
            return
        self._title_head(Text.assemble(" · run ", literal(fmt.short_id(item.run.run_id))))
        head.update(header(item, self.app.clock()))
        body.border_title = body_title(item, False)
        await self._show_own(item)

    async def _show_own(self, item: ReviewItem) -> None:
        """The step's output as it reads (or what it asks), then its usage and recorded calls."""
        output = self.query_one("#review-output", ReadableOutput)
        if item.output is not None and item.output.readable is not None:
            shown = item.output.readable
            await output.show(replace(shown, blocks=shown.blocks + item.calls))
        else:
            await output.show(Readable((Block(None, unrecorded(item, self.app.db_url)), *item.calls)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="upstream")
    def _read_upstream(self, item: ReviewItem, expanded: bool = False) -> None:
        with self.app.reader.runtime() as rt:
            upstream = read_upstream(rt, item, expanded)
        self.post_message(UpstreamLoaded(upstream))

    async def on_upstream_loaded(self, message: UpstreamLoaded) -> None:
        self.upstream = message.upstream
        if self.showing_upstream and self._upstream_current():
            await self._show_upstream(message.upstream)

    def _upstream_current(self) -> bool:
        up, item = self.upstream, self.item
        return (up is not None and item is not None and item.run.pending is not None
                and (up.run_id, up.checkpoint_id) == (item.run.run_id, item.run.pending.checkpoint_id))

    async def _show_upstream(self, upstream: Upstream) -> None:
        blocks: list[Block] = []
        for name, shown in upstream.outputs:
            first, *rest = shown.blocks
            title = f"output of {name}" + (f" · {first.title}" if first.title is not None else "")
            blocks += [replace(first, title=title), *rest]
        await self.query_one("#review-output", ReadableOutput).show(Readable(tuple(blocks)))

    # ---- keys ---------------------------------------------------------------------------------

    def why_not(self, action: str) -> str | None:
        """Why ``action`` does not apply to the decision shown, in one line; None when it does.
        Decisions: the registry's reasons (the runtime's rules) and a read-only store."""
        item = self.item
        if item is None:
            return "nothing to review" if self.loaded else "the review queue is still being read"
        if action in DECISIONS:
            return self.refusal(action, item.run)
        if action == "next_pending" and item.position == len(item.queue) - 1:
            return "this is the newest pending decision"
        if action == "previous_pending" and item.position == 0:
            return "this is the oldest pending decision"
        if action == "upstream" and (item.execution is None or not upstream_of(item.run.tasks, item.execution)):
            return "its step has no upstream outputs"
        if action == "expand" and self.showing_upstream:
            if not (self._upstream_current() and any(shown.folded for _, shown in self.upstream.outputs)):
                return "no list of the upstream outputs is folded"
        elif action == "expand" and (item.output is None or item.output.readable is None
                                     or not item.output.readable.folded):
            return "no list of its output is folded"
        return None

    @property
    def shown_run(self) -> Run | None:
        return self.item.run if self.item is not None else None

    def approve_form(self, run: Run) -> ApproveScreen:
        """The approve form on the output shown, its Approve button focused: ``enter`` records."""
        output = self.item.output if self.item is not None else None
        if output is None:
            return ApproveScreen(run, None, False, None, confirm_first=True)
        return ApproveScreen(run, output.value, output.recorded, output.editor, output.readable, confirm_first=True)

    def action_next_pending(self) -> None:
        """``n``: the next newer pending decision (read again: with none shown, the oldest)."""
        self.read_again(1 if self.item is not None else 0)

    def action_previous_pending(self) -> None:
        """``N``: the next older pending decision."""
        if self.why_not("previous_pending") is None:
            self.read_again(-1)

    async def action_upstream(self) -> None:
        """``u``: the outputs the step was built from, and back."""
        item = self.item
        if self.why_not("upstream") is not None or item is None:
            return
        self.showing_upstream = not self.showing_upstream
        self.query_one("#review-body", VerticalScroll).border_title = body_title(item, self.showing_upstream)
        if not self.showing_upstream:
            await self._show_own(item)
        elif self._upstream_current():
            assert self.upstream is not None
            await self._show_upstream(self.upstream)
        else:
            await self.query_one("#review-output", ReadableOutput).show(Text("reading the upstream outputs…",
                                                                              style="dim"))
            self._read_upstream(item)

    def action_expand(self) -> None:
        """``e``: the output (or, shown instead, the upstream outputs) with its long lists whole."""
        if self.why_not("expand") is not None:
            return
        if self.showing_upstream:
            assert self.item is not None
            self._read_upstream(self.item, expanded=True)
        else:
            self.read_again(0, expanded=True)

    def action_open_run(self) -> None:
        """``o``: back to the runs list, filtered to this run."""
        if self.item is None:
            return
        self.open_run(self.item.run.run_id)

    def palette_run(self, action: str, argument: str | None) -> None:
        """Run the palette's ``action``: this screen's own here (or say why not), any other on the
        runs list, which it returns to (the runs list's commands apply there)."""
        if action not in OWN_ACTIONS:
            self.app.pop_screen()
            self.app.runs_screen.palette_run(action, argument)
        else:
            super().palette_run(action, argument)

    def open_run(self, run_id: str) -> None:
        """The palette's run by id prefix: the runs list, showing it."""
        self.app.pop_screen()
        self.app.runs_screen.show_run(run_id)

    def action_back(self) -> None:
        self.app.pop_screen()
