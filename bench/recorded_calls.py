"""The cost of a recorded call (``ctx.call``) beside a plain step's boundary, in one process, on a
fresh SQLite store: one step making n recorded calls against a chain
of n no-op steps, each at ``full`` and ``normal`` durability; medians of ``--repeat`` runs, in µs
per call (per boundary for the chain).

    python bench/recorded_calls.py [--calls 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import time
from pathlib import Path

from relaypoint import Runtime, Workflow


def _store(directory: Path) -> str:
    return str(directory / f"{secrets.token_hex(4)}.db")


def calls(url: str, n: int, durability: str) -> float:
    """µs per recorded call of one step making ``n`` of them."""
    wf = Workflow("calls")

    @wf.step
    def agent(ctx):
        for i in range(n):
            ctx.call("model", lambda i=i: i)

    with Runtime(url, [wf], durability=durability) as rt:
        t = time.perf_counter()
        rt.start("calls")
        return (time.perf_counter() - t) / n * 1e6


def chain(url: str, n: int, durability: str) -> float:
    """µs per boundary of a chain of ``n`` no-op steps."""
    wf = Workflow("chain")
    for i in range(n):
        wf.step(name=f"s{i}")(lambda ctx: None)
    with Runtime(url, [wf], durability=durability) as rt:
        t = time.perf_counter()
        rt.start("chain")
        return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"| durability | recorded call, µs | chain step boundary, µs | ({args.calls:,} each, median of {args.repeat})")
    print("| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for durability in ("full", "normal"):
            row = {}
            for name, fn in (("calls", calls), ("chain", chain)):
                row[name] = statistics.median(fn(_store(Path(tmp)), args.calls, durability)
                                              for _ in range(args.repeat))
            print(f"| {durability} | {row['calls']:.0f} | {row['chain']:.0f} |")


if __name__ == "__main__":
    main()
