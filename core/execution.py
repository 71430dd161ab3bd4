"""The run loop's decisions and records: what a claimed run does next, the context each execution
runs with, and each boundary, while this process holds the run's lease.

Each turn asks the run's driver what to do (:mod:`relaypoint.drivers`); a step's call runs (see
:mod:`relaypoint.runner`, and :mod:`relaypoint.flights` for calls in flight at once) and its
boundary commits as one change (:meth:`RunStore.commit`): the finished execution and its output, the
driver's new state in the checkpoint, the next execution's start, the run's progress and the
events, fenced on the lease token. Between boundaries the run's state lives in memory
(:class:`Claim`), so a boundary costs the same at step 10 as at step 10,000: it reads the next
execution's row and, when the step asks, the upstream outputs it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from . import encoding, events
from .clock import Clock
from .drivers import (Action, Call, CallKey, Driver, Finish, Pause, RunStep, RunSteps, State, call_key, idempotency_key,
                      where)
from .errors import DriftError, LeaseLost
from .lease import LeaseHolder
from .recorded import Recorder
from .recovery import Recovery, now_of
from .status import CheckpointKind, RunStatus, StepStatus
from .models import StepRecord
from .store import Change, NewCheckpoint, NewEvent, NewStep, RunStore, RunUpdate, StepEnd, StepStart, StoreDamaged
from .typed import read_back
from .upstream import LazyHistory, LazyResponses, LazyResults, LazyState
from .workflow import Context

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
    completed-step count, the next seq for appended executions (read once, when needed),
    ``fresh_from``: planned executions from this seq on are known to be as this claim recorded
    them (pending, never started, keyed by :func:`idempotency_key`), so starting one reads nothing
    (None: unknown, read each row; a claim that inserted the rows knows them), and ``open_calls``:
    on resume, the recorded rows of the pattern's independent calls that never finished, by
    :func:`~relaypoint.drivers.call_key` (each runs again in its own row, not in a new one).
    ``workflow``: the run's workflow name (its spans carry it)."""

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
    open_calls: dict[CallKey, StepRecord] = field(default_factory=dict)
    workflow: str = ""

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
                output = read_back(driver.model(call), output, f"the recorded output of '{call.name}'{where(call)}")
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

    def context(self, run_id: str, driver: Driver, state: State, input: dict[str, Any], cur: Current,
                fence: str | None = None) -> Views:
        """The context execution ``cur`` runs with, and the lazy views it reads through; ``fence``
        (the lease token) for an execution that runs, whose calls are recorded (:mod:`.recorded`)."""
        call = cur.call
        results = LazyResults(self.store, run_id, driver.upstream(state), lambda name: driver.model(Call(name)))
        responses = LazyResponses(self.store, run_id, cur.seq if cur.seq is not None else -1)
        group = driver.history_of(call)
        history = LazyHistory(self.store, run_id, *group, model=lambda r: driver.model(Call.of(r))) \
            if group is not None else None
        ctx = Context(run_id=run_id, step=call.name, attempt=cur.attempt, idempotency_key=cur.key,
                      input=input if call.input is None else call.input, results=results, responses=responses,
                      iteration=call.iteration, agent=call.agent, state=LazyState(driver.view(state)),
                      history=history if history is not None else (), _approved=responses.approval,
                      _recorder=None if fence is None or cur.seq is None else Recorder(
                          self.store, self.clock, run_id, cur.seq, cur.attempt, fence, call.name))
        return Views(ctx, (results, responses) + ((history,) if history is not None else ()))

    def open_calls(self, run_id: str, action: Action) -> dict[CallKey, StepRecord]:
        """On resume: the recorded rows of ``action``'s calls inside a pattern (its independent
        calls, or the one left of them) that never finished (interrupted, failed, waiting, or never
        started; not cancelled), the latest row of each call by its key; {} for any other action."""
        calls = action.calls if isinstance(action, RunSteps) else (action.call,) if isinstance(action, RunStep) else ()
        if not calls or calls[0].parent is None:
            return {}
        wanted = {call_key(c) for c in calls}
        rows = {call_key(Call.of(r)): r for r in self.store.steps(run_id, parent=calls[0].parent)}
        return {k: r for k, r in rows.items()
                if k in wanted and r.status not in (StepStatus.COMPLETED, StepStatus.CANCELLED)}

    def free_call(self, claim: Claim, action: Action, flying: Collection[CallKey]) -> Current | None:
        """The next of ``action``'s independent calls to start beside the calls ``flying`` (their
        keys), within the driver's :meth:`~relaypoint.drivers.Driver.max_concurrency`; None when
        none may start (another action waits until nothing is in flight)."""
        if not isinstance(action, RunSteps):
            return None
        limit = claim.driver.max_concurrency(action.calls[0])
        if limit is not None and len(flying) >= limit:
            return None
        call = next((c for c in action.calls if call_key(c) not in flying), None)
        return None if call is None else Current(call, None, 1, idempotency_key(claim.run_id, call))

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
        if nxt.seq is None and (row := claim.open_calls.pop(call_key(nxt.call), None)) is not None:
            nxt = Current(nxt.call, row.seq, row.attempts + 1, row.idempotency_key, row.status)
        if nxt.seq is not None:
            claim.started(nxt.seq)
            return StepStart(nxt.seq, nxt.attempt), nxt
        if claim.next_seq is None:
            last = self.store.step(claim.run_id)
            claim.next_seq = 0 if last is None else last.seq + 1
        nxt = replace(nxt, seq=claim.next_seq)
        claim.next_seq += 1
        return StepStart(self.appended(claim.driver, nxt), nxt.attempt), nxt

    # ---- boundaries

    def boundary(self, claim: Claim, ended: StepEnd | None, made: list[NewEvent], state: State,
                 stop: bool | str, *, top: bool = False, output: str | None = None,
                 flying: Mapping[CallKey, int] | None = None, start: bool = True) -> RunStatus | None:
        """Commit one boundary: ``ended`` (the execution that ended, if any; ``output``: its output
        as JSON text, for a completed one) with the events ``made``,
        then what the driver asks for from ``state``: start the next execution, or pause, or
        finish. ``top``: ``ended`` is a top-level row that completed (counted in the run's
        progress). ``stop`` (true, or the reason as text) releases the run ``queued`` instead of
        starting the next execution. ``flying``: the calls still in flight (key -> seq); while
        there are some, only another of their independent calls may start (:meth:`free_call`), and
        the checkpoint names the first of them. ``start``: False when nothing may start (a failure
        or a person's turn waits for the calls in flight). Returns the status the run stopped in,
        or None to go on; ``claim.current`` is the execution it started (None: none)."""
        run_id = claim.run_id
        at = now_of(self.clock)
        state, action, nxt = self.resolve(run_id, claim.driver, state, claim.input, fresh_from=claim.fresh_from)
        done = claim.steps_done + top
        after = ended.seq + 1 if ended is not None else 0
        started = None
        status: RunStatus | None = None
        made = list(made)
        if flying or not start:
            nxt = self.free_call(claim, action, flying) if flying and start and not stop else None
            if nxt is None:  # the calls in flight land first
                seq, step = min((s, k[0]) for k, s in flying.items()) if flying else (after, None)
                self.store.commit(Change(
                    run_id, at, fence=claim.lease.token, run=RunUpdate(steps_done=done),
                    ended=() if ended is None else (ended,), outputs={} if output is None else {ended.seq: output},
                    checkpoints=(NewCheckpoint(run_id, CheckpointKind.BOUNDARY, seq, step, at,
                                               state=state_json(state)),), events=made))
                claim.state, claim.action, claim.current, claim.steps_done = state, action, None, done
                return None
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
        claim.state, claim.action, claim.steps_done = state, action, done
        claim.current = nxt if started is not None else None
        return status

    def ask(self, claim: Claim, cur: Current, prompt: str, kind: CheckpointKind, timeout: float | None,
            waiting: Collection[int] = ()) -> RunStatus:
        """Pause the run on the step's ``request_input`` (``kind`` input: ``awaiting_input``) or a
        person's turn of kind approval (``awaiting_approval``): the step waits unfinished (re-run
        from its top once decided), the state stays as it was. ``waiting``: the executions of
        other persons' turns that asked meanwhile, back to ``pending`` (asked once this one is
        decided: a run waits on one person at a time)."""
        at = now_of(self.clock)
        deadline = deadline_of(self.clock, timeout)
        approval = kind == CheckpointKind.APPROVAL
        status = RunStatus.AWAITING_APPROVAL if approval else RunStatus.AWAITING_INPUT
        self.store.commit(Change(
            claim.run_id, at, fence=claim.lease.token,
            run=RunUpdate(status=status, current_step=cur.call.name, lease=None),
            marked={**{seq: StepStatus.PENDING for seq in waiting},
                    cur.seq: StepStatus.AWAITING_APPROVAL if approval else StepStatus.AWAITING_INPUT},
            checkpoints=[NewCheckpoint(claim.run_id, kind, cur.seq, cur.call.name, at, reason=prompt,
                                       state=state_json(claim.state), deadline_at=deadline, paused_seq=cur.seq)],
            events=[events.paused(kind, cur.call.name, prompt, deadline, cur.call)]))
        return status


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
