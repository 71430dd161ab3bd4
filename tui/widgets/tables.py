"""Tables that patch their rows in place: keyed by id, so a live refresh never moves the cursor."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey


class OrderedCell(Text):
    """A first cell that also carries its row's place (``order``: any comparable value), so
    ``DataTable.sort`` can order rows by it."""

    __slots__ = ("order",)

    def __init__(self, text: Text, order: object = 0) -> None:
        super().__init__(text.plain, style=text.style, justify=text.justify, overflow=text.overflow,
                         no_wrap=text.no_wrap, end=text.end)
        self.spans = list(text.spans)
        self.order = order


class KeyedTable(DataTable):
    """A row-cursor ``DataTable`` keyed by an id, updated with :meth:`patch` (changed cells only,
    new rows added, vanished rows removed) instead of ``clear()``, which would reset the cursor and
    the scroll position. ``j``/``k`` move like the arrows.

    An id is a string or any other hashable value (a frozen dataclass, say), never equal to a
    string; :meth:`index_of` finds either (``DataTable`` itself matches plain strings only)."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def __init__(self, columns: Sequence[tuple[str, str, int | None]], **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._column_spec = columns

    def on_mount(self) -> None:
        for key, label, width in self._column_spec:
            self.add_column(label, key=key, width=width)

    def index_of(self, key: Hashable) -> int:
        """The row index of id ``key``. Raises ``RowDoesNotExist``."""
        return self.get_row_index(RowKey(key))  # type: ignore[arg-type]

    def selected_key(self) -> Hashable | None:
        """The id of the row under the cursor, or None when the table is empty."""
        if self.row_count == 0:
            return None
        row = min(self.cursor_row, self.row_count - 1)
        return self.coordinate_to_cell_key(Coordinate(row, 0)).row_key.value

    def keys(self) -> list[Hashable]:
        """Row ids in display order."""
        return [row.key.value for row in self.ordered_rows]

    def patch(self, rows: dict[Hashable, list[Text]]) -> None:
        """Make the table show ``rows`` (id -> cells, in display order), keeping the cursor on the
        same id and the same first visible row where they still exist."""
        selected = self.selected_key()
        old_keys = self.keys()
        top = old_keys[int(self.scroll_y)] if int(self.scroll_y) < len(old_keys) else None
        with self.app.batch_update():
            for key in set(old_keys) - rows.keys():
                self.remove_row(RowKey(key))  # type: ignore[arg-type]
            columns = [c[0] for c in self._column_spec]
            for key, (first, *rest) in rows.items():
                cells = [OrderedCell(first), *rest]
                row_key = RowKey(key)  # type: ignore[arg-type]
                if row_key not in self.rows:
                    self.add_row(*cells, key=key)  # type: ignore[arg-type]  (it makes the RowKey)
                    continue
                for column, cell in zip(columns, cells, strict=True):
                    if self.get_cell(row_key, column) != cell:
                        self.update_cell(row_key, column, cell)
            if self.keys() != list(rows):
                for order, key in enumerate(rows):
                    self.get_cell(RowKey(key), columns[0]).order = order  # type: ignore[arg-type]
                self.sort(columns[0], key=lambda cell: cell.order)
            if top in rows and self.keys().index(top) != int(self.scroll_y):
                self.scroll_to(y=self.keys().index(top), animate=False, immediate=True)
            if selected in rows:
                index = self.index_of(selected)
                if index != self.cursor_row:
                    self.move_cursor(row=index, scroll=False)
            elif self.row_count:
                self.move_cursor(row=min(self.cursor_row, self.row_count - 1), scroll=False)
