"""The run loop: executes a claimed run's steps while this process holds its lease.

Each turn asks the run's driver what to do (:mod:`relaypoint.drivers`), runs the step, and commits
the boundary as one change (:meth:`RunStore.commit`): the finished execution and its output, the
driver's new state in the checkpoint, the next execution's start, the run's progress and the
events, fenced on the lease token. Between boundaries the run's state lives in memory
(:class:`Claim`), so a boundary costs the same at step 10 as at step 10,000: it reads the next
execution's row and, when the step asks, the upstream outputs it uses.
"""

from __future__ import annotations

import traceback as tb
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from . import encoding, events
from .clock import Clock
from .drivers import Action, Call, Driver, Finish, Pause, RunStep, RunSteps, State, idempotency_key, where
from .errors import DriftError, InvalidValue, LeaseLost, StoreError
from .lease import HOST, LeaseHolder
from .recovery import Recovery, now_of
from .status import CheckpointKind, RunStatus, StepStatus
from .store import (Change, NewCheckpoint, NewEvent, NewStep, RunStore, RunUpdate, StepEnd, StepStart, StoreDamaged,
                    StoreUnreachable)
from .upstream import LazyHistory, LazyResponses, LazyResults, LazyState
from .workflow import Context, InputRequested

Stop = Callable[[], bool | str]


@dataclass
class Current:
    """The execution under way: its call, row (``seq``; None until an appended one is recorded),
    attempt (1-based) and idempotency key."""

    call: Call
    seq: int | None
    attempt: int
    key: str
    status: StepStatus = StepStatus.PENDING


@dataclass
class Claim:
    """What the executor keeps in memory while it holds a run's lease: the input, the driver and
    its state, the execution under way (None when the driver's next action is not a step), the
    completed-step count, the next seq for appended executions (read once, when needed), and
    ``fresh_from``: planned executions from this seq on are known to be as this claim recorded
    them (pending, never started, keyed by :func:`idempotency_key`), so starting one reads nothing
    (None: unknown, read each row; a claim that inserted the rows knows them)."""

    run_id: str
    driver: Driver
    lease: LeaseHolder
    input: dict[str, Any]
    state: State
    action: Action
    current: Current | None
    steps_done: int
    next_seq: int | None = field(default=None)
    fresh_from: int | None = field(default=None)

    def started(self, seq: int) -> None:
        """Planned execution ``seq`` was started: it, and the planned rows before it, are no longer
        known fresh."""
        if self.fresh_from is not None and seq >= self.fresh_from:
            self.fresh_from = seq + 1


def lease_lost(store: RunStore, run_id: str) -> LeaseLost:
    """The ``LeaseLost`` saying why this process no longer owns the run."""
    return LeaseLost.of(run_id, cancelled=store.run(run_id, documents=False).status == RunStatus.CANCELLED)


def state_json(state: State) -> str:
    """The driver state as stored in ``checkpoints.state``."""
    return encoding.dumps_trusted(state, "state")


def deadline_of(clock: Clock, timeout: float | None) -> Any:
    """When a pause of ``timeout`` seconds begun now expires (UTC), or None."""
    return None if timeout is None else now_of(clock) + timedelta(seconds=timeout)


class Executor:
    """Drives claimed runs on ``store`` (see the module docstring)."""

    def __init__(self, store: RunStore, clock: Clock, recovery: Recovery) -> None:
        self.store, self.clock, self.recovery = store, clock, recovery

    # ---- what comes next

    def resolve(self, run_id: str, driver: Driver, state: State, input: dict[str, Any], *,
                resume_at: int | None = None, fresh_from: int | None = None) -> tuple[State, Action, Current | None]:
        """The driver's next action from ``state`` and the execution it starts. An execution
        already recorded completed (met again on resume: a planned row, or the appended row the
        latest checkpoint names) is folded into the state with its recorded output, and the driver
        is asked again. ``resume_at``: on resume, the seq the latest checkpoint continues with; an
        appended call recorded there (started, never finished) is run again in its own row rather
        than in a new one. ``fresh_from``: see :attr:`Claim.fresh_from` (planned rows from that seq
        on are not read). ``input``: the run's input, for the context of a recorded fold."""
        while True:
            action = driver.next(state)
            if isinstance(action, RunStep):
                call = action.call
            elif isinstance(action, RunSteps):
                call = action.calls[0]
            else:
                return state, action, None
            try:
                driver.spec(call)
            except KeyError:
                raise DriftError(f"run {run_id} goes on with '{call.name}'{where(call)}, which the loaded definition "
                                 "does not have (an allowed drift removed it); restore it, or fork the run from an "
                                 "earlier step") from None
            seq = driver.seq_of(call)
            if seq is None:
                row = self.store.step(run_id, resume_at) if resume_at is not None else None
                resume_at = None  # only the first call can be the one the checkpoint names
                if row is None or (row.name, row.iteration, row.agent) != (call.name, call.iteration, call.agent):
                    return state, action, Current(call, None, 1, idempotency_key(run_id, call))
                cur = Current(call, row.seq, row.attempts + 1, row.idempotency_key, row.status)
                if row.status != StepStatus.COMPLETED:
                    return state, action, cur
                # completed while the run waited (an orphan approved with the output it produced)
                _, output = self.store.output(run_id, row.seq)
                state = driver.fold(state, call, output, recorded=True,
                                    ctx=self.context(run_id, driver, state, input, cur).ctx)
                continue
            if fresh_from is not None and seq >= fresh_from:
                return state, action, Current(call, seq, 1, idempotency_key(run_id, call))
            brief = self.store.step_brief(run_id, seq)
            if brief is None or brief.name != call.name:
                found = "nothing" if brief is None else f"step {brief.name!r}"
                raise StoreDamaged(f"run {run_id} records {found} where its definition has step '{call.name}' "
                                   "(edited by hand?); fork the run from an earlier step")
            if brief.status != StepStatus.COMPLETED:
                return state, action, Current(call, seq, brief.attempts + 1, brief.idempotency_key, brief.status)
            _, output = self.store.output(run_id, name=call.name)
            state = driver.fold(state, call, output, recorded=True)

    def context(self, run_id: str, driver: Driver, state: State, input: dict[str, Any], cur: Current) -> Views:
        """The context execution ``cur`` runs with, and the lazy views it reads through."""
        call = cur.call
        results = LazyResults(self.store, run_id, driver.upstream(state))
        responses = LazyResponses(self.store, run_id, cur.seq if cur.seq is not None else -1)
        group = driver.history_of(call)
        history = LazyHistory(self.store, run_id, *group) if group is not None else None
        ctx = Context(run_id=run_id, step=call.name, attempt=cur.attempt, idempotency_key=cur.key,
                      input=input if call.input is None else call.input, results=results, responses=responses,
                      iteration=call.iteration, agent=call.agent, state=LazyState(driver.view(state)),
                      history=history if history is not None else (), _approved=responses.approval)
        return Views(ctx, (results, responses) + ((history,) if history is not None else ()))

    @staticmethod
    def appended(driver: Driver, cur: Current) -> NewStep:
        """The row of an execution the driver appends (``cur.seq`` assigned)."""
        assert cur.seq is not None
        options = driver.spec(cur.call).options()
        if cur.call.task is not None:
            options["task"] = cur.call.task
        return NewStep(seq=cur.seq, name=cur.call.name, idempotency_key=cur.key,
                       options=encoding.dumps_trusted(options, "options"),
                       iteration=cur.call.iteration, agent=cur.call.agent, parent=cur.call.parent)

    def start_of(self, claim: Claim, nxt: Current) -> tuple[StepStart, Current]:
        """How a boundary starts ``nxt``: its planned row, or a row appended at the next seq."""
        if nxt.seq is not None:
            claim.started(nxt.seq)
            return StepStart(nxt.seq, nxt.attempt), nxt
        if claim.next_seq is None:
            last = self.store.step(claim.run_id)
            claim.next_seq = 0 if last is None else last.seq + 1
        nxt = replace(nxt, seq=claim.next_seq)
        claim.next_seq += 1
        return StepStart(self.appended(claim.driver, nxt), nxt.attempt), nxt

    # ---- the loop

    def drive(self, claim: Claim, should_stop: Stop | None = None) -> RunStatus:
        """Execute steps while this process holds the lease. Returns the status the run ends in.

        Whatever a step raises fails that step (retried per its ``retries``, except an unstorable
        output): ``SystemExit`` and other ``BaseException`` subclasses included, so ``sys.exit()``
        in a step never ends the process with the run left behind. Three exceptions: the
        executor's own ``InputRequested`` pauses the run; ``KeyboardInterrupt`` (Ctrl-C) and a
        stored value that cannot be read (``StoreDamaged``, even when the step caught it) release
        the run ``interrupted`` and propagate.
        """
        lease = claim.lease
        lease.start_heartbeat()
        failures: dict[int, int] = {}
        try:
            while True:
                cur = claim.current
                if cur is None:
                    return self._boundary(claim, None, [], claim.state, False)
                spec = claim.driver.spec(cur.call)
                views = self.context(claim.run_id, claim.driver, claim.state, claim.input, cur)
                try:
                    value = spec.fn(views.ctx)
                    views.check()
                    output = encoding.dumps(value, "output")
                    state = claim.driver.fold(claim.state, cur.call, value, ctx=views.ctx)
                    views.check()
                except InputRequested as ask:
                    views.check()
                    return self._ask(claim, cur, ask.prompt, ask.kind, spec.timeout)
                except KeyboardInterrupt:
                    raise  # the operator's Ctrl-C: release the run (below), not a failed step
                except StoreError:
                    raise  # a damaged upstream value: release the run (below), nothing charged
                except BaseException as exc:  # sys.exit() and any other raise in a step fail the step
                    views.check()
                    failures[cur.seq] = failures.get(cur.seq, 0) + 1
                    retry = not isinstance(exc, InvalidValue) and failures[cur.seq] <= spec.retries
                    status = self._failed(claim, cur, exc, retry, should_stop)
                    if status is None:
                        continue
                    return status
                if lease.lost.is_set():
                    raise lease_lost(self.store, claim.run_id)
                stop = should_stop is not None and should_stop()
                completed = [events.step_completed(cur.call, cur.attempt)]
                ended = StepEnd(cur.seq, StepStatus.COMPLETED)
                status = self._boundary(claim, ended, completed, state, stop, top=cur.call.parent is None,
                                        output=output)
                if status is not None:
                    return status
        except LeaseLost:
            raise
        except StoreUnreachable as e:  # the server went away: say where the run stands, not "try again"
            released = self.recovery.release(claim.run_id, lease.token, lease.pid, HOST)
            stands = "is interrupted" if released else "shows interrupted once its lease expires"
            raise StoreUnreachable(f"{e}; run {claim.run_id} {stands}: `relaypoint resume {claim.run_id}` "
                                   "continues it") from None
        except (Exception, KeyboardInterrupt, SystemExit):  # the store failed, or Ctrl-C / exit
            self.recovery.release(claim.run_id, lease.token, lease.pid, HOST)
            raise
        finally:
            lease.stop_heartbeat()

    # ---- boundaries

    def _boundary(self, claim: Claim, ended: StepEnd | None, made: list[NewEvent], state: State,
                  stop: bool | str, *, top: bool = False, output: str | None = None) -> RunStatus | None:
        """Commit one boundary: ``ended`` (the execution that ended, if any; ``output``: its output
        as JSON text, for a completed one) with the events ``made``,
        then what the driver asks for from ``state``: start the next execution, or pause, or
        finish. ``top``: ``ended`` is a top-level row that completed (counted in the run's
        progress). ``stop`` (true, or the reason as text) releases the run ``queued`` instead of
        starting the next execution. Returns the status the run stopped in, or None to go on."""
        run_id = claim.run_id
        at = now_of(self.clock)
        state, action, nxt = self.resolve(run_id, claim.driver, state, claim.input, fresh_from=claim.fresh_from)
        done = claim.steps_done + top
        after = ended.seq + 1 if ended is not None else 0
        started = None
        status: RunStatus | None = None
        made = list(made)
        if nxt is not None:
            run = RunUpdate(steps_done=done, current_step=nxt.call.name)
            if stop:
                run = replace(run, status=RunStatus.QUEUED, lease=None)
                made.append(events.released(nxt.call.name, stop if isinstance(stop, str) else "executor stopping"))
                status = RunStatus.QUEUED
            else:
                # the seq first: an appended execution's boundary checkpoint names its row, so a
                # resume after a crash re-runs that row instead of appending a second one
                started, nxt = self.start_of(claim, nxt)
                made.append(events.step_started(nxt.call, nxt.attempt))
            checkpoint = NewCheckpoint(run_id, CheckpointKind.BOUNDARY, nxt.seq if nxt.seq is not None else after,
                                       nxt.call.name, at, state=state_json(state))
        elif isinstance(action, Pause):
            deadline = deadline_of(self.clock, action.timeout)
            checkpoint = NewCheckpoint(run_id, action.kind, after, action.step, at, reason=action.reason,
                                       state=state_json(state), deadline_at=deadline, paused_seq=action.seq)
            status = RunStatus.AWAITING_INPUT if action.kind == CheckpointKind.INPUT else RunStatus.AWAITING_APPROVAL
            run = RunUpdate(steps_done=done, status=status, current_step=action.step, lease=None)
            made.append(events.paused(action.kind, action.step, action.reason, deadline))
        else:
            assert isinstance(action, Finish)
            checkpoint = NewCheckpoint(run_id, CheckpointKind.BOUNDARY, after, None, at,
                                       state=state_json(state)) if ended is not None else None
            run = RunUpdate(steps_done=done, status=RunStatus.COMPLETED, current_step=None, lease=None)
            made.append(events.run_completed())
            status = RunStatus.COMPLETED
        self.store.commit(Change(run_id, at, fence=claim.lease.token, run=run, ended=() if ended is None else (ended,),
                                 started=started, outputs={} if output is None else {ended.seq: output},
                                 checkpoints=() if checkpoint is None else (checkpoint,), events=made))
        claim.state, claim.action, claim.current, claim.steps_done = state, action, nxt, done
        return status

    def _ask(self, claim: Claim, cur: Current, prompt: str, kind: CheckpointKind, timeout: float | None) -> RunStatus:
        """Pause the run on the step's ``request_input`` (``kind`` input: ``awaiting_input``) or a
        person's turn of kind approval (``awaiting_approval``): the step waits unfinished (re-run
        from its top once decided), the state stays as it was."""
        at = now_of(self.clock)
        deadline = deadline_of(self.clock, timeout)
        approval = kind == CheckpointKind.APPROVAL
        status = RunStatus.AWAITING_APPROVAL if approval else RunStatus.AWAITING_INPUT
        self.store.commit(Change(
            claim.run_id, at, fence=claim.lease.token,
            run=RunUpdate(status=status, current_step=cur.call.name, lease=None),
            marked={cur.seq: StepStatus.AWAITING_APPROVAL if approval else StepStatus.AWAITING_INPUT},
            checkpoints=[NewCheckpoint(claim.run_id, kind, cur.seq, cur.call.name, at, reason=prompt,
                                       state=state_json(claim.state), deadline_at=deadline, paused_seq=cur.seq)],
            events=[events.paused(kind, cur.call.name, prompt, deadline, cur.call)]))
        return status

    def _failed(self, claim: Claim, cur: Current, exc: BaseException, retry: bool,
                should_stop: Stop | None) -> RunStatus | None:
        """Record a failed attempt: start the next attempt (``retry``), or ask the driver (a
        planner re-plans: the run goes on), or fail the run. Returns None to go on, else the
        status the run stopped in."""
        message = encoding.readable(str(exc) if isinstance(exc, InvalidValue) else (
            f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__))
        at = now_of(self.clock)
        failed = events.step_failed(cur.call, cur.attempt, message, retry)
        if retry:
            cur.attempt += 1
            self.store.commit(Change(claim.run_id, at, fence=claim.lease.token, started=StepStart(cur.seq, cur.attempt),
                                     events=[failed, events.step_started(cur.call, cur.attempt)]))
            return None
        ended = StepEnd(cur.seq, StepStatus.FAILED, error=message, traceback=encoding.readable("".join(tb.format_exception(exc))))
        outcome = claim.driver.failed(claim.state, cur.call, message)
        if not isinstance(outcome, str):
            if claim.lease.lost.is_set():
                raise lease_lost(self.store, claim.run_id)
            return self._boundary(claim, ended, [failed], outcome, should_stop is not None and should_stop())
        self.store.commit(Change(claim.run_id, at, fence=claim.lease.token, ended=[ended],
                                 run=RunUpdate(status=RunStatus.FAILED, error=outcome, lease=None),
                                 events=[failed, events.run_failed(cur.call, message)]))
        return RunStatus.FAILED


@dataclass(frozen=True)
class Views:
    """An execution's context and the lazy views it reads the store through."""

    ctx: Context
    views: tuple[LazyResults | LazyResponses | LazyHistory, ...]

    def check(self) -> None:
        """Raise the damage the execution met reading stored values, even if it caught it."""
        for view in self.views:
            if view.damage is not None:
                raise view.damage
