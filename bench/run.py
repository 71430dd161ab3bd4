"""Side-by-side benchmark: relaypoint, the raw SQLite floor, LangGraph (SqliteSaver) and DBOS (SQLite).

    pip install -e '.[bench]'
    python bench/run.py [--sizes 10,100,1000,10000] [--repeat 3] [--budget 120] [--quick] [--json FILE]
                        [--postgres postgresql://user@host:port/db [--postgres-only]]

Measures in one run: µs per step of chains of no-op steps (for relaypoint also µs per agent call of a
two-agent debate of n/2 rounds, each call recorded at its own boundary with the pattern's state),
bytes on disk per byte of ~10 KB outputs,
and the time to fork a run at its last step and resume the fork. Every measurement runs in its own
subprocess on a fresh store in a temporary directory and times the run itself (not interpreter start-up
or imports); figures are medians of ``--repeat`` runs. A measurement that takes longer than
``--budget`` seconds is stopped and shown as "over budget" (larger sizes of that series are skipped).
Prints the machine, the versions, the figures, the ratios and the issue's targets beside them.

With ``--postgres URL`` (or ``RELAYPOINT_BENCH_POSTGRES``) the same run also measures on that
PostgreSQL server (see pg_section.py): µs per step of relaypoint, the raw floor, LangGraph's PostgresSaver and
DBOS; worker throughput; the console on a large store. ``--postgres-only`` skips the SQLite section.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
console = Console()


@dataclass(frozen=True)
class Series:
    """One measured configuration: ``tool`` names bench/tool_<tool>.py, ``args`` its extra arguments,
    ``task`` what it runs for the per-step figure (a chain; relaypoint also a debate)."""

    label: str
    tool: str
    args: tuple[str, ...] = ()
    task: str = "chain"


class OverBudget(Exception):
    """A measurement ran past the time budget, or failed (the message says which)."""


def call(tool: str, task: str, *args: object, budget: float) -> Any:
    """Run ``tool_<tool>.py task args...`` in a fresh interpreter; its printed JSON result.
    Raises OverBudget after ``budget`` seconds or when the subprocess fails."""
    cmd = [sys.executable, str(BENCH / f"tool_{tool}.py"), task, *map(str, args)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=budget)
    except subprocess.TimeoutExpired:
        raise OverBudget("over budget") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise OverBudget(f"failed: {last[:80]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fresh(tmp: Path, tag: str) -> Path:
    """A new empty directory under ``tmp``, and the store path inside it."""
    d = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{tag}-"))
    return d / "store.db"


def relaypoint_series(has_durability: bool) -> list[Series]:
    if has_durability:
        return [Series("relaypoint full", "relaypoint", ("full",)),
                Series("relaypoint normal", "relaypoint", ("normal",)),
                Series("relaypoint debate full", "relaypoint", ("full",), "debate")]
    return [Series("relaypoint default*", "relaypoint", ("default",))]


def per_size(series: list[Series], sizes: list[int], what: str,
             measure: Callable[[Series, int], Any]) -> dict[str, dict[int, Any]]:
    """``measure(series, n)`` per series and size; once a size runs over budget, that series'
    larger sizes are skipped and show the same "over budget" text."""
    out: dict[str, dict[int, Any]] = {}
    for s in series:
        out[s.label] = {}
        stopped = None
        for n in sizes:
            if stopped:
                out[s.label][n] = stopped
                continue
            console.print(f"  {what} {s.label} n={n:,}", style="dim")
            try:
                out[s.label][n] = measure(s, n)
            except OverBudget as e:
                out[s.label][n] = stopped = str(e)
    return out


def measure_chains(series: list[Series], sizes: list[int], repeat: int, budget: float,
                   tmp: Path) -> dict[str, dict[int, Any]]:
    """µs per step, median of ``repeat`` runs, per series and size; a string when not measured."""
    def chain(s: Series, n: int) -> float:
        samples = [call(s.tool, s.task, fresh(tmp, s.tool), n, *s.args, budget=budget) for _ in range(repeat)]
        return statistics.median(samples) / n * 1e6
    return per_size(series, sizes, "chain", chain)


def measure_storage(series: list[Series], steps: int, budget: float, tmp: Path) -> dict[str, Any]:
    """{"disk": bytes, "outputs": bytes} per series (the same for every repeat, so measured once)."""
    out = {}
    for s in series:
        console.print(f"  storage {s.label} n={steps:,}", style="dim")
        try:
            out[s.label] = call(s.tool, "storage", fresh(tmp, s.tool), steps, *s.args, budget=budget)
        except OverBudget as e:
            out[s.label] = str(e)
    return out


def measure_resume(series: list[Series], sizes: list[int], repeat: int, budget: float,
                   tmp: Path) -> dict[str, dict[int, Any]]:
    """{"fork": ms, "resume": ms} medians per series and run length, one parent run forked ``repeat`` times."""
    def resume(s: Series, n: int) -> dict[str, float]:
        r = call(s.tool, "resume", fresh(tmp, s.tool), n, repeat, *s.args, budget=budget)
        return {k: statistics.median(v) * 1000 for k, v in r.items()}
    return per_size(series, sizes, "resume", resume)


def machine(tmp: Path) -> dict[str, str]:
    """CPU model, cores, Python, SQLite and the filesystem holding the stores."""
    import sqlite3  # the version of the library every tool here links against

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown")
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    mount = max((m for m in mounts if str(tmp).startswith(m[1])), key=lambda m: len(m[1]), default=None)
    return {"cpu": cpu, "cores": str(os.cpu_count()), "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version, "os": platform.platform(),
            "filesystem": f"{mount[2]} on {mount[1]} ({mount[0]})" if mount else "unknown", "tmp": str(tmp)}


def print_verdicts(notes: list[str], title: str, goals: list[tuple[str, str]]) -> None:
    """Print the notes under the tables, then each target with its result (green when met)."""
    for note in notes:
        console.print(note, style="dim")
    t = Table(title=title)
    t.add_column("target")
    t.add_column("result")
    for name, result in goals:
        t.add_row(name, result, style="green" if result.startswith("met") else "red")
    console.print(t)


def fmt(v: Any, spec: str = ",.0f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) else str(v)


def ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def verdict(value: float | None, limit: float, why: str = "", shown: str | None = None) -> str:
    """"met (figure)" or "not met (figure)"; ``shown`` replaces the ratio as the figure."""
    if value is None:
        return f"not measured{why}"
    return ("met" if value <= limit else "not met") + f" ({shown or f'{value:.2f}'}){why}"


def targets(chains, storage, resume, rp: str, floor: str, peers: list[str], sizes: list[int],
            resume_sizes: list[int]) -> list[tuple[str, str]]:
    """The issue's targets, each with "met" / "not met (figure)"."""
    note = "" if rp == "relaypoint full" else " *"
    c = chains.get(rp, {})
    worst = [r for n in sizes if (r := ratio(c.get(n), chains[floor].get(n))) is not None]
    fastest = {n: min((v for p in peers if isinstance(v := chains[p].get(n), float)), default=None) for n in sizes}
    vs_peers = [r for n in sizes if (r := ratio(c.get(n), fastest[n])) is not None]
    lo, hi = sizes[0], sizes[-1]
    rr = resume.get(rp, {})
    r_lo, r_hi = resume_sizes[0], resume_sizes[-1]
    hi_res = rr.get(r_hi, {}).get("resume") if isinstance(rr.get(r_hi), dict) else None
    lo_res = rr.get(r_lo, {}).get("resume") if isinstance(rr.get(r_lo), dict) else None
    st = storage.get(rp)
    return [
        ("µs per step at full <= 1.3x raw SQLite FULL (worst size)", verdict(max(worst, default=None), 1.3, note)),
        (f"flat: {hi:,}-step within 1.2x of {lo:,}-step",
         verdict(ratio(c.get(hi), c.get(lo)), 1.2, note if isinstance(c.get(hi), float) else f" ({c.get(hi)})")),
        ("<= 0.25x the faster of LangGraph and DBOS (worst size)", verdict(max(vs_peers, default=None), 0.25, note)),
        ("storage <= 1.3x the outputs' bytes",
         verdict(ratio(st["disk"], st["outputs"]) if isinstance(st, dict) else None, 1.3, note)),
        (f"resume at {r_hi:,} steps <= 20 ms", verdict(hi_res, 20, note if hi_res is not None else f" ({rr.get(r_hi)})",
                                                        f"{fmt(hi_res, '.1f')} ms")),
        (f"resume flat: {r_hi:,} within 1.2x of {r_lo:,}", verdict(ratio(hi_res, lo_res), 1.2, note)),
    ]


NOTES = [
    "Durability: LangGraph's SqliteSaver runs in WAL with SQLite's default synchronous=FULL; DBOS runs its "
    "SQLite system database in rollback-journal mode with synchronous=FULL: both are peers of 'full'.",
    "LangGraph: each node overwrites one state key (a key per node would re-store every earlier output in every "
    "checkpoint). Fork = find the checkpoint before the last node in the history + update_state; resume = invoke "
    "from the fork.",
    "DBOS: fork = fork_workflow(id, last step); resume = from its return to the fork's result (dispatched from a "
    "queue polled every 1 ms; DBOS re-executes the workflow function, reading each recorded step's output).",
    "raw SQLite: no resume figure (a floor, not an engine: there is no run to fork).",
]
DEFAULT_NOTE = ("* this relaypoint takes no durability option: its default (synchronous=NORMAL) is measured, "
                "and the targets set for 'full' are checked against it.")


def show(info, versions, chains, storage, resume, goals, sizes, resume_sizes, repeat, floor_labels) -> None:
    t = Table(title="machine", show_header=False)
    for k, v in {**info, **{f"version {k}": str(v) for k, v in versions.items()}}.items():
        t.add_row(k, v)
    console.print(t)

    t = Table(title=f"µs per step, chains of no-op steps (median of {repeat})")
    t.add_column("series")
    for n in sizes:
        t.add_column(f"{n:,}", justify="right")
    for label, row in chains.items():
        t.add_row(label, *(fmt(row.get(n)) for n in sizes))
    console.print(t)

    t = Table(title="ratios (x = first / second, same size)")
    t.add_column("ratio")
    for n in sizes:
        t.add_column(f"{n:,}", justify="right")
    rp_labels = [lbl for lbl in chains if lbl.startswith("relaypoint")]
    peers = [lbl for lbl in chains if lbl not in rp_labels and lbl not in floor_labels.values()]
    for rp in rp_labels:
        floors = [floor_labels[d] for d in ("full", "normal") if not rp.endswith({"full": "normal", "normal": "full"}[d])]
        for other in [*floors, *peers]:
            t.add_row(f"{rp} / {other}", *(fmt(ratio(chains[rp].get(n), chains[other].get(n)), ".2f") for n in sizes))
    console.print(t)

    t = Table(title="storage: bytes on disk (db + wal after a TRUNCATE checkpoint) / bytes of the outputs' JSON")
    for col in ("series", "on disk", "outputs", "ratio"):
        t.add_column(col, justify="left" if col == "series" else "right")
    for label, s in storage.items():
        if isinstance(s, dict):
            t.add_row(label, f"{s['disk']:,}", f"{s['outputs']:,}", f"{s['disk'] / s['outputs']:.2f}")
        else:
            t.add_row(label, s, "", "")
    console.print(t)

    t = Table(title=f"resume: fork at the last step, then resume the fork (ms, median of {repeat})")
    t.add_column("series")
    for n in resume_sizes:
        t.add_column(f"fork {n:,}", justify="right")
        t.add_column(f"resume {n:,}", justify="right")
    for label, row in resume.items():
        cells = []
        for n in resume_sizes:
            v = row.get(n)
            cells += [fmt(v["fork"], ".1f"), fmt(v["resume"], ".1f")] if isinstance(v, dict) else [str(v), ""]
        t.add_row(label, *cells)
    console.print(t)

    print_verdicts(NOTES, "targets of issue 7", goals)
    if any(label.endswith("*") for label in chains):
        console.print(DEFAULT_NOTE)


def sizes_arg(text: str) -> list[int]:
    return sorted({int(x.replace("_", "")) for x in text.split(",") if x.strip()})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=sizes_arg, default=[10, 100, 1000, 10000], help="chain lengths (comma-separated)")
    p.add_argument("--resume-sizes", type=sizes_arg, default=[100, 1000, 10000], help="run lengths forked and resumed")
    p.add_argument("--storage-steps", type=int, default=1000, help="steps of ~10 KB outputs in the storage run")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is shown")
    p.add_argument("--budget", type=float, default=120, help="seconds allowed per measurement")
    p.add_argument("--quick", action="store_true", help="smoke test: sizes 10 and 100, repeat 1")
    p.add_argument("--json", type=Path, help="also write the raw figures to this file")
    p.add_argument("--postgres", metavar="URL", default=os.environ.get("RELAYPOINT_BENCH_POSTGRES"),
                   help="also measure on this PostgreSQL database (a schema per measurement, dropped afterwards)")
    p.add_argument("--postgres-only", action="store_true", help="measure on PostgreSQL only")
    p.add_argument("--pg-sizes", type=sizes_arg, default=[10, 1000, 10000], help="chain lengths on PostgreSQL")
    p.add_argument("--worker-runs", type=int, default=1000, help="queued runs per worker-throughput figure")
    p.add_argument("--workers", type=sizes_arg, default=[1, 4, 16], help="worker-process counts")
    p.add_argument("--worker-poll", type=float, default=0.1, help="the workers' --poll seconds")
    p.add_argument("--console-runs", type=int, default=100_000, help="runs in the console's PostgreSQL store")
    p.add_argument("--idle-seconds", type=int, default=60, help="seconds the idle console is watched")
    a = p.parse_args()
    if a.quick:
        a.sizes, a.resume_sizes, a.storage_steps, a.repeat = [10, 100], [10, 100], 100, 1
        a.pg_sizes, a.worker_runs, a.workers, a.console_runs, a.idle_seconds = [10, 100], 50, [1, 4], 2000, 10
    if a.postgres_only and not a.postgres:
        p.error("--postgres-only needs --postgres URL")
    figures: dict[str, Any] = {}
    if not a.postgres_only:
        figures = sqlite_section(a)
    if a.postgres:
        import pg_section  # only with --postgres: it needs psycopg

        figures["postgres"] = pg_section.section(pg_section.Options(
            a.postgres, a.pg_sizes, a.repeat, a.budget, a.worker_runs, a.workers, a.worker_poll, a.console_runs,
            a.idle_seconds))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2))


def sqlite_section(a: argparse.Namespace) -> dict[str, Any]:
    """Measure and print the SQLite figures; returns them."""
    with tempfile.TemporaryDirectory(prefix="relaypoint-bench-") as tmp_name:
        tmp = Path(tmp_name)
        info = machine(tmp)
        versions: dict[str, Any] = {}
        for tool in ("relaypoint", "langgraph", "dbos"):
            try:
                versions.update(call(tool, "version", budget=60))
            except OverBudget as e:
                console.print(f"{tool} cannot be measured ({e}); the peers install with: pip install -e '.[bench]'")
                sys.exit(1)
        rp = relaypoint_series(bool(versions.pop("durability_option")))
        floors = {"full": "raw SQLite FULL", "normal": "raw SQLite NORMAL"}
        series = [*rp, Series(floors["full"], "sqlite", ("FULL",)), Series(floors["normal"], "sqlite", ("NORMAL",)),
                  Series("LangGraph SqliteSaver sync", "langgraph"), Series("DBOS SQLite", "dbos")]
        peers = [s for s in series if s.tool in ("langgraph", "dbos")]
        console.print("measuring (each figure in its own process)...")
        chains = measure_chains(series, a.sizes, a.repeat, a.budget, tmp)
        storage = measure_storage([rp[0], series[len(rp)], *peers], a.storage_steps, a.budget, tmp)
        resume = measure_resume([rp[0], *peers], a.resume_sizes, a.repeat, a.budget, tmp)
    goals = targets(chains, storage, resume, rp[0].label, floors["full"], [s.label for s in peers], a.sizes,
                    a.resume_sizes)
    show(info, versions, chains, storage, resume, goals, a.sizes, a.resume_sizes, a.repeat, floors)
    return {"machine": info, "versions": versions, "repeat": a.repeat, "us_per_step": chains, "storage": storage,
            "resume_ms": resume, "targets": dict(goals)}


if __name__ == "__main__":
    main()
