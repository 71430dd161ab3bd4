"""The review screen: the pending decisions of all runs (approvals, input requests, orphan holds),
oldest first, one at a time, with what a reviewer judges: the gated output as it reads, the
upstream outputs it was built from (``u``), the run's input and why it waits. ``a`` opens the
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
from functools import partial
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import Worker, WorkerState, get_current_worker

from relaypoint.errors import RelaypointError
from relaypoint.status import CheckpointKind
from relaypoint.upstream import upstream_of
from relaypoint.views.display import clean, literal, preview
from relaypoint.views.patterns import describe

from . import changes
from . import format as fmt
from .actions import GENERAL_BINDINGS, QUEUE_BINDINGS, REVIEW_BINDINGS, RUN_ACTIONS, help_markdown
from .data import REFRESH_SECONDS, ReviewItem, ReviewRead, ReviewWant, Upstream, Version, read_review, read_upstream
from .detail import HEADER_CHARS
from .footer import ConsoleFooter
from .messages import ActionDone, ActionFailed, RefreshFailed, ReviewLoaded, UpstreamLoaded
from .modals import ApproveScreen, HelpScreen, RejectScreen, RespondScreen
from .output import show_command
from .palette import ConsoleCommands
from .readable import Block, Readable, ReadableOutput, plain_text

if TYPE_CHECKING:
    from .app import RelaypointConsole

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
GREYABLE = {b.key: b.action for b in REVIEW_SCREEN_BINDINGS if b.id not in (*_KEPT_GENERAL, "back")}
"""Keys whose action can be greyed out on the review screen, and the action."""


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
    """The review screen's header: where in the queue, the run, why it waits, and its input."""
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


class ReviewScreen(changes.ChangeWorker, Screen[None]):
    """The review queue, one pending decision at a time (see the module's doc). ``move``: start
    at the oldest (0, 1) or the newest (-1) pending decision."""

    BINDINGS = REVIEW_SCREEN_BINDINGS
    COMMANDS = {ConsoleCommands}
    app: RelaypointConsole

    def __init__(self, move: int = 0) -> None:
        super().__init__()
        self.item: ReviewItem | None = None
        self.readonly_reason: str | None = None
        self.loaded = False
        self.upstream: Upstream | None = None
        self.showing_upstream = False
        self._first = ReviewWant(move=move)
        self._version: Version | None = None  # the store version the queue shown was read at
        self._generation = 0  # moves on with every read the reviewer asks for and every decision made here
        self._reading: Worker[None] | None = None
        self._deciding = False  # a decision made here is being recorded
        self._looking: Worker[None] | None = None
        self._timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text("reading the review queue…", style="dim"), id="review-head")
        with VerticalScroll(id="review-body"):
            yield ReadableOutput(id="review-output")
        yield ConsoleFooter()

    def on_mount(self) -> None:
        self._title_head(Text())
        self.query_one("#review-body").border_title = "Output"
        self._ask(self._first)
        self._schedule()

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
        """Read the queue as the reviewer asked; a live refresh under way is dropped."""
        self._generation += 1
        self.workers.cancel_group(self, "review-live")
        self._reading = self._read(want)

    @work(thread=True, exclusive=True, exit_on_error=False, group="review")
    def _read(self, want: ReviewWant) -> None:
        reader = self.app.reader
        with reader.runtime() as rt:
            version = (reader.connection, *rt.data_version())
            read = read_review(rt, want)
        if not get_current_worker().is_cancelled:
            self.post_message(ReviewLoaded(read, version))

    # ---- live refresh: a chained one-shot timer, paused while anything is open over the screen ----

    def _schedule(self) -> None:
        self._timer = self.set_timer(REFRESH_SECONDS, self._look)

    def _look(self) -> None:
        """Look whether the store changed (and if so read the queue again), unless a form or help
        is open over the screen, or a read or a decision is under way: then look again later."""
        self._timer = None
        reading = self._reading is not None and not self._reading.is_finished
        if self.app.screen is not self or reading or self._deciding:
            self._schedule()
            return
        if self.item is not None:  # how long it has waited goes on, changed or not
            self.query_one("#review-head", Static).update(header(self.item, self.app.clock()))
        self._looking = self._read_changes(self._version, self._generation, self._want())

    @work(thread=True, exclusive=True, exit_on_error=False, group="review-live")
    def _read_changes(self, version: Version | None, generation: int, want: ReviewWant) -> None:
        """Read the store's version and, when it is not ``version``, the queue (``want``: the
        decision shown, kept in view if it is still pending)."""
        reader = self.app.reader
        try:
            with reader.runtime() as rt:
                now = (reader.connection, *rt.data_version())
                if now == version:
                    return
                read = read_review(rt, want)
        except RelaypointError as e:  # shown under the header; the next look retries
            self.post_message(RefreshFailed(str(e)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(ReviewLoaded(read, now, live=generation, shown=want.current))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:  # a read failed (a decision refused is ActionFailed)
            error = event.worker.error
            text = str(error) if isinstance(error, RelaypointError) else f"internal error: {error!r}"
            self.notify(clean(text), severity="error", markup=False)
            if event.worker.group == "change":
                self._deciding = False
                self.read_again()
        if event.worker is self._looking and event.state in (WorkerState.SUCCESS, WorkerState.ERROR,
                                                            WorkerState.CANCELLED):
            self._looking = None
            self._schedule()

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
            self.item, self.readonly_reason = replace(item, output=shown.output), read.readonly_reason
            self.refresh_bindings()
            self.query_one("#review-head", Static).update(header(self.item, self.app.clock()))
            return True
        cp = shown.run.pending
        step = describe(shown.execution, shown.run.tasks) if shown.execution is not None else cp.step or "?"
        then = "showing the next pending decision" if item is not None else "nothing left to review"
        done = "answered" if cp.kind == CheckpointKind.INPUT else "decided"
        self.notify(clean(f"run {fmt.short_id(shown.run.run_id)}: its {cp.kind} at step {step} was {done} "
                          f"elsewhere; {then}"), markup=False)
        return False

    async def on_review_loaded(self, message: ReviewLoaded) -> None:
        read = message.read
        if message.live is not None:
            if message.live != self._generation or self._deciding or self.app.screen is not self \
                    or message.shown != self._want().current:
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
        output = self.query_one("#review-output", ReadableOutput)
        if item.output is not None and item.output.readable is not None:
            await output.show(item.output.readable)
        else:
            await output.show(unrecorded(item, self.app.db_url))

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
            if self.readonly_reason:
                return f"the store is read-only: {self.readonly_reason}"
            return next(a for a in DECISION_ACTIONS if a.name == action).why_not(item.run)
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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out (None) what does not apply to the decision shown (see :meth:`why_not`)."""
        if action in GREYABLE.values() and action != "next_pending":  # n also reads the queue again
            return True if self.why_not(action) is None else None
        return True

    def on_key(self, event: events.Key) -> None:
        """A key whose action is greyed out: say in one line why it does not apply."""
        action = GREYABLE.get(event.key)
        if action is not None and action != "next_pending" and (reason := self.why_not(action)) is not None:
            event.stop()
            self.notify(clean(f"{action.replace('_', ' ')}: {reason}"), severity="warning", markup=False)

    def _decide(self, form: ModalScreen[Any], change: Any) -> None:
        def done(result: Any) -> None:
            if result is not None and result is not False:
                self._deciding = True  # until it is recorded, a live refresh would call it decided elsewhere
                self._generation += 1
                self._change(partial(change, result))

        # A live read under way was read before the form, for the decision as it was then: its
        # answer, landing as the form closes, would call a refusal's decision "decided elsewhere".
        self._generation += 1
        self.app.push_screen(form, done)

    def action_approve(self) -> None:
        """The approve form on the output shown, its Approve button focused: ``enter`` records."""
        if self.why_not("approve") is not None or self.item is None:
            return
        item, output = self.item, self.item.output
        if output is None:
            form = ApproveScreen(item.run, None, False, None, confirm_first=True)
        else:
            form = ApproveScreen(item.run, output.value, output.recorded, output.editor, output.readable,
                                 confirm_first=True)
        self._decide(form, partial(changes.approve, item.run, app_spec=self.app.app_spec, by=self.app.by))

    def action_reject(self) -> None:
        if self.why_not("reject") is None and self.item is not None:
            self._decide(RejectScreen(self.item.run), partial(changes.reject, self.item.run, by=self.app.by))

    def action_respond(self) -> None:
        if self.why_not("respond") is None and self.item is not None:
            self._decide(RespondScreen(self.item.run),
                         partial(changes.respond, self.item.run, app_spec=self.app.app_spec, by=self.app.by))

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

    def palette_why_not(self, action: str) -> str | None:
        """Why the palette's ``action`` does not apply here now; None when it does (the runs
        list's commands apply there, where they take the reviewer)."""
        return self.why_not(action) if action in GREYABLE.values() and action != "next_pending" else None

    def palette_run(self, action: str, argument: str | None) -> None:
        """Run the palette's ``action``: this screen's own here (or say why not), any other on the
        runs list, which it returns to."""
        if action not in OWN_ACTIONS:
            self.app.pop_screen()
            self.app.console_screen.palette_run(action, argument)
        elif (reason := self.palette_why_not(action)) is not None:
            self.notify(clean(f"{action.replace('_', ' ')}: {reason}"), severity="warning", markup=False)
        else:
            self.call_later(getattr(self, f"action_{action}"))

    def open_run(self, run_id: str) -> None:
        """The palette's run by id prefix: the runs list, showing it."""
        self.app.pop_screen()
        self.app.console_screen.show_run(run_id)

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(help_markdown(), readonly_reason=self.readonly_reason))

    def action_quit(self) -> None:
        self.app.exit()

    # ---- what a decision did ------------------------------------------------------------------

    @on(ActionDone)
    def _done(self, message: ActionDone) -> None:
        self._deciding = False
        self.notify(clean(message.summary), markup=False)
        self.read_again()

    @on(ActionFailed)
    def _failed(self, message: ActionFailed) -> None:
        self._deciding = False
        self.notify(clean(message.error), severity="error", markup=False)
        self.read_again()
