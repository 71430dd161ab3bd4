"""One worker process keeping async runs in flight: ``runs`` queued runs of one step awaiting 1 s
(``worker_app.asleep``), executed by one ``relaypoint worker --concurrency N``, on SQLite and (with
``--postgres URL``) PostgreSQL. Run from bench/: ``python worker_async.py [--postgres URL]``.

Two figures per backend, medians of ``--repeat`` rounds: the wall time from the worker's start
(its "worker on" line) to the last run completed, and from the first claim (the first ``resumed``
event) to the last ``run_completed`` event; the floor is 1 s (every run at once).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from worker_app import workflows

from relaypoint import Runtime
from relaypoint.status import EventKind

BENCH = Path(__file__).resolve().parent


def one_round(url: str, runs: int, concurrency: int) -> tuple[float, float]:
    """(seconds from the worker's start to the last completion, seconds from the first claim to the
    last completion) for ``runs`` queued runs of ``asleep``."""
    with Runtime(url, workflows) as rt:
        queued = [rt.enqueue("asleep") for _ in range(runs)]
        target = rt.counts().get("completed", 0) + runs
        cmd = [sys.executable, "-m", "relaypoint", "--db", url, "worker", "--app", "worker_app:workflows",
               "--concurrency", str(concurrency), "--poll", "0.1"]
        worker = subprocess.Popen(cmd, cwd=BENCH, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert worker.stderr is not None and "worker on" in worker.stderr.readline()
            began = time.monotonic()
            while rt.counts().get("completed", 0) < target:
                if time.monotonic() - began > 120:
                    raise SystemExit(f"the worker did not complete {runs} runs in 120 s")
                time.sleep(0.01)
            wall = time.monotonic() - began
        finally:
            worker.terminate()
            worker.communicate(timeout=60)
        events = [e for rid in queued for e in rt.events(rid)]
    claims = [e.at for e in events if e.kind == EventKind.RESUMED]
    ends = [e.at for e in events if e.kind == EventKind.RUN_COMPLETED]
    return wall, (max(ends) - min(claims)).total_seconds()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--postgres", metavar="URL", help="also on this server (a database URL, no query string)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        targets = {"sqlite": lambda i: sqlite_store(Path(tmp) / f"runs{i}.db")}
        if a.postgres:
            from pg_section import fresh_schema
            targets["postgresql"] = lambda i: fresh_schema(a.postgres, "worker_async")
        print(f"{a.runs} runs x one step awaiting 1 s, one worker --concurrency {a.concurrency}, "
              f"median of {a.repeat} (floor 1 s)")
        for backend, store in targets.items():
            rounds = []
            for i in range(a.repeat):
                with store(i) as url:
                    rounds.append(one_round(url, a.runs, a.concurrency))
            wall, claimed = (statistics.median(r[k] for r in rounds) for k in (0, 1))
            print(f"{backend:>10}: {wall:.2f} s from the worker's start ({a.runs / wall:.0f} runs/s), "
                  f"{claimed:.2f} s from the first claim to the last completion")


@contextmanager
def sqlite_store(path: Path) -> Iterator[str]:
    """A new SQLite store file, as ``fresh_schema`` gives a PostgreSQL one."""
    Runtime(str(path)).close()
    yield str(path)


if __name__ == "__main__":
    main()
