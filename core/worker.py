"""``relaypoint worker``: executes queued runs (approved, answered, forked) and recovers interrupted
ones, claiming each by lease so any number of workers never execute one run twice.

A worker also enforces pause deadlines. SIGINT/SIGTERM stop it gracefully: the step under way
finishes and is recorded, then the run is released ``queued`` for another worker.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable

from .errors import RefusedTransition, RelaypointError
from .runtime import LEASE_SECONDS, Runtime
from .status import RunStatus
from .workflow import Workflow

POLL_SECONDS = 1.0
MAX_RECOVERIES = 3


class Worker:
    """``concurrency`` threads, each with its own store connection, polling every ``poll_seconds``
    for runnable runs of the workflows given (others are left for a worker that defines them).

    ``max_recoveries``: an interrupted run whose executor died more than this many times is marked
    failed with the reason instead of being recovered again. ``log``: receives one line per action.
    """

    def __init__(self, db_path: str, workflows: Iterable[Workflow], *, concurrency: int = 1,
                 poll_seconds: float = POLL_SECONDS, max_recoveries: int = MAX_RECOVERIES,
                 lease_seconds: float = LEASE_SECONDS, log: Callable[[str], None] = print) -> None:
        self.db_path = db_path
        self.workflows = list(workflows)
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.max_recoveries = max_recoveries
        self.lease_seconds = lease_seconds
        self.log = log
        self.stopping = threading.Event()

    def _runtime(self) -> Runtime:
        return Runtime(self.db_path, self.workflows, create=False, lease_seconds=self.lease_seconds,
                       max_recoveries=self.max_recoveries)

    def candidates(self, rt: Runtime) -> list[str]:
        """Runnable runs of known workflows, oldest first: queued and interrupted (after a sweep)."""
        rt.sweep()
        names = [w.name for w in self.workflows]
        marks = ", ".join("?" * len(names))
        rows = rt.store.conn.execute(
            f"SELECT run_id FROM runs WHERE status IN (?, ?) AND workflow IN ({marks}) "
            "ORDER BY updated_at LIMIT 50", (RunStatus.QUEUED, RunStatus.INTERRUPTED, *names))
        return [r[0] for r in rows]

    def run_once(self, rt: Runtime) -> int:
        """One poll: expire deadlines, then execute what can be claimed. Returns runs executed."""
        for rid in rt.expire_deadlines():
            self.log(f"run {rid}: pause deadline passed; rejected")
        executed = 0
        for rid in self.candidates(rt):
            if self.stopping.is_set():
                break
            try:
                status = rt.resume(rid, should_stop=self.stopping.is_set)
            except RefusedTransition:
                continue  # another worker claimed it first, or it changed state meanwhile
            except RelaypointError as e:  # LeaseLost, drift, a failing definition: say it, go on
                self.log(str(e) if rid in str(e) else f"run {rid}: {e}")
                continue
            executed += 1
            self.log(f"run {rid}: {status}")
        return executed

    def _loop(self) -> None:
        with self._runtime() as rt:
            while not self.stopping.is_set():
                try:
                    busy = self.run_once(rt)
                except RelaypointError as e:  # e.g. the store stayed busy: say so, poll again
                    self.log(str(e))
                    busy = 0
                if not busy:
                    self.stopping.wait(self.poll_seconds)

    def run(self) -> None:
        """Run until SIGINT/SIGTERM (when called from the main thread) or :meth:`stop`."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: self.stop())
        self._runtime().close()  # a missing or unreadable store fails here, before any thread starts
        threads = [threading.Thread(target=self._loop, name=f"worker-{i}") for i in range(self.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short joins keep the main thread able to take signals

    def stop(self) -> None:
        """Finish the step under way, release its run, and stop polling."""
        if not self.stopping.is_set():
            self.log("stopping: finishing the steps under way")
        self.stopping.set()
