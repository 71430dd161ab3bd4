"""The detail pane: the selected run's header, action buttons, step chain, one step's output and
error, and the run's events. It only displays; every change is asked of the screen."""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Vertical, VerticalScroll
from textual.geometry import Size
from textual.widgets import Button, Static
from textual.widgets.data_table import ColumnKey

from relaypoint.models import Event, Run, StepRecord
from relaypoint.status import StepStatus
from relaypoint.usage import Usage
from relaypoint.views.display import clean, json_text, literal
from relaypoint.views.patterns import describe, kind_of, paused_execution, progress, shown_status, tree

from .. import format as fmt
from ..actions import RUN_ACTIONS
from ..data import RunDetail, StepOutput
from ..patterns import call_name, group_name
from .readable_output import ReadableOutput
from .tables import KeyedTable

STATUS_WIDTH = max(fmt.step_status(status).cell_len for status in StepStatus)
STEP_COLUMNS = (("step", "Step", None), ("status", "Status", STATUS_WIDTH), ("attempts", "Tries", 5),
                ("duration", "Took", 7))
"""The step chain's columns. The step name takes the width the others leave (see
:meth:`StepsTable.fit_columns`), so a long name is cut, never pushing Tries and Took out of view."""
MIN_STEP_WIDTH = 8


@dataclass(frozen=True)
class CallKey:
    """The step chain's row id of a pattern's call: the pattern's name, the call's iteration and
    agent (unique in a run, and unchanged when a drift-allowed resume renumbers the executions).
    A top-level step's row id is its name; a ``CallKey`` never equals a name."""

    pattern: str
    iteration: int
    agent: str | None

    @classmethod
    def of(cls, call: StepRecord) -> CallKey:
        """The row id of ``call`` (a pattern's child)."""
        return cls(call.name, call.iteration, call.agent)


StepKey = str | CallKey
"""A step chain row id: a top-level step's name, or a pattern call's :class:`CallKey`."""


def key_of(step: StepRecord) -> StepKey:
    """The step chain row id of an execution."""
    return step.name if step.parent is None else CallKey.of(step)


def _grid() -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(ratio=1)
    return grid


def _when(at: datetime | None, now: datetime) -> Text:
    return Text(f"{fmt.utc(at)}  ({fmt.ago(at, now)})")


HEADER_CHARS = 1_000
"""Characters of a header field (input, error, prompt) or an event's detail value shown: the
header is a few lines high, the events box a dozen."""


def one_line_json(value: Any) -> Text:
    """``value`` as compact JSON on one line, shown literally, cut with an ellipsis where the
    width ends (the whole value is in the fork form's input editor)."""
    text = literal(json.dumps(value, ensure_ascii=False, separators=(", ", ": "))[:HEADER_CHARS])
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def run_header(run: Run, now: datetime, usage: Usage = Usage()) -> RenderableType:
    """The run's identity, then what needs a person (what it waits for, its error, a step that did
    not complete), then its input, progress, ``usage`` (when it made model requests), times,
    lineage and executor: a short terminal shows only the first lines."""
    grid = _grid()
    grid.add_row("run", Text.assemble(literal(run.run_id), "  ", fmt.run_status(run.status)))
    if run.pending is not None:
        cp = run.pending
        paused = paused_execution(run.tasks, cp)
        grid.add_row("waiting", Text.assemble(
            literal(cp.kind, "bold yellow"), " at step ",
            literal(describe(paused, run.tasks) if paused is not None else cp.step or "?", "bold"),
            f" (checkpoint {cp.checkpoint_id}, {fmt.ago(cp.created_at, now)})"))
        label = "prompt" if cp.kind == "input" else "reason"
        grid.add_row(label, literal((cp.reason or "")[:HEADER_CHARS], multiline=True))
        if cp.deadline_at is not None:
            left = "passed" if cp.deadline_at <= now else "open"
            grid.add_row("deadline", Text(f"{fmt.utc(cp.deadline_at)} ({left}; then the run is rejected)"))
    if run.error:
        grid.add_row("error", literal(run.error[:HEADER_CHARS], "red"))
    orphan = next((t for t in run.tasks if t.status == StepStatus.INTERRUPTED), None)
    if orphan is not None:
        then = ("pauses for a person to decide" if orphan.options.get("on_orphan") == "hold"
                else f"re-runs it as attempt {orphan.attempts + 1}")
        grid.add_row("not done", Text.assemble(
            "step ", literal(describe(orphan, run.tasks), "bold"),
            f" was running (attempt {orphan.attempts}) when its process "
            "died; its output was never recorded, so it did not complete. Resume ", then, "."))
    grid.add_row("input", one_line_json(run.input))
    grid.add_row("progress", Text(f"{run.steps_done}/{run.steps_total} steps"
                                  + (f", at {clean(run.current_step)}" if run.current_step else "")))
    if usage.used:
        grid.add_row("usage", Text(usage.line(), style="dim"))
    grid.add_row("created", _when(run.created_at, now))
    grid.add_row("updated", _when(run.updated_at, now))
    if run.parent_run_id:
        grid.add_row("parent", Text.assemble(
            literal(fmt.short_id(run.parent_run_id)), (" (deleted)", "dim") if run.parent_deleted else "",
            " forked at step ", literal(run.forked_from_step or "?", "bold"),
            "" if run.forked_from_iteration is None else f", iteration {run.forked_from_iteration}"))
    if run.forks:
        grid.add_row("forks", literal(", ".join(fmt.short_id(f) for f in run.forks)))
    if run.lease is not None:
        lease = run.lease
        grid.add_row("executor", Text.assemble(
            f"pid {lease.pid} on ", literal(lease.host), f", heartbeat {fmt.ago(lease.heartbeat_at, now)}, "
            f"lease until {fmt.utc(lease.expires_at)}"))
    return grid


def step_cells(step: StepRecord, now: datetime, name: Text | None = None) -> list[Text]:
    """The cells of one step row: name (``name``: drawn otherwise; cut with an ellipsis where its
    column ends), status, attempts, duration (running: so far)."""
    end = now if step.status == StepStatus.RUNNING else step.finished_at
    name = literal(step.name) if name is None else name
    name.no_wrap, name.overflow = True, "ellipsis"
    return [name, fmt.step_status(step.status), Text(str(step.attempts), justify="right"),
            Text(fmt.duration(step.started_at, end), justify="right")]


def group_cells(group: StepRecord, kind: str, calls: list[StepRecord], state: Any, expanded: bool,
                now: datetime) -> list[Text]:
    """The cells of a pattern's row: ``▸ name  kind · progress``, the status it shows (see
    :func:`~relaypoint.views.patterns.shown_status`), its result's attempts, and the time from its
    first call to its result (so far, while a call runs)."""
    status = shown_status(group, calls)
    start = calls[0].started_at if calls and calls[0].started_at else group.started_at
    end = group.finished_at if group.status == StepStatus.COMPLETED else (
        now if status == StepStatus.RUNNING else (calls[-1].finished_at if calls else None))
    name = group_name(group, kind, progress(group, calls, state), expanded)
    name.no_wrap, name.overflow = True, "ellipsis"
    return [name, fmt.step_status(status), Text(str(group.attempts), justify="right"),
            Text(fmt.duration(start, end), justify="right")]


def chain_rows(run: Run, state: Any, expanded: set[str], now: datetime) -> dict[Hashable, list[Text]]:
    """The step chain's rows, keyed by :func:`key_of`, in order: each top-level step, and each
    pattern with, when its name is in ``expanded``, its calls under it. ``state``: the run's
    latest driver state (a planner's progress reads it)."""
    rows: dict[Hashable, list[Text]] = {}
    for top, calls in tree(run.tasks):
        kind = kind_of(top)
        if kind is None:
            rows[top.name] = step_cells(top, now)
            continue
        rows[top.name] = group_cells(top, kind, calls, state, top.name in expanded, now)
        if top.name in expanded:
            for n, call in enumerate(calls):
                rows[CallKey.of(call)] = step_cells(call, now, call_name(kind, call, n == len(calls) - 1))
    return rows


def _cut(text: str) -> str:
    return text if len(text) <= HEADER_CHARS else text[:HEADER_CHARS] + "…"


def _detail_text(detail: Any) -> Text:
    """An event's detail as ``key=value`` pairs, each value cut at :data:`HEADER_CHARS` (an error
    quoted in full is in the step's output box, bounded there too)."""
    if not detail:
        return Text()
    if not isinstance(detail, dict):
        return literal(_cut(json_text(detail)))
    out = Text()
    for key, value in detail.items():
        if value is None:
            continue
        if out:
            out.append("  ")
        out.append_text(literal(_cut(f"{key}="), "dim"))
        out.append_text(literal(_cut(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))))
    return out


def events_view(events: list[Event]) -> RenderableType:
    """The run's events, newest first: time (with the date when it changes), kind, step and
    actor, and under them the detail."""
    if not events:
        return Text("no events", style="dim")
    table = Table.grid(padding=(0, 1))
    table.add_column(style="dim", no_wrap=True)
    table.add_column(ratio=1)
    day = None
    for e in reversed(events):
        when = fmt.clock_time(e.at) if e.at.date() != day else e.at.strftime("%H:%M:%S")
        day = e.at.date()
        what = Text.assemble(literal(e.kind, "bold"), " ", literal(e.step))
        if e.actor:
            what.append_text(Text.assemble(" by ", literal(e.actor, "cyan")))
        detail = _detail_text(e.detail)
        if detail:
            what.append("\n")
            what.append_text(detail)
        table.add_row(when, what)
    return table


def default_step(run: Run) -> StepKey | None:
    """The row to show first: the execution the run waits at (the pending checkpoint's: the
    output a reviewer approves, the step asking for input, a person's turn in a pattern, the
    orphan to decide), else the step or pattern it works on, else the failed one, else the last
    one with a recorded output, else the first."""
    tops = [s for s in run.tasks if s.parent is None]
    if not tops:
        return None
    paused = paused_execution(run.tasks, run.pending) if run.pending is not None else None
    if paused is not None:
        return key_of(paused)
    names = [s.name for s in tops]
    if run.current_step in names:
        return run.current_step
    failed = [s.name for s in tops if s.status == StepStatus.FAILED]
    done = [s.name for s in tops if s.has_output]
    return (failed or done[-1:] or names)[0]


class StepsTable(KeyedTable):
    """The step chain, keyed by :data:`StepKey`. Besides moving in it, ``pgdn``/``pgup`` scroll
    the selected step's output, so a long output can be read without leaving the chain; on a
    pattern, ``enter``/``space`` expand or collapse it, ``right`` expands it, ``left`` collapses
    it (from one of its calls too, moving to it)."""

    BINDINGS = [
        Binding("pagedown", "scroll_output(1)", "Scroll output down", show=False),
        Binding("pageup", "scroll_output(-1)", "Scroll output up", show=False),
        Binding("enter,space", "expand(None)", "Expand or collapse", show=False),
        Binding("right", "expand(True)", "Expand", show=False),
        Binding("left", "expand(False)", "Collapse", show=False),
    ]

    def action_expand(self, expand: bool | None) -> None:
        """Expand (True), collapse (False) or toggle (None) the pattern under the cursor, or the
        one whose call is under it (collapsing it moves the cursor to its row)."""
        self.query_ancestor(DetailPane).expand(self.selected_key(), expand)

    def on_resize(self) -> None:
        self.fit_columns()

    def fit_columns(self) -> None:
        """Give the step name column the width the other columns leave."""
        fixed = sum(width or 0 for _, _, width in STEP_COLUMNS) + 2 * self.cell_padding * len(STEP_COLUMNS)
        width = max(MIN_STEP_WIDTH, self.size.width - self.styles.scrollbar_size_vertical - fixed)
        column = self.columns.get(ColumnKey("step"))
        if column is not None and (column.auto_width or column.width != width):
            column.width, column.auto_width = width, False
            # DataTable measures its scrollable width only as rows and cells change: say it here.
            self.virtual_size = Size(sum(c.get_render_width(self) for c in self.columns.values()),
                                     self.virtual_size.height)
            self.refresh()

    def action_scroll_output(self, direction: int) -> None:
        box = self.screen.query_one("#output-box", VerticalScroll)
        # Not animated: keys pressed in a burst each move a whole page.
        if direction > 0:
            box.scroll_page_down(animate=False)
        else:
            box.scroll_page_up(animate=False)


class DetailPane(Vertical):
    """The selected run. ``show`` re-renders it from a fresh read; ``show_output`` fills the
    output box. The step cursor starts on the run's :func:`default_step` and follows it as the run
    moves on (say, to a new approval gate) until the user moves it to another step."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run: Run | None = None
        self.state: Any = None
        self.output: StepOutput | None = None
        self.expanded: set[str] = set()
        self._rows: dict[Hashable, StepRecord] = {}
        self._shown_at: datetime | None = None
        self._output_key: object = None
        self._output_step: int | None = None
        self._events_key: object = None
        self._auto_step: StepKey | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="detail-run"):
            yield Static(id="run-header")
            with Grid(id="run-actions"):
                for action in RUN_ACTIONS:
                    button = Button(action.label, id=f"do-{action.name}", compact=True, disabled=True,
                                    tooltip=f"{action.tooltip} (key {action.key})")
                    button.can_focus = False  # for the mouse; keys act on the selected run directly
                    yield button
            yield StepsTable(STEP_COLUMNS, id="steps")
        with Vertical(id="detail-step"):
            with VerticalScroll(id="output-box"):
                yield ReadableOutput(id="output")
            with VerticalScroll(id="events-box"):
                yield Static(id="events")

    def on_mount(self) -> None:
        self.query_one("#steps").border_title = "Steps"
        self.query_one("#output-box").border_title = "Output"
        self.query_one("#events-box").border_title = "Events, newest first"
        self.show_empty("loading…")

    @property
    def steps(self) -> StepsTable:
        """The step chain table (keyed by :data:`StepKey`)."""
        return self.query_one("#steps", StepsTable)

    def selected_step(self) -> StepRecord | None:
        """The execution under the steps cursor (a step, a pattern's row, or one of its calls)."""
        key = self.steps.selected_key()
        return None if self.run is None or key is None else self._rows.get(key)

    def kind_of_group(self, step: StepRecord) -> str | None:
        """The pattern kind of ``step`` (a pattern's row) or of its pattern (one of its calls,
        which share its name); None for a chain step."""
        group = self._rows.get(step.name)
        return kind_of(group) if group is not None else None

    def label(self, step: StepRecord) -> str:
        """``step`` in words (see :func:`~relaypoint.views.patterns.describe`)."""
        return describe(step, self.run.tasks if self.run is not None else ())

    def expand(self, key: Hashable | None, expand: bool | None) -> None:
        """Expand (True), collapse (False) or toggle (None) the pattern whose row has row id
        ``key``; from one of its calls, collapse it (False) and move the cursor to its row.
        Anything else is left alone."""
        step = self._rows.get(key) if key is not None else None
        if self.run is None or step is None or self.kind_of_group(step) is None:
            return
        name = step.name
        if step.parent is not None and expand is not False:
            return  # a call: its pattern is expanded already
        if expand is None:
            expand = name not in self.expanded
        if expand:
            self.expanded.add(name)
        else:
            self.expanded.discard(name)
        self._patch_chain()
        if not expand:
            self.steps.move_cursor(row=self.steps.index_of(name), scroll=True)

    def show_empty(self, message: str) -> None:
        """No run to show (empty store or nothing matches the filters)."""
        self.run = None
        self.output = None
        self.expanded = set()
        self._rows = {}
        self._auto_step = None
        self.border_title = "Run"
        self.query_one("#run-header", Static).update(Text(message, style="dim"))
        self.steps.patch({})
        self._output_key = self._events_key = None
        self.query_one("#output-box").border_title = "Output"
        self.query_one("#output", ReadableOutput).show_soon(Text(""))
        self.query_one("#events", Static).update("")
        self.enable_actions(set())

    def show(self, detail: RunDetail, now: datetime) -> None:
        """Show a run (freshly read). A different run starts at its :func:`default_step` (its
        patterns collapsed but the one holding that row); the same run moves there too when its
        default changed and the user left the cursor where it was put."""
        run, events = detail.run, detail.events
        switched = self.run is None or self.run.run_id != run.run_id
        self.run, self.state, self._shown_at = run, detail.state, now
        self._rows = {key_of(s): s for s in run.tasks}
        self.border_title = Text.assemble("Run ", literal(fmt.short_id(run.run_id)), " · ", literal(run.workflow))
        self.query_one("#run-header", Static).update(run_header(run, now, detail.usage))
        if switched:
            self.output = None
            self.expanded = set()
            for box in self.query("#output-box, #events-box").results(VerticalScroll):
                box.scroll_home(animate=False)
        follow = switched or self.steps.selected_key() == self._auto_step
        if follow:
            self._auto_step = default_step(run)
            if isinstance(self._auto_step, CallKey):
                self.expanded.add(self._auto_step.pattern)
        self._patch_chain()
        if follow and self._auto_step is not None and self._auto_step != self.steps.selected_key():
            self.steps.move_cursor(row=self.steps.index_of(self._auto_step), scroll=True)
        events_key = (run.run_id, len(events), events[-1].event_id if events else None)
        if events_key != self._events_key:
            self._events_key = events_key
            self.query_one("#events", Static).update(events_view(events))
        self._render_output()

    def _patch_chain(self) -> None:
        assert self.run is not None and self._shown_at is not None
        self.steps.patch(chain_rows(self.run, self.state, self.expanded, self._shown_at))

    def show_output(self, output: StepOutput) -> None:
        """Show a step output just read, if it is still the selected step's."""
        step = self.selected_step()
        if self.run is None or step is None or (output.run_id, output.seq) != (self.run.run_id, step.seq):
            return
        self.output = output
        self._render_output()

    def why_no_output(self, action: str) -> str | None:
        """Why the output key of ``action`` does not apply (``more_output``: ``m``, which needs
        more to show; ``expand``: ``e``, which needs a folded list; ``pager``: ``p``, which needs a
        recorded output); None when it does."""
        step = self.selected_step()
        if step is None:
            return "no step is selected"
        what = self.label(step)
        if not self.output_is_current():
            return f"the output of step {what} is still being read"
        assert self.output is not None
        if not self.output.recorded:
            return f"step {what} has no output recorded"
        if action == "more_output" and not self.output.more:
            return f"the output of step {what} is shown whole"
        if action == "expand" and not self.output.view.folded:
            return f"no list of the output of step {what} is folded"
        return None

    def output_is_current(self) -> bool:
        """True when the output box holds the selected step's output as of the run's last change."""
        step = self.selected_step()
        return (step is not None and self.output is not None and self.run is not None
                and (self.output.run_id, self.output.seq, self.output.version)
                == (self.run.run_id, step.seq, self.run.updated_at))

    def _render_output(self) -> None:
        step = self.selected_step()
        current = self.output if step and self.output and self.output.seq == step.seq else None
        if (step, current) == self._output_key:
            return
        self._output_key = (step, current)
        box = self.query_one("#output-box", VerticalScroll)
        if (step and step.seq) != self._output_step:
            self._output_step = step and step.seq
            box.scroll_home(animate=False)
        output = self.query_one("#output", ReadableOutput)
        if step is None:
            box.border_title = "Output"
            output.show_soon(Text(""))
            return
        kind = kind_of(step)
        box.border_title = Text.assemble("Output of ", literal(self.label(step)), f" ({kind})" if kind else "")
        output.show_soon(current.view if current is not None else Text("loading…", style="dim"))

    def enable_actions(self, names: set[str]) -> None:
        """Enable the buttons of the actions in ``names``, disable the others."""
        for action in RUN_ACTIONS:
            self.query_one(f"#do-{action.name}", Button).disabled = action.name not in names
