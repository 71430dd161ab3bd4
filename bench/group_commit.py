"""Many runs at once at ``full`` durability: N queued runs executed by one ``relaypoint worker
--concurrency N``, aggregate boundaries per second, and its ratio to one run alone measured in the
same round; beside it the same work through a DBOS queue. Run from bench/: ``python group_commit.py
[--postgres URL [--commit-delays 0,100,1000]] [--sizes 1,4,16,64] [--repeat 3]``.

Two kinds of run (``worker_app``): ``noop200``, 200 no-op steps, and ``wait20``, 20 steps each
awaiting 10 ms. A boundary is one step's end (its output, checkpoint and the next step's start in
one transaction). The rate is boundaries of every run over the time from the first claim (the first
``resumed`` event) to the last ``run_completed`` event; medians of ``--repeat`` rounds, each on a
new store.

DBOS (``tool_dbos_queue.py``, in a process of its own, interleaved with relaypoint's rounds): the
same workflows as ``@DBOS.step``s, N enqueued at once on a queue of ``worker_concurrency`` N, on its
SQLite system database and on the same PostgreSQL server; one step = one boundary. A DBOS round
stops after ``--dbos-seconds`` of steps (its steps counted until then; DBOS on SQLite commits about
70 steps a second).

``--commit-delays`` (PostgreSQL): relaypoint's rounds again under each ``commit_delay`` (µs, with
``commit_siblings`` 5), set with ``ALTER SYSTEM`` and reset afterwards (needs a superuser).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from relaypoint import Runtime
from relaypoint.status import EventKind
from run import call
from worker_async import sqlite_store

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


def dbos_round(store: str, workflow: str, runs: int, seconds: float) -> float:
    """Boundaries per second of ``runs`` workflows of ``workflow`` enqueued at once on a DBOS queue of
    ``worker_concurrency`` runs (see tool_dbos_queue.py); ``store`` a SQLite path or a schema's URL."""
    return call("dbos_queue", "queue", store, runs, workflow, seconds, budget=seconds + 300)


def cells(med: dict[int, float], sizes: list[int]) -> str:
    return "  ".join(f"N={n}: {med[n]:,.0f} ({med[n] / med[sizes[0]]:.1f}x)" for n in sizes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,4,16,64", help="numbers of runs in flight, comma-separated")
    p.add_argument("--workflows", default="noop200,wait20")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--postgres", metavar="URL", help="also on this server (a database URL, no query string)")
    p.add_argument("--no-dbos", action="store_true", help="relaypoint only")
    p.add_argument("--dbos-seconds", type=float, default=20, help="seconds of steps a DBOS round is stopped after")
    p.add_argument("--commit-delays", help="PostgreSQL: relaypoint again under these commit_delay values (µs)")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        targets = {"sqlite": lambda i: sqlite_store(Path(tmp) / f"runs{i}.db")}
        dbos_targets = {"sqlite": lambda i: nullcontext(str(Path(tmp) / f"dbos{i}.db"))}
        if a.postgres:
            from pg_section import fresh_schema
            targets["postgresql"] = lambda i: fresh_schema(a.postgres, "group_commit")
            dbos_targets["postgresql"] = lambda i: fresh_schema(a.postgres, "group_commit_dbos")
        print(f"one worker --concurrency N at full, N queued runs, boundaries/s (ratio to N=1), median of {a.repeat}; "
              f"DBOS: a queue of worker_concurrency N")
        for backend, store in targets.items():
            for wf in a.workflows.split(","):
                rates: dict[int, list[float]] = {n: [] for n in sizes}
                peer: dict[int, list[float]] = {n: [] for n in sizes}
                for i in range(a.repeat):
                    for n in sizes:
                        with store(f"{wf}{n}-{i}") as url:
                            rates[n].append(one_round(url, wf, n))
                        if not a.no_dbos:
                            with dbos_targets[backend](f"{wf}{n}-{i}") as target:
                                peer[n].append(dbos_round(target, wf, n, a.dbos_seconds))
                med = {n: statistics.median(r) for n, r in rates.items()}
                print(f"{backend:>10} {wf:>8} relaypoint: {cells(med, sizes)}", flush=True)
                if not a.no_dbos:
                    dmed = {n: statistics.median(r) for n, r in peer.items()}
                    print(f"{backend:>10} {wf:>8} DBOS:       {cells(dmed, sizes)}", flush=True)
                    print(f"{backend:>10} {wf:>8} relaypoint / DBOS: "
                          + "  ".join(f"N={n}: {med[n] / dmed[n]:.1f}x" for n in sizes), flush=True)
        if a.postgres and a.commit_delays:
            commit_delays(a.postgres, [int(d) for d in a.commit_delays.split(",")], sizes, a.workflows.split(","),
                          a.repeat)


def commit_delays(url: str, delays: list[int], sizes: list[int], workflows: list[str], repeat: int) -> None:
    """relaypoint's rounds on PostgreSQL under each ``commit_delay`` (µs; ``commit_siblings`` 5),
    interleaved: each round goes through every delay. The server's settings are reset afterwards."""
    from pg_section import fresh_schema, server_settings
    for wf in workflows:
        rates: dict[tuple[int, int], list[float]] = {(d, n): [] for d in delays for n in sizes}
        try:
            for i in range(repeat):
                for d in delays:
                    server_settings(url, {"commit_delay": d, "commit_siblings": 5})
                    for n in sizes:
                        with fresh_schema(url, "group_commit") as store:
                            rates[d, n].append(one_round(store, wf, n))
        finally:
            server_settings(url, {"commit_delay": None, "commit_siblings": None})
        for d in delays:
            med = {n: statistics.median(rates[d, n]) for n in sizes}
            print(f"postgresql {wf:>8} commit_delay={d:>4} µs: {cells(med, sizes)}", flush=True)

if __name__ == "__main__":
    main()
