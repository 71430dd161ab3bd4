"""An output rendered for reading (the review screen and the approve form): a Markdown text as
Markdown, any other value as pretty JSON with its long arrays folded and its multi-line text
fields shown below it as they read (as Markdown when they are Markdown).

:func:`readable` builds plain :class:`Block` values in a thread worker, bounded whatever the
output's size; :class:`ReadableOutput` shows them. Stored text stays inert: the Markdown source is
cleaned first (control, format and separator characters become visible escapes such as
``\\x1b``), HTML in it is shown as text rather than hidden, Rich and Textual markup is never
parsed, and a link opens only after its address is shown and ``y`` is pressed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from rich.highlighter import JSONHighlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Markdown, Static

from relaypoint.display import PREVIEW_CHARS, PREVIEW_LINES, clean, human_size, literal, preview

MARKDOWN_CHARS = 30_000
"""Longest text rendered as Markdown; a longer one is shown as plain text, its first pages."""
TEXT_CHARS = 4 * PREVIEW_CHARS
"""Most characters of a plain text, or of a value's JSON, shown for reading."""
FOLD_ITEMS = 10
"""A list longer than this shows its first items and how many more (``e`` shows them all)."""
TEXT_FIELDS = 10
"""Most multi-line text fields of an object shown below its JSON (the others stay in it)."""

_json = JSONHighlighter()
_MARKDOWN_LINE = re.compile(r"^(?:#{1,6} \S|\s*[-*+] \S|\s*\d+[.)] \S|```|~~~|> |\|.*\|\s*$)", re.MULTILINE)
_HEADING_OR_TABLE = re.compile(r"^(?:#{1,6} \S|\|[\s:]*-{3,}[\s:]*\|)", re.MULTILINE)


def looks_like_markdown(text: str) -> bool:
    """True when ``text`` (at most :data:`MARKDOWN_CHARS` long, over several lines) reads as
    Markdown: it has a heading or a table, or at least three lines of lists, quotes or fences."""
    if len(text) > MARKDOWN_CHARS or "\n" not in text:
        return False
    return _HEADING_OR_TABLE.search(text) is not None or len(_MARKDOWN_LINE.findall(text)) >= 3


@dataclass(frozen=True)
class Block:
    """One part of an output as it reads: ``title`` (a text field's name; None for the value
    itself) and either ``markdown`` (cleaned Markdown source) or ``text`` (styled, inert)."""

    title: str | None
    text: Text | None = None
    markdown: str | None = None


@dataclass(frozen=True)
class Readable:
    """An output as it reads: its ``blocks``, and ``folded``: True when a list is folded (``e``
    shows the whole)."""

    blocks: tuple[Block, ...]
    folded: bool = False


class _Full(Exception):
    """The JSON budget is spent."""


def _is_text_field(value: Any) -> bool:
    return isinstance(value, str) and "\n" in value


def _pretty(value: Any, fold: int | None, below: set[str]) -> tuple[list[tuple[str, bool]], bool, bool]:
    """``value`` as pretty JSON in pieces (text, is_note), its lists longer than ``fold`` cut to
    their first ``fold`` items and a note, the top-level fields named in ``below`` replaced by a
    note; at most :data:`TEXT_CHARS` characters. Returns the pieces, whether a list was folded
    and whether the budget cut the text."""
    pieces: list[tuple[str, bool]] = []
    size = 0
    folded = False

    def emit(text: str, note: bool = False) -> None:
        nonlocal size
        pieces.append((text, note))
        size += len(text)
        if size > TEXT_CHARS:
            raise _Full

    def walk(item: Any, pad: str, top: bool) -> None:
        nonlocal folded
        if isinstance(item, dict) and item:
            emit("{")
            for n, (key, inner) in enumerate(item.items()):
                emit(f"\n{pad}  {json.dumps(key, ensure_ascii=False)}: ")
                if top and key in below:
                    emit(f"‹text, {inner.count(chr(10)) + 1:,} lines, shown below›", True)
                else:
                    walk(inner, pad + "  ", False)
                if n < len(item) - 1:
                    emit(",")
            emit(f"\n{pad}}}")
        elif isinstance(item, list) and item:
            shown = item if fold is None or len(item) <= fold else item[:fold]
            emit("[")
            for n, inner in enumerate(shown):
                emit(f"\n{pad}  ")
                walk(inner, pad + "  ", False)
                if n < len(item) - 1:
                    emit(",")
            if len(shown) < len(item):
                folded = True
                emit(f"\n{pad}  … {len(item) - len(shown):,} more items (e: show all)", True)
            emit(f"\n{pad}]")
        else:
            emit(json.dumps(item, ensure_ascii=False))

    try:
        walk(value, "", True)
    except _Full:
        return pieces, folded, True
    return pieces, folded, False


def _json_block(value: Any, fold: int | None, below: set[str], whole: str) -> tuple[Block, bool]:
    pieces, folded, cut = _pretty(value, fold, below)
    text = Text()
    for piece, note in pieces:
        text.append_text(Text(piece, style="dim italic") if note else literal(piece, multiline=True))
    _json.highlight(text)
    if cut:
        text.append_text(Text(f"\n… the rest is not shown; {whole} prints it whole", style="dim italic"))
    return Block(None, text), folded


def _text_block(title: str | None, text: str, whole: str) -> Block:
    """``text`` as Markdown when it reads as Markdown, else its first pages as plain text."""
    if looks_like_markdown(text):
        return Block(title, markdown=clean(text, multiline=True))
    head = preview(text, chars=TEXT_CHARS, lines=TEXT_CHARS * PREVIEW_LINES // PREVIEW_CHARS)
    shown = literal(head.head, multiline=True)
    if head.cut:
        shown.append_text(Text(f"\n… {human_size(head.size)} in all; {whole} prints it whole", style="dim italic"))
    return Block(title, shown)


def readable(value: Any, whole: str, expanded: bool = False) -> Readable:
    """``value`` (a step's output) as it reads. ``whole``: the command that prints it whole (named
    where the view is cut); ``expanded``: show every item of long lists (still bounded by
    :data:`TEXT_CHARS`). Costs about one page of JSON encoding for any size of value, plus at most
    :data:`MARKDOWN_CHARS` of each text field."""
    if isinstance(value, str):
        return Readable((_text_block(None, value, whole),))
    fields = [key for key, inner in value.items() if _is_text_field(inner)][:TEXT_FIELDS] \
        if isinstance(value, dict) else []
    block, folded = _json_block(value, None if expanded else FOLD_ITEMS, set(fields), whole)
    return Readable((block, *(_text_block(key, value[key], whole) for key in fields)), folded)


def _parser() -> MarkdownIt:
    """Textual's GitHub-like parser with HTML off: HTML in stored text is shown, never hidden."""
    return MarkdownIt("gfm-like", {"html": False})


class SafeMarkdown(Markdown):
    """Textual's Markdown widget for cleaned stored text: HTML is shown as text, and a link clicked
    is not opened: its address is shown, and it opens only when ``y`` answers the question."""

    def __init__(self, markdown: str, **kwargs: Any) -> None:
        super().__init__(markdown, parser_factory=_parser, open_links=False, **kwargs)

    def on_markdown_link_clicked(self, event: Markdown.LinkClicked) -> None:
        event.stop()
        from .modals import ConfirmScreen  # modals shows readable outputs too

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
    """An output as it reads (see :func:`readable`); :meth:`show` replaces what it shows."""

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

    def compose(self) -> ComposeResult:
        if self._initial is not None:
            yield from _widgets(self._initial.blocks)

    async def show(self, shown: Readable | Text) -> None:
        """Show ``shown`` (a readable output, or one line such as "loading…") instead."""
        with self.app.batch_update():
            await self.remove_children()
            await self.mount_all([Static(shown)] if isinstance(shown, Text) else list(_widgets(shown.blocks)))
