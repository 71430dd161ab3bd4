"""``panel``: a panel of agents reviews a repository audit's findings, one multi-agent pattern after
another. Deterministic (every agent is a rule, no network), over real local input: the findings are
those of the ``repo-audit`` example's scan and analysis of a directory
(:func:`relaypoint.examples.audit.scan_directory`, :func:`~relaypoint.examples.audit.analyze_files`).

1. ``findings`` (a step): the audit's findings, most severe first, named ``F1``, ``F2``, ...
2. ``argue`` (a debate, 3 rounds): each round the ``advocate`` states the case for the findings
   still standing and the ``skeptic`` strikes the weakest one, if it is weak enough
   (:data:`SKEPTIC_BAR`); the ``judge`` lists the findings that matter and those struck.
3. ``rank`` (a vote): the voters ``impact``, ``effort`` and ``reach`` each rank the findings that
   matter; a Borda count (:func:`borda`) tallies the rankings.
4. ``triage`` (a supervisor): the router alternates ``search`` (finds the next top-ranked finding
   in its file) and ``fix`` (proposes a fix for a found one); each returns None, an idle turn, once
   it has nothing left. When both are idle, ``review`` collects the fixes and the router stops.
5. ``fixes`` (a planner): an ``edit`` and a ``check`` subtask per fix. An edit takes at most
   :data:`EDIT_LINES` lines, which the first plan does not know: the edit of a longer function
   fails, and the re-plan splits every such edit into chunks.
6. ``summary`` (a loop): drafts the panel's Markdown report, each pass adding at most two sections,
   until its score (the share of sections written) reaches ``threshold``.

Workflows: ``panel``, and ``panel-with-person``, where the skeptic is a person (``human(...)``): each
round pauses the run ``awaiting_input`` for their answer (``relaypoint respond RUN --value '"F4"'``
strikes F4, ``--value null`` strikes nothing).

Run input (all optional): ``root`` (directory, default "."), ``max_files`` (default 2000),
``long_function_lines`` (default 50), ``docstring_target`` (coverage below it is a finding,
default 0.8), ``max_findings`` (default 6), ``max_fixes`` (how many top-ranked findings triage
takes, 1 to :data:`MAX_FIXES`, default 3), ``threshold`` (the summary's score to reach, default
0.9), ``delay`` (seconds the skeptic spends in round 2 on its first attempt, for demos that kill
the process mid-debate).
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from relaypoint.examples.audit import analyze_files, scan_directory
from relaypoint.patterns import human
from relaypoint.workflow import Context, Workflow

ROUNDS = 3
SKEPTIC_BAR = 1.25
"""The skeptic strikes the weakest finding standing when its severity is below this (and it is not
a file that fails to parse)."""
EDIT_LINES = 40
"""The most lines one ``edit`` subtask rewrites; a longer span fails the subtask."""
MAX_FIXES = 8
"""The most findings triage takes: 2 turns each, 3 more to finish, within its 20 turns."""
SECTIONS = ("findings", "debate", "ranking", "triage", "plan")
SECTIONS_PER_PASS = 2
SKEPTIC_PROMPT = 'Strike the weakest finding still standing: answer its id (e.g. "F5"), or null to concede'
"""What the person in ``panel-with-person`` is asked each round; ``{"strike": "F5", "says": "why"}``
also strikes F5, with the reason."""

Finding = dict[str, Any]


# ---- the findings -------------------------------------------------------------------------------


def gather_findings(root: str, *, max_files: int = 2000, long_lines: int = 50, docstring_target: float = 0.8,
                    limit: int = 6) -> dict[str, Any]:
    """The audit's findings for ``root``, most severe first (the first ``limit``).

    Severity: a file that does not parse 3; a long function its length over ``long_lines`` (97
    lines over 50: 1.94); docstring coverage below ``docstring_target`` 1 + 5 x the shortfall (66%
    against 80%: 1.7); a TODO/FIXME/XXX comment 1. Returns ``{"root": absolute path,
    "files_analyzed", "long_function_lines", "considered": findings before the cut, "findings":
    [{"id": "F1", "kind": "unparsable" | "long_function" | "docstrings" | "todo", "path",
    "severity", "says": one line, plus "name" and "lines" (long_function) or "line" (todo)}]}``.

    Raises ``FileNotFoundError`` if ``root`` is not a directory.
    """
    scan = scan_directory(root, max_files)
    analysis = analyze_files(scan["root"], scan["python_files"], long_lines)
    found: list[Finding] = [
        {"kind": "unparsable", "path": u["path"], "severity": 3.0, "says": f"{u['path']} does not parse: {u['error']}"}
        for u in analysis["unparsable"]]
    for f in analysis["long_functions"]:
        ratio = round(f["lines"] / long_lines, 2)
        found.append({"kind": "long_function", "path": f["path"], "name": f["name"], "lines": f["lines"],
                      "severity": ratio, "says": f"`{f['name']}` in {f['path']} is {f['lines']} lines "
                                                 f"({ratio}x the {long_lines}-line limit)"})
    coverage = analysis["docstring_coverage"]
    if coverage is not None and coverage < docstring_target:
        found.append({"kind": "docstrings", "path": ".", "severity": round(1 + 5 * (docstring_target - coverage), 2),
                      "says": f"docstring coverage is {coverage:.0%}, below the {docstring_target:.0%} target"})
    found += [{"kind": "todo", "path": t["path"], "line": t["line"], "severity": 1.0,
               "says": f"{t['path']}:{t['line']} {t['text']}"} for t in analysis["todos"]]
    found.sort(key=lambda f: -f["severity"])  # stable: among equals, in the order gathered
    return {"root": scan["root"], "files_analyzed": analysis["files_analyzed"], "long_function_lines": long_lines,
            "considered": len(found),
            "findings": [{"id": f"F{i}", **f} for i, f in enumerate(found[:limit], 1)]}


def _findings(ctx: Context) -> dict[str, Finding]:
    """The run's findings by id, most severe first."""
    return {f["id"]: f for f in ctx.results["findings"]["findings"]}


def findings(ctx: Context) -> dict[str, Any]:
    """The audit's findings for ``input.root`` (see :func:`gather_findings`). Raises ``ValueError``
    for a ``max_fixes`` outside 1 to :data:`MAX_FIXES`."""
    max_fixes = int(ctx.input.get("max_fixes", 3))
    if not 1 <= max_fixes <= MAX_FIXES:
        raise ValueError(f"max_fixes must be 1 to {MAX_FIXES}, not {max_fixes}")
    return gather_findings(ctx.input.get("root", "."), max_files=int(ctx.input.get("max_files", 2000)),
                           long_lines=int(ctx.input.get("long_function_lines", 50)),
                           docstring_target=float(ctx.input.get("docstring_target", 0.8)),
                           limit=int(ctx.input.get("max_findings", 6)))


# ---- argue: the debate --------------------------------------------------------------------------


def struck_by(answer: Any) -> str | None:
    """The finding id a skeptic's answer strikes: ``"F4"`` or ``{"strike": "F4", ...}``; anything
    else (None, ``{"strike": None}``, other text) strikes nothing."""
    strike = answer.get("strike") if isinstance(answer, Mapping) else answer
    return strike.strip() if isinstance(strike, str) else None


def standing(found: Mapping[str, Finding], history: Sequence[dict[str, Any]]) -> tuple[list[str], list[dict]]:
    """The finding ids still standing after the skeptic's turns in ``history`` (most severe first),
    and the strikes as ``[{"id", "round", "why"}]`` (a strike of an id not standing is ignored)."""
    left, struck = list(found), []
    for turn in history:
        if turn["agent"] == "skeptic" and (fid := struck_by(turn["output"])) in left:
            left.remove(fid)
            why = turn["output"].get("says") if isinstance(turn["output"], Mapping) else None
            struck.append({"id": fid, "round": turn["iteration"], "why": why or "struck by the skeptic"})
    return left, struck


def advocate(ctx: Context) -> dict[str, Any]:
    """Keep every finding standing; make the case for the strongest."""
    found = _findings(ctx)
    left, struck = standing(found, ctx.history)
    if not left:
        return {"says": "nothing left to defend", "keep": []}
    lost = f"{struck[-1]['id']} is struck; " if struck else ""
    return {"says": f"{lost}{len(left)} findings stand. {left[0]} first: {found[left[0]]['says']}", "keep": left}


def _why_weak(f: Finding) -> str:
    """The skeptic's one-line reason for striking ``f``."""
    if f["kind"] == "long_function":
        return f"{f['lines']} lines is within {f['severity'] - 1:.0%} of the limit; splitting buys little"
    if f["kind"] == "todo":
        return "a TODO is a reminder, not a defect"
    return "close enough to the target to wait"


def skeptic(ctx: Context) -> dict[str, Any]:
    """Strike the weakest finding standing when its severity is below :data:`SKEPTIC_BAR` (a file
    that does not parse is never struck); else concede. Sleeps ``input.delay`` seconds in round 2
    of its first attempt (demos kill the process there)."""
    if ctx.iteration == 2 and ctx.attempt == 1:
        time.sleep(float(ctx.input.get("delay") or 0))
    found = _findings(ctx)
    left, _ = standing(found, ctx.history)
    weakest = found[left[-1]] if left else None
    if weakest is None or weakest["severity"] >= SKEPTIC_BAR or weakest["kind"] == "unparsable":
        return {"strike": None, "says": "concede: every finding standing is worth fixing"}
    return {"strike": weakest["id"], "says": _why_weak(weakest)}


def judge(ctx: Context) -> dict[str, Any]:
    """The findings that matter (standing after the debate, most severe first) and those struck."""
    found = _findings(ctx)
    left, struck = standing(found, ctx.history)
    says = f"{len(left)} of {len(found)} findings matter" + (f": {', '.join(left)}" if left else "")
    if struck:
        says += f"; struck {', '.join(s['id'] for s in struck)}"
    return {"matter": left, "struck": struck, "says": says}


# ---- rank: the vote -----------------------------------------------------------------------------


def _matter(ctx: Context) -> list[Finding]:
    found = _findings(ctx)
    return [found[fid] for fid in ctx.results["argue"]["matter"]]


def by_impact(ctx: Context) -> list[str]:
    """Most severe first."""
    return [f["id"] for f in sorted(_matter(ctx), key=lambda f: -f["severity"])]


def _effort(f: Finding) -> float:
    """Hours to fix, roughly: a TODO 0.5, a parse error 1, docstrings 3, a function 1 per 20 lines."""
    return {"todo": 0.5, "unparsable": 1.0, "docstrings": 3.0}.get(f["kind"], f.get("lines", 0) / 20)


def by_effort(ctx: Context) -> list[str]:
    """Cheapest to fix first."""
    return [f["id"] for f in sorted(_matter(ctx), key=_effort)]


def by_reach(ctx: Context) -> list[str]:
    """Findings in the files with the most findings first (docstrings reach every file), then by
    severity."""
    matter = _matter(ctx)
    per_file = {f["path"]: sum(g["path"] == f["path"] for g in matter) for f in matter}

    def reach(f: Finding) -> float:
        return math.inf if f["kind"] == "docstrings" else per_file[f["path"]]

    return [f["id"] for f in sorted(matter, key=lambda f: (-reach(f), -f["severity"]))]


def borda(votes: Mapping[str, list[str]]) -> dict[str, Any]:
    """Borda count of rankings ``{voter: [id, ...]}``: in a ranking of n, the first gets n points,
    the last 1. Returns ``{"ranking": ids by points, most first (ties: the first voter's order),
    "points": {id: points}}``."""
    points: dict[str, int] = {}
    for ranking in votes.values():
        for place, fid in enumerate(ranking):
            points[fid] = points.get(fid, 0) + len(ranking) - place
    return {"ranking": sorted(points, key=lambda fid: -points[fid]), "points": points}


# ---- triage: the supervisor ---------------------------------------------------------------------


def route(ctx: Context) -> str | None:
    """Alternate ``search`` and ``fix``; once both are idle, ``review``; after the review, stop."""
    state = ctx.state
    if state["activations"]["review"]:
        return None
    if state["idle"]["search"] and state["idle"]["fix"]:
        return "review"
    return "fix" if state["turn"] % 2 else "search"


def _done_by(history: Sequence[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
    """The non-idle outputs of ``agent`` in ``history``, in order."""
    return [h["output"] for h in history if h["agent"] == agent and h["output"] is not None]


def locate(root: str, f: Finding) -> tuple[str, int | None]:
    """Where finding ``f`` is, as ``(path, line)``: the line of a long function's ``def`` (read from
    the file under ``root``; None if it cannot be read or found), of a TODO; a file that does not
    parse has no line; docstrings are ``("every module", None)``."""
    if f["kind"] == "todo":
        return f["path"], f["line"]
    if f["kind"] == "long_function":
        pattern = re.compile(rf"\s*(async\s+)?def\s+{re.escape(f['name'].rsplit('.', 1)[-1])}\b")
        try:
            with open(os.path.join(root, f["path"]), encoding="utf-8", errors="replace") as source:
                return f["path"], next((n for n, text in enumerate(source, 1) if pattern.match(text)), None)
        except OSError:
            return f["path"], None
    return ("every module" if f["kind"] == "docstrings" else f["path"]), None


def search(ctx: Context) -> dict[str, Any] | None:
    """Find the next top-ranked finding (of the first ``input.max_fixes``) in its file; None (idle)
    when every one is found."""
    found = _findings(ctx)
    located = {out["finding"] for out in _done_by(ctx.history, "search")}
    targets = ctx.results["rank"]["result"]["ranking"][:int(ctx.input.get("max_fixes", 3))]
    fid = next((t for t in targets if t not in located), None)
    if fid is None:
        return None
    path, line = locate(ctx.results["findings"]["root"], found[fid])
    where = f"{path}:{line}" if line else path
    return {"finding": fid, "where": where, "path": path, "line": line, "says": f"{fid} is in {where}"}


def _proposal(f: Finding, limit: int) -> str:
    if f["kind"] == "long_function":
        parts = math.ceil(f["lines"] / limit)
        return f"split `{f['name']}` ({f['lines']} lines) into {parts} functions of at most {limit} lines"
    return {"unparsable": "fix the syntax error so the file parses",
            "docstrings": "document the public modules, classes and functions first",
            "todo": "resolve the TODO, or file it as an issue and delete the comment"}[f["kind"]]


def fix(ctx: Context) -> dict[str, Any] | None:
    """Propose a fix for the next found finding not fixed yet; None (idle) when there is none."""
    found = _findings(ctx)
    fixed = {out["finding"] for out in _done_by(ctx.history, "fix")}
    todo = next((out for out in _done_by(ctx.history, "search") if out["finding"] not in fixed), None)
    if todo is None:
        return None
    f = found[todo["finding"]]
    first = todo["line"] or 1
    span = [first, first + f["lines"] - 1] if f["kind"] == "long_function" else None
    return {"finding": f["id"], "where": todo["where"], "path": todo["path"], "span": span,
            "fix": _proposal(f, ctx.results["findings"]["long_function_lines"])}


def review(ctx: Context) -> dict[str, Any]:
    """The fixes proposed in this triage, in order (the supervisor's result)."""
    fixes = _done_by(ctx.history, "fix")
    return {"fixes": fixes, "says": f"{len(fixes)} fixes proposed" + (
        f": {', '.join(f['finding'] for f in fixes)}" if fixes else "")}


# ---- fixes: the planner -------------------------------------------------------------------------


def plan_fixes(ctx: Context) -> list[dict[str, Any]]:
    """One ``edit`` then one ``check`` subtask per fix of the triage."""
    tasks = []
    for f in ctx.results["triage"]["fixes"]:
        edit_id = f"edit-{f['finding']}"
        tasks.append({"id": edit_id, "agent": "edit", "input": f})
        tasks.append({"id": f"check-{f['finding']}", "agent": "check", "input": {"finding": f["finding"]},
                      "after": [edit_id]})
    return tasks


def edit(ctx: Context) -> dict[str, Any]:
    """Make the edit ``ctx.input`` describes (a subtask of the plan). Raises ``ValueError`` for a
    span of more than :data:`EDIT_LINES` lines."""
    task = ctx.input
    span = task["span"]
    if span and span[1] - span[0] + 1 > EDIT_LINES:
        raise ValueError(f"{task['where']}: lines {span[0]}-{span[1]} are more than one edit rewrites "
                         f"({EDIT_LINES}); split the edit")
    where = f"{task['path']} lines {span[0]}-{span[1]}" if span else task["where"]
    return {"finding": task["finding"], "edited": where, "says": task["fix"]}


def check(ctx: Context) -> dict[str, Any]:
    """Check that the edits of finding ``ctx.input.finding`` are recorded (its subtasks so far)."""
    fid = ctx.input["finding"]
    edits = [h["output"]["edited"] for h in ctx.history if h["agent"] == "edit" and h["output"]["finding"] == fid]
    return {"finding": fid, "ok": bool(edits), "edits": edits,
            "says": f"{len(edits)} edit{'' if len(edits) == 1 else 's'} recorded"}


def replan_fixes(ctx: Context) -> list[dict[str, Any]]:
    """The unfinished part of the plan again, every edit longer than :data:`EDIT_LINES` split into
    chunks (``edit-F1.1``, ``edit-F1.2``, ...) that the check waits on."""
    unfinished = [t for t in ctx.state["plan"] if t["status"] != "completed"]
    chunks: dict[str, list[str]] = {}
    tasks = []
    for t in unfinished:
        span = (t["input"] or {}).get("span") if t["agent"] == "edit" else None
        if not span or span[1] - span[0] + 1 <= EDIT_LINES:
            tasks.append(t)
            continue
        starts = range(span[0], span[1] + 1, EDIT_LINES)
        pieces = [{"id": f"{t['id']}.{n}", "agent": "edit", "after": t["after"],
                   "input": {**t["input"], "span": [s, min(s + EDIT_LINES - 1, span[1])]}}
                  for n, s in enumerate(starts, 1)]
        chunks[t["id"]] = [p["id"] for p in pieces]
        tasks += pieces
    return [{"id": t["id"], "agent": t["agent"], "input": t["input"],
             "after": [c for a in t["after"] for c in chunks.get(a, [a])]} for t in tasks]


# ---- summary: the loop --------------------------------------------------------------------------


def render_summary(results: Mapping[str, Any], sections: Sequence[str]) -> str:
    """The panel's Markdown report with ``sections`` (of :data:`SECTIONS`), from the results of the
    earlier steps and patterns. Ends with a newline."""
    found = {f["id"]: f for f in results["findings"]["findings"]}
    out = [f"# Panel review of {os.path.basename(results['findings']['root'])}"]
    if "findings" in sections:
        out += ["", "## Findings", ""]
        out += [f"- **{fid}** {f['says']} (severity {f['severity']})" for fid, f in found.items()] or ["None."]
    if "debate" in sections:
        argue = results["argue"]
        out += ["", "## Debate", "", argue["says"] + "."]
        out += [f"- {s['id']} struck in round {s['round']}: {s['why']}" for s in argue["struck"]]
    if "ranking" in sections:
        tally = results["rank"]["result"]
        out += ["", "## Ranking", ""]
        out += [f"{n}. {fid} ({tally['points'][fid]} points)" for n, fid in enumerate(tally["ranking"], 1)] or [
            "Nothing to rank."]
    if "triage" in sections:
        out += ["", "## Triage", ""]
        out += [f"- {f['finding']} in {f['where']}: {f['fix']}" for f in results["triage"]["fixes"]] or [
            "No fixes."]
    if "plan" in sections:
        out += ["", "## Plan", ""]
        out += [f"- {tid}: {o.get('edited') or o['says']}" for tid, o in results["fixes"].items()] or [
            "Nothing to do."]
        if any("." in tid for tid in results["fixes"]):
            out += ["", f"Re-planned: an edit rewrites at most {EDIT_LINES} lines, so the longer ones were split."]
    return "\n".join(out) + "\n"


def summarize(ctx: Context) -> dict[str, Any]:
    """One pass: the previous pass's sections plus at most :data:`SECTIONS_PER_PASS` missing ones."""
    have = ctx.history[-1]["output"]["sections"] if ctx.history else []
    sections = have + [s for s in SECTIONS if s not in have][:SECTIONS_PER_PASS]
    return {"pass": ctx.iteration, "score": round(len(sections) / len(SECTIONS), 2), "sections": sections,
            "markdown": render_summary(ctx.results, sections)}


def good_enough(ctx: Context) -> bool:
    """Whether the pass's score reached ``input.threshold`` (default 0.9)."""
    return ctx.output["score"] >= float(ctx.input.get("threshold", 0.9))


# ---- the workflows ------------------------------------------------------------------------------


def panel_workflow(name: str, skeptic_agent: Any) -> Workflow:
    """The panel (see the module docstring) with ``skeptic_agent`` as the debate's skeptic."""
    wf = Workflow(name)
    wf.step(findings)
    wf.debate("argue", agents={"advocate": advocate, "skeptic": skeptic_agent}, rounds=ROUNDS, judge=judge)
    wf.vote("rank", voters={"impact": by_impact, "effort": by_effort, "reach": by_reach}, tally=borda)
    wf.supervisor("triage", agents={"search": search, "fix": fix, "review": review}, route=route, max_turns=20,
                  max_idle=2)
    # one subtask at a time: the example's record (and the console's screenshots) read the same every run
    wf.planner("fixes", plan=plan_fixes, agents={"edit": edit, "check": check}, replan=replan_fixes, max_replans=2,
               max_concurrency=1)
    wf.loop(summarize, name="summary", max_iterations=len(SECTIONS), until=good_enough)
    return wf


workflow = panel_workflow("panel", skeptic)
with_person = panel_workflow("panel-with-person", human(SKEPTIC_PROMPT))
workflows = [workflow, with_person]
