"""Patterns under real kills: the test app whose agents log every call, and the crash matrix's
pattern scenario (:data:`PATTERNS`), run by tests/test_pattern_crash_matrix.py with the harness of
tests/crashmatrix.py (random SIGKILLs, racing resumers, the same invariants).

The app (:data:`APP`, written as ``patternapp.py`` into a test's directory) defines:

- ``patterns``: every kind of node in one workflow: a step, a loop, a debate (3 rounds and a
  judge), a vote (3 voters, majority), a supervisor (a router over two agents, one of which goes
  idle), a planner (3 subtasks) and a step that reports on them all;
- ``debate``: a 5-round debate of ``pro`` and ``con`` with a judge (``PATTERNAPP_ROUNDS=n``: n
  rounds, its definition changed, for a drift-allowed resume); ``careful``: 2 rounds, its
  agents' calls held for a person when their process dies (``on_orphan="hold"``);
- ``supervise``: the supervisor alone; ``plan``: a planner with a re-plan function and
  ``max_replans=1`` (a subtask fails when its id is in the input's ``fail`` list);
- ``person``, ``consent``, ``hurry``: debates in which ``con`` is a person (:func:`relaypoint.human`):
  answering (kind input), approving (kind approval), and with a 1-second deadline;
- ``fanout``: the nodes whose calls run side by side: a parallel of three branches, a map over
  the topic's words (``max_concurrency=2``), a 2-round ``concurrent`` debate of three speakers
  and a judge, then a step digesting their results.
- ``spread``: the crash matrix's concurrent scenario (:data:`SPREAD`): a vote of five, a parallel of
  four, a map of six items by three, a concurrent debate and a planner of independent subtasks,
  sync calls and async ones (awaiting their naps), each napping a seeded, staggered time.

Every execution of user code appends one line to the executions log (``EXEC_LOG``): ``label attempt
pid run_id state``, the label being the execution's idempotency key without the run id
(``argue#3/con``: debate ``argue``, round 3, agent ``con``; a step's label is its name) and state
what ``ctx.state`` showed it (compact JSON). Each agent's output is a digest of everything it saw
(input, history, state, iteration; a call beside others leaves out what depends on timing), so a
resume that restored anything wrongly changes every output after it. Two environment variables aim
a process at one execution: ``PATTERNAPP_HOLD=label`` makes it wait there (to be killed),
``PATTERNAPP_FAIL=label`` makes it raise there.

Soak: ``RELAYPOINT_PATTERN_TRIALS=100 python -m pytest tests/test_pattern_crash_matrix.py -q -s``, or
``python tests/patternmatrix.py [--spread] --trials 100 [--seed N] [--db postgresql://...]`` for a line
per trial.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import crashmatrix  # (tests/ is not a package)
import procs

APP_SOURCE = '"""The pattern test app (written by tests/patternmatrix.py)."""\n' + crashmatrix.INSTRUMENTATION + r'''
import asyncio
from relaypoint import human

HOLD = os.environ.get("PATTERNAPP_HOLD")
FAIL = os.environ.get("PATTERNAPP_FAIL")


def _call(ctx):
    """Log this execution, then nap, wait to be killed, or raise, as the test asks."""
    _begin(ctx, ctx.run_id, json.dumps(dict(ctx.state), separators=(",", ":"), sort_keys=True))
    if label(ctx) == HOLD:
        time.sleep(300)
    if label(ctx) == FAIL:
        raise RuntimeError(f"{label(ctx)} failed as asked")
    _nap(ctx)


def _digest(*parts):
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:10]


def said(ctx):
    """An agent: its label and a digest of everything it saw."""
    _call(ctx)
    return f"{label(ctx)}:{_digest(ctx.input, list(ctx.history), dict(ctx.state), ctx.agent, ctx.iteration)}"


def judged(ctx):
    _call(ctx)
    return {"winner": "pro" if int(_digest(list(ctx.history)), 16) % 2 else "con", "heard": len(ctx.history),
            "digest": _digest(list(ctx.history), dict(ctx.state))}


def voted(ctx):
    _call(ctx)
    return "yes" if int(_digest(ctx.results["argue"], ctx.agent), 16) % 3 else "no"


def route(ctx):
    """The router: stop after 4 turns; else the agent called least (search first)."""
    _call(ctx)
    made = ctx.state["activations"]
    return None if ctx.state["turn"] >= 4 else "search" if made["search"] <= made["code"] else "code"


def search(ctx):
    """Finds something once, then nothing: idle turns."""
    return said(ctx) if ctx.state["activations"]["search"] == 0 else _call(ctx)


def make_plan(ctx):
    """Three subtasks in a row (the same answer when asked to decompose again)."""
    _call(ctx)
    fail = ctx.input.get("fail", [])
    return [{"id": "t1", "agent": "code", "input": {"task": "t1", "fail": "t1" in fail}},
            {"id": "t2", "agent": "test", "input": {"task": "t2", "fail": "t2" in fail}, "after": ["t1"]},
            {"id": "t3", "agent": "code", "input": {"task": "t3", "fail": "t3" in fail}, "after": ["t2"]}]


def replan(ctx):
    """The failed subtask again, as ``<id>r`` (run by ``code``), and the rest waiting on it."""
    _call(ctx)
    old = ctx.failed["task"]["id"]
    new = f"{old}r"
    rest = [{"id": t["id"], "agent": t["agent"], "input": t["input"],
             "after": [new if a == old else a for a in t["after"]]}
            for t in ctx.state["plan"] if t["status"] == "pending"]
    return [{"id": new, "agent": "code", "input": {"task": new, "fail": new in ctx.input.get("fail", [])},
             "after": ctx.failed["task"]["after"]}] + rest


def work(ctx):
    """A subtask: fails when its input says so."""
    if ctx.input.get("fail"):
        _call(ctx)
        raise RuntimeError(f"subtask {ctx.input['task']} cannot be done")
    return said(ctx)


def _debate(wf, rounds, con=said):
    wf.debate("argue", agents={"pro": said, "con": con}, rounds=rounds, judge=judged)


def _supervisor(wf):
    wf.supervisor("triage", agents={"search": search, "code": said}, route=route, max_turns=6, max_idle=2)


def _planner(wf, **options):
    wf.planner("build", plan=make_plan, agents={"code": work, "test": work}, **options)


patterns = Workflow("patterns")


@patterns.step
def brief(ctx):
    _call(ctx)
    return {"words": ctx.input["text"].split(), "n": ctx.input["n"]}


@patterns.loop(max_iterations=4, until=lambda ctx: ctx.output["score"] >= 3)
def refine(ctx):
    _call(ctx)
    return {"score": ctx.iteration + ctx.results["brief"]["n"] % 2, "seen": _digest(list(ctx.history))}


_debate(patterns, 3)
patterns.vote("decide", voters={"a": voted, "b": voted, "c": voted})
_supervisor(patterns)
_planner(patterns)


@patterns.step
def report(ctx):
    _call(ctx)
    return _digest({name: ctx.results[name] for name in ("brief", "refine", "argue", "decide", "triage", "build")})


debate = Workflow("debate")
_debate(debate, int(os.environ.get("PATTERNAPP_ROUNDS", "5")))
careful = Workflow("careful")
careful.debate("argue", agents={"pro": said, "con": said}, rounds=2, judge=judged, on_orphan="hold")
supervise = Workflow("supervise")
_supervisor(supervise)
plan = Workflow("plan")
_planner(plan, replan=replan, max_replans=1)
person = Workflow("person")
_debate(person, 2, con=human("Your rebuttal?"))
consent = Workflow("consent")
_debate(consent, 1, con=human("Do you concede?", kind="approval"))
hurry = Workflow("hurry")
_debate(hurry, 1, con=human("Quick, your rebuttal?", timeout=1))



def alone(ctx):
    """A call made beside others (a branch, an item, a concurrent speaker): its label and a digest
    of what it saw, its driver state left out (under concurrency that depends on timing)."""
    _call(ctx)
    return f"{label(ctx)}:{_digest(ctx.input, list(ctx.history), ctx.agent, ctx.iteration)}"


def listed(ctx):
    """A map's items: one per word of the topic, and a fixed tail."""
    _call(ctx)
    return [{"word": w} for w in ctx.input["topic"].split("-")] + [{"word": "x"}, {"word": "y"}]


fanout = Workflow("fanout")
fanout.parallel("gather", branches={"a": alone, "b": alone, "c": alone})
fanout.map("each", alone, items=listed, max_concurrency=2)
fanout.debate("chorus", agents={"pro": alone, "con": alone, "mid": alone}, rounds=2, judge=judged, concurrent=True)


@fanout.step
def summed(ctx):
    _call(ctx)
    return _digest({name: ctx.results[name] for name in ("gather", "each", "chorus")})


async def _acall(ctx):
    """:func:`_call` for an async agent: its nap awaited, so the loop runs the others meanwhile."""
    _begin(ctx, ctx.run_id, json.dumps(dict(ctx.state), separators=(",", ":"), sort_keys=True))
    if label(ctx) == HOLD:
        await asyncio.sleep(300)
    if label(ctx) == FAIL:
        raise RuntimeError(f"{label(ctx)} failed as asked")
    if not NO_SLEEP:
        await asyncio.sleep(float(ctx.input.get("sleeps", {}).get(label(ctx), 0)))


async def aloof(ctx):
    """:func:`alone`, async."""
    await _acall(ctx)
    return f"{label(ctx)}:{_digest(ctx.input, list(ctx.history), ctx.agent, ctx.iteration)}"


def ballot(ctx):
    """A voter beside four others: a vote from what it saw (sync, or async: :func:`aballot`)."""
    _call(ctx)
    return "yes" if int(_digest(ctx.results["opening"], ctx.agent), 16) % 3 else "no"


async def aballot(ctx):
    await _acall(ctx)
    return "yes" if int(_digest(ctx.results["opening"], ctx.agent), 16) % 3 else "no"


def dealt(ctx):
    """A map's six items, from the input."""
    _call(ctx)
    return [{"k": k, "n": ctx.input["n"] % (k + 7)} for k in range(6)]


def _after(ctx):
    """What a subtask digests of its history: its dependencies' outputs (the subtasks beside it
    are timing's, see test_concurrent_history.py)."""
    after = next(t["after"] for t in ctx.state["plan"] if t["id"] == ctx.input["task"])
    return [h["output"] for h in ctx.history if h.get("task") in after]


def built(ctx):
    """A planner's subtask beside others: its label and a digest of its input and dependencies
    (sync, or async: :func:`abuilt`)."""
    _call(ctx)
    return f"{label(ctx)}:{_digest(ctx.input, _after(ctx), ctx.agent, ctx.iteration)}"


async def abuilt(ctx):
    await _acall(ctx)
    return f"{label(ctx)}:{_digest(ctx.input, _after(ctx), ctx.agent, ctx.iteration)}"


def split_work(ctx):
    """Three independent subtasks, and a fourth after two of them."""
    _call(ctx)
    return [{"id": "t1", "agent": "code", "input": {"task": "t1"}},
            {"id": "t2", "agent": "test", "input": {"task": "t2"}},
            {"id": "t3", "agent": "code", "input": {"task": "t3"}},
            {"id": "t4", "agent": "test", "input": {"task": "t4"}, "after": ["t1", "t2"]}]


# the fan-out nodes with calls of staggered latencies (the input's ``sleeps``), sync ones in
# threads and async ones on the loop: the crash matrix's concurrent scenario
spread = Workflow("spread")


@spread.step
def opening(ctx):
    _call(ctx)
    return {"words": ctx.input["text"].split(), "n": ctx.input["n"]}


spread.vote("poll", voters={"a": aballot, "b": ballot, "c": aballot, "d": ballot, "e": aballot})
spread.parallel("gather", branches={"a": aloof, "b": alone, "c": aloof, "d": alone})
spread.map("each", aloof, items=dealt, max_concurrency=3)
spread.debate("chorus", agents={"pro": aloof, "con": alone, "mid": aloof}, rounds=2, judge=judged, concurrent=True)
spread.planner("build", plan=split_work, agents={"code": abuilt, "test": built})


@spread.step
def closing(ctx):
    _call(ctx)
    return _digest({name: ctx.results[name] for name in ("opening", "poll", "gather", "each", "chorus", "build")})


workflows = [patterns, debate, careful, supervise, plan, person, consent, hurry, fanout, spread]
'''

APP = crashmatrix.App("patternapp", APP_SOURCE)
WORKFLOW = "patterns"
NODES = ("brief", "refine", "argue", "decide", "triage", "build", "report")
NAPPING = ("refine#2", "argue#2/con", "decide#1/b", "triage#2/code", "build#2/test")


@dataclass(frozen=True)
class Logged:
    """One line of the executions log of the pattern app."""

    label: str
    attempt: int
    pid: int
    run_id: str
    state: dict[str, Any]


def ledger(lines: Path | list[tuple[str, ...]]) -> list[Logged]:
    """The executions the pattern app logged (the log at a path, or its lines split on
    whitespace), in order."""
    split = procs.read_lines(lines) if isinstance(lines, Path) else lines
    return [Logged(line[0], int(line[1]), int(line[2]), line[3], json.loads(" ".join(line[4:]))) for line in split]


# ---- the crash-matrix scenario ---------------------------------------------------------------------

def make_input(rng: random.Random) -> dict[str, Any]:
    return {"text": " ".join(rng.choice(crashmatrix.WORDS) for _ in range(rng.randint(2, 6))),
            "n": rng.randint(0, 10**6),
            "sleeps": {s: round(rng.uniform(0.05, 0.3), 3) for s in rng.sample(NAPPING, 3)}}


def work_left(db: Path, run_id: str | None, run_input: dict[str, Any], dwell: float) -> tuple[float, int, bool]:
    """The executions not completed yet (by the reference run's list): seconds of naps and
    boundaries, boundaries, and whether a nap is left."""
    ref = crashmatrix.reference(APP, WORKFLOW, run_input)
    done = {crashmatrix.row_label(s["idempotency_key"]) for s in procs.steps(db, run_id)
            if s["status"] == "completed"} if run_id else set()
    left = [label for label in ref.outputs if label not in done]
    naps = [run_input["sleeps"][label] for label in left if label in run_input["sleeps"]]
    return 0.02 + sum(naps) + (0.003 + 2 * dwell) * (len(left) + 2), len(left), bool(naps)


def shape_check(nodes: tuple[str, ...], limits: dict[str, int] | None = None) -> Callable[..., None]:
    """The ``check_round`` of a workflow of ``nodes`` (``limits``: the nodes' ``max_concurrency``):
    the store's shape after a round. The nodes read completed* open? pending* (a pattern under way
    is pending while its executions run); the executions follow the planned rows group by group,
    every group but the one under way completed; the open ones (running or interrupted: several at
    once where calls are independent) all in that group, at most its ``max_concurrency`` running;
    a running run has some open, an interrupted one none running, a completed one none open;
    ``steps_done`` counts the completed nodes; no execution has two rows."""
    limits = limits or {}

    def check(row: dict[str, Any], steps: list[dict[str, Any]], rnd: int, result: crashmatrix.TrialResult) -> None:
        v = result.violations
        code = {"completed": "c", "running": "r", "interrupted": "i", "pending": "p"}
        top = [s for s in steps if s["parent_seq"] is None]
        children = [s for s in steps if s["parent_seq"] is not None]
        shape = "".join(code.get(s["status"], "?") for s in top)
        inner = "".join(code.get(s["status"], "?") for s in children)
        if [s["name"] for s in top] != list(nodes) or not re.fullmatch(r"c*[ri]?p*", shape):
            v.append(f"round {rnd}: the nodes read {shape!r} ({[s['name'] for s in top]})")
        if [s["seq"] for s in children] != list(range(len(nodes), len(nodes) + len(children))) \
                or not re.fullmatch(r"[cri]*", inner):
            v.append(f"round {rnd}: the pattern executions read {inner!r} at seqs {[s['seq'] for s in children]}")
        labels = [crashmatrix.row_label(s["idempotency_key"]) for s in steps]
        if len(labels) != len(set(labels)):
            v.append(f"round {rnd}: executions recorded in more than one row: "
                     f"{sorted(k for k, n in Counter(labels).items() if n > 1)}")
        groups = [s["parent_seq"] for s in children]
        under_way = next((s["seq"] for s in top if s["status"] != "completed"), None)
        open_ = [s for s in steps if s["status"] in ("running", "interrupted")]
        if groups != sorted(groups) or any(s["parent_seq"] not in (None, under_way) for s in open_):
            v.append(f"round {rnd}: open executions {[(s['seq'], s['parent_seq']) for s in open_]} of groups "
                     f"{groups} while node {under_way} is under way")
        running = [s for s in children if s["status"] == "running"]
        limit = limits.get(top[under_way]["name"]) if under_way is not None and under_way < len(top) else None
        if limit is not None and len(running) > limit:
            v.append(f"round {rnd}: {len(running)} calls of {top[under_way]['name']} running, beyond its "
                     f"max_concurrency {limit}")
        if row["steps_done"] != shape.count("c"):
            v.append(f"round {rnd}: steps_done is {row['steps_done']} but {shape.count('c')} nodes are completed")
        statuses = {s["status"] for s in open_}
        if {"completed": not statuses, "running": bool(statuses), "interrupted": statuses == {"interrupted"}}.get(
                row["status"]) is not True or (row["status"] == "completed" and (shape + inner).strip("c")):
            v.append(f"round {rnd}: run status {row['status']} with nodes {shape!r} and executions {inner!r}")

    return check


def progress(kind: str, seq: int, state: Any) -> Any:
    """What of a checkpoint is the same whatever order independent calls landed in (the row it
    names is the first still in flight, which depends on timing): its kind, the node it is in,
    and, at a node's end, the whole state."""
    return kind, (state or {}).get("next"), None if state is None or "in" in state else state


# the vote's voters run at once (so its checkpoints name rows in the order they land)
PATTERNS = crashmatrix.Scenario(APP, WORKFLOW, make_input, work_left, shape_check(NODES), checkpoint=progress)
"""The ``patterns`` workflow of :data:`APP` in the crash matrix."""


# ---- the concurrent scenario: fan-outs killed while several calls are in flight ----------------------

SPREAD_NODES = ("opening", "poll", "gather", "each", "chorus", "build", "closing")
# every call that runs beside others, each napping a seeded 0.02-0.3 s (staggered: calls in flight
# land one by one, so a kill finds some landed, some in flight, some not started)
SPREAD_CALLS = (*(f"poll#1/{v}" for v in "abcde"), *(f"gather#1/{b}" for b in "abcd"),
                *(f"each#{i}" for i in range(1, 7)),
                *(f"chorus#{r}/{a}" for r in (1, 2) for a in ("pro", "con", "mid")),
                "build#1/code", "build#2/test", "build#3/code", "build#4/test")
SPREAD_LIMITS = {"each": 3}  # the nodes' max_concurrency


def make_spread_input(rng: random.Random) -> dict[str, Any]:
    return {"text": " ".join(rng.choice(crashmatrix.WORDS) for _ in range(rng.randint(2, 6))),
            "n": rng.randint(0, 10**6), "sleeps": {c: round(rng.uniform(0.02, 0.3), 3) for c in SPREAD_CALLS}}


def spread_work_left(db: Path, run_id: str | None, run_input: dict[str, Any],
                     dwell: float) -> tuple[float, int, bool]:
    """The work left of :data:`SPREAD`: the calls of a wave run at once, so a wave (a node's calls,
    a debate's round, a map's items by three) costs its longest nap; boundaries: each call's, and
    the start of each call beside another."""
    ref = crashmatrix.reference(APP, "spread", run_input)
    done = {crashmatrix.row_label(s["idempotency_key"]) for s in procs.steps(db, run_id)
            if s["status"] == "completed"} if run_id else set()
    left = [label for label in ref.outputs if label not in done]
    waves: dict[str, list[float]] = {}
    for label in left:
        if label in run_input["sleeps"]:
            node, _, rest = label.partition("#")
            wave = label.split("/")[0] if node == "chorus" else node
            waves.setdefault(wave, []).append(run_input["sleeps"][label])
    naps = sum(sum(w) / SPREAD_LIMITS[k] if k in SPREAD_LIMITS else max(w) for k, w in waves.items())
    boundaries = len(left) + sum(len(w) - 1 for w in waves.values())
    return 0.02 + naps + (0.003 + 2 * dwell) * (boundaries + 2), boundaries, bool(waves)


SPREAD = crashmatrix.Scenario(APP, "spread", make_spread_input, spread_work_left,
                              shape_check(SPREAD_NODES, SPREAD_LIMITS), checkpoint=progress)
"""The ``spread`` workflow of :data:`APP` in the crash matrix: a vote of five, a parallel of four,
a map of six by three, a concurrent debate and a planner of independent subtasks, sync and async
calls with staggered naps, killed while several are in flight and inside their boundaries."""


if __name__ == "__main__":
    spread = "--spread" in sys.argv
    sys.exit(crashmatrix.main([a for a in sys.argv[1:] if a != "--spread"], scenario=SPREAD if spread else PATTERNS))
