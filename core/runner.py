"""Running a claimed run's calls: async functions awaited on an event loop, sync ones in worker
threads, the calls a run has in flight at once (:mod:`relaypoint.flights`) each handed back as it
finishes.

From the sync API (``Runtime.start``, ``resume``, the CLI, the worker) a lone sync call runs in the
calling thread, as a plain function call (``asyncio.run`` and ``agent.run_sync`` work inside it),
unless it has a ``timeout`` or the thread runs an event loop of its own; everything else runs on the
runtime's own event loop, one for the runtime's life, in a thread of its own (so an async client
made in one step still works in the next). From the async API (``await Runtime.astart``,
``aresume``) the calls run on the caller's event loop, and what is recorded in the store is
written from a worker thread, so the loop never waits on the store.

A ``timeout`` bounds each attempt of a call: an async call past it is cancelled; a sync call cannot
be stopped, so it is failed and its result, when it comes, is discarded. Either failure is retried
as any other (``retries``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from . import recorded, tracing
from .calls import is_async
from .errors import LeaseLost, RuntimeClosed
from .execution import Claim, Executor, Stop, lease_lost
from .flights import Flight, Flights, Outcome
from .lease import HOST
from .recovery import Recovery
from .status import RunStatus
from .store import StoreUnreachable
from .workflow import InputRequested

T = TypeVar("T")
CALL_THREADS = 64
"""At most this many sync calls of one runtime run at once (the worker threads they run in)."""
CALL_THREAD_PREFIX = "relaypoint-call"
"""The name of each of those threads begins with this."""
CLOSE_SECONDS = 1.0
"""How long closing the runtime waits for its event loop's thread to stop and close the loop."""


class LoopThread:
    """An event loop of the runtime's own, running in a daemon thread from its first use until
    :meth:`close`, then closed in that thread (a loop left unclosed is closed by the garbage
    collector, which at interpreter exit may find its self-pipe already gone and print a traceback)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=_run_then_close, args=(loop,), name="relaypoint-loop",
                                                daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result, from a thread that is not the loop's,
        in a copy of that thread's context (``call_soon_threadsafe`` copies it: its current span is
        the parent of the spans ``coro`` makes). Interrupted (Ctrl-C), it cancels ``coro`` and waits
        until it has ended before raising."""
        ended = threading.Event()

        async def whole() -> T:
            try:
                return await coro
            except (KeyboardInterrupt, SystemExit) as exc:  # raised out of a task, they would stop the loop
                raise _Carried(exc) from None
            finally:
                ended.set()

        future: Future[T] = asyncio.run_coroutine_threadsafe(whole(), self._running())
        try:
            return future.result()
        except _Carried as carried:
            raise carried.exc from None
        except BaseException:
            future.cancel()
            ended.wait()
            raise

    def close(self) -> None:
        """Stop the loop (calls still on it are abandoned) and wait up to :data:`CLOSE_SECONDS`
        for its thread to close it (a call blocking the loop may hold it longer: it is not waited for)."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            if thread is not threading.current_thread():
                thread.join(CLOSE_SECONDS)


def _run_then_close(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


class _Carried(Exception):
    """A ``KeyboardInterrupt`` or ``SystemExit`` carried out of the runtime's loop to the thread
    waiting on it (the loop must keep running for the runtime's other runs)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


class Runner:
    """Runs claimed runs to their next stop for ``executor`` (see the module docstring); ``recovery``
    releases a run whose executor failed outside its steps."""

    def __init__(self, executor: Executor, recovery: Recovery) -> None:
        self.executor, self.recovery = executor, recovery
        self.loop = LoopThread()
        self.threads = ThreadPoolExecutor(CALL_THREADS, thread_name_prefix=CALL_THREAD_PREFIX)
        self._driving: dict[str, Claim] = {}  # the runs executing now, by id
        self._closed = False

    def close(self) -> None:
        """Release the runs executing now ``interrupted`` (a resume continues each; their calls in
        flight are cancelled, or abandoned in their threads, and record nothing), then stop the
        runtime's loop and its call threads."""
        self._closed = True
        for claim in list(self._driving.values()):
            lease = claim.lease
            self.recovery.release(claim.run_id, lease.token, lease.pid, HOST)
            lease.lose()
        self.loop.close()
        self.threads.shutdown(wait=False, cancel_futures=True)

    def drive(self, claim: Claim, should_stop: Stop | None = None) -> RunStatus:
        """Execute ``claim``'s run from the calling thread until it completes, pauses, fails or is
        released; returns the status it stopped in.

        Whatever a step raises fails that step (retried per its ``retries``, except an unstorable
        output): ``SystemExit`` and other ``BaseException`` subclasses included, so ``sys.exit()``
        in a step never ends the process with the run left behind. Three exceptions: a person's
        turn or ``request_input`` pauses the run; ``KeyboardInterrupt`` (Ctrl-C) and a stored value
        that cannot be read (``StoreDamaged``, even when the step caught it) release the run
        ``interrupted`` and propagate. Raises ``LeaseLost`` when the run was taken from this
        process (cancelled, or claimed by another after its lease lapsed).
        """
        flights = Flights(self.executor, claim, should_stop)
        inline = not _loop_running()
        self._driving[claim.run_id] = claim
        claim.lease.start_heartbeat()
        try:
            launch = flights.begin()
            while not isinstance(launch, RunStatus):
                if inline and _lone_sync(flights, launch):
                    flight = launch[0]
                    with (tracing.execution_span(_attributes(flights, flight)) as span,
                          recorded.running(flight.views.ctx)):
                        outcome = _outcome_of(flight.spec.fn, flight.views.ctx)
                        if outcome.error is None and _awaitable(outcome.value):
                            outcome = self.loop.run(_outcome(outcome.value))
                        _traced(span, outcome)
                    launch = flights.land(flight, outcome)
                else:
                    launch = self.loop.run(self._fly(flights, launch, _inline, lone_returns=inline))
            return launch
        except BaseException as exc:
            self._stopped(claim, exc)
            raise
        finally:
            self._driving.pop(claim.run_id, None)
            claim.lease.stop_heartbeat()

    async def adrive(self, claim: Claim, should_stop: Stop | None = None) -> RunStatus:
        """:meth:`drive` from a running event loop, without blocking it: the calls run on it (sync
        ones in worker threads) and the store is written from worker threads. A cancelled call of
        it (the caller's task cancelled) releases the run ``interrupted``."""
        flights = Flights(self.executor, claim, should_stop)
        self._driving[claim.run_id] = claim
        claim.lease.start_heartbeat()
        try:
            launch = await asyncio.to_thread(flights.begin)
            if not isinstance(launch, RunStatus):
                launch = await self._fly(flights, launch, asyncio.to_thread, lone_returns=False)
            assert isinstance(launch, RunStatus)
            return launch
        except BaseException as exc:
            await asyncio.to_thread(self._stopped, claim, exc)
            raise
        finally:
            self._driving.pop(claim.run_id, None)
            await asyncio.to_thread(claim.lease.stop_heartbeat)

    def _stopped(self, claim: Claim, exc: BaseException) -> None:
        """After the run's execution raised ``exc``: release it ``interrupted`` unless its lease was
        lost (what stops it is not a step: the store failed, Ctrl-C, exit); a server gone away says
        where the run stands instead of ``exc``, and so does a runtime closed meanwhile."""
        if self._closed:
            raise RuntimeClosed(f"run {claim.run_id}: the runtime was closed while it executed the run, which is "
                                f"interrupted: `relaypoint resume {claim.run_id}` continues it") from None
        if isinstance(exc, LeaseLost):
            return
        lease = claim.lease
        released = self.recovery.release(claim.run_id, lease.token, lease.pid, HOST)
        if isinstance(exc, StoreUnreachable):
            stands = "is interrupted" if released else "shows interrupted once its lease expires"
            raise StoreUnreachable(f"{exc}; run {claim.run_id} {stands}: `relaypoint resume {claim.run_id}` "
                                   "continues it") from None

    async def _fly(self, flights: Flights, launch: list[Flight],
                   store: Callable[..., Awaitable[Any]], *, lone_returns: bool) -> RunStatus | list[Flight]:
        """Run ``launch`` and what follows on the running loop, handing each outcome to ``flights``
        through ``store`` (a call of it inline, or from a worker thread) as it comes; returns the
        status the run stopped in, or (``lone_returns``) the next flights once they are one lone
        sync call. A lost lease cancels the calls in flight and raises ``LeaseLost``."""
        loop = asyncio.get_running_loop()
        landed: asyncio.Queue[tuple[Flight, Outcome]] = asyncio.Queue()
        tasks: dict[Flight, asyncio.Task[None]] = {}
        lost = asyncio.Event()
        lease = flights.claim.lease
        lease.on_lost = lambda: loop.call_soon_threadsafe(lost.set)
        if lease.lost.is_set():
            lost.set()

        async def run(flight: Flight) -> None:
            with tracing.execution_span(_attributes(flights, flight)) as span, recorded.running(flight.views.ctx):
                outcome = await self._attempt(flight)
                _traced(span, outcome)
            landed.put_nowait((flight, outcome))

        try:
            while True:
                for flight in launch:
                    tasks[flight] = asyncio.ensure_future(run(flight))
                got, gone = asyncio.ensure_future(landed.get()), asyncio.ensure_future(lost.wait())
                await asyncio.wait((got, gone), return_when=asyncio.FIRST_COMPLETED)
                gone.cancel()
                if not got.done():
                    got.cancel()
                    raise lease_lost(self.executor.store, flights.claim.run_id)
                flight, outcome = got.result()
                del tasks[flight]
                result = await store(flights.land, flight, outcome)
                if isinstance(result, RunStatus):
                    return result
                launch = result
                if lone_returns and not tasks and _lone_sync(flights, launch):
                    return launch
        finally:
            lease.on_lost = None
            for task in tasks.values():
                task.cancel()

    async def _attempt(self, flight: Flight) -> Outcome:
        """One attempt of ``flight``'s function: awaited on this loop when async, else in a worker
        thread (its context copied: tracing spans carry over), within the step's ``timeout``."""
        fn, ctx, timeout = flight.spec.fn, flight.views.ctx, flight.spec.timeout
        limit = asyncio.timeout(timeout)
        try:
            async with limit:
                outcome = await _outcome(self._call(fn, ctx))
        except TimeoutError:
            if not limit.expired():
                raise
            outcome = None
        # past its deadline however it returned (it swallowed the cancellation, or blocked the loop):
        # its late result is discarded
        if outcome is None or (timeout is not None and asyncio.get_running_loop().time() >= limit.when()):
            late = "cancelled" if is_async(fn) else "late result is discarded"
            return Outcome(error=TimeoutError(f"the call ran longer than its timeout of {timeout:g} s ({late})"))
        return outcome

    async def _call(self, fn: Callable[[Any], Any], ctx: Any) -> Any:
        if is_async(fn):
            return await fn(ctx)
        call = functools.partial(contextvars.copy_context().run, fn, ctx)
        return await asyncio.get_running_loop().run_in_executor(self.threads, call)


def _attributes(flights: Flights, flight: Flight) -> dict[str, Any]:
    """The attributes of the span of ``flight``'s attempt."""
    claim, cur = flights.claim, flight.cur
    return tracing.execution_attributes(claim.run_id, claim.workflow, cur.call, cur.attempt, cur.key)


def _traced(span: Any, outcome: Outcome) -> None:
    """Mark an attempt's span failed when it raised (a pause is not a failure)."""
    if outcome.error is not None and not isinstance(outcome.error, InputRequested):
        tracing.failed(span, outcome.error)


def _loop_running() -> bool:
    """Whether the calling thread runs an event loop (its own calls must not block it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _lone_sync(flights: Flights, launch: list[Flight]) -> bool:
    """Whether ``launch`` is one sync call without a timeout and nothing else is in flight."""
    return (len(launch) == 1 and len(flights.flying) == 1 and not is_async(launch[0].spec.fn)
            and launch[0].spec.timeout is None)


def _outcome_of(fn: Callable[[Any], Any], ctx: Any) -> Outcome:
    """Call a sync function here: its value, or what it raised (Ctrl-C propagates)."""
    try:
        return Outcome(fn(ctx))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return Outcome(error=exc)


def _awaitable(value: Any) -> bool:
    return asyncio.iscoroutine(value) or asyncio.isfuture(value) or hasattr(value, "__await__")


async def _outcome(value: Any) -> Outcome:
    """``value`` awaited while what it gives is awaitable (a sync function may return a coroutine):
    its value, or what it raised (a cancellation propagates)."""
    try:
        while _awaitable(value):
            value = await value
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        return Outcome(error=exc)
    return Outcome(value)


async def _inline(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)
