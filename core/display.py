"""Showing stored text literally: stored outputs, errors, names and comments are untrusted.

Control characters (C0 but newline and tab, DEL, C1), format characters (BiDi overrides,
zero-width characters) and lone surrogates are replaced by visible escapes such as ``\\x1b`` or
``\\u202e``, so terminal escape sequences never reach the terminal. Markup is never parsed:
callers build ``rich.text.Text`` from the result, never markup strings.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from rich.text import Text

_KEEP = {"\n", "\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control, format and surrogate character replaced by a visible escape."""
    if text.isprintable():
        return text
    return "".join(
        _escape(ch) if ch not in _KEEP and unicodedata.category(ch) in ("Cc", "Cf", "Cs") else ch for ch in text
    )


def literal(value: Any, style: str = "") -> Text:
    """A ``rich.text.Text`` that shows ``value`` (converted with ``str``) exactly, never as markup."""
    return Text(printable("" if value is None else str(value)), style=style)


def pretty_json(value: Any) -> str:
    """Indented JSON for display (non-ASCII kept readable; pass the result through :func:`printable`)."""
    return printable(json.dumps(value, indent=2, ensure_ascii=False))
