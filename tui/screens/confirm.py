"""The yes/no confirmation (cancel a run, resume allowing drift, open a link)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question: ``y`` confirms, ``n`` or ``escape`` declines."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="yes"),
        Binding("n", "answer(False)", "No", id="no"),
        Binding("escape", "answer(False)", "No", show=False, id="close"),
    ]

    def __init__(self, title: str, question: Text) -> None:
        super().__init__()
        self.confirm_title = title
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog confirm") as dialog:
            dialog.border_title = self.confirm_title
            yield Static(self.question)
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
