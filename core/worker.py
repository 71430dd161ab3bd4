"""``relaypoint worker``: executes queued runs (approved, answered, forked, enqueued) and recovers
interrupted ones, claiming each by lease so any number of workers never execute one run twice.

A worker keeps up to ``concurrency`` runs in flight on one event loop, each a task awaiting
:meth:`~relaypoint.Runtime.aresume`: their async calls are awaited on that loop, their sync calls
run in the runtime's call threads, and their store work in the loop's ``STORE_THREADS``, so a run
awaiting I/O holds no thread but its lease's heartbeat. The tasks share one
:class:`~relaypoint.Runtime`: it is thread-safe, each store thread has a connection of its own (so
the store connections are the store threads', not one a run, as a runtime a run would need), and
one runtime means one pool of call threads for the sync calls of every run (``CALL_THREADS`` of
:mod:`relaypoint.runner` at once, which ``--concurrency``'s limit of 64 matches).

A worker also enforces pause deadlines, and with a :class:`~relaypoint.pausehook.PauseHook` tells a
person of each pause in the store no one has announced yet, on a thread of its own, until an
attempt succeeds. SIGINT/SIGTERM stop it gracefully: the step under way finishes and is recorded,
then the run is released ``queued`` for another worker.

A run recovered from ``interrupted`` is executed alone, up to its first boundary: its process died
while executing it, maybe because of it, and a death is charged to a run only when the run was the
only one its process was executing (see :mod:`relaypoint.recovery`). So a poison pill is soon recovered
alone and charged, and the healthy runs that shared its worker are never suspects.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from datetime import datetime, timedelta

from .clock import to_text
from .defaults import DURABILITY, LEASE_SECONDS, MAX_RECOVERIES, POLL_SECONDS
from .errors import RefusedTransition, RelaypointError
from .lease import heartbeat_store
from .models import PendingDecision
from .pausehook import PauseHook
from .recovery import now_of
from .runtime import Runtime
from .status import AnnouncementOutcome, RunStatus
from .throughput import STATS_SECONDS, Meter, WorkerStats
from .workflow import Workflow

CANDIDATES = 50
"""Runnable runs one poll looks at at least, besides those already in flight here."""
STORE_THREADS = 8
"""At most this many threads (each with its own store connection) do the store work of the runs
in flight: claims and boundaries are short, and on SQLite they take turns anyway."""


class Worker:
    """Up to ``concurrency`` runs in flight at once (see the module docstring) on a store connection
    ``url``, polling every ``poll_seconds`` for runnable runs of the workflows given (others are
    left for a worker that defines them). The heartbeats of the runs under way share a few
    connections (see :func:`~relaypoint.lease.heartbeat_store`).

    ``max_recoveries``: an interrupted run whose executor died more than this many times while
    executing it alone is marked failed with the reason instead of being recovered again.
    ``log``: receives one line per action, and every ``stats_seconds`` while busy a stats line
    (:class:`~relaypoint.throughput.WorkerStats`; to ``on_stats`` instead when given); a line it cannot write (``OSError``: its reader gone, as
    the pipe to ``tee`` after Ctrl-C) is lost, and the worker goes on, or stops as asked. ``on_pause``: told of each pause for a person (approval,
    input, a held orphan) in the store that no one has announced yet, whoever made it (see
    :meth:`~relaypoint.Runtime.announce_pauses`): a thread of its own claims them every
    ``poll_seconds``, no more than the hook can start at once, so the runs executing never wait for
    it nor it for them; the hook tries each in the background, and the thread records how each
    ended (announced, failed, released) at its next poll. Stopping, no attempt is tried again, and
    :meth:`run` waits for the attempts under way before it returns. Without ``on_pause`` nothing is
    claimed or marked.

    Isolation: before recovering an interrupted run, the worker stops claiming and has the runs in
    flight released ``queued`` at their next boundary (a ``released`` event with the reason), waits
    until none is left, then executes the recovered run alone until its first boundary, where it
    too is released ``queued``; then normal concurrency resumes. One recovery is isolated at a time.
    """

    def __init__(self, url: str, workflows: Iterable[Workflow], *, concurrency: int = 1,
                 poll_seconds: float = POLL_SECONDS, max_recoveries: int = MAX_RECOVERIES,
                 lease_seconds: float = LEASE_SECONDS, durability: str = DURABILITY,
                 log: Callable[[str], None] = print, on_pause: PauseHook | None = None,
                 stats_seconds: float = STATS_SECONDS, on_stats: Callable[[WorkerStats], None] | None = None) -> None:
        self.url = url
        self.on_pause = on_pause
        self.durability = durability
        self.workflows = list(workflows)
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.max_recoveries = max_recoveries
        self.lease_seconds = lease_seconds
        self.log = log
        self.stats_seconds = stats_seconds
        self.on_stats = on_stats
        self.stopping = threading.Event()
        self._flying: dict[str, asyncio.Task[bool]] = {}  # the runs this process is claiming or executing
        self._isolating: str | None = None   # the recovered run being executed alone, if any
        self._executed = 0                   # runs claimed so far
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None  # set by a run that ended, and by stop(): poll again now

    def _runtime(self) -> Runtime:
        return Runtime(self.url, self.workflows, create=False, lease_seconds=self.lease_seconds,
                       max_recoveries=self.max_recoveries, durability=self.durability)

    def candidates(self, rt: Runtime) -> list[tuple[str, RunStatus]]:
        """The oldest runnable runs of known workflows with their status (queued, and interrupted
        after a sweep), in random order: ``CANDIDATES`` (or ``concurrency`` if more) besides the runs
        in flight here, which are listed still queued while they are being claimed."""
        rt.sweep()
        listed = rt.runnable([w.name for w in self.workflows], max(CANDIDATES, self.concurrency) + len(self._flying))
        # Workers that listed the same oldest runs would all go for the first one: in a random
        # order they mostly reach different runs, instead of queuing on one claim after another.
        random.shuffle(listed)
        return listed

    def run_once(self, rt: Runtime) -> int:
        """One :meth:`poll` on an event loop of its own, and the runs it started executed to their next
        stop; returns how many were executed (claimed), 0 when none could be claimed."""
        async def once() -> None:
            await self.poll(rt)
            await self.drain()

        before = self._executed
        asyncio.run(once())
        return self._executed - before

    async def poll(self, rt: Runtime) -> None:
        """One poll: expire deadlines, then go down the candidates while fewer than ``concurrency``
        runs are in flight, starting each queued one as a task of its own and recovering an
        interrupted one alone (see the class docstring), after which the list is stale and the poll
        ends; it returns without waiting for the runs it started (see :meth:`drain`). Raises what
        :meth:`candidates` raises."""
        for rid in await asyncio.to_thread(rt.expire_deadlines):
            self._say(f"run {rid}: pause deadline passed; rejected")
        for rid, status in await asyncio.to_thread(self.candidates, rt):
            if self.stopping.is_set() or len(self._flying) >= self.concurrency:
                break
            if rid in self._flying:
                continue
            if status == RunStatus.INTERRUPTED:
                if await self._recover_alone(rt, rid):
                    return  # the rest of the list went stale while the run executed
                continue
            self._flying[rid] = asyncio.ensure_future(self._execute(rt, rid, status))
            self._flying[rid].add_done_callback(lambda task, rid=rid: self._landed(rid, task))

    def _landed(self, rid: str, task: asyncio.Task[bool]) -> None:
        del self._flying[rid]
        if task.cancelled():
            return
        if (exc := task.exception()) is not None:  # a defect, not the run's doing: its traceback, and go on
            task.get_loop().call_exception_handler({"message": f"run {rid}: the worker's task broke",
                                                    "exception": exc, "task": task})
        elif task.result() and self._wake is not None:
            self._wake.set()  # a slot is free, and the run's end may have made others runnable

    async def _recover_alone(self, rt: Runtime, rid: str) -> bool:
        """Execute interrupted run ``rid`` alone up to its first boundary, once the runs in flight
        have been released; False when stopping first, or when it could not be claimed."""
        self._isolating = rid
        try:
            while self._flying and not self.stopping.is_set():
                await asyncio.wait(list(self._flying.values()), timeout=0.2)
            if self.stopping.is_set():
                return False
            self._say(f"run {rid}: recovering it alone up to its next boundary")
            return await self._execute(rt, rid, RunStatus.INTERRUPTED)
        finally:
            self._isolating = None

    async def _execute(self, rt: Runtime, rid: str, status: RunStatus) -> bool:
        """Claim ``rid`` if it is still in ``status`` and execute it to its next stop, saying how it
        ended; True when it was claimed (or failed as a poison pill), False when refused or broken."""
        alone = status == RunStatus.INTERRUPTED
        try:
            # only as listed: a run listed interrupted may have failed as a poison pill since
            # (a failed run is resumable), one listed queued may need recovering alone
            ended = await rt.aresume(rid, should_stop=self._alone_until_boundary if alone else self._should_release,
                                     only_if=status, skip_locked=True)
        except RefusedTransition:  # another worker is claiming it or claimed it first, or it changed state
            if alone:
                self._say(f"run {rid}: not recovered here (another worker took it, or it changed meanwhile)")
            return False
        except RelaypointError as e:  # LeaseLost, drift, a failing definition, the server gone: say it, go on
            self._say(str(e) if str(e).startswith(f"run {rid}") else f"run {rid}: {e}")
            return False
        self._executed += 1
        self._say(f"run {rid}: {ended}")
        return True

    def _should_release(self) -> bool | str:
        """At a boundary of an ordinary run: release it when stopping, or to let a recovery run alone."""
        if self.stopping.is_set():
            return True
        isolating = self._isolating
        return f"making way for the recovery of run {isolating}, executed alone" if isolating else False

    def _alone_until_boundary(self) -> str:
        return "recovered alone up to this boundary; continues among other runs"

    def _announce(self, hook: PauseHook) -> None:
        """The announcer thread: every poll, record how the announcements handed to ``hook`` ended,
        then claim the pauses no one has announced yet, as many as ``hook`` starts at once, and hand
        them to it (again at once after a full batch). On stopping, waits for the hook's attempts
        under way and records them too."""
        handed: dict[Future[AnnouncementOutcome], tuple[PendingDecision, datetime]] = {}
        with self._runtime() as rt:
            try:
                while not self.stopping.is_set():
                    self._settle(rt, handed, [f for f in handed if f.done()])
                    free = hook.free()
                    claimed: list[PendingDecision] = []
                    # held for every attempt, and until the poll after the last, which records it
                    until = now_of(rt.clock) + timedelta(seconds=hook.hold_seconds + self.poll_seconds)
                    if free:
                        try:
                            claimed = rt.announce_pauses(free, until)
                        except RelaypointError as e:  # e.g. the server unreachable: say it, try at the next poll
                            self._say(f"pauses not announced this poll: {e}")
                    for pause in claimed:
                        handed[hook.announce(pause)] = (pause, until)
                    if not free or len(claimed) < free:
                        self.stopping.wait(self.poll_seconds)
            finally:
                hook.close()
                self._settle(rt, handed, list(handed))

    def _settle(self, rt: Runtime, handed: dict[Future[AnnouncementOutcome], tuple[PendingDecision, datetime]],
                done: list[Future[AnnouncementOutcome]]) -> None:
        """Record in the store how each of the announcements ``done`` ended, and forget them. One
        that cannot be recorded (the store unreachable) is said; its claim expires, and the pause is
        claimed again."""
        for future in done:
            pause, until = handed.pop(future)
            try:
                outcome = future.result()
            except Exception as e:  # a defect in the hook's thread: leave the pause to the next claimer
                self._say(f"run {pause.run_id}: on-pause hook for checkpoint {pause.checkpoint_id} broke: {e!r}")
                outcome = AnnouncementOutcome.RELEASED
            try:
                rt.settle_announcement(pause.checkpoint_id, until, outcome)
            except RelaypointError as e:
                self._say(f"run {pause.run_id}: the announcement of checkpoint {pause.checkpoint_id} ({outcome}) "
                          f"was not recorded: {e}; it is claimed again after {to_text(until)}")

    async def _serve(self, rt: Runtime) -> None:
        """The event loop's work: poll until stopping, then wait for the runs in flight to be released."""
        loop = asyncio.get_running_loop()
        # one more than the runs may use: the polls' sweep and listing never wait behind their claims
        loop.set_default_executor(ThreadPoolExecutor(min(self.concurrency, STORE_THREADS) + 1,
                                                     thread_name_prefix="worker-store"))
        self._wake = asyncio.Event()
        self._loop = loop
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):  # a wakeup fd: heard whichever thread the signal reaches
                loop.add_signal_handler(sig, self.stop)
        meter = Meter(rt.commit_counts)
        stats = asyncio.create_task(self._report(meter))
        try:
            while not self.stopping.is_set():
                try:
                    await self.poll(rt)
                except RelaypointError as e:  # e.g. the store stayed busy or unreachable: say so, poll again
                    self._say(str(e))
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
                self._wake.clear()
            await self.drain()
        finally:
            stats.cancel()
            self._loop = None
        self._tell(meter.read(len(self._flying)))  # what the last interval did, once stopped

    async def _report(self, meter: Meter) -> None:
        """Every ``stats_seconds``, the stats line of a busy worker."""
        while True:
            await asyncio.sleep(self.stats_seconds)
            self._tell(meter.read(len(self._flying)))

    def _tell(self, stats: WorkerStats | None) -> None:
        """Give a stats line (None: idle, nothing to say) to ``on_stats``, or as a line to ``log``."""
        if stats is None:
            return
        if self.on_stats is None:
            self._say(stats.line())
        else:
            with suppress(OSError):
                self.on_stats(stats)

    async def drain(self) -> None:
        """Wait until the runs in flight have stopped (released ``queued`` at their next boundary once
        stopping)."""
        while self._flying:
            await asyncio.wait(list(self._flying.values()))

    def run(self) -> None:
        """Run until SIGINT/SIGTERM (when called from the main thread) or :meth:`stop`. Raises what
        :meth:`check_store` raises before anything starts."""
        main = threading.current_thread() is threading.main_thread()
        if main:
            self._catch_signals()
        self.check_store()
        with heartbeat_store(self.url):  # keeps the heartbeats' shared connections open between runs
            announcer = None
            if self.on_pause is not None:
                announcer = threading.Thread(target=self._announce, args=(self.on_pause,), name="on-pause")
                announcer.start()
            try:
                with self._runtime() as rt:
                    try:
                        asyncio.run(self._serve(rt))
                    finally:
                        if main:
                            self._catch_signals()  # the loop's handlers went with it; a signal now is a stop too
            finally:
                self.stopping.set()  # the announcer stops with the runs, whatever ended them
                if announcer is not None:
                    while announcer.is_alive():
                        announcer.join(0.2)  # short joins keep the main thread able to take signals

    def _catch_signals(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.stop())

    def check_store(self) -> None:
        """Raise ``StoreError`` (one line) when the store is missing, unusable, or read-only: a worker
        records what it executes."""
        with self._runtime() as rt:
            if rt.readonly_reason is not None:
                raise rt.read_only_error("a worker records what it executes, so it needs a store it can write")

    def stop(self) -> None:
        """Finish the steps under way, release their runs, and stop polling (from any thread, and as
        a signal handler: stopping is decided before anything is written)."""
        stopped = self.stopping.is_set()
        self.stopping.set()
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with suppress(RuntimeError):  # the loop closed meanwhile: nothing to wake
                loop.call_soon_threadsafe(wake.set)
        if not stopped:
            self._say("stopping: finishing the steps under way")

    def _say(self, line: str) -> None:
        """Give ``line`` to ``log``; an ``OSError`` writing it (a closed pipe, a terminal gone) loses
        the line: it must neither end a task between two runs nor escape a signal handler."""
        with suppress(OSError):
            self.log(line)
