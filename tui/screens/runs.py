"""The runs list, the console's main screen: the runs table with its filters, the detail pane, the
status line, and the workers that read pages, a run's detail and a step's output, and start
resumes. The live refresh, key greying, the palette's hooks and the decisions are the base
screen's (:mod:`.base`)."""

from __future__ import annotations

import os
import shlex
import subprocess
from datetime import datetime
from functools import partial
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SuspendNotSupported
from textual.containers import Horizontal, Vertical
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Static
from textual.worker import Worker, WorkerState, get_current_worker

from relaypoint.background import failure_reason, log_size, resume_log, spawn_resume
from relaypoint.errors import RelaypointError
from relaypoint.models import Run
from relaypoint.status import RUN_SYMBOLS, RunStatus
from relaypoint.views.display import literal
from relaypoint.views.patterns import fork_point, paused_execution

from .. import changes
from .. import format as fmt
from ..actions import GENERAL_BINDINGS, OUTPUT_BINDINGS, PANE_BINDINGS, QUEUE_BINDINGS, RUN_ACTIONS
from ..data import (PageKind, RunDetail, RunKey, RunQuery, StepOutput, StoreState, load_detail, load_output, read_page,
                    read_refresh)
from ..messages import (ActionFailed, ApprovalReady, DetailLoaded, OutputLoaded, PageLoaded, PagerReady, RefreshFailed,
                        Refreshed, ResumeStarted)
from ..output import pager_text
from ..widgets.detail import DetailPane
from ..widgets.footer import ConsoleFooter
from ..widgets.runs_table import AGO_PERIOD, RunsTable
from .base import BaseScreen, LiveRead
from .confirm import ConfirmScreen
from .forms import ApproveScreen, ForkPoint, ForkScreen
from .review import ReviewScreen

SEARCH_DEBOUNCE_SECONDS = 0.2
OUTPUT_ACTIONS = frozenset(b.action for b in OUTPUT_BINDINGS)
STATUS_CYCLE: tuple[str | None, ...] = (None, *(s.value for s in RunStatus))


class RunsScreen(BaseScreen):
    """Runs on the left (top when narrow), the selected run on the right (bottom), a status line."""

    BINDINGS = [*(a.binding() for a in RUN_ACTIONS), *QUEUE_BINDINGS, *GENERAL_BINDINGS, *OUTPUT_BINDINGS,
                *PANE_BINDINGS]
    GREYABLE = {**{a.key: a.name for a in RUN_ACTIONS}, **{b.key: b.action for b in OUTPUT_BINDINGS}}

    def __init__(self) -> None:
        super().__init__()
        self.query_state = RunQuery()
        self.selected: str | None = None
        self.state = StoreState({}, None)
        self._page: Worker[None] | None = None
        self._enabled: set[str] | None = None
        self._search_timer: Timer | None = None
        self._shown: tuple[RunDetail, datetime] | None = None  # the detail shown, and when
        self._resumes: list[ResumeStarted] = []
        self._drifted: dict[str, str] = {}  # run id -> why its last resume from here refused the drift
        self._approve_form: ApproveScreen | None = None

    # ---- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="main"):
            with Vertical(id="runs-panel"):
                yield Input(placeholder="run id or workflow prefix (enter: keep, escape: clear)", id="search")
                yield RunsTable(id="runs")
            yield DetailPane(id="detail")
        yield Static(id="status-line")
        yield ConsoleFooter()

    @property
    def runs(self) -> RunsTable:
        """The runs list."""
        return self.query_one("#runs", RunsTable)

    @property
    def detail(self) -> DetailPane:
        """The detail pane."""
        return self.query_one("#detail", DetailPane)

    @property
    def search(self) -> Input:
        """The search box (shown by ``/``)."""
        return self.query_one("#search", Input)

    @property
    def readonly_reason(self) -> str | None:  # type: ignore[override]
        return self.state.readonly_reason

    @property
    def shown_run(self) -> Run | None:
        return self.detail.run

    # ---- focus: the runs table and the step chain; moved at once (``set_focus``, not the deferred
    # ``focus()``) so that keys typed right after a move already go to the new place ----------------

    def _focus(self, widget: Widget) -> None:
        self.set_focus(widget)

    def action_open_run(self) -> None:
        """``enter`` on the runs table: go to the run's step chain."""
        self._focus(self.detail.steps)

    def action_switch_pane(self, direction: int) -> None:
        """``tab`` / ``shift+tab``: the runs table and the step chain, in turn. From anywhere else
        (the search box, an output box clicked) ``tab`` goes to the runs table, ``shift+tab`` to the
        step chain."""
        panes: list[Widget] = [self.runs, self.detail.steps]
        if self.focused in panes:
            self._focus(panes[(panes.index(self.focused) + direction) % len(panes)])
        else:
            self._focus(panes[0] if direction > 0 else panes[-1])

    def on_mount(self) -> None:
        self._title_runs()
        self._focus(self.runs)
        self.refresh_now()

    def _title_runs(self) -> None:
        title = Text("Runs")
        if self.query_state.status:
            title.append(" · status ")
            title.append_text(fmt.run_status(RunStatus(self.query_state.status)))
        if self.query_state.search:
            title.append(" · search ")
            title.append_text(literal(self.query_state.search, "bold"))
        self.query_one("#runs-panel").border_title = title

    def _status_line(self, error: str | None = None) -> None:
        """Counts per status, the time of the last refresh, the store, and a failed refresh's error.
        A read-only store is said first, so that no width cuts it off (why it is read-only is too
        long for one line: help and every refused action say it whole), then the name decisions
        are recorded under, when the console was given one."""
        head = Text("read-only  ", style="bold yellow") if self.state.readonly_reason else Text()
        if self.app.by is not None:
            head.append_text(Text.assemble("as ", literal(self.app.by, "bold"), "  "))
        tail = Text(f"refreshed {self.app.clock().strftime('%H:%M:%S')} UTC  ", style="dim")
        tail.append_text(literal(self.app.store_name, "dim"))
        if error:
            tail.append("  refresh failed: ", style="bold red")
            tail.append_text(literal(error, "red"))
        line = head + self._counts(named=True) + tail
        if line.cell_len > self.size.width - 2:  # too long: symbols only
            line = head + self._counts(named=False) + tail
        self.query_one("#status-line", Static).update(line, layout=False)  # one line, full width: no relayout

    def _counts(self, named: bool) -> Text:
        counts = Text()
        for status in RunStatus:
            if self.state.counts.get(status):
                label = fmt.run_status(status) if named else Text(RUN_SYMBOLS[status], style=fmt.RUN_COLORS[status])
                counts.append_text(label)
                counts.append(f" {self.state.counts[status]}  ")
        return counts if counts else Text("no runs  ", style="dim")

    # ---- live refresh (see the base screen) ---------------------------------------------------------

    def look(self) -> LiveRead:
        """Report the resumes that failed, then re-read what is shown (see
        :class:`~relaypoint.tui.data.RefreshRequest`)."""
        self._poll_resumes()
        running = bool(self.state.counts.get(RunStatus.RUNNING)) and not self.state.readonly_reason
        request = self.runs.refresh_request(self.query_state, self.selected, running)
        return lambda rt, connection: Refreshed(read_refresh(rt, connection, request))

    def changed(self) -> None:
        self.refresh_now()

    def on_refreshed(self, message: Refreshed) -> None:
        read = message.read
        if read.request.query != self.query_state:
            return
        now = self.app.clock()
        if read.state is not None:
            self.state = read.state
        self._status_line()
        self.runs.refreshed(read, now)
        self.runs.tick(now)
        self._follow_cursor()
        if read.detail is not None and read.detail.run.run_id == self.selected:
            self._show_detail(read.detail)
        elif self._shown is not None and self._shown[0].run.run_id == self.selected:
            shown, at = self._shown
            if now - at >= AGO_PERIOD:
                self._show_detail(shown)  # unchanged: only its relative times move on

    def on_resize(self) -> None:
        self._status_line()

    def on_refresh_failed(self, message: RefreshFailed) -> None:
        self._status_line(message.error)  # the next look retries

    def _poll_resumes(self) -> None:
        """Report each resume process that ended in failure: the reason from its log, one line, and
        what to do (for a changed definition: ``r`` again resumes allowing the drift, after asking)."""
        for started in list(self._resumes):
            code = started.process.poll()
            if code is None:
                continue
            self._resumes.remove(started)
            if code == 0:
                continue
            run = fmt.short_id(started.run_id)
            reason = failure_reason(self.app.db_url, started.log_from) or f"its process exited with status {code}"
            if "--allow-drift" in reason and not started.allow_drift:
                self._drifted[started.run_id] = reason
                then = "press r on it again to resume allowing the drift (it asks first), or fork it"
            else:
                then = f"the whole output is in {resume_log(self.app.db_url).name}"
            self.say(f"resume of run {run} failed: {reason.rstrip('.')}; {then}", title="Resume failed",
                     severity="error", timeout=20)

    # ---- the runs list and the selection ----------------------------------------------------------

    def _follow_cursor(self) -> None:
        run_id = self.runs.selected_key()
        if run_id != self.selected:
            self.selected = run_id
            self._enable_actions(set())
            if run_id is None:
                self.detail.show_empty(self._empty_message())
            else:
                self._read_detail(run_id)
        self.runs.load_ahead()

    def _enable_actions(self, names: set[str]) -> None:
        """Enable the buttons and footer keys of the actions in ``names``. The footer is refreshed
        only when that set changed: refreshing it rebuilds every footer key widget."""
        if names != self._enabled:
            self._enabled = names
            self.detail.enable_actions(names)
            self.refresh_bindings()

    def _empty_message(self) -> str:
        if self.query_state != RunQuery():
            return "No run matches the filters; press escape to clear them."
        return "No runs in this store yet. Start one with `relaypoint start WORKFLOW --app MODULE:ATTR`."

    @on(DataTable.RowHighlighted, "#runs")
    def _run_highlighted(self) -> None:
        self._follow_cursor()

    @on(Worker.StateChanged)
    def _page_ended(self, event: Worker.StateChanged) -> None:
        if event.worker is self._page and event.state in (WorkerState.ERROR, WorkerState.CANCELLED):
            self.runs.page_failed()

    @on(RunsTable.PageWanted)
    def _page_wanted(self, message: RunsTable.PageWanted) -> None:
        self._page = self._read_page(self.query_state, message.kind, message.anchor)

    @work(thread=True, exclusive=True, exit_on_error=False, group="page")
    def _read_page(self, query: RunQuery, kind: PageKind, anchor: RunKey | None) -> None:
        reader = self.app.reader
        with reader.runtime() as rt:
            version = (reader.connection, *rt.data_version())
            page = read_page(rt, query, kind, anchor)
        if not get_current_worker().is_cancelled:
            self.post_message(PageLoaded(page, version))

    def on_page_loaded(self, message: PageLoaded) -> None:
        if message.page.query == self.query_state:
            self.runs.page_loaded(message.page, message.version, self.app.clock())

    @work(thread=True, exclusive=True, exit_on_error=False, group="detail")
    def _read_detail(self, run_id: str) -> None:
        with self.app.reader.runtime() as rt:
            detail = load_detail(rt, run_id)
        if detail is not None and not get_current_worker().is_cancelled:
            self.post_message(DetailLoaded(detail))

    def on_detail_loaded(self, message: DetailLoaded) -> None:
        if message.detail.run.run_id == self.selected:
            self._show_detail(message.detail)

    def _show_detail(self, detail: RunDetail) -> None:
        self._shown = (detail, self.app.clock())
        self.detail.show(detail, self._shown[1])
        self._enable_actions({a.name for a in RUN_ACTIONS if self.actionable(a.name) is not None})
        self._ensure_output()

    @on(DataTable.RowHighlighted, "#steps")
    def _step_highlighted(self) -> None:
        self._ensure_output()

    def _ensure_output(self) -> None:
        step = self.detail.selected_step()
        run = self.detail.run
        if run is not None and step is not None and not self.detail.output_is_current():
            shown = self.detail.output
            if shown is not None and shown.seq != step.seq:
                shown = None  # another step's: this one starts at one page, lists folded
            self._read_output(run, step, shown.pages if shown else 1, self.detail.state, bool(shown and shown.expanded))

    @work(thread=True, exclusive=True, exit_on_error=False, group="output")
    def _read_output(self, run: Run, step: Any, pages: int, state: Any, expanded: bool = False) -> None:
        """Read and format (here, off the UI thread) ``pages`` pages of a step's output as it reads
        (``expanded``: its long lists whole; with, for a pattern, its summary; ``state``: the run's
        latest driver state, as read with it)."""
        with self.app.open_runtime() as rt:
            output = load_output(rt, run, step, pages, state, expanded)
        if output is not None and not get_current_worker().is_cancelled:
            self.post_message(OutputLoaded(output))

    def on_output_loaded(self, message: OutputLoaded) -> None:
        self.detail.show_output(message.output)

    def action_more_output(self) -> None:
        """``m``: show another page of the selected step's output (read and formatted in a worker)."""
        output, step, run = self.detail.output, self.detail.selected_step(), self.detail.run
        if self.why_not("more_output") is None and output is not None and step is not None and run is not None:
            self._read_output(run, step, output.pages + 1, self.detail.state, output.expanded)

    def action_expand(self) -> None:
        """``e``: show the selected step's output with its long lists whole (read in a worker)."""
        output, step, run = self.detail.output, self.detail.selected_step(), self.detail.run
        if self.why_not("expand") is None and output is not None and step is not None and run is not None:
            self._read_output(run, step, output.pages, self.detail.state, True)

    def action_pager(self) -> None:
        """``p``: open the selected step's whole output in ``$PAGER`` (formatted in a worker)."""
        output = self.detail.output
        if self.why_not("pager") is None and output is not None:
            self._prepare_pager(output)

    @work(thread=True, exclusive=True, exit_on_error=False, group="pager")
    def _prepare_pager(self, output: StepOutput) -> None:
        """The whole output as the pager shows it, with terminal controls made visible."""
        self.post_message(PagerReady(output, pager_text(output.value).encode("utf-8", "surrogatepass")))

    def on_pager_ready(self, message: PagerReady) -> None:
        """Suspend the console and run ``$PAGER`` (``less`` when unset) on the output."""
        command = shlex.split(os.environ.get("PAGER") or "less")
        output = message.output
        try:
            with self.app.suspend():
                subprocess.run(command, input=message.text, check=False)
        except SuspendNotSupported:
            self.say(f"no terminal to open a pager in; {output.whole} prints the whole output", severity="warning")
        except OSError as e:
            self.say(f"could not start the pager {command[0]!r} ({e.strerror}); set $PAGER", severity="error")

    # ---- filters ------------------------------------------------------------------------------------

    def _set_query(self, query: RunQuery) -> None:
        if query == self.query_state:
            return
        self.query_state = query
        self._title_runs()
        self.runs.forget()
        self.refresh_now()

    def action_search(self) -> None:
        """``/`` (a priority binding, acted on before the next key is dispatched): show the search
        box and focus it at once, so everything typed after ``/`` lands in it."""
        self.search.display = True
        self._focus(self.search)

    @on(Input.Changed, "#search")
    def _search_changed(self) -> None:
        """Search once typing pauses for :data:`SEARCH_DEBOUNCE_SECONDS`: a word typed is one
        query, not one per key."""
        if self._search_timer is not None:
            self._search_timer.stop()
        self._search_timer = self.set_timer(SEARCH_DEBOUNCE_SECONDS, self._apply_search)

    def _apply_search(self) -> None:
        if self._search_timer is not None:
            self._search_timer.stop()
            self._search_timer = None
        self._set_query(RunQuery(self.query_state.status, self.search.value.strip() or None))

    @on(Input.Submitted, "#search")
    def _search_submitted(self) -> None:
        self._apply_search()
        self._focus(self.runs)

    def action_cycle_status(self) -> None:
        nxt = STATUS_CYCLE[(STATUS_CYCLE.index(self.query_state.status) + 1) % len(STATUS_CYCLE)]
        self._set_query(RunQuery(nxt, self.query_state.search))

    def action_back(self) -> None:
        search = self.search
        if search.has_focus:
            search.value = ""
            search.display = False
            self._focus(self.runs)
        elif not self.runs.has_focus:
            self._focus(self.runs)
        elif self.query_state != RunQuery():
            search.value = ""
            search.display = False
            self._set_query(RunQuery())

    def action_next_pending(self) -> None:
        """``n``: the review queue, at the oldest pending decision of all runs."""
        self.app.push_screen(ReviewScreen())

    def action_previous_pending(self) -> None:
        """``N``: the review queue, at the newest pending decision."""
        self.app.push_screen(ReviewScreen(move=-1))

    def palette_run(self, action: str, argument: str | None) -> None:
        """Run the palette's ``action`` (``filter_status``: with status ``argument``, None for all),
        or say in one line why it does not apply."""
        if action == "filter_status":
            self._set_query(RunQuery(argument, self.query_state.search))
        else:
            super().palette_run(action, argument)

    def open_run(self, run_id: str) -> None:
        """The palette's run by id prefix: show it (see :meth:`show_run`)."""
        self.show_run(run_id)

    def show_run(self, run_id: str) -> None:
        """Show run ``run_id`` alone in the runs list (its full id as the search; escape clears it)."""
        self.search.value = run_id
        self.search.display = True
        self._set_query(RunQuery(None, run_id))
        self._focus(self.runs)

    # ---- actions on the selected run ------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out (None) the run and output actions that do not apply now (see :meth:`why_not`),
        and ``/`` while the search box has the focus (so the key is typed into it)."""
        if action == "search":
            return None if self.search.has_focus else True
        return super().check_action(action, parameters)

    def why_not(self, action: str) -> str | None:
        """Why ``action`` (a run or output action) does not apply now, in one line; None when it
        does. The run's own reasons come from the action registry (the runtime's rules)."""
        run = self.detail.run
        if run is None or run.run_id != self.selected:
            return "no run is selected" if self.selected is None else "the run is still being read"
        if action in OUTPUT_ACTIONS:
            return self.detail.why_no_output(action)
        return self.refusal(action, run)

    @on(Button.Pressed, "#run-actions Button")
    def _button(self, event: Button.Pressed) -> None:
        getattr(self, f"action_{(event.button.id or '').removeprefix('do-')}")()

    def approve_form(self, run: Run) -> ApproveScreen:
        """The approve form, opened at once (keys typed right after ``a`` go to it), with the gated
        step's output when the detail pane shows it (the pending step is selected by default),
        else reading it and filling the form when it arrives."""
        output = self.detail.output
        step = self.detail.selected_step()
        paused = paused_execution(run.tasks, run.pending) if run.pending is not None else None
        if (output is not None and step is not None and paused is not None
                and step.seq == paused.seq and self.detail.output_is_current()):
            form = ApproveScreen(run, output.value, output.recorded, output.editor, output.readable)
        else:
            form = ApproveScreen(run)
            self._read_gated_output(run)
        self._approve_form = form
        return form

    @work(thread=True, exclusive=True, exit_on_error=False, group="prepare")
    def _read_gated_output(self, run: Run) -> None:
        assert run.pending is not None
        step = paused_execution(run.tasks, run.pending)
        with self.app.open_runtime() as rt:
            output = load_output(rt, run, step) if step is not None else None
        self.post_message(ApprovalReady(run.run_id, output))

    async def on_approval_ready(self, message: ApprovalReady) -> None:
        form = self._approve_form
        if form is None or form.run.run_id != message.run_id or form not in self.app.screen_stack:
            return
        output = message.output
        if output is None:
            await form.load(None, False, None, None)
        else:
            await form.load(output.value, output.recorded, output.editor, output.readable)

    def action_fork(self) -> None:
        """Open the fork form from the highlighted step; from a pattern's call, from that call's
        iteration of the pattern."""
        run = self.actionable("fork")
        step = self.detail.selected_step()
        if run is None or step is None:
            return
        point = None
        if step.parent is not None:
            point = ForkPoint(step.name, step.iteration, fork_point(self.detail.kind_of_group(step), step))
        self.decide(ForkScreen(run, step.name, point),
                     partial(changes.fork, run, app_spec=self.app.app_spec))

    def action_cancel(self) -> None:
        if (run := self.actionable("cancel")) is None:
            return
        question = Text.assemble("Cancel run ", literal(fmt.short_id(run.run_id)), " (", literal(run.workflow, "bold"),
                                 ", ", fmt.run_status(run.status), ")?\nIts remaining steps are cancelled; "
                                 "a step still running will not be recorded. It can be forked later.")
        self.decide(ConfirmScreen("Cancel run", question), lambda _yes, rt: changes.cancel(run, rt, by=self.app.by))

    def action_resume(self) -> None:
        """Resume the run in a separate process. When the last resume started here was refused
        because the workflow changed, ask first, then resume allowing the drift."""
        run = self.actionable("resume")
        if run is None:
            return
        app_spec = self.app.app_spec
        drift = self._drifted.get(run.run_id)
        if drift is None:
            self._start_resume(run.run_id, app_spec, False)
            return
        question = Text.assemble(
            "Resume run ", literal(fmt.short_id(run.run_id)), " allowing the drift?\n", literal(drift, "yellow"),
            "\nCompleted steps are kept by name, the chain follows the new definition, and steps it "
            "no longer has are dropped (recorded in the run's events).")

        def answered(yes: bool | None) -> None:
            if yes:
                self._drifted.pop(run.run_id, None)
                self._start_resume(run.run_id, app_spec, True)

        self.app.push_screen(ConfirmScreen("Resume allowing drift", question), answered)

    @work(thread=True, exit_on_error=False, group="resume")
    def _start_resume(self, run_id: str, app_spec: str, allow_drift: bool) -> None:
        try:
            with self.app.open_runtime() as rt:
                rt.check_resumable(run_id)
            log_from = log_size(self.app.db_url)
            process = spawn_resume(self.app.db_url, app_spec, run_id, allow_drift=allow_drift,
                                   durability=self.app.durability)
        except (RelaypointError, OSError) as e:
            self.post_message(ActionFailed(str(e)))
            return
        self.post_message(ResumeStarted(run_id, process, log_from, allow_drift))

    def on_resume_started(self, message: ResumeStarted) -> None:
        self._resumes.append(message)
        self.say(f"resuming run {fmt.short_id(message.run_id)} in process {message.process.pid}"
                 + (" allowing drift" if message.allow_drift else "") + "; it keeps going if the console closes")
        self.refresh_now()
