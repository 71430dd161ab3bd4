"""The widgets that show an output as it reads (:class:`~relaypoint.tui.readable.Readable`):
:class:`ReadableOutput`, and :class:`SafeMarkdown` for its Markdown (HTML shown as text, a link
opened only after its address is shown and ``y`` is pressed)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static

from relaypoint.views.display import literal

from ..readable import Block, Readable, markdown_parser
from ..screens.confirm import ConfirmScreen


class SafeMarkdown(Markdown):
    """Textual's Markdown widget for cleaned stored text: HTML is shown as text, and a link clicked
    is not opened: its address is shown, and it opens only when ``y`` answers the question."""

    def __init__(self, markdown: str, **kwargs: Any) -> None:
        super().__init__(markdown, parser_factory=markdown_parser, open_links=False, **kwargs)

    def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        event.stop()
        href = event.href
        question = Text.assemble("Open this link in your browser?\n", literal(href, "bold"),
                                 "\n(it was shown in a stored output: check where it goes)")

        def answered(yes: bool | None) -> None:
            if yes:
                self.app.open_url(href)

        self.app.push_screen(ConfirmScreen("Open link", question), answered)


def _widgets(blocks: Iterable[Block]) -> Iterator[Static | Markdown]:
    for block in blocks:
        if block.title is not None:
            yield Static(Text.assemble("── ", literal(block.title), " ──"), classes="field-title")
        if block.markdown is not None:
            yield SafeMarkdown(block.markdown)
        else:
            yield Static(block.text or Text(), classes="field-text")


class ReadableOutput(Vertical):
    """An output as it reads (see :func:`readable`); :meth:`show` replaces what it shows (one
    replacement at a time, in the order asked, and none when it shows that already)."""

    DEFAULT_CSS = """
    ReadableOutput {
        height: auto;
    }
    ReadableOutput .field-title {
        margin-top: 1;
        color: $text-muted;
        text-style: bold;
    }
    ReadableOutput Markdown {
        padding: 0;
        margin: 0;
    }
    """

    def __init__(self, shown: Readable | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._initial = shown
        self._shown: Readable | Text | None = shown
        self._wanted: Readable | Text | None = shown
        self._lock = asyncio.Lock()

    def compose(self) -> ComposeResult:
        if self._initial is not None:
            yield from _widgets(self._initial.blocks)

    async def show(self, shown: Readable | Text) -> None:
        """Show ``shown`` (a readable output, or one line such as "loading…") instead."""
        self._wanted = shown
        await self._replace(shown)

    def show_soon(self, shown: Readable | Text) -> None:
        """:meth:`show`, from code that cannot wait for it: the widgets are replaced in a worker,
        unless a later call asks for something else first."""
        self._wanted = shown
        self.run_worker(self._replace(shown), group="show")

    async def _replace(self, shown: Readable | Text) -> None:
        async with self._lock:
            if shown is not self._wanted or shown == self._shown:
                return
            self._shown = shown
            with self.app.batch_update():
                await self.remove_children()
                await self.mount_all([Static(shown)] if isinstance(shown, Text) else list(_widgets(shown.blocks)))
