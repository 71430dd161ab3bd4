"""DBOS Transact's queue beside ``relaypoint worker --concurrency N`` (group_commit.py): N workflows
enqueued at once on a queue of ``worker_concurrency`` N, executed by this process's DBOS.

``queue(store, n, workflow, seconds)``: ``store`` a SQLite file (DBOS's SQLite system database, in its
default rollback journal with SQLite's default ``synchronous=FULL``) or a PostgreSQL URL naming a
schema (the system database there, at the server's ``synchronous_commit``, on by default). The
workflows are group_commit.py's: ``noop200``, 200 no-op ``@DBOS.step``s; ``wait20``, 20 async
steps each awaiting 10 ms (an async workflow on DBOS's event loop). Each step's output is
committed before the next starts: one boundary a step. The queue is polled every 50 ms, as
group_commit.py's worker (``--poll 0.05``); DBOS's pool of system-database connections is sized to
the N workflows at once (20, its default, at least). Returns the boundaries per second from the
first step's start to the last step's end (``list_workflow_steps``' ``started_at_epoch_ms`` and
``completed_at_epoch_ms``: the workflows' own timestamps have whole seconds on SQLite). That leaves
out each workflow's dequeue and its final status write, which relaypoint's figure (first claim to
last ``run_completed``) includes: a small edge for DBOS.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from importlib.metadata import version as dist_version
from pathlib import Path

from common import pg_target, serve
from dbos import DBOS, DBOSConfig

STEPS = {"noop200": 200, "wait20": 20}
POLL_SECONDS = 0.05
WAIT_SECONDS = 600


def _launch(store: Path | str, n: int) -> None:
    """DBOS on ``store``, its pool of system-database connections sized to ``n`` workflows at once
    (and 4 more: its queue thread, this harness's reads), 20 (its default) at least."""
    pool = max(20, n + 4)
    if isinstance(store, Path):
        config = DBOSConfig(name="bench", system_database_url=f"sqlite:///{store}", log_level="WARNING",
                            sys_db_pool_size=pool)
    else:
        conninfo, schema = pg_target(store)
        config = DBOSConfig(name="bench", system_database_url=conninfo, dbos_system_schema=schema,
                            log_level="WARNING", sys_db_pool_size=pool)
    DBOS(config=config)
    logging.getLogger("dbos").setLevel(logging.WARNING)


def queue(store: Path | str, n: int, workflow: str, seconds: float | str = WAIT_SECONDS) -> float:
    """Boundaries per second of ``n`` enqueued workflows of ``workflow`` on a queue of
    ``worker_concurrency`` n, until they complete or for ``seconds`` after they were enqueued
    (then the steps completed so far are counted)."""
    _launch(store, n)
    done = threading.Semaphore(0)  # released by each workflow's last line: no polling of the database

    @DBOS.step()
    def noop(i: int) -> None:
        return None

    @DBOS.workflow()
    def noop200() -> int:
        for i in range(200):
            noop(i)
        done.release()
        return 200

    @DBOS.step()
    async def wait(i: int) -> None:
        await asyncio.sleep(0.01)

    @DBOS.workflow()
    async def wait20() -> int:
        for i in range(20):
            await wait(i)
        done.release()
        return 20

    DBOS.launch()
    q = DBOS.register_queue("q", worker_concurrency=n, polling_interval_sec=POLL_SECONDS)
    fn = {"noop200": noop200, "wait20": wait20}[workflow]
    handles = [q.enqueue(fn) for _ in range(n)]
    ids = [h.workflow_id for h in handles]
    stop = time.monotonic() + float(seconds)
    for _ in ids:
        if not done.acquire(timeout=max(0.0, stop - time.monotonic())):
            break
    steps = [s for i in ids for s in DBOS.list_workflow_steps(i) if s["completed_at_epoch_ms"] is not None]
    first = min(s["started_at_epoch_ms"] for s in steps)
    last = max(s["completed_at_epoch_ms"] for s in steps)
    DBOS.destroy(workflow_completion_timeout_sec=0)
    return len(steps) / ((last - first) / 1000)


def version() -> dict[str, str]:
    return {"dbos": dist_version("dbos")}


if __name__ == "__main__":
    serve(globals())
    sys.stdout.flush()
    os._exit(0)  # a round stopped early leaves workflows in DBOS's threads, which exit would wait for
