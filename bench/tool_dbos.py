"""DBOS Transact on SQLite: a workflow calling n ``@DBOS.step`` functions, called directly (it runs
in this process, each step's output committed to the system database before the next starts).

Resume: ``DBOS.fork_workflow(id, start_step)`` at the last step copies the earlier steps' outputs
into a new workflow and enqueues it; the fork is dispatched from a queue polled every millisecond
and awaited with a 1 ms polling interval, so polling adds at most ~1 ms to the resume figure.
"""

from __future__ import annotations

import logging
import time
from importlib.metadata import version as dist_version
from pathlib import Path

from common import on_disk, payload, payload_bytes, serve
from dbos import DBOS, DBOSConfig

POLL_SECONDS = 0.001
QUEUE_CHECK_SECONDS = 1.5


def _launch(path: Path, output):
    """Configure and launch DBOS on a SQLite system database at ``path``; returns the workflow."""
    DBOS(config=DBOSConfig(name="bench", system_database_url=f"sqlite:///{path}", log_level="WARNING"))
    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    def step(i: int):
        return output(i)

    @DBOS.workflow()
    def run(n: int) -> int:
        for i in range(n):
            step(i)
        return n

    DBOS.launch()
    return run, DBOS.register_queue("bench", polling_interval_sec=POLL_SECONDS)


def chain(path: Path, n: int) -> float:
    """Seconds of one call of an n-step workflow of no-op steps."""
    run, _ = _launch(path, lambda i: None)
    t = time.perf_counter()
    run(n)
    elapsed = time.perf_counter() - t
    DBOS.destroy()
    return elapsed


def storage(path: Path, n: int) -> dict[str, int]:
    """Bytes on disk after an n-step workflow whose steps return ~10 KB each."""
    run, _ = _launch(path, payload)
    run(n)
    DBOS.destroy()
    return {"disk": on_disk(path), "outputs": payload_bytes(n)}


def resume(path: Path, n: int, repeat: int) -> dict[str, list[float]]:
    """Seconds of ``fork_workflow`` at the last step, and from the fork's return to its result."""
    run, queue = _launch(path, lambda i: None)
    handle = DBOS.start_workflow(run, n)
    handle.get_result()
    time.sleep(QUEUE_CHECK_SECONDS)  # the queue thread notices a newly registered queue within this
    last = max(s["function_id"] for s in DBOS.list_workflow_steps(handle.workflow_id))
    forks, resumes = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        fork = DBOS.fork_workflow(handle.workflow_id, last, queue_name=queue.name)
        forks.append(time.perf_counter() - t)
        t = time.perf_counter()
        fork.get_result(polling_interval_sec=POLL_SECONDS)
        resumes.append(time.perf_counter() - t)
    DBOS.destroy()
    return {"fork": forks, "resume": resumes}


def version() -> dict[str, str]:
    return {"dbos": dist_version("dbos")}


if __name__ == "__main__":
    serve(globals())
