"""Benchmark harness: step-boundary throughput and listing speed on a large store.

    python bench/bench.py [--runs 100000] [--boundary-runs 300]

Prints a table of medians. Boundary figures come from real runs through ``Runtime.start`` (one
transaction per boundary, WAL, the default durability: synchronous=FULL). Listing figures come from
a store filled to ``--runs`` runs through the store contract in one transaction (only the reads are
measured).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

from relaypoint import Runtime, RunStatus, StepStatus, Workflow
from relaypoint.clock import to_text, utcnow
from relaypoint.store import Change, NewRun, NewStep

STATUSES = ["completed"] * 6 + ["failed", "awaiting_approval", "interrupted", "queued"]


def chain(steps: int) -> Workflow:
    wf = Workflow("bench")
    for i in range(steps):
        wf.step(name=f"s{i}")(lambda ctx, i=i: {"i": i, "payload": "x" * 200})
    return wf


def timed(fn, repeat: int = 7) -> float:
    """Median wall seconds of ``fn()`` over ``repeat`` calls."""
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def fill(rt: Runtime, n: int, *, steps_per_run: int = 5, output_bytes: int = 1000,
         workflows: tuple[str, ...] = ("bench",)) -> None:
    """Record ``n`` completed-looking runs of ``steps_per_run`` steps each (outputs of
    ``output_bytes`` characters) through the store contract in one transaction, one second apart,
    the workflow names taken in turn from ``workflows``: only the reads of such a store are measured."""
    now = utcnow()
    output = '"' + "y" * output_bytes + '"'
    store = rt.store
    with store.transaction():
        for i in range(n):
            rid = f"{i:016x}"
            created = now - timedelta(seconds=n - i)
            store.commit(Change(rid, created, run=None, new=NewRun(
                run_id=rid, workflow=workflows[i % len(workflows)], status=RunStatus(STATUSES[i % len(STATUSES)]),
                input="{}", definition="[]", fingerprint="", created_at=created, steps_total=steps_per_run,
                steps_done=steps_per_run),
                inserted=[NewStep(seq=p, name=f"s{p}", idempotency_key=f"{rid}/s{p}", status=StepStatus.COMPLETED,
                                  attempts=1) for p in range(steps_per_run)],
                outputs={p: output for p in range(steps_per_run)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the listing store")
    parser.add_argument("--boundary-runs", type=int, default=300, help="real 5-step runs for boundary timing")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        with Runtime(Path(tmp, "boundary.db"), [chain(5)]) as rt:
            t = time.perf_counter()
            for _ in range(args.boundary_runs):
                rt.start("bench")
            elapsed = time.perf_counter() - t
        boundaries = args.boundary_runs * 5
        rows.append(("step boundaries per second (5-step runs, real executor)", f"{boundaries / elapsed:,.0f}"))
        rows.append(("one 5-step run, start to completed", f"{elapsed / args.boundary_runs * 1000:.2f} ms"))

        with Runtime(Path(tmp, "big.db")) as rt:
            fill(rt, args.runs, workflows=("ingest-orders", "ingest-users", "report"))
            size = Path(tmp, "big.db").stat().st_size
            page = rt.list(limit=100)
            last = page[-1]
            deep = rt.store.list_runs(limit=100, before=(to_text(last.created_at), last.run_id))
            assert len(deep) == 100
            rows += [
                (f"store size ({args.runs:,} runs, 5 steps each, 1 KB outputs)", f"{size / 2**20:,.0f} MiB"),
                ("list: first page of 100, newest first", f"{timed(lambda: rt.list(limit=100)) * 1000:.2f} ms"),
                ("list: next page (keyset)", f"{timed(lambda: rt.store.list_runs(limit=100, before=(to_text(last.created_at), last.run_id))) * 1000:.2f} ms"),
                ("list: filtered by status, first page", f"{timed(lambda: rt.list(status='failed', limit=100)) * 1000:.2f} ms"),
                ("counts by status (console status line)", f"{timed(rt.store.count_by_status) * 1000:.3f} ms"),
                ("search: workflow prefix matching 2 runs in 3, first page",
                 f"{timed(lambda: rt.store.list_runs(search='ingest', limit=100)) * 1000:.2f} ms"),
                ("search: run id prefix, first page",
                 f"{timed(lambda: rt.store.list_runs(search=page[50].run_id[:14], limit=100)) * 1000:.2f} ms"),
                ("get one run with its outputs", f"{timed(lambda: rt.get(page[50].run_id)) * 1000:.2f} ms"),
            ]
    table = Table("measure", "median", title="relaypoint benchmark")
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


if __name__ == "__main__":
    main()
