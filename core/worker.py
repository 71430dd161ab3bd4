"""``relaypoint worker``: executes queued runs (approved, answered, forked, enqueued) and recovers
interrupted ones, claiming each by lease so any number of workers never execute one run twice.

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

import random
import signal
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
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
from .store import StoreUnreachable
from .workflow import Workflow

CANDIDATES = 50
"""Runnable runs one poll looks at."""


class Worker:
    """``concurrency`` threads, each with its own store connection to ``url``, polling every ``poll_seconds``
    for runnable runs of the workflows given (others are left for a worker that defines them). The
    heartbeats of the runs under way share a few connections (see :func:`~relaypoint.lease.heartbeat_store`).

    ``max_recoveries``: an interrupted run whose executor died more than this many times while
    executing it alone is marked failed with the reason instead of being recovered again.
    ``log``: receives one line per action; a line it cannot write (``OSError``: its reader gone, as
    the pipe to ``tee`` after Ctrl-C) is lost, and the worker goes on, or stops as asked. ``on_pause``: told of each pause for a person (approval,
    input, a held orphan) in the store that no one has announced yet, whoever made it (see
    :meth:`~relaypoint.Runtime.announce_pauses`): a thread of its own claims them every
    ``poll_seconds``, no more than the hook can start at once, so the runs executing never wait for
    it nor it for them; the hook tries each in the background, and the thread records how each
    ended (announced, failed, released) at its next poll. Stopping, no attempt is tried again, and
    :meth:`run` waits for the attempts under way before it returns. Without ``on_pause`` nothing is
    claimed or marked.

    Isolation: a thread about to recover an interrupted run first makes the others stop claiming and
    release their runs ``queued`` at their next boundary (a ``released`` event with the reason),
    waits until no other run is executing in this process, then executes the recovered run alone
    until its first boundary, where it too is released ``queued``; then normal concurrency resumes.
    One recovery is isolated at a time.
    """

    def __init__(self, url: str, workflows: Iterable[Workflow], *, concurrency: int = 1,
                 poll_seconds: float = POLL_SECONDS, max_recoveries: int = MAX_RECOVERIES,
                 lease_seconds: float = LEASE_SECONDS, durability: str = DURABILITY,
                 log: Callable[[str], None] = print, on_pause: PauseHook | None = None) -> None:
        self.url = url
        self.on_pause = on_pause
        self.durability = durability
        self.workflows = list(workflows)
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.max_recoveries = max_recoveries
        self.lease_seconds = lease_seconds
        self.log = log
        self.stopping = threading.Event()
        self._turns = threading.Condition()
        self._executing = 0                  # runs this process's threads are claiming or executing
        self._isolating: str | None = None   # the recovered run being executed alone, if any

    def _runtime(self) -> Runtime:
        return Runtime(self.url, self.workflows, create=False, lease_seconds=self.lease_seconds,
                       max_recoveries=self.max_recoveries, durability=self.durability)

    def candidates(self, rt: Runtime) -> list[tuple[str, RunStatus]]:
        """The oldest ``CANDIDATES`` runnable runs of known workflows with their status (queued, and
        interrupted after a sweep), in random order."""
        rt.sweep()
        listed = rt.runnable([w.name for w in self.workflows], CANDIDATES)
        # Workers (and threads) that listed the same oldest runs would all go for the first one: in
        # a random order they mostly reach different runs, instead of queuing on one claim after another.
        random.shuffle(listed)
        return listed

    def run_once(self, rt: Runtime) -> int:
        """One poll: expire deadlines, then execute the first candidate that can be claimed (an
        interrupted run alone, see the class docstring); a store found unreachable ends the poll.
        Returns the runs executed: 1, or 0 when none could be claimed (the caller then waits)."""
        for rid in rt.expire_deadlines():
            self._say(f"run {rid}: pause deadline passed; rejected")
        for rid, status in self.candidates(rt):
            alone = status == RunStatus.INTERRUPTED
            if self.stopping.is_set() or not self._enter(rid if alone else None):
                break  # stopping, or a recovery is isolated: nothing is claimed until it is done
            try:
                if alone:
                    self._say(f"run {rid}: recovering it alone up to its next boundary")
                # only as listed: a run listed interrupted may have failed as a poison pill since
                # (a failed run is resumable), one listed queued may need recovering alone
                ended = rt.resume(rid, should_stop=self._alone_until_boundary if alone else self._should_release,
                                  only_if=status, skip_locked=True)
            except RefusedTransition:  # another worker is claiming it or claimed it first, or it changed state
                if alone:
                    self._say(f"run {rid}: not recovered here (another worker took it, or it changed meanwhile)")
                continue
            except RelaypointError as e:  # LeaseLost, drift, a failing definition: say it, go on
                self._say(str(e) if str(e).startswith(f"run {rid}") else f"run {rid}: {e}")
                if isinstance(e, StoreUnreachable):
                    break  # the server, not the run: the other candidates wait for the next poll
                continue
            finally:
                self._leave(alone)
            self._say(f"run {rid}: {ended}")
            return 1  # the rest of the list went stale while the run executed: the next poll lists again
        return 0

    def _enter(self, isolate: str | None) -> bool:
        """Take a turn to claim a run; with ``isolate`` (a recovered run's id), the only turn: wait
        until the other threads have released theirs. False while another recovery is isolated, or
        once stopping."""
        with self._turns:
            if self._isolating is not None:
                return False
            if isolate is not None:
                self._isolating = isolate
                while self._executing and not self.stopping.is_set():
                    self._turns.wait(0.2)
                if self.stopping.is_set():
                    self._isolating = None
                    self._turns.notify_all()
                    return False
            self._executing += 1
            return True

    def _leave(self, isolated: bool) -> None:
        with self._turns:
            self._executing -= 1
            if isolated:
                self._isolating = None
            self._turns.notify_all()

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

    def _loop(self) -> None:
        with self._runtime() as rt:
            while not self.stopping.is_set():
                try:
                    busy = self.run_once(rt)
                except RelaypointError as e:  # e.g. the store stayed busy: say so, poll again
                    self._say(str(e))
                    busy = 0
                if not busy:
                    self.stopping.wait(self.poll_seconds)

    def run(self) -> None:
        """Run until SIGINT/SIGTERM (when called from the main thread) or :meth:`stop`. Raises what
        :meth:`check_store` raises before any thread starts."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: self.stop())
        self.check_store()
        with heartbeat_store(self.url):  # keeps the heartbeats' shared connections open between runs
            threads = [threading.Thread(target=self._loop, name=f"worker-{i}") for i in range(self.concurrency)]
            if self.on_pause is not None:
                threads.append(threading.Thread(target=self._announce, args=(self.on_pause,), name="on-pause"))
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)  # short joins keep the main thread able to take signals

    def check_store(self) -> None:
        """Raise ``StoreError`` (one line) when the store is missing, unusable, or read-only: a worker
        records what it executes."""
        with self._runtime() as rt:
            if rt.readonly_reason is not None:
                raise rt.read_only_error("a worker records what it executes, so it needs a store it can write")

    def stop(self) -> None:
        """Finish the step under way, release its run, and stop polling (also as a signal handler:
        stopping is decided before anything is written)."""
        stopped = self.stopping.is_set()
        self.stopping.set()
        if not stopped:
            self._say("stopping: finishing the steps under way")

    def _say(self, line: str) -> None:
        """Give ``line`` to ``log``; an ``OSError`` writing it (a closed pipe, a terminal gone) loses
        the line: it must neither end a thread between two runs nor escape a signal handler."""
        with suppress(OSError):
            self.log(line)
