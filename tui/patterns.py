"""How the console draws a pattern: its row and its calls' rows in the step chain, and the summary
shown above its result when its row is selected (rounds, per-agent counts, routing decisions,
votes and tally, the judge's decision, the plan as a tree). What is drawn is computed by
:mod:`relaypoint.views.patterns`; stored text (agent names, task ids, outputs) is shown literally."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from relaypoint.models import StepRecord
from relaypoint.status import STEP_SYMBOLS, StepStatus
from relaypoint.views.display import literal
from relaypoint.views.patterns import AgentCounts, PatternSummary, PlanNode, Route, call_label, undefined

from . import format as fmt

PREVIEW = 160
"""Characters of an output previewed on one line (cut again where the column ends)."""
DECISION_PREVIEW = 600
"""Characters of a judge's decision or a tally shown (it wraps)."""
EXPANDED, COLLAPSED = "▾", "▸"


def inline(value: Any, chars: int = PREVIEW) -> Text:
    """``value`` on one line, at most ``chars`` characters: a text with its runs of whitespace
    made single spaces, anything else as compact JSON (encoded only as far as shown)."""
    if isinstance(value, str):
        text = " ".join(value[:chars * 2].split())
    else:
        pieces, length = [], 0
        for chunk in json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).iterencode(value):
            pieces.append(chunk)
            length += len(chunk)
            if length > chars:
                break
        text = "".join(pieces)
    cut = text if len(text) <= chars else text[:chars - 1] + "…"
    shown = literal(cut)
    shown.no_wrap, shown.overflow = True, "ellipsis"
    return shown


def _styled(text: Text, style: str) -> Text:
    text.stylize(style)
    return text


def _status(status: StepStatus | None) -> Text:
    return fmt.step_status(status) if status is not None else Text("· planned", style="dim")


def _symbol(status: StepStatus | None) -> Text:
    if status is None:
        return Text("·", style="dim")
    return Text(STEP_SYMBOLS[status], style=fmt.STEP_COLORS[status])


def group_name(group: StepRecord, kind: str, progress: str, expanded: bool) -> Text:
    """A pattern's name cell in the step chain: ``▸ argue  round 3/5 · debate`` (``▾`` when
    expanded; the progress before the kind, which a narrow column cuts first)."""
    return Text.assemble(EXPANDED if expanded else COLLAPSED, " ", literal(group.name), "  ",
                         literal(progress), (f" · {kind}", "dim"))


def call_name(kind: str, call: StepRecord, last: bool) -> Text:
    """A pattern's call's name cell, under its pattern: ``  ├ round 2 · pro`` (``└`` for the last)."""
    return Text.assemble(("  └ " if last else "  ├ ", "dim"), literal(call_label(kind, call)))


def _output(call: StepRecord) -> Text:
    """A call's output on one line; until it completed, its status (and error) instead."""
    if call.status != StepStatus.COMPLETED:
        shown = Text(call.status.value, style=fmt.STEP_COLORS[call.status])  # its symbol is beside it
        if call.error:
            shown.append_text(Text.assemble("  ", literal(call.error[:PREVIEW], "red")))
        shown.no_wrap, shown.overflow = True, "ellipsis"
        return shown
    if not call.has_output:
        return Text("no output", style="dim")
    return inline(call.output)


def _table(rows: list[list[Text]], caps: tuple[int, ...]) -> Table:
    """``rows`` as a grid: each column as wide as its widest cell up to its cap in ``caps`` (cut
    with an ellipsis past it), the last column taking the rest of the width, cut at its end."""
    grid = Table.grid(padding=(0, 2), expand=True)
    for n, cap in enumerate(caps):
        width = min(cap, max((row[n].cell_len for row in rows), default=1))
        grid.add_column(width=width, no_wrap=True, overflow="ellipsis")
    grid.add_column(ratio=1)  # wrappable, so the table narrows it first; its cells are one line
    for row in rows:
        grid.add_row(*row)
    return grid


def _heading(text: str) -> Text:
    return Text(f"\n{text}", style="bold")


def _iterations(s: PatternSummary) -> list[RenderableType]:
    word = {"debate": "rounds", "loop": "passes", "supervisor": "turns", "parallel": "branches",
            "map": "items"}.get(s.kind, "calls")
    calls = [(n, it, call) for it in s.iterations for n, call in enumerate(it.calls)]
    agents = any(call.agent for _, _, call in calls)  # a loop's passes have none
    persons = s.parameters.get("humans")
    persons = persons if isinstance(persons, Mapping) else {}
    rows = [[Text(it.label if n == 0 else "", style="dim"),
             *([_agent(call.agent or "", call.agent in persons, undefined(s.parameters, call.agent))]
               if agents else []),
             _symbol(call.status), _output(call)] for n, it, call in calls]
    parts: list[RenderableType] = [_heading(word)]
    if s.earlier:
        parts.append(Text(f"… {s.earlier} earlier {word} (each is a row of the step chain)", style="dim italic"))
    parts.append(_table(rows, (10, 24, 1) if agents else (10, 1)) if rows else Text("none yet", style="dim"))
    return parts


def _agent(name: str, person: bool = False, gone: bool = False) -> Text:
    """An agent's name, marked when the agent is a person (:func:`relaypoint.human`) or ``gone``
    from the pattern's definition (a placeholder for what an allowed drift removed)."""
    return Text.assemble(literal(name), (" (person)", "dim") if person else "",
                         (" (not defined)", "yellow") if gone else "")


def _counts(counts: list[AgentCounts], live: bool, parameters: Mapping[str, Any]) -> list[RenderableType]:
    rows = [[Text("agent", style="dim"), Text("calls", style="dim"), Text("idle in a row", style="dim"), Text()]]
    rows += [[_agent(c.agent, gone=undefined(parameters, c.agent)), Text(str(c.activations), justify="right"),
              Text(str(c.idle), justify="right"), Text()] for c in counts]
    source = "from the supervisor's state" if live else "counted from its calls"
    return [Text.assemble(_heading("agents"), (f"  ({source})", "dim")),
            _table(rows, (24, 5, 13)) if counts else Text("none yet", style="dim")]


def _routes(routes: list[Route]) -> list[RenderableType]:
    rows = []
    for r in routes:
        if r.status != StepStatus.COMPLETED:
            choice = fmt.step_status(r.status)
        elif r.choice is None:
            choice = Text("→ stop", style="bold")
        else:
            choice = Text.assemble("→ ", literal(r.choice, "bold"))
        rows.append([Text(f"turn {r.turn}", style="dim"), choice,
                     Text.assemble(("of ", "dim"), Text(", ").join(literal(c) for c in r.candidates))])
    return [_heading("routing decisions"), _table(rows, (8, 18)) if rows else Text("none yet", style="dim")]


def _majority(result: Mapping[str, Any]) -> Text | None:
    """A majority tally (``{"winner", "tie", "counts": [[value, n], ...]}``) in words, or None."""
    counts = result.get("counts")
    if not isinstance(counts, list) or not all(isinstance(c, list) and len(c) == 2 for c in counts):
        return None
    tally = Text(", ").join(Text.assemble(inline(value, 40), f" × {n}") for value, n in counts)
    if result.get("tie"):
        return Text.assemble(("tie", "bold yellow"), "  ", tally)
    return Text.assemble(("winner ", "dim"), _styled(inline(result.get("winner"), 60), "bold green"), "  ", tally)


def _votes(s: PatternSummary) -> list[RenderableType]:
    """The votes, then the tally. With a majority's ``key``, a middle column shows what each vote
    counted as; a vote an allowed drift withdrew is listed after them, marked ``not counted``."""
    recorded, result = s.tally
    keys = result.get("keys") if recorded and isinstance(result, Mapping) else None
    keys = keys if isinstance(keys, Mapping) else {}
    if keys or s.uncounted:
        rows = [[literal(voter), Text.assemble(("→ ", "dim"), inline(keys[voter], 40)) if voter in keys
                 else Text("counted", style="dim"), inline(vote)] for voter, vote in s.votes]
        rows += [[_agent(voter, gone=undefined(s.parameters, voter)), Text("not counted", style="yellow"),
                  inline(vote)] for voter, vote in s.uncounted]
        caps: tuple[int, ...] = (30, 24)
    else:
        rows, caps = [[literal(voter), inline(vote)] for voter, vote in s.votes], (16,)
    parts: list[RenderableType] = [_heading("votes"), _table(rows, caps) if rows else Text("none yet", style="dim"),
                                   _heading("tally")]
    if not recorded:
        parts.append(Text("not yet", style="dim"))
    else:
        parts.append((_majority(result) if isinstance(result, Mapping) else None) or inline(result, DECISION_PREVIEW))
    return parts


def _judge(judge: StepRecord | None, has_judge: bool) -> list[RenderableType]:
    if not has_judge:
        return [_heading("judge"), Text("none: the result is the last round's outputs", style="dim")]
    if judge is None:
        return [_heading("judge"), Text("decides after the last round", style="dim")]
    head = Text.assemble(_heading("judge's decision"), "  ", fmt.step_status(judge.status))
    if judge.status != StepStatus.COMPLETED:
        return [head]
    decision = inline(judge.output, DECISION_PREVIEW)
    decision.no_wrap = False
    return [head, decision]


def _plan_label(node: PlanNode, parameters: Mapping[str, Any]) -> Text:
    label = Text.assemble(_symbol(node.status), " ", literal(node.task, "bold"))
    if node.agent:
        label.append_text(Text.assemble(" · ", _agent(node.agent, gone=undefined(parameters, node.agent))))
    if node.replan:
        label.append(f"  re-plan {node.replan}", style="yellow")
    if len(node.after) > 1:
        label.append_text(Text.assemble(("  after ", "dim"), literal(", ".join(node.after), "dim")))
    if node.dropped_by is not None:
        label.append(f"  dropped by re-plan {node.dropped_by}", style="dim italic")
    elif node.status is None:
        label.append("  planned", style="dim")
    elif node.runs[-1].status == StepStatus.COMPLETED and node.runs[-1].has_output and node.runs[-1].output is not None:
        label.append("  ")
        label.append_text(_styled(inline(node.runs[-1].output, 60), "dim"))
    elif node.runs[-1].error:
        label.append_text(Text.assemble("  ", literal(node.runs[-1].error[:PREVIEW], "red")))
    if len(node.runs) > 1:
        label.append(f"  ({len(node.runs)} executions)", style="dim")
    label.no_wrap, label.overflow = True, "ellipsis"
    return label


def _plan(s: PatternSummary) -> list[RenderableType]:
    title = Text("plan", style="bold")
    if s.plan_step is not None and s.plan_step.status != StepStatus.COMPLETED:
        title.append_text(Text.assemble("  ", fmt.step_status(s.plan_step.status)))
    if s.replans:
        title.append(f"  re-planned {len(s.replans)} time{'s' if len(s.replans) != 1 else ''}", style="yellow")
    tree = Tree(title, guide_style="dim")

    def add(branch: Tree, nodes: list[PlanNode]) -> None:
        for node in nodes:
            add(branch.add(_plan_label(node, s.parameters)), node.children)

    add(tree, s.plan)
    parts: list[RenderableType] = [tree]
    if not s.plan and (s.plan_step is None or s.plan_step.status == StepStatus.COMPLETED):
        parts.append(Text("no subtasks planned yet", style="dim"))
    for r in s.replans:
        what = "re-plan" if r.step.agent == "replan" else "plan made again (resume --replan)"
        after = Text.assemble(" after ", literal(r.failed, "bold"), " failed") if r.failed else Text("")
        parts.append(Text.assemble((f"{r.number}. {what}", "yellow"), after, "  ", fmt.step_status(r.step.status)))
    return parts


def summary_view(s: PatternSummary) -> RenderableType:
    """The summary of a selected pattern (its kind, progress and status are on its row, just
    above): what its kind records (see :class:`~relaypoint.views.patterns.PatternSummary`)."""
    parts: list[RenderableType] = []
    if s.kind == "vote":
        parts += _votes(s)
    elif s.kind == "planner":
        parts += _plan(s)
    else:
        parts += _iterations(s)
    if s.kind == "supervisor":
        parts += _counts(s.counts, s.counts_live, s.parameters) + _routes(s.routes)
    if s.kind == "debate":
        parts += _judge(s.judge, s.parameters.get("judge") is not False)
    first = parts[0]
    if isinstance(first, Text) and first.plain.startswith("\n"):  # no blank line at the top
        parts[0] = first[1:]
    return Group(*parts)
