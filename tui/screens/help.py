"""The help screen: every key, rendered from Markdown built out of the key registry."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown, Static

from relaypoint.views.display import literal

from ..actions import CLOSE_HELP


class HelpScreen(ModalScreen[None]):
    """The keys, rendered from Markdown built out of the key registry; first, when the store is
    read-only, why (``readonly_reason``, shown literally: it names roles and schemas)."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="close")]

    def __init__(self, markdown: str, *, readonly_reason: str | None = None) -> None:
        super().__init__()
        self.markdown = markdown
        self.readonly_reason = readonly_reason

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help") as dialog:
            dialog.border_title = "Help"
            dialog.border_subtitle = CLOSE_HELP
            if self.readonly_reason:
                yield Static(Text.assemble(("This store is read-only: ", "bold yellow"),
                                           literal(self.readonly_reason), ". The actions that record (greyed "
                                           "out) are unavailable; runs and the review queue can be browsed."),
                             id="help-read-only")
            yield Markdown(self.markdown)

    def action_close(self) -> None:
        self.dismiss(None)
