"""Many runs at once at ``full`` durability: N queued runs executed by one ``relaypoint worker
--concurrency N``, aggregate boundaries per second, and its ratio to one run alone measured in the
same round. Run from bench/: ``python group_commit.py [--postgres URL] [--sizes 1,4,16,64]``.

Two kinds of run (``worker_app``): ``noop200``, 200 no-op steps, and ``wait20``, 20 steps each
awaiting 10 ms. A boundary is one step's end (its output, checkpoint and the next step's start in
one transaction). The rate is boundaries of every run over the time from the first claim (the first
``resumed`` event) to the last ``run_completed`` event; medians of ``--repeat`` rounds, each on a
new store.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from worker_async import sqlite_store

from relaypoint import Runtime
from relaypoint.status import EventKind

BENCH = Path(__file__).resolve().parent
STEPS = {"noop200": 200, "wait20": 20}


def one_round(url: str, workflow: str, runs: int) -> float:
    """Boundaries per second of ``runs`` queued runs of ``workflow`` in one worker with as many in flight."""
    from worker_app import workflows
    with Runtime(url, workflows, durability="full") as rt:
        queued = [rt.enqueue(workflow) for _ in range(runs)]
        cmd = [sys.executable, "-m", "relaypoint", "--db", url, "--durability", "full", "worker",
               "--app", "worker_app:workflows", "--concurrency", str(runs), "--poll", "0.05"]
        worker = subprocess.Popen(cmd, cwd=BENCH, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert worker.stderr is not None and "worker on" in worker.stderr.readline()
            began = time.monotonic()
            while rt.counts().get("completed", 0) < runs:
                if time.monotonic() - began > 600:
                    raise SystemExit(f"the worker did not complete {runs} runs of {workflow} in 600 s")
                time.sleep(0.02)
        finally:
            worker.terminate()
            worker.communicate(timeout=60)
        events = [e for rid in queued for e in rt.events(rid)]
    claims = [e.at for e in events if e.kind == EventKind.RESUMED]
    ends = [e.at for e in events if e.kind == EventKind.RUN_COMPLETED]
    return runs * STEPS[workflow] / (max(ends) - min(claims)).total_seconds()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,4,16,64", help="numbers of runs in flight, comma-separated")
    p.add_argument("--workflows", default="noop200,wait20")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--postgres", metavar="URL", help="also on this server (a database URL, no query string)")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        targets = {"sqlite": lambda i: sqlite_store(Path(tmp) / f"runs{i}.db")}
        if a.postgres:
            from pg_section import fresh_schema
            targets["postgresql"] = lambda i: fresh_schema(a.postgres, "group_commit")
        print(f"one worker --concurrency N at full, N queued runs, boundaries/s (ratio to N=1), median of {a.repeat}")
        for backend, store in targets.items():
            for wf in a.workflows.split(","):
                rates: dict[int, list[float]] = {n: [] for n in sizes}
                for i in range(a.repeat):
                    for n in sizes:
                        with store(f"{wf}{n}-{i}") as url:
                            rates[n].append(one_round(url, wf, n))
                med = {n: statistics.median(r) for n, r in rates.items()}
                cells = "  ".join(f"N={n}: {med[n]:,.0f} ({med[n] / med[sizes[0]]:.1f}x)" for n in sizes)
                print(f"{backend:>10} {wf:>8}: {cells}", flush=True)


if __name__ == "__main__":
    main()
