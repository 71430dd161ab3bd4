"""The runs list: one row per run, newest first, keyed by run id, loaded a page at a time."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.text import Text
from textual.binding import Binding

from relaypoint.display import literal
from relaypoint.models import RunSummary

from . import format as fmt
from .data import RunKey, RunsPage, run_key
from .tables import KeyedTable

RUN_COLUMNS = (
    ("id", "ID", 8), ("workflow", "Workflow", 14), ("status", "Status", 19), ("progress", "Steps", 5),
    ("step", "Current step", 12), ("updated", "Updated", 8), ("parent", "Parent", 8),
)
NEAR_END = 5
"""Rows from the end at which the next page is read."""


def _fit(text: Text, width: int) -> Text:
    text.truncate(width, overflow="ellipsis")
    return text


def run_cells(run: RunSummary, now: datetime) -> list[Text]:
    """The cells of one run's row (stored text shown literally, cut to the column width)."""
    return [
        literal(fmt.short_id(run.run_id)),
        _fit(literal(run.workflow), 14),
        fmt.run_status(run.status),
        Text(f"{run.steps_done}/{run.steps_total}", justify="right"),
        _fit(literal(run.current_step or ""), 12),
        Text(fmt.ago(run.updated_at, now), justify="right"),
        literal(fmt.short_id(run.parent_run_id), "dim"),
    ]


class RunsTable(KeyedTable):
    """The runs list. :meth:`apply` merges a refresh, :meth:`extend` adds an older page; both
    patch rows in place so the cursor stays on its run. ``enter`` runs the screen's ``open_run``
    action (at once, not through a message, so keys typed right after it already go where it moved
    the focus); a mouse click only highlights."""

    BINDINGS = [Binding("enter", "screen.open_run", "Open run", show=False)]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(RUN_COLUMNS, **kwargs)
        self.runs: dict[str, RunSummary] = {}
        self.more = False

    def boundary(self) -> RunKey | None:
        """The listing position of the oldest run shown (None when empty)."""
        return run_key(next(reversed(self.runs.values()))) if self.runs else None

    def near_end(self) -> bool:
        """True when the cursor is close to the last row and older runs exist."""
        return self.more and self.cursor_row >= self.row_count - NEAR_END

    def forget(self) -> None:
        """Forget what was read (the filters changed): the next refresh reads the first page again
        and replaces every row."""
        self.runs = {}
        self.more = False

    def apply(self, page: RunsPage, now: datetime) -> None:
        """Show a refresh: rows down to ``page.boundary`` are replaced by ``page.runs``; older rows
        (a page read since the refresh started) are kept."""
        kept = {} if page.boundary is None else {
            rid: r for rid, r in self.runs.items() if run_key(r) < page.boundary}
        if page.boundary is None or not kept:
            self.more = page.more
        self._show({r.run_id: r for r in page.runs} | kept, now)

    def extend(self, page: RunsPage, now: datetime) -> None:
        """Add an older page below the rows shown."""
        self.more = page.more
        self._show(self.runs | {r.run_id: r for r in page.runs}, now)

    def _show(self, runs: dict[str, RunSummary], now: datetime) -> None:
        ordered = sorted(runs.values(), key=run_key, reverse=True)
        self.runs = {r.run_id: r for r in ordered}
        self.patch({r.run_id: run_cells(r, now) for r in ordered})
