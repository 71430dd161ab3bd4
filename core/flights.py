"""The calls of a claimed run in flight: which start, and each one's boundary as it lands.

:class:`Flights` decides and records; it runs no user code and waits for nothing (the runners of
:mod:`relaypoint.runner` call the functions and hand each outcome back, in the order the calls
finish). A run has one call in flight at a time, except where its driver asks for independent
calls (:class:`~relaypoint.drivers.RunSteps`: a vote's voters, a planner's ready subtasks, the
branches of ``wf.parallel``, the items of ``wf.map``): those start together, up to the driver's
``max_concurrency``, each in its own execution. Each call lands at its own boundary, committed when
it finishes with the driver's state folded over it, so the state is a set of finished calls and a
crash re-runs only the calls that had not finished. While calls are in flight, nothing else starts:
a call failed for good, a person's turn that asks, or a stop waits until the others have landed
(their results are recorded), and then fails the run, pauses it or releases it.
"""

from __future__ import annotations

import traceback as tb
from dataclasses import dataclass, field
from typing import Any

from . import encoding, events
from .drivers import CallKey, call_key
from .errors import InvalidValue, StoreError
from .execution import Claim, Current, Executor, Stop, Views, lease_lost
from .recorded import CallDrift
from .recovery import now_of
from .status import RunStatus, StepStatus
from .store import Change, RunUpdate, StepEnd, StepStart
from .workflow import InputRequested, StepSpec

DETERMINISTIC = (InvalidValue, CallDrift)
"""Failures that would recur on every attempt (an unstorable value, a recorded call's drift): no retry."""


@dataclass(eq=False)
class Flight:
    """One execution in flight: its row, its step (function and options), the context it runs
    with, and the attempts of it that failed in this claim."""

    cur: Current
    spec: StepSpec
    views: Views
    failures: int = 0

    @property
    def key(self) -> CallKey:
        return call_key(self.cur.call)


@dataclass(frozen=True)
class Outcome:
    """How a call's function ended: its ``value``, or the ``error`` it raised."""

    value: Any = None
    error: BaseException | None = None


@dataclass
class _Held:
    """What waits for the calls in flight to land: a person's turn that asked (the first, and the
    later ones sent back to pending), or the run's failure (reason, and the call that failed)."""

    asked: tuple[Flight, InputRequested] | None = None
    waiting: list[int] = field(default_factory=list)
    failure: tuple[Current, str, str] | None = None


class Flights:
    """The calls of ``claim`` in flight, driven by ``executor``; ``should_stop`` is asked as each
    call lands (see :meth:`relaypoint.Runtime.resume`). Methods are called one at a time (from any
    thread): :meth:`begin` once, then :meth:`land` with each call's outcome. Each returns the
    flights to start (their rows already started) or the status the run stopped in, which comes only
    once nothing is in flight."""

    def __init__(self, executor: Executor, claim: Claim, should_stop: Stop | None) -> None:
        self.x, self.claim, self.should_stop = executor, claim, should_stop
        self.flying: dict[CallKey, Flight] = {}
        self.held = _Held()
        self.stop: bool | str = False

    def begin(self) -> list[Flight] | RunStatus:
        """The flights the claim starts with: the execution it started, and the independent calls
        beside it."""
        cur = self.claim.current
        if cur is None:
            status = self.x.boundary(self.claim, None, [], self.claim.state, False)
            assert status is not None
            return status
        return [self._fly(cur), *self._more()]

    def land(self, flight: Flight, outcome: Outcome) -> list[Flight] | RunStatus:
        """Record how ``flight`` ended (its boundary, a retry, a pause or a failure)."""
        del self.flying[flight.key]
        error = outcome.error
        if error is None:
            try:
                flight.views.check()
                output = encoding.dumps(outcome.value, "output")
                state = self.claim.driver.fold(self.claim.state, flight.cur.call, outcome.value, ctx=flight.views.ctx)
                flight.views.check()
            except StoreError:
                raise  # a damaged upstream value: the run is released, nothing charged
            except BaseException as exc:  # an unstorable output, or a pattern's own user code raising
                error = exc
            else:
                return self._completed(flight, state, output)
        if isinstance(error, (KeyboardInterrupt, StoreError)):
            raise error  # the operator's Ctrl-C, a damaged value: release the run, not a failed step
        flight.views.check()
        if isinstance(error, InputRequested):
            return self._asked(flight, error)
        return self._failed(flight, error)

    # ---- what lands

    def _completed(self, flight: Flight, state: dict[str, Any], output: str) -> list[Flight] | RunStatus:
        claim, cur = self.claim, flight.cur
        if claim.lease.lost.is_set():
            raise lease_lost(self.x.store, claim.run_id)
        if not self.stop and self.should_stop is not None:
            self.stop = self.should_stop()
        ended = StepEnd(cur.seq, StepStatus.COMPLETED)
        return self._boundary(ended, [events.step_completed(cur.call, cur.attempt)], state, top=cur.call.parent is None,
                              output=output)

    def _asked(self, flight: Flight, ask: InputRequested) -> list[Flight] | RunStatus:
        if self.held.asked is None:
            self.held.asked = (flight, ask)
        else:
            self.held.waiting.append(flight.cur.seq)
        return self._settled()

    def _failed(self, flight: Flight, exc: BaseException) -> list[Flight] | RunStatus:
        claim, cur = self.claim, flight.cur
        flight.failures += 1
        # no retry once the node fails anyway (a person's turn waiting does not stop one)
        retry = (not isinstance(exc, DETERMINISTIC) and flight.failures <= flight.spec.retries
                 and self.held.failure is None)
        message = encoding.readable(str(exc) if isinstance(exc, DETERMINISTIC) else (
            f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__))
        failed = events.step_failed(cur.call, cur.attempt, message, retry)
        at = now_of(self.x.clock)
        if retry:
            cur.attempt += 1
            self.x.store.commit(Change(claim.run_id, at, fence=claim.lease.token, started=StepStart(cur.seq, cur.attempt),
                                       events=[failed, events.step_started(cur.call, cur.attempt)]))
            return [self._fly(cur, failures=flight.failures)]
        ended = StepEnd(cur.seq, StepStatus.FAILED, error=message,
                        traceback=encoding.readable("".join(tb.format_exception(exc))))
        outcome = claim.driver.failed(claim.state, cur.call, message)
        if not isinstance(outcome, str):  # the driver goes on (a planner re-plans)
            if claim.lease.lost.is_set():
                raise lease_lost(self.x.store, claim.run_id)
            return self._boundary(ended, [failed], outcome)
        if not self.flying and self._open():
            return self._fail_run(cur, message, outcome, ended=[ended], made=[failed])
        # the calls in flight land first, their results kept; the first failure is the run's
        self.x.store.commit(Change(claim.run_id, at, fence=claim.lease.token, ended=[ended], events=[failed]))
        if self.held.failure is None:
            self.held.failure = (cur, message, outcome)
        return self._settled()

    # ---- boundaries

    def _boundary(self, ended: StepEnd, made: list[Any], state: dict[str, Any], *, top: bool = False,
                  output: str | None = None) -> list[Flight] | RunStatus:
        """Commit ``ended``'s boundary (see :meth:`Executor.boundary`): with nothing in flight or
        held, the next execution started, or the pause or finish, in the same change; else another
        independent call started, or none."""
        flying = {k: f.cur.seq for k, f in self.flying.items()}
        status = self.x.boundary(self.claim, ended, made, state, self.stop, top=top, output=output, flying=flying,
                                 start=self._open())
        if status is not None:
            return status
        started = [] if self.claim.current is None else [self._fly(self.claim.current)]
        return started + self._more() if self.flying else self._settled()

    def _more(self) -> list[Flight]:
        """Start the independent calls that may start beside those in flight: a change each, all in
        one transaction (one durable write for a round of calls)."""
        claim, starts = self.claim, []
        busy = set(self.flying)
        while self._open() and not self.stop:
            nxt = self.x.free_call(claim, claim.action, busy)
            if nxt is None:
                break
            busy.add(call_key(nxt.call))
            starts.append(self.x.start_of(claim, nxt))
        at = now_of(self.x.clock)
        changes = [Change(claim.run_id, at, fence=claim.lease.token, started=start,
                          events=[events.step_started(nxt.call, nxt.attempt)]) for start, nxt in starts]
        if len(changes) > 1:
            with self.x.store.transaction(claim.run_id):
                for change in changes:
                    self.x.store.commit(change)
        elif changes:
            self.x.store.commit(changes[0])
        return [self._fly(nxt) for _, nxt in starts]

    def _settled(self) -> list[Flight] | RunStatus:
        """Once nothing is in flight: the held failure or pause, recorded ([] before)."""
        if self.flying:
            return []
        held, claim = self.held, self.claim
        if held.failure is not None:
            cur, message, reason = held.failure
            waiting = [*held.waiting, *([held.asked[0].cur.seq] if held.asked else [])]
            return self._fail_run(cur, message, reason, marked={seq: StepStatus.PENDING for seq in waiting})
        assert held.asked is not None, "settled only with a failure or a person's turn held"
        flight, ask = held.asked
        return self.x.ask(claim, flight.cur, ask.prompt, ask.kind, flight.spec.timeout, held.waiting)

    def _fail_run(self, cur: Current, message: str, reason: str, *, ended: list[StepEnd] | None = None,
                  made: list[Any] | None = None, marked: dict[int, StepStatus] | None = None) -> RunStatus:
        claim = self.claim
        self.x.store.commit(Change(claim.run_id, now_of(self.x.clock), fence=claim.lease.token, ended=ended or [],
                                   marked=marked or {}, run=RunUpdate(status=RunStatus.FAILED, error=reason, lease=None),
                                   events=[*(made or []), events.run_failed(cur.call, message)]))
        return RunStatus.FAILED

    def _open(self) -> bool:
        """Whether new calls may start: no failure or person's turn is waiting for the others."""
        return self.held.failure is None and self.held.asked is None

    def _fly(self, cur: Current | None, failures: int = 0) -> Flight:
        assert cur is not None
        claim = self.claim
        flight = Flight(cur, claim.driver.spec(cur.call),
                        self.x.context(claim.run_id, claim.driver, claim.state, claim.input, cur,
                                       fence=claim.lease.token), failures)
        self.flying[flight.key] = flight
        return flight
