"""relaypoint: a chain of n steps (or a debate of n agent calls) run by ``Runtime.start``; a fork at
the last step resumed.

``durability`` is "full", "normal" or "default" (the engine's own default, for an engine that
does not take the keyword yet). The store is a SQLite file, or a PostgreSQL store URL
(``postgresql://...?schema=NAME``: the PostgreSQL section of run.py).
"""

from __future__ import annotations

import inspect
import time
from importlib.metadata import version as dist_version
from pathlib import Path

from common import on_disk, payload, payload_bytes, serve

from relaypoint import Runtime, Workflow


def has_durability() -> bool:
    """Whether this relaypoint's Runtime takes the ``durability`` keyword."""
    return "durability" in inspect.signature(Runtime).parameters


def _runtime(path: Path, wf: Workflow, durability: str) -> Runtime:
    return Runtime(str(path), [wf]) if durability == "default" else Runtime(str(path), [wf], durability=durability)


def _workflow(n: int, output) -> Workflow:
    wf = Workflow("bench")
    for i in range(n):
        wf.step(name=f"s{i}")(lambda ctx, i=i: output(i))
    return wf


def chain(path: Path, n: int, durability: str = "full") -> float:
    """Seconds of ``Runtime.start`` of an n-step chain of no-op steps."""
    with _runtime(path, _workflow(n, lambda i: None), durability) as rt:
        t = time.perf_counter()
        rt.start("bench")
        return time.perf_counter() - t


def debate(path: Path, n: int, durability: str = "full") -> float:
    """Seconds of ``Runtime.start`` of a debate of two no-op agents and n/2 rounds (n agent calls;
    no judge), each call an execution recorded at its own boundary."""
    wf = Workflow("bench")
    wf.debate("argue", agents={"pro": lambda ctx: None, "con": lambda ctx: None}, rounds=max(1, n // 2))
    with _runtime(path, wf, durability) as rt:
        t = time.perf_counter()
        rt.start("bench")
        return time.perf_counter() - t


def storage(path: Path, n: int, durability: str = "full") -> dict[str, int]:
    """Bytes on disk after an n-step run whose steps return ~10 KB each."""
    with _runtime(path, _workflow(n, payload), durability) as rt:
        rt.start("bench")
    return {"disk": on_disk(path), "outputs": payload_bytes(n)}


def resume(path: Path, n: int, repeat: int, durability: str = "full") -> dict[str, list[float]]:
    """Seconds of ``fork(run, last step)`` and of ``resume(fork)``, ``repeat`` times from one n-step run."""
    forks, resumes = [], []
    with _runtime(path, _workflow(n, lambda i: None), durability) as rt:
        run_id = rt.start("bench")
        for _ in range(repeat):
            t = time.perf_counter()
            fork_id = rt.fork(run_id, f"s{n - 1}")
            forks.append(time.perf_counter() - t)
            t = time.perf_counter()
            rt.resume(fork_id)
            resumes.append(time.perf_counter() - t)
    return {"fork": forks, "resume": resumes}


def version() -> dict[str, object]:
    return {"relaypoint": dist_version("relaypoint"), "durability_option": has_durability()}


if __name__ == "__main__":
    serve(globals())
