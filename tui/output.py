"""A step's output as the console shows it, built in the thread worker that reads it (never on the
UI thread): the output (a text as is, any other value as pretty JSON) cut to a bounded preview that
says its size and how to see the rest, the multi-line text fields of an object again as they read,
and the step's error and traceback, bounded too. Selecting a step whose output is 10 MB costs the
console one page of text; ``m`` shows another page, ``p`` opens the whole output in ``$PAGER``.
"""

from __future__ import annotations

import shlex
from typing import Any

from rich.console import Group, RenderableType
from rich.highlighter import JSONHighlighter
from rich.text import Text

from relaypoint.display import (PREVIEW_CHARS, PREVIEW_LINES, Preview, clean, human_size, json_text, literal, preview,
                                preview_json)
from relaypoint.models import StepRecord
from relaypoint.patterns_view import PatternSummary
from relaypoint.status import StepStatus

from . import format as fmt
from .patterns import summary_view

_json = JSONHighlighter()


def whole_text(value: Any) -> str:
    """The output as the console shows it: a text as is, any other value as pretty JSON."""
    return value if isinstance(value, str) else json_text(value)


def page(value: Any, pages: int) -> Preview:
    """The first ``pages`` pages of the output as shown: a page is the CLI's bounded preview,
    :data:`~relaypoint.display.PREVIEW_CHARS` characters or
    :data:`~relaypoint.display.PREVIEW_LINES` lines, whichever ends first. A JSON value is encoded
    only as far as the pages reach (plus one compact encoding for its size)."""
    chars, lines = pages * PREVIEW_CHARS, pages * PREVIEW_LINES
    if isinstance(value, str):
        return preview(value, chars=chars, lines=lines)
    return preview_json(value, chars=chars, lines=lines)


EDITABLE_CHARS = 200_000
"""Longest output JSON the approve form puts in its editor; a longer one is approved as is."""


def editor_json(value: Any) -> str | None:
    """The output as JSON for the approve form's editor, or None when it is longer than
    :data:`EDITABLE_CHARS` (a text area of megabytes would freeze the console)."""
    if isinstance(value, str) and len(value) > EDITABLE_CHARS:
        return None
    if preview_json(value, chars=EDITABLE_CHARS, lines=EDITABLE_CHARS).cut:
        return None
    return json_text(value)


def pager_text(value: Any) -> str:
    """The whole output for ``$PAGER``: as shown, with terminal controls made visible."""
    return clean(whole_text(value), multiline=True)


def show_command(db: str, run_id: str, step: StepRecord) -> str:
    """The command that prints an execution's output raw (as JSON), quoted for a shell and safe to
    show: ``show RUN --output STEP`` for a top-level step (a pattern's result), ``show RUN --json``
    (every execution, in order) for a pattern's call."""
    what = f"--output {shlex.quote(step.name)}" if step.parent is None else "--json"
    return clean(f"relaypoint --db {shlex.quote(db)} show {fmt.short_id(run_id)} {what}")


def _rest(left: int, what: str) -> Text:
    return Text(f"… {left:,} more characters of {what} not shown", style="dim italic")


def output_view(db: str, run_id: str, step: StepRecord, recorded: bool, value: Any,
                pages: int, summary: PatternSummary | None = None) -> tuple[RenderableType, bool]:
    """What the output box shows: for a pattern, its ``summary`` first, then (as for a step)
    ``pages`` pages of the output (with, when it is cut, its size and the keys and command that
    show the rest), its multi-line text fields, then the step's error and traceback; and whether
    the output goes on past them."""
    parts: list[RenderableType] = []
    more = False
    if summary is not None:
        parts += [summary_view(summary), Text("\nresult", style="bold")]
    if not recorded:
        parts.append(Text(_unrecorded(step, summary is not None), style="dim"))
    else:
        head = page(value, pages)
        more = head.cut
        shown = literal(head.head, multiline=True)
        if more:
            parts.append(Text(f"{human_size(head.size)} in all ({head.size:,} bytes); the first {len(head.head):,} "
                              "characters shown · m: more · p: all in $PAGER", style="bold yellow"))
        parts.append(shown if isinstance(value, str) else _json(shown))
        if more:
            parts.append(Text.assemble(("… the rest is not shown: ", "italic"), ("m", "bold"), " shows more, ",
                                       ("p", "bold"), " opens it all in $PAGER, ",
                                       (show_command(db, run_id, step), "bold"), " prints it raw", style="dim"))
        parts += _text_fields(value, pages * PREVIEW_CHARS)
    if step.error:
        error = preview(step.error)
        parts.append(Text.assemble("\n", ("error ", "bold red"), literal(error.head, "red", multiline=True)))
        if error.cut:
            parts.append(_rest(len(step.error) - len(error.head), "the error"))
    if step.traceback:
        # Its end says where it was raised: keep the last lines.
        tail = "\n".join(step.traceback[-PREVIEW_CHARS:].split("\n")[-PREVIEW_LINES:])
        if len(tail) < len(step.traceback):
            parts.append(Text(f"… the first {len(step.traceback) - len(tail):,} characters of the traceback "
                              "not shown", style="dim italic"))
        parts.append(literal(tail, "dim", multiline=True))
    return Group(*parts), more


WAITING = {StepStatus.AWAITING_INPUT: "it waits for an answer (i: respond)",
           StepStatus.AWAITING_APPROVAL: "it waits for a person's approval (a: approve, x: reject)"}


def _unrecorded(step: StepRecord, pattern: bool) -> str:
    """Why an execution shows no output: a pattern that has not finished, a pause waiting for a
    person (and the key that answers it), or nothing recorded."""
    if pattern:
        return "none yet: the pattern has not finished"
    return "no output recorded" + (f": {WAITING[step.status]}" if step.status in WAITING else "")


def _text_fields(value: Any, budget: int) -> list[RenderableType]:
    """Top-level text fields that span lines (a report, a diff), shown again as they read, within
    ``budget`` characters in all."""
    if not isinstance(value, dict):
        return []
    parts: list[RenderableType] = []
    for key, text in value.items():
        if not (isinstance(text, str) and "\n" in text):
            continue
        if budget <= 0:
            parts.append(Text("\n… more text fields not shown", style="dim italic"))
            break
        head = preview(text, chars=budget, lines=budget * PREVIEW_LINES // PREVIEW_CHARS)
        budget -= len(head.head)
        parts.append(Text.assemble("\n", (f"── {clean(key)} ──", "bold dim"), "\n", literal(head.head, multiline=True)))
        if head.cut:
            parts.append(_rest(len(text) - len(head.head), "this field"))
    return parts
