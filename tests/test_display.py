"""The console's literal text: stored strings never become markup or terminal control."""

from __future__ import annotations

import json

from rich.console import Console

from relaypoint.views.display import ESCAPE_STYLE, clean, json_text, literal

CONTROLS = "\x00\x07\x08\x0b\x0c\r\x1b\x7f\x80\x9b\x9d\u200b\u202e\u2066\u2028\ufeff"


def test_markup_stays_as_typed():
    text = literal("[bold red]X[/] [link=http://e]y[/link] :smile:")
    assert text.plain == "[bold red]X[/] [link=http://e]y[/link] :smile:"
    assert text.spans == []


def test_every_control_character_becomes_a_visible_escape():
    shown = clean(f"a{CONTROLS}b")
    assert shown == ("a\\x00\\x07\\x08\\x0b\\x0c\\x0d\\x1b\\x7f\\x80\\x9b\\x9d\\u200b\\u202e\\u2066\\u2028\\ufeffb")
    assert shown.isprintable()


def test_escape_sequences_are_neutralised_and_marked():
    text = literal("\x1b[31mred \x1b]52;c;SGVsbG8=\x07 \x1b]0;title\x07", "green")
    assert text.plain == "\\x1b[31mred \\x1b]52;c;SGVsbG8=\\x07 \\x1b]0;title\\x07"
    marked = [text.plain[s.start:s.end] for s in text.spans if s.style == ESCAPE_STYLE]
    assert marked == ["\\x1b", "\\x1b", "\\x07", "\\x1b", "\\x07"]
    assert text.style == "green"


def test_one_line_unless_multiline():
    assert clean("a\nb\tc") == "a\\nb\\tc"
    assert clean("a\nb\tc\r", multiline=True) == "a\nb\tc\\x0d"
    assert literal("x\n\x1by", multiline=True).plain == "x\n\\x1by"


def test_none_and_empty():
    assert clean(None) == "" and literal(None).plain == "" and literal("").plain == ""


def test_nothing_unsafe_reaches_the_terminal():
    console = Console(file=None, force_terminal=True, color_system="truecolor", width=200)
    with console.capture() as capture:
        console.print(literal(f"[bold]{CONTROLS}[/bold]", multiline=True))
    out = capture.get()
    assert "[bold]" in out
    # Rich adds its own SGR codes for styles; none of the stored control bytes survive.
    assert "\x07" not in out and "\x9b" not in out and "\u202e" not in out and "\x1b]" not in out


def test_json_text_is_safe_and_round_trips():
    value = {"t": f"[b]{CONTROLS}é", "n": [1, None, 2.5]}
    text = json_text(value)
    assert json.loads(text) == value
    assert all(c == "\n" or c.isprintable() for c in text)
    assert "é" in text and "\\u001b" in text and "\\u009b" in text
