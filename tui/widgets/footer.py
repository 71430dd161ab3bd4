"""The console's footer: Textual's, compact, with the help and quit keys grouped at its right end
so they stay visible when a narrow terminal cuts the other keys off."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.widget import Widget
from textual.widgets import Footer

from ..actions import PINNED_ACTIONS


class ConsoleFooter(Footer):
    """A compact footer whose keys for :data:`~relaypoint.tui.actions.PINNED_ACTIONS` sit in a
    group docked right; the others fill the rest from the left. The command palette key is not
    shown (``ctrl+p`` still opens it; help says so)."""

    DEFAULT_CSS = """
    ConsoleFooter HorizontalGroup.pinned {
        dock: right;
        width: auto;
        height: 1;
        padding-left: 1;
    }
    """

    def __init__(self) -> None:
        super().__init__(compact=True, show_command_palette=False)

    def compose(self) -> ComposeResult:
        pinned: list[Widget] = []
        for widget in super().compose():
            if getattr(widget, "action", None) in PINNED_ACTIONS:  # a FooterKey (not exported)
                pinned.append(widget)
            else:
                yield widget
        with HorizontalGroup(classes="pinned"):
            yield from pinned
