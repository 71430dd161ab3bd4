"""A step's recorded calls and usage as its output box shows them, under its output: the usage
line (for a pattern's row, its calls' sum), then each call (see :mod:`relaypoint.views.calls`) as
a header line (order, name, kind, model, status, time, tokens and cost) and what it sent and got
back, each part bounded, a Markdown text rendered as an output's is, any other value as JSON.

Built in the thread worker that reads the output, never on the UI thread, and bounded whatever
the step recorded: at most :data:`CALLS_SHOWN` calls and :data:`CALLS_CHARS` characters of them,
then a line saying how many more and the command that prints them all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.highlighter import JSONHighlighter
from rich.padding import Padding
from rich.text import Text

from relaypoint.models import CallRecord
from relaypoint.status import StepStatus
from relaypoint.usage import Usage, dollars, of_calls
from relaypoint.views.calls import CallParts, Part, read_calls
from relaypoint.views.display import clean, human_size, literal, preview, preview_json

from . import format as fmt
from .readable import Block, looks_like_markdown, markdown_elements

CALLS_SHOWN = 20
"""Most recorded calls listed under a step's output."""
CALLS_CHARS = 40_000
"""Most characters of the calls' parts listed under a step's output (each part is bounded too)."""
PART_CHARS, PART_LINES = 2_000, 30
"""The bounds of one part of a call (a message, arguments, a result) shown."""
PART_MARKDOWN_ELEMENTS = 40
"""Most Markdown elements of a part rendered as Markdown (each is a widget); past it, plain text."""
INLINE_JSON = 100
"""A JSON value whose compact text is at most this long is shown on its label's line."""

_json = JSONHighlighter()


@dataclass(frozen=True)
class Indented:
    """``text`` drawn ``indent`` cells in, its wrapped lines too."""

    text: Text
    indent: int

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Padding(self.text, (0, 0, 0, self.indent))


@dataclass(frozen=True)
class Lines:
    """``lines`` drawn one under the other. Equal when they are, so an output read again
    unchanged (the run moved on elsewhere) is not drawn again."""

    lines: tuple[Text | Indented, ...]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text | Indented]:
        yield from self.lines


def usage_line(used: Usage) -> Text | None:
    """``usage  3 requests, 1,204 in / 388 out tokens, $0.0042``, dim; None when nothing was used."""
    return Text.assemble("usage  ", used.line(), style="dim") if used.used else None


def _tokens(call: CallRecord, prices: Mapping[str, tuple[float, float]]) -> str:
    if call.input_tokens is None and call.output_tokens is None:
        return ""
    cost = of_calls([call], prices).cost
    return (f"{call.input_tokens or 0:,} in / {call.output_tokens or 0:,} out tokens"
            + ("" if cost is None else f", {dollars(cost)}"))


def call_header(call: CallRecord, prices: Mapping[str, tuple[float, float]]) -> Text:
    """A call's header line: its order, name (and kind, unless the name says it), model, status,
    how long it took, and its tokens (and cost when its model is priced), literally."""
    line = Text.assemble(("▸ ", "dim"), (f"{call.position + 1} ", "bold"), literal(call.name, "bold"))
    if not call.name.startswith(call.kind):
        line.append_text(Text.assemble("  ", literal(call.kind, "dim")))
    if call.model:
        line.append_text(Text.assemble(" · ", literal(call.model, "cyan")))
    line.append_text(Text.assemble("  ", fmt.step_status(call.status),
                                   ("  " + fmt.duration(call.started_at, call.finished_at), "dim")))
    tokens = _tokens(call, prices)
    if tokens:
        line.append(f"  {tokens}", style="dim")
    return line


def _json_text(value: Any, whole: str) -> tuple[Text, bool, int]:
    """``value`` as bounded JSON (compact when short), highlighted; whether it fits on its label's
    line, and its characters shown."""
    shown = preview_json(value, chars=PART_CHARS, lines=PART_LINES)
    if not shown.cut:
        compact = json.dumps(value, ensure_ascii=False)
        if len(compact) <= INLINE_JSON:
            text = literal(compact)
            _json.highlight(text)
            return text, True, len(compact)
    text = literal(shown.head, multiline=True)
    _json.highlight(text)
    if shown.cut:
        text.append(f"\n… {human_size(shown.size)} in all; {whole} prints it whole", style="dim italic")
    return text, False, len(shown.head)


def _part(part: Part, received: bool, failed: bool, whole: str) -> tuple[list[Text | Indented], str | None, int]:
    """One part: its label and value as text (the value as Markdown, returned apart, when it reads
    as Markdown) and the characters it shows."""
    label = Text.assemble(("  → " if received else "    ", "dim"),
                          literal(part.label, "bold" if received else "dim"))
    value = part.value
    if part.same_as is not None:
        return [Text.assemble(label, "  ", (f"the result of call {part.same_as + 1}, above", "dim italic"))], None, 0
    if isinstance(value, str):
        if (looks_like_markdown(value) and len(value) <= PART_CHARS
                and markdown_elements(value) <= PART_MARKDOWN_ELEMENTS):
            return [label], clean(value, multiline=True), len(value)
        head = preview(value, chars=PART_CHARS, lines=PART_LINES)
        text = literal(head.head, "red" if failed else "", multiline=True)
        if head.cut:
            text.append(f"\n… {human_size(head.size)} in all; {whole} prints it whole", style="dim italic")
        inline, size = "\n" not in head.head and not head.cut, len(head.head)
    else:
        text, inline, size = _json_text(value, whole)
    if inline:
        return [Text.assemble(label, "  ", text)], None, size
    return [label, Indented(text, 6)], None, size


def _more(count: int, what: str) -> Text:
    return Text(f"    … {count:,} more {what} not shown", style="dim italic")


def calls_blocks(calls: tuple[CallRecord, ...], used: Usage, prices: Mapping[str, tuple[float, float]],
                 whole: str) -> tuple[Block, ...]:
    """What the output box shows under a step's output: its usage line (``used``, when anything
    was), then its ``calls`` (priced by ``prices``), each as its header and parts, bounded (see the
    module); ``whole`` is the command that prints them all (``show RUN --json``)."""
    blocks: list[Block] = []
    shown: list[Text | Indented] = [Text("")]
    line = usage_line(used)
    if line is not None:
        shown.append(line)
    if calls:
        shown += [Text(""), Text(f"recorded calls ({len(calls)})", style="bold")]
    budget, listed = CALLS_CHARS, 0
    for read in read_calls(calls):
        if listed == CALLS_SHOWN or budget <= 0:
            break
        listed += 1
        shown += [Text(""), call_header(read.call, prices)]
        for part, received in _sides(read):
            failed = received and read.call.status != StepStatus.COMPLETED
            lines, markdown, size = _part(part, received, failed, whole)
            shown += lines
            budget -= size
            if markdown is not None:
                blocks += [Block(None, Lines(tuple(shown))), Block(None, markdown=markdown)]
                shown = []
        if read.more_sent:
            shown.append(_more(read.more_sent, "parts it sent"))
        if read.more_received:
            shown.append(_more(read.more_received, "parts it got back"))
    if listed < len(calls):
        shown.append(Text(f"… {len(calls) - listed:,} more recorded calls not shown; {whole} prints them all",
                          style="dim italic"))
    if shown and (blocks or len(shown) > 1):  # the blank line alone, nothing to show
        blocks.append(Block(None, Lines(tuple(shown))))
    return tuple(blocks)


def _sides(read: CallParts) -> list[tuple[Part, bool]]:
    """The parts of ``read`` in order: what it sent, then what it got back (True)."""
    return [*((p, False) for p in read.sent), *((p, True) for p in read.received)]
