"""An output rendered for reading (the detail pane's output box, the review screen and the approve
form): a Markdown text as Markdown, any other value as pretty JSON with its long arrays folded and
its multi-line text fields shown below it as they read (as Markdown when they are Markdown).

:func:`readable` builds plain :class:`Block` values in a thread worker, bounded whatever the
output's size (a number of pages of it, and Markdown of at most :data:`MARKDOWN_CHARS` characters
and :data:`MARKDOWN_ELEMENTS` elements); :class:`ReadableOutput` shows them. Stored text stays
inert: the Markdown source is cleaned first (control, format and separator characters become
visible escapes such as ``\\x1b``), HTML in it is shown as text rather than hidden, Rich and
Textual markup is never parsed, and a link opens only after its address is shown and ``y`` is
pressed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from rich.console import RenderableType
from rich.highlighter import JSONHighlighter
from rich.text import Text

from relaypoint.views.display import PREVIEW_CHARS, PREVIEW_LINES, clean, human_size, literal, preview

MARKDOWN_CHARS = 30_000
"""Longest text rendered as Markdown; a longer one is shown as plain text, its first pages."""
MARKDOWN_ELEMENTS = 200
"""Most Markdown elements (headings, paragraphs, list items, table rows and cells...) rendered:
each is a widget, and 200 table cells take the console over half a second to lay out, so a text
with more is shown as plain text, its first pages."""
READ_PAGES = 4
"""Pages of a plain text, or of a value's JSON, shown on the review screen (a page is
:data:`~relaypoint.views.display.PREVIEW_CHARS` characters or :data:`~relaypoint.views.display.PREVIEW_LINES`
lines; the detail pane starts at one and ``m`` adds one)."""
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
    itself) and either ``markdown`` (cleaned Markdown source) or ``text`` (styled and inert: a
    ``Text``, or around the output in the detail pane, a pattern's summary)."""

    title: str | None
    text: RenderableType | None = None
    markdown: str | None = None


@dataclass(frozen=True)
class Readable:
    """An output as it reads: its ``blocks``; ``folded``: True when a list is folded (``e`` shows
    the whole); ``cut``: True when a text or the JSON stops before its end (more pages show
    more), and then ``size``: the UTF-8 bytes of the whole value (as stored, for a JSON value)."""

    blocks: tuple[Block, ...]
    folded: bool = False
    cut: bool = False
    size: int = 0


class _Full(Exception):
    """The JSON budget is spent."""


def _is_text_field(value: Any) -> bool:
    return isinstance(value, str) and "\n" in value


def _pretty(value: Any, fold: int | None, below: set[str], chars: int) -> tuple[list[tuple[str, bool]], bool, bool]:
    """``value`` as pretty JSON in pieces (text, is_note), its lists longer than ``fold`` cut to
    their first ``fold`` items and a note, the top-level fields named in ``below`` replaced by a
    note; at most ``chars`` characters (a long string is cut too). Returns the pieces, whether a
    list was folded and whether the budget cut the text."""
    pieces: list[tuple[str, bool]] = []
    size = 0
    folded = False

    def emit(text: str, note: bool = False) -> None:
        nonlocal size
        if size + len(text) > chars:
            pieces.append((text[:chars - size], note))
            raise _Full
        pieces.append((text, note))
        size += len(text)

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


def _json_block(value: Any, fold: int | None, below: set[str], whole: str, chars: int) -> tuple[Block, bool, bool]:
    pieces, folded, cut = _pretty(value, fold, below, chars)
    text = Text()
    for piece, note in pieces:
        text.append_text(Text(piece, style="dim italic") if note else literal(piece, multiline=True))
    _json.highlight(text)
    if cut:
        text.append_text(Text(f"\n… the rest is not shown; {whole} prints it whole", style="dim italic"))
    return Block(None, text), folded, cut


def markdown_elements(text: str) -> int:
    """How many block elements (each one widget) the Markdown ``text`` renders as."""
    return sum(token.nesting == 1 for token in markdown_parser().parse(text))


def _text_block(title: str | None, text: str, whole: str, pages: int) -> tuple[Block, bool]:
    """``text`` as Markdown when it reads as Markdown (and is cheap enough to render: see
    :data:`MARKDOWN_ELEMENTS`), else its first ``pages`` pages as plain text; and whether it was
    cut."""
    shown = Text()
    if looks_like_markdown(text):
        if markdown_elements(text) <= MARKDOWN_ELEMENTS:
            return Block(title, markdown=clean(text, multiline=True)), False
        shown.append(f"(Markdown of more than {MARKDOWN_ELEMENTS} elements: shown as text)\n", style="dim italic")
    plain, cut = _plain(text, whole, pages)
    shown.append_text(plain)
    return Block(title, shown), cut


def _plain(text: str, whole: str, pages: int) -> tuple[Text, bool]:
    head = preview(text, chars=pages * PREVIEW_CHARS, lines=pages * PREVIEW_LINES)
    shown = literal(head.head, multiline=True)
    if head.cut:
        shown.append_text(Text(f"\n… {human_size(head.size)} in all; {whole} prints it whole", style="dim italic"))
    return shown, head.cut


def plain_text(text: str, whole: str, pages: int = READ_PAGES) -> Text:
    """Free text a person reads beside a decision (a checkpoint's reason, a person's prompt) shown
    literally and bounded as an output's text is: its first ``pages`` pages (see
    :data:`READ_PAGES`) and, when it goes on, its size and ``whole``, the command that prints it
    whole. Costs about ``pages`` pages of text whatever its length, plus counting its bytes."""
    return _plain(text, whole, pages)[0]


def _size(value: Any) -> int:
    """UTF-8 bytes of ``value``: a text, or a JSON value as stored (compact)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


def readable(value: Any, whole: str, expanded: bool = False, pages: int = READ_PAGES) -> Readable:
    """``value`` (a step's output) as it reads. ``whole``: the command that prints it whole (named
    where the view is cut); ``expanded``: show every item of long lists; ``pages``: how much of a
    plain text, and of the JSON, to show (see :data:`READ_PAGES`; a Markdown text is shown whole
    up to :data:`MARKDOWN_CHARS`). Costs about ``pages`` pages of JSON encoding for any size of
    value, plus at most :data:`MARKDOWN_CHARS` of each text field, plus, when the view is cut,
    one compact encoding for ``size``. Raises ``ValueError`` for ``pages`` below 1."""
    if pages < 1:
        raise ValueError(f"pages must be at least 1, not {pages}")
    if isinstance(value, str):
        block, cut = _text_block(None, value, whole, pages)
        return Readable((block,), cut=cut, size=_size(value) if cut else 0)
    fields = [key for key, inner in value.items() if _is_text_field(inner)][:TEXT_FIELDS] \
        if isinstance(value, dict) else []
    block, folded, cut = _json_block(value, None if expanded else FOLD_ITEMS, set(fields), whole,
                                     pages * PREVIEW_CHARS)
    blocks = [block]
    for key in fields:
        field, field_cut = _text_block(key, value[key], whole, pages)
        blocks.append(field)
        cut = cut or field_cut
    return Readable(tuple(blocks), folded, cut, _size(value) if cut else 0)


def markdown_parser() -> MarkdownIt:
    """Textual's GitHub-like parser with HTML off: HTML in stored text is shown, never hidden."""
    return MarkdownIt("gfm-like", {"html": False})
