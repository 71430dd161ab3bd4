"""Stored text shown literally: never markup, never terminal control.

Everything the store holds (workflow and step names, outputs, errors, comments, prompts) may come
from anyone. The console builds ``rich.text.Text`` objects from it (a ``Text`` is never parsed for
markup, so ``[bold]`` or ``[link=...]`` stays as typed) and replaces every control, format and
surrogate character (Unicode categories Cc, Cf, Cs: ESC, BEL, CR, DEL, the one-byte C1 CSI and OSC,
BiDi overrides, zero-width characters), and the line and paragraph separators, with a visible
escape such as ``\\x1b`` or ``\\u202e``, drawn reversed so it cannot pass for typed text. The CLI
and the console both use it.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rich.text import Text

ESCAPE_STYLE = "reverse"
"""How a replaced character is drawn."""

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\t": "\\t"}


def escape_char(char: str) -> str:
    """The visible form of one character: ``\\n``, ``\\t``, ``\\x1b`` or ``\\u202e``."""
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _unsafe(char: str, multiline: bool) -> bool:
    if multiline and char in "\n\t":
        return False
    return unicodedata.category(char) in _UNSAFE_CATEGORIES


def _pieces(text: str, multiline: bool) -> Iterator[tuple[str, bool]]:
    """``text`` cut into (piece, is_unsafe_character); a line with nothing to escape is one piece."""
    lines = text.split("\n") if multiline else [text]
    for number, line in enumerate(lines):
        if number:
            yield "\n", False
        if line.isprintable():  # fast path (C speed): no control, format, separator but space
            yield line, False
            continue
        start = 0
        for i, char in enumerate(line):
            if _unsafe(char, multiline):
                if i > start:
                    yield line[start:i], False
                yield char, True
                start = i + 1
        if start < len(line):
            yield line[start:], False


def clean(text: str | None, *, multiline: bool = False) -> str:
    """``text`` with every unsafe character replaced by its visible escape (plain ``str``).

    With ``multiline`` newlines and tabs are kept; otherwise they are escaped too, so the
    result stays on one line. None becomes ``""``.
    """
    if not text:
        return ""
    return "".join(escape_char(p) if unsafe else p for p, unsafe in _pieces(text, multiline))


def error_line(error: BaseException) -> str:
    """An expected failure (a ``RelaypointError``) as the one line that reports it: its message,
    cleaned (see :func:`clean`). The CLI prints it after ``Error: ``; the MCP server returns it as a
    tool error."""
    return clean(str(error))


def literal(text: str | None, style: str = "", *, multiline: bool = False) -> Text:
    """A ``Text`` showing ``text`` exactly as stored: markup is not interpreted and unsafe
    characters appear as escapes drawn with :data:`ESCAPE_STYLE`. None becomes an empty Text."""
    out = Text(style=style)
    for piece, unsafe in _pieces(text or "", multiline):
        out.append(escape_char(piece) if unsafe else piece, style=ESCAPE_STYLE if unsafe else None)
    return out


def json_text(value: Any) -> str:
    """Pretty JSON (2-space indent, non-ASCII kept) with every unsafe character written as a
    ``\\uXXXX`` escape: safe to put on a terminal or in an editor, and it parses back to ``value``."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    # json.dumps escapes C0 itself; what is left can only occur inside strings, where \\uXXXX is valid.
    return "".join(f"\\u{ord(p):04x}" if unsafe else p for p, unsafe in _pieces(text, multiline=True))


PREVIEW_CHARS = 4_000
"""At most this many characters of one value (an output, an error, a traceback) are shown to a
person at once; the rest is reached on demand (``relaypoint show RUN --output STEP``). The
store and ``--json`` always hold and print the whole value."""

PREVIEW_LINES = 60
"""At most this many lines of one value are shown at once (see :data:`PREVIEW_CHARS`)."""
CALL_PREVIEW_CHARS, CALL_PREVIEW_LINES = 400, 6
"""The bounds of one recorded call's result shown under its step (a step may record many)."""


@dataclass(frozen=True)
class Preview:
    """The bounded head of a value's text: ``head`` (raw: show it through :func:`literal` or
    :func:`clean`), ``size`` (UTF-8 bytes of the whole value: the text, or a JSON value as stored)
    and ``cut`` (True when ``head`` is not the whole)."""

    head: str
    size: int
    cut: bool

    def note(self, whole: str) -> str:
        """One line saying that the preview was cut, the whole size, and the command ``whole`` that
        prints everything."""
        return f"… cut here: {self.size:,} bytes ({human_size(self.size)}) in all; the whole value: {whole}"


def preview(text: str, *, chars: int = PREVIEW_CHARS, lines: int = PREVIEW_LINES) -> Preview:
    """The first ``chars`` characters and ``lines`` lines of ``text`` (cost bounded by the cut, not
    by the size of ``text``, except for counting its bytes)."""
    head = _head(text, chars, lines)
    return Preview(head, len(text.encode("utf-8", "surrogatepass")), len(head) < len(text))


def preview_json(value: Any, *, chars: int = PREVIEW_CHARS, lines: int = PREVIEW_LINES) -> Preview:
    """A bounded preview of ``value`` as pretty JSON (2-space indent, non-ASCII kept). Encoding
    stops once the preview is full, so a value of any size costs about one compact encoding (for
    ``size``: its bytes as stored) plus the preview."""
    pieces, length = [], 0
    chunks = json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(value)
    for chunk in chunks:
        pieces.append(chunk)
        length += len(chunk)
        if length > chars:
            break
    else:
        chunks = None  # encoded whole
    text = "".join(pieces)
    head = _head(text, chars, lines)
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    return Preview(head, size, chunks is not None or len(head) < len(text))


def _head(text: str, chars: int, lines: int) -> str:
    head = text[:chars]
    cut_at = -1
    for _ in range(lines):
        cut_at = head.find("\n", cut_at + 1)
        if cut_at < 0:
            return head
    return head[:cut_at]


def human_size(size: int) -> str:
    """``size`` bytes for a person: ``512 B``, ``4.0 KiB``, ``10.0 MiB``, ``1.2 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
