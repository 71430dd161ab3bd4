"""Fan-out benchmark (issue 21): relaypoint's concurrent calls beside LangGraph and DBOS.

    pip install -e '.[bench]'
    python bench/fanout.py [--repeat 5] [--budget 120] [--width 1000] [--json FILE]

Measures in one run:

1. one round of 5 agents x 0.5 s (``asyncio.sleep`` in async agents, ``time.sleep`` in sync ones),
   seconds per run, in each relaypoint form (``wf.vote``, ``wf.parallel``, ``wf.map``,
   ``wf.debate(concurrent=True)``, at durability "full"; async agents through ``await rt.astart``,
   sync ones through ``rt.start``), beside LangGraph (``Send`` x5, ``AsyncSqliteSaver`` / ``SqliteSaver``,
   durability "sync") and DBOS (an async workflow awaiting ``asyncio.gather`` of 5 steps, SQLite);
2. kill -9 during a fan-out of calls lasting 0.3, 0.6, 0.9, 1.2 and 1.5 s, 1.05 s after the first call
   started, then a resume in a new process: which calls ran again, read from a log the calls write
   (fanout_calls.py), not from what the tool reports;
3. width: ``wf.map`` over 1,000 items, ``max_concurrency=50``, each awaiting 0.1 s (floor 2 s);
4. an event loop's responsiveness while ``await rt.astart(...)`` runs a step awaiting 1 s and a step
   sleeping 1 s: the longest interval of a 10 ms ticker task.

Each measurement runs in its own subprocess on a fresh store in a temporary directory and times the
run itself (not start-up or imports); figures are medians of ``--repeat`` runs (the kill figure: one
kill per series). A relaypoint API that is not there yet is shown as "not available in this
relaypoint"; a series marked "before" ran on a relaypoint without issue 21's concurrency.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fanout_calls import KILL_AT, ROUND, STAGGER, read_marks
from rich.table import Table
from run import BENCH, OverBudget, Series, call, console, fmt, fresh, machine, print_verdicts, ratio, verdict

RP = "fanout_relaypoint"
N = len(ROUND)
FLOOR = max(ROUND)
NATIVE = ("vote", "parallel", "map", "debate")
ROUND_SERIES = {
    "async": [
        Series("relaypoint wf.vote, await rt.astart", RP, ("vote", "async")),
        Series("relaypoint wf.parallel, await rt.astart", RP, ("parallel", "async")),
        Series("relaypoint wf.map, await rt.astart", RP, ("map", "async")),
        Series("relaypoint wf.debate(concurrent=True), await rt.astart", RP, ("debate", "async")),
        Series("relaypoint wf.vote, voters wrapping asyncio.run, rt.start", RP, ("vote_asyncio_run", "async")),
        Series("relaypoint, one step gathering the 5 calls (one boundary for all)", RP, ("gather", "async")),
        Series("LangGraph Send x5, async nodes, AsyncSqliteSaver, durability sync", "fanout_langgraph", ("async",)),
        Series("DBOS async workflow, asyncio.gather of 5 async steps", "fanout_dbos", ("async",)),
    ],
    "sync": [
        Series("relaypoint wf.vote, rt.start", RP, ("vote", "sync")),
        Series("relaypoint wf.parallel, rt.start", RP, ("parallel", "sync")),
        Series("relaypoint wf.map, rt.start", RP, ("map", "sync")),
        Series("relaypoint wf.debate(concurrent=True), rt.start", RP, ("debate", "sync")),
        Series("relaypoint, one step running the 5 calls in a thread pool (one boundary)", RP, ("gather", "sync")),
        Series("LangGraph Send x5, sync nodes, SqliteSaver, durability sync", "fanout_langgraph", ("sync",)),
        Series("DBOS async workflow, gather of 5 sync steps via asyncio.to_thread", "fanout_dbos", ("sync",)),
    ],
}
KILL_SERIES = [
    Series("relaypoint wf.vote, sync voters, rt.start", RP, ("vote", "sync")),
    Series("relaypoint wf.vote, async voters, await rt.astart", RP, ("vote", "async")),
    Series("relaypoint wf.parallel, async, await rt.astart", RP, ("parallel", "async")),
    Series("relaypoint wf.parallel, sync branches, rt.start", RP, ("parallel", "sync")),
    Series("relaypoint wf.map, async, await rt.astart", RP, ("map", "async")),
    Series("relaypoint wf.debate(concurrent=True), async, await rt.astart", RP, ("debate", "async")),
    Series("relaypoint, one step gathering the 5 async calls", RP, ("gather", "async")),
    Series("LangGraph Send x5, async nodes, AsyncSqliteSaver", "fanout_langgraph", ("async",)),
    Series("DBOS async workflow, asyncio.gather of async steps", "fanout_dbos", ("async",)),
]
TICKER_SERIES = [
    Series("relaypoint await rt.astart (step awaiting 1 s, step sleeping 1 s)", RP, ("astart",), "ticker"),
    Series("relaypoint rt.start called in a coroutine (the sleeping step alone)", RP, ("on_loop",), "ticker"),
    Series("relaypoint await asyncio.to_thread(rt.start) (both steps sync)", RP, ("to_thread",), "ticker"),
]
MARKED = "(before)"  # appended to a measured relaypoint series on a relaypoint without issue 21


def measured(r: Any) -> bool:
    return isinstance(r, (int, float)) or (isinstance(r, dict) and "na" not in r)


def shown(r: Any) -> str:
    return r["na"] if isinstance(r, dict) and "na" in r else str(r)


def repeated(s: Series, task: str, tmp: Path, repeat: int, budget: float, *extra: object) -> Any:
    """Median of ``repeat`` runs of ``task``, each in its own process on a fresh store: a number,
    a dict of medians, ``{"na": why}`` or the failure's text."""
    samples = []
    for _ in range(repeat):
        try:
            r = call(s.tool, task, fresh(tmp, s.tool), *extra, *s.args, budget=budget)
        except OverBudget as e:
            return str(e)
        if not measured(r):
            return r
        samples.append(r)
    if isinstance(samples[0], dict):
        return {k: statistics.median(x[k] for x in samples) for k in samples[0]}
    return statistics.median(samples)


def kill_once(s: Series, tmp: Path, budget: float) -> Any:
    """Start the staggered fan-out, SIGKILL it ``KILL_AT`` s after its first call started, resume it
    in a new process; what the call log shows."""
    store = fresh(tmp, s.tool)
    log = store.with_name("calls.log")
    cmd = [sys.executable, str(BENCH / f"tool_{s.tool}.py"), "crash", str(store), str(N), *s.args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + budget
    while not (marks := read_marks(log)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    if not marks:
        proc.kill()
        out, err = proc.communicate()
        last = (out.strip().splitlines() or err.strip().splitlines() or ["no call started"])[-1]
        return json.loads(last) if last.startswith("{") else f"failed: {last[:80]}"
    time.sleep(max(0.0, marks[0][2] + KILL_AT - time.time()))
    killed_at = time.time() - marks[0][2]
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    before = read_marks(log)
    try:
        resumed = call(s.tool, "recover", store, N, *s.args, budget=budget)
    except OverBudget as e:
        return str(e)
    after = read_marks(log)[len(before):]
    started = {n for e, n, _ in before if e == "start"}
    finished = {n for e, n, _ in before if e == "end"}
    again = sorted(n for e, n, _ in after if e == "start" and n in started)
    ended = {n for e, n, _ in before + after if e == "end"}
    return {"killed_at": killed_at, "finished": sorted(finished), "in_flight": sorted(started - finished),
            "rerun": again, "rerun_finished": sorted(set(again) & finished),
            "first_run": sorted({n for e, n, _ in after if e == "start"} - started),
            "all_done": len(ended) == N, "resume_s": resumed["seconds"], "status": resumed["status"]}


def before_label(s: Series, before: bool, r: Any) -> str:
    """The series' label, marked when it measured a relaypoint form that issue 21 changes on a
    relaypoint without it."""
    changed = s.tool == RP and s.args[0] in NATIVE
    return f"{s.label} {MARKED}" if before and changed and measured(r) else s.label


def round_targets(rounds: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    goals = []
    for kind, series in ROUND_SERIES.items():
        native = [s for s in series if s.tool == RP and s.args[0] in NATIVE]
        figures = {s.label: rounds[kind][s.label] for s in native}
        peers = [v for s in series if s.tool != RP and isinstance(v := rounds[kind][s.label], float)]
        got = [v for v in figures.values() if isinstance(v, float)]
        gap = "" if len(got) == len(figures) else f", {len(figures) - len(got)} of {len(figures)} forms not measured"
        worst = max(got, default=None)
        goals.append((f"{kind}: every relaypoint form within 1.1x of the {FLOOR} s floor",
                      verdict(ratio(worst, FLOOR), 1.1, gap)))
        goals.append((f"{kind}: every relaypoint form no slower than the faster peer",
                      verdict(ratio(worst, min(peers, default=None)), 1.0, gap)))
    return goals


def kill_target(r: Any) -> str:
    if not isinstance(r, dict) or "na" in r:
        return f"not measured ({shown(r)})"
    ok = r["rerun"] == r["in_flight"] == ["a3", "a4"] and not r["rerun_finished"] and r["all_done"]
    return ("met" if ok else "not met") + (f" (finished by the kill {len(r['finished'])}, re-ran {len(r['rerun'])}"
                                           f" of which finished {len(r['rerun_finished'])}, first run on resume "
                                           f"{len(r['first_run'])})")


def show(info, versions, rounds, kills, width, ticks, goals, repeat, before) -> None:
    t = Table(title="machine", show_header=False)
    for k, v in {**info, **{f"version {k}": str(v) for k, v in versions.items()}}.items():
        t.add_row(k, v)
    console.print(t)

    for kind, series in ROUND_SERIES.items():
        t = Table(title=f"one round of {N} {kind} agents x {FLOOR} s, seconds per run (median of {repeat})")
        for col in ("series", "s/round", f"x {FLOOR} s floor", "x faster peer"):
            t.add_column(col, justify="left" if col == "series" else "right")
        peers = [v for s in series if s.tool != RP and isinstance(v := rounds[kind][s.label], float)]
        for s in series:
            v = rounds[kind][s.label]
            ratios = (ratio(v, FLOOR), ratio(v, min(peers, default=None)))
            t.add_row(before_label(s, before, v), fmt(v, ".3f") if measured(v) else shown(v),
                      *("" if x is None else f"{x:.2f}" for x in ratios))
        console.print(t)

    t = Table(title=f"kill -9 {KILL_AT} s into a fan-out of calls of {', '.join(map(str, STAGGER))} s, then resume "
                    "(calls counted from their own log)")
    for col in ("series", "killed at s", "finished", "in flight", "re-run on resume", "of them finished",
                "first run on resume", "resume s"):
        t.add_column(col, justify="left" if col == "series" else "right")
    for s in KILL_SERIES:
        r = kills[s.label]
        label = before_label(s, before, r)
        if isinstance(r, dict) and "na" not in r:
            t.add_row(label, f"{r['killed_at']:.2f}", *(str(len(r[k])) for k in ("finished", "in_flight", "rerun",
                                                                                  "rerun_finished", "first_run")),
                      f"{r['resume_s']:.2f}" + ("" if r["all_done"] else " (not all calls done)"))
        else:
            t.add_row(label, shown(r), *[""] * 6)
    console.print(t)

    floor = width["items"] / width["concurrency"] * width["seconds"]
    t = Table(title=f"width: wf.map over {width['items']:,} items, max_concurrency={width['concurrency']}, each "
                    f"awaiting {width['seconds']} s (floor {floor:g} s; median of {repeat})")
    for col in ("wall s", "x floor", "wall over the floor per call ms", "CPU per call ms"):
        t.add_column(col, justify="right")
    w = width["result"]
    if measured(w):
        t.add_row(f"{w['wall']:.2f}", f"{w['wall'] / floor:.2f}", f"{(w['wall'] - floor) / width['items'] * 1e3:.2f}",
                  f"{w['cpu'] / width['items'] * 1e3:.2f}")
    else:
        t.add_row(shown(w), "", "", "")
    console.print(t)

    t = Table(title=f"event loop: the longest interval of a 10 ms ticker task during a run (median of {repeat})")
    for col in ("series", "longest interval ms", "run s"):
        t.add_column(col, justify="left" if col == "series" else "right")
    for s in TICKER_SERIES:
        r = ticks[s.label]
        label = before_label(s, before, r)
        t.add_row(label, *([f"{r['max_gap_ms']:.1f}", f"{r['seconds']:.2f}"] if measured(r) else [shown(r), ""]))
    console.print(t)

    notes = [f"{MARKED}: measured on a relaypoint without issue 21's concurrency (no Workflow.parallel): voters run "
             "one after another; rt.start runs the steps on the calling thread."] if before else []
    notes.append("Kill: 'in flight' are the calls started and not finished when the process died; a re-run call "
                 "that had finished repeats its side effect. DBOS's resume includes its recovery dispatch "
                 "through its internal queue.")
    print_verdicts(notes, "targets of issue 21", goals)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="runs per figure; the median is shown")
    p.add_argument("--budget", type=float, default=120, help="seconds allowed per measurement")
    p.add_argument("--width", type=int, default=1000, help="items of the width figure's wf.map")
    p.add_argument("--concurrency", type=int, default=50, help="max_concurrency of the width figure")
    p.add_argument("--json", type=Path, help="also write the raw figures to this file")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="relaypoint-fanout-") as tmp_name:
        tmp = Path(tmp_name)
        info = machine(tmp)
        versions: dict[str, Any] = {}
        for tool in (RP, "fanout_langgraph", "fanout_dbos"):
            try:
                versions.update(call(tool, "version", budget=60))
            except OverBudget as e:
                console.print(f"{tool} cannot be measured ({e}); the peers install with: pip install -e '.[bench]'")
                sys.exit(1)
        apis = versions.pop("apis")
        versions["relaypoint APIs"] = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in apis.items())
        before = not apis["Workflow.parallel"]
        console.print("measuring (each figure in its own process)...")
        rounds: dict[str, dict[str, Any]] = {}
        for kind, series in ROUND_SERIES.items():
            rounds[kind] = {}
            for s in series:
                console.print(f"  round {kind} {s.label}", style="dim")
                rounds[kind][s.label] = repeated(s, "round", tmp, a.repeat, a.budget, N)
        kills = {}
        for s in KILL_SERIES:
            console.print(f"  kill -9 {s.label}", style="dim")
            kills[s.label] = kill_once(s, tmp, a.budget)
        console.print("  width", style="dim")
        width = {"items": a.width, "concurrency": a.concurrency, "seconds": 0.1,
                 "result": repeated(Series("width", RP), "width", tmp, a.repeat, a.budget, a.width, a.concurrency)}
        ticks = {}
        for s in TICKER_SERIES:
            console.print(f"  ticker {s.label}", style="dim")
            ticks[s.label] = repeated(s, "ticker", tmp, a.repeat, a.budget, 0)
    floor = a.width / a.concurrency * 0.1
    w, tick = width["result"], ticks[TICKER_SERIES[0].label]
    goals = [*round_targets(rounds),
             *((f"kill -9: {s.label} re-runs only the 2 unfinished calls", kill_target(kills[s.label]))
               for s in KILL_SERIES if s.tool == RP and s.args[0] != "gather"),
             (f"width: wf.map of {a.width:,} within 1.1x of the {floor:g} s floor",
              verdict(ratio(w["wall"], floor) if measured(w) else None, 1.1, "" if measured(w) else f" ({shown(w)})")),
             ("event loop: longest ticker interval under astart < 50 ms",
              verdict(tick["max_gap_ms"] if measured(tick) else None, 50, "" if measured(tick) else f" ({shown(tick)})",
                      f"{tick['max_gap_ms']:.1f} ms" if measured(tick) else None))]
    show(info, versions, rounds, kills, width, ticks, goals, a.repeat, before)
    if a.json:
        a.json.write_text(json.dumps({"machine": info, "versions": versions, "repeat": a.repeat, "before": before,
                                      "round_s": rounds, "kill": kills, "width": width, "ticker": ticks,
                                      "targets": dict(goals)}, indent=2))


if __name__ == "__main__":
    main()
