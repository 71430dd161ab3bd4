"""A step's output as the detail pane shows it, built in the thread worker that reads it (never on
the UI thread): for a pattern its summary, then the output as it reads (see
:mod:`relaypoint.tui.readable`: Markdown rendered, JSON pretty with long lists folded, its text
fields below it), a page of it at first with, when it goes on, its size and the keys that show the
rest, then its usage and recorded calls (:mod:`relaypoint.tui.calls`), then the step's error and
traceback, bounded too. Selecting a step whose output is 10 MB costs
the console one page of text; ``m`` shows another page, ``e`` its long lists whole, ``p`` opens the
whole output in ``$PAGER``.
"""

from __future__ import annotations

import shlex
from typing import Any

from rich.text import Text

from relaypoint.models import StepRecord
from relaypoint.status import StepStatus
from relaypoint.views.display import (PREVIEW_CHARS, PREVIEW_LINES, clean, human_size, json_text, literal, preview,
                                     preview_json)
from relaypoint.views.patterns import PatternSummary

from . import format as fmt
from .patterns import summary_view
from .readable import Block, Readable


def whole_text(value: Any) -> str:
    """The output as ``$PAGER`` shows it: a text as is, any other value as pretty JSON."""
    return value if isinstance(value, str) else json_text(value)


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


def show_command(db: str, run_id: str, step: StepRecord | None = None) -> str:
    """The command that prints an execution's output raw (as JSON), quoted for a shell and safe to
    show: ``show RUN --output STEP`` for a top-level step (a pattern's result), ``show RUN --json``
    (every execution, in order, and the checkpoint it waits on) for a pattern's call, or without
    ``step`` for the run itself."""
    what = f"--output {shlex.quote(step.name)}" if step is not None and step.parent is None else "--json"
    return clean(f"relaypoint --db {shlex.quote(db)} show {fmt.short_id(run_id)} {what}")


def _rest(left: int, what: str) -> Text:
    return Text(f"… {left:,} more characters of {what} not shown", style="dim italic")


def output_view(step: StepRecord, shown: Readable | None, pages: int, summary: PatternSummary | None = None,
                calls: tuple[Block, ...] = ()) -> Readable:
    """What the output box shows: a running step's progress line; for a pattern, its ``summary``
    first; then the output as it reads, ``shown`` (None: none recorded), ``pages`` pages of it,
    headed, when it goes on, by its size and the keys that show the rest; then ``calls``, the
    execution's usage and recorded calls as they read (see :func:`relaypoint.tui.calls.calls_blocks`);
    then the step's error and traceback. Its ``folded`` and ``cut`` are the output's."""
    blocks: list[Block] = []
    if step.progress and step.status == StepStatus.RUNNING:
        blocks.append(Block(None, Text.assemble(("… ", "dim"), literal(step.progress, "italic"), "\n")))
    if summary is not None:
        blocks += [Block(None, summary_view(summary)), Block(None, Text("\nresult", style="bold"))]
    if shown is None:
        blocks.append(Block(None, Text(_unrecorded(step, summary is not None), style="dim")))
    else:
        if shown.cut:
            first = "the first page" if pages == 1 else f"the first {pages} pages"
            blocks.append(Block(None, Text(f"{human_size(shown.size)} in all ({shown.size:,} bytes); {first} shown"
                                           " · m: more · p: all in $PAGER", style="bold yellow")))
        blocks += shown.blocks
    blocks += calls
    trouble: list[Text] = []
    if step.error:
        error = preview(step.error)
        trouble.append(Text.assemble(("error ", "bold red"), literal(error.head, "red", multiline=True)))
        if error.cut:
            trouble.append(_rest(len(step.error) - len(error.head), "the error"))
    if step.traceback:
        # Its end says where it was raised: keep the last lines.
        tail = "\n".join(step.traceback[-PREVIEW_CHARS:].split("\n")[-PREVIEW_LINES:])
        if len(tail) < len(step.traceback):
            trouble.append(Text(f"… the first {len(step.traceback) - len(tail):,} characters of the traceback "
                                "not shown", style="dim italic"))
        trouble.append(literal(tail, "dim", multiline=True))
    if trouble:
        blocks.append(Block(None, Text("\n").join([Text(""), *trouble])))
    return Readable(tuple(blocks), shown is not None and shown.folded, shown is not None and shown.cut,
                    shown.size if shown is not None else 0)


WAITING = {StepStatus.AWAITING_INPUT: "it waits for an answer (i: respond)",
           StepStatus.AWAITING_APPROVAL: "it waits for a person's approval (a: approve, x: reject)"}


def _unrecorded(step: StepRecord, pattern: bool) -> str:
    """Why an execution shows no output: a pattern that has not finished, a pause waiting for a
    person (and the key that answers it), or nothing recorded."""
    if pattern:
        return "none yet: the pattern has not finished"
    return "no output recorded" + (f": {WAITING[step.status]}" if step.status in WAITING else "")
