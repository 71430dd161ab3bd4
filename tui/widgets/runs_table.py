"""The runs list: one row per run, newest first, keyed by run id.

It holds a contiguous window of the listing, never the whole of a big store: the first page, then
pages read as the cursor nears either end (keyset pages, whatever the depth), at most
:data:`MAX_ROWS` rows (rows far behind the cursor are dropped, and read again if it goes back);
``end``/``G`` replace it with the oldest page, ``home``/``g`` with the newest, and the window grows
from there at both ends. Movement past the loaded rows is queued and replayed when the page
arrives, so no key is lost. A live refresh re-reads only the rows on screen and a margin, plus the
runs added above the newest, and changes only the cells whose text changed (relative times: rows
on screen only).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.message import Message

from relaypoint.models import RunSummary
from relaypoint.views.display import literal

from .. import format as fmt
from ..data import PageKind, RefreshRead, RefreshRequest, RunKey, RunQuery, RunsPage, Version, run_key
from .tables import KeyedTable, OrderedCell

RUN_COLUMNS = (
    ("id", "ID", 8), ("workflow", "Workflow", 14), ("status", "Status", 19), ("progress", "Steps", 5),
    ("step", "Current step", 12), ("updated", "Updated", 8), ("parent", "Parent", 8),
)
COLUMN_KEYS = tuple(c[0] for c in RUN_COLUMNS)
UPDATED = COLUMN_KEYS.index("updated")
NEAR_END = 5
"""Rows from either end of the loaded rows at which the next page is read ahead of the cursor."""
WINDOW_MARGIN = 25
"""Rows above and below the screen that a live refresh re-reads with the rows on it."""
MAX_ROWS = 1000
"""Most rows loaded: a page added at one end beyond it drops as many rows at the other end, so
memory and refresh cost do not grow with how far the list is scrolled."""
AGO_PERIOD = timedelta(seconds=10)
"""How often the relative "Updated" times of the rows on screen are brought up to date when
nothing else changed. A changed cell makes ``DataTable`` render every cell on screen again (its
cell cache is keyed by the table's update count), so the times that changed meanwhile are changed
together, not one re-render a second."""


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
        _updated(run, now),
        literal(fmt.short_id(run.parent_run_id), "dim"),
    ]


def _updated(run: RunSummary, now: datetime) -> Text:
    return Text(fmt.ago(run.updated_at, now), justify="right")


class RunsTable(KeyedTable):
    """The runs list (see the module's docstring). The screen builds each live refresh from
    :meth:`refresh_request` and hands back what was read to :meth:`refreshed`; pages the table
    asks for with :class:`PageWanted` come back through :meth:`page_loaded`. ``enter`` runs the
    screen's ``open_run`` action (at once, not through a message, so keys typed right after it
    already go where it moved the focus); a mouse click only highlights.

    ``runs``: the loaded runs in display order. ``more``/``more_above``: older runs exist below
    the last row / newer runs above the first. ``version``: the store version of the last refresh
    (None: nothing read yet for the current filters). ``pending``: rows of movement past the loaded
    rows, replayed when the page arrives."""

    BINDINGS = [
        Binding("enter", "screen.open_run", "Open run", show=False),
        Binding("home,g", "first", "First run", show=False),
        Binding("end,G", "last", "Last run", show=False),
    ]

    @dataclass
    class PageWanted(Message):
        """The table needs a page of the listing (``anchor``: the loaded position it continues from)."""

        kind: PageKind
        anchor: RunKey | None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(RUN_COLUMNS, **kwargs)
        self.runs: dict[str, RunSummary] = {}
        self.more = False
        self.more_above = False
        self.version: Version | None = None
        self.pending = 0
        self.wanted: tuple[PageKind, RunKey | None] | None = None
        self._order: list[str] = []
        self._cells: dict[str, list[Text]] = {}
        self._read_at: dict[str, Version] = {}
        self._request: RefreshRequest | None = None
        self._ticked: datetime | None = None

    # ---- what a refresh reads, and what it read ------------------------------------------------

    def forget(self) -> None:
        """The filters changed: the next refresh reads the first page and replaces every row (they
        stay shown until then); pages and movement asked for under the old filters are dropped."""
        self.version = None
        self.more = self.more_above = False
        self.pending = 0
        self.wanted = None
        self._request = None

    def refresh_request(self, query: RunQuery, selected: str | None, sweep: bool) -> RefreshRequest:
        """What the next live refresh must read: the rows on screen and :data:`WINDOW_MARGIN`
        around them, the runs added above the newest (unless newer runs than the first row are
        not loaded anyway), or the first page when nothing is loaded."""
        if self.version is None or not self._order:
            request = RefreshRequest(query, self.version, sweep, None, False, None, True, selected)
        else:
            first = max(0, int(self.scroll_y) - WINDOW_MARGIN)
            keys = self._order[first:int(self.scroll_y) + self._page_rows() + WINDOW_MARGIN]
            window = (run_key(self.runs[keys[0]]), run_key(self.runs[keys[-1]]))
            stale = any(self._read_at[key] != self.version for key in keys)
            top = None if self.more_above else run_key(self.runs[self._order[0]])
            request = RefreshRequest(query, self.version, sweep, window, stale, top, False, selected)
        self._request = request
        return request

    def refreshed(self, read: RefreshRead, now: datetime) -> None:
        """Show what a live refresh read; dropped when the rows were replaced since it was asked
        (a jump, new filters): the next refresh asks again."""
        if read.request is not self._request:
            return
        self._request = None
        self.version = read.version
        if read.first is not None:
            self._replace(read.first, read.version, now)
            self.move_by(0)  # movement typed before the first page arrived
            return
        if read.window is not None and read.request.window is not None:
            newest, oldest = read.request.window
            shown = self._order[self.get_row_index(newest[1]):self.get_row_index(oldest[1]) + 1]
            fresh = {r.run_id for r in read.window}
            self._update(read.window, [key for key in shown if key not in fresh], read.version, now)
        if read.newer is not None:
            self.more_above = read.newer.more
            self._update(read.newer.runs, (), read.version, now)

    def page_loaded(self, page: RunsPage, version: Version, now: datetime) -> None:
        """Add the page asked for (any other is dropped), then replay the queued movement."""
        if self.wanted != (page.kind, page.anchor):
            return
        self.wanted = None
        if page.kind == PageKind.FIRST:
            self._replace(page, version, now)
            self.move_cursor(row=0)
        elif page.kind == PageKind.LAST:
            self._replace(page, version, now)
            self.move_cursor(row=self.row_count - 1)
        elif page.kind == PageKind.OLDER:
            self.more = page.more
            self._update(page.runs, (), version, now)
            if len(self._order) > MAX_ROWS:  # forget the newest rows; read again if the cursor goes back
                self.more_above = True
                self._update((), self._order[:len(self._order) - MAX_ROWS], version, now)
        else:
            self.more_above = page.more
            self._update(page.runs, (), version, now)
            if len(self._order) > MAX_ROWS:
                self.more = True
                self._update((), self._order[MAX_ROWS:], version, now)
        self.move_by(0)

    def page_failed(self) -> None:
        """The page asked for could not be read: the next move past the end asks again."""
        self.wanted = None

    def tick(self, now: datetime) -> None:
        """Bring the relative "Updated" times of the rows on screen up to ``now`` (changed cells
        only), at most every :data:`AGO_PERIOD`."""
        if self._ticked is not None and now - self._ticked < AGO_PERIOD:
            return
        self._ticked = now
        start = int(self.scroll_y)
        changed = []
        for key in self._order[start:start + self._page_rows() + 1]:
            cell = _updated(self.runs[key], now)
            if cell.plain != self._cells[key][UPDATED].plain:
                self._cells[key][UPDATED] = cell
                changed.append((key, cell))
        if changed:
            with self.app.batch_update():
                for key, cell in changed:
                    self.update_cell(key, "updated", cell)

    def _replace(self, page: RunsPage, version: Version, now: datetime) -> None:
        selected = self.selected_key()
        self._request = None
        self.clear()
        self.runs, self._order, self._cells, self._read_at = {}, [], {}, {}
        self.more = page.more and page.kind in (PageKind.FIRST, PageKind.OLDER)
        self.more_above = page.more and page.kind in (PageKind.LAST, PageKind.NEWER)
        self._update(page.runs, (), version, now)
        if selected in self.runs:
            self.move_cursor(row=self.get_row_index(selected), scroll=True)

    def _update(self, runs: Iterable[RunSummary], removed: Iterable[str], version: Version,
                now: datetime) -> None:
        """Add or change ``runs`` (newest first) and remove the ``removed`` ids, changing only the
        cells whose text changed; the cursor stays on its run and the first row on screen stays
        first. Rows are re-sorted only when one was added anywhere but below the last row."""
        selected = self.selected_key()
        scroll = int(self.scroll_y)
        top = self._order[scroll] if scroll < len(self._order) else None
        appended: list[str] = []
        moved = False
        with self.app.batch_update():
            for key in removed:
                self.remove_row(key)
                del self.runs[key], self._cells[key], self._read_at[key]
                moved = True
            for run in runs:
                key = run.run_id
                cells = run_cells(run, now)
                old = self._cells.get(key)
                self.runs[key] = run
                self._cells[key] = cells
                self._read_at[key] = version
                if old is None:
                    last = appended[-1] if appended else (self._order[-1] if self._order else None)
                    moved = moved or (last is not None and run_key(self.runs[last]) < run_key(run))
                    self.add_row(OrderedCell(cells[0], run_key(run)), *cells[1:], key=key)
                    appended.append(key)
                    continue
                for column, cell, was in zip(COLUMN_KEYS[1:], cells[1:], old[1:], strict=True):
                    if cell != was:
                        self.update_cell(key, column, cell)
            if moved:
                if appended:
                    self.sort(COLUMN_KEYS[0], key=lambda cell: cell.order, reverse=True)
                self._order = [row.key.value for row in self.ordered_rows]
                self.runs = {key: self.runs[key] for key in self._order}
            else:
                self._order += appended
            if top in self.runs and self.get_row_index(top) != scroll:
                self.scroll_to(y=self.get_row_index(top), animate=False, immediate=True)
            if selected in self.runs:
                index = self.get_row_index(selected)
                if index != self.cursor_row:
                    self.move_cursor(row=index, scroll=False)
            elif self.row_count:
                self.move_cursor(row=min(self.cursor_row, self.row_count - 1), scroll=False)

    # ---- movement: never lost at the end of the loaded rows ------------------------------------

    def _page_rows(self) -> int:
        return max(1, self.scrollable_content_region.height - (self.header_height if self.show_header else 0))

    def _want(self, kind: PageKind) -> None:
        anchor = None
        if kind == PageKind.OLDER:
            anchor = run_key(self.runs[self._order[-1]])
        elif kind == PageKind.NEWER:
            anchor = run_key(self.runs[self._order[0]])
        if self.wanted != (kind, anchor):
            self.wanted = (kind, anchor)
            self.post_message(self.PageWanted(kind, anchor))

    def load_ahead(self) -> None:
        """Ask for the next page when the cursor is within :data:`NEAR_END` rows of either end of
        the loaded rows and more runs exist beyond it."""
        if self.wanted is not None or not self._order:
            return
        if self.more and self.cursor_row >= self.row_count - NEAR_END:
            self._want(PageKind.OLDER)
        elif self.more_above and self.cursor_row < NEAR_END:
            self._want(PageKind.NEWER)

    def move_by(self, rows: int) -> None:
        """Move the cursor ``rows`` rows down (negative: up). Movement past the loaded rows, when
        runs exist beyond them, is kept in :attr:`pending` and the page asked for; movement while
        the first page or a jump is on its way is kept too. ``move_by(0)`` replays what is kept."""
        if self.version is None or (self.wanted is not None and self.wanted[0] in (PageKind.FIRST, PageKind.LAST)):
            self.pending += rows
            return
        target = self.cursor_row + self.pending + rows
        self.pending = 0
        last = self.row_count - 1
        if target > last and self.more:
            self.pending, target = target - last, last
            self._want(PageKind.OLDER)
        elif target < 0 and self.more_above:
            self.pending, target = target, 0
            self._want(PageKind.NEWER)
        target = max(0, min(target, last))
        if self.row_count and target != self.cursor_row:
            self.move_cursor(row=target)

    def action_cursor_down(self) -> None:
        self.move_by(1)

    def action_cursor_up(self) -> None:
        self.move_by(-1)

    def action_page_down(self) -> None:
        self.move_by(self._page_rows())

    def action_page_up(self) -> None:
        self.move_by(-self._page_rows())

    def action_first(self) -> None:
        """``home``/``g``: the newest run (the newest page is read when it is not loaded)."""
        self.pending = 0
        if self.more_above:
            self._want(PageKind.FIRST)
        elif self.row_count:
            self.move_cursor(row=0)

    def action_last(self) -> None:
        """``end``/``G``: the oldest run (the oldest page replaces the loaded rows when it is not
        loaded, so a store of any size loads one page, not every run above it)."""
        self.pending = 0
        if self.more:
            self._want(PageKind.LAST)
        elif self.row_count:
            self.move_cursor(row=self.row_count - 1)

    def action_scroll_top(self) -> None:
        self.action_first()

    def action_scroll_bottom(self) -> None:
        self.action_last()
