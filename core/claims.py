"""Claiming a run for this process: a new run (start) or an existing one (resume); and recording a
new run for a worker to claim (enqueue).

A claim takes the run's lease in one transaction and reads what the run loop needs, in constant
cost: the run's own row, its input, the latest checkpoint (the driver's state) and the next
execution's row; what it writes is one change at its end. Never all steps, all outputs or all
checkpoints (an allowed drift, which rebuilds the chain and reads it back, is the exception). Resume refuses, with the reason: a run that is running, paused,
ended, drifted, or whose latest pause carries a decision that does not let it go on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from . import encoding, events
from .clock import Clock
from .drivers import Call, Driver, State, call_key, idempotency_key, located, where
from .errors import DriftError, RefusedTransition
from .execution import Claim, Current, Executor, state_json
from .lease import HOST, LeaseHolder, owner_gone
from .models import Checkpoint, Owner, RunHead, StepRecord
from .recovery import Recovery, now_of
from .refusals import resume_refusal
from .status import OPEN_STEPS, PAUSE_KINDS, CheckpointKind, RunStatus, StepStatus, goes_on
from .store import Change, Lookup, NewCheckpoint, NewEvent, NewRun, NewStep, RunStore, RunUpdate, StepEnd, StepStart
from .workflow import Workflow, describe_drift, fingerprint


class Claims:
    """Claims runs of ``store`` with leases of ``lease_seconds``. ``max_recoveries``: deaths
    charged to a run before resume fails it instead (None: no limit)."""

    def __init__(self, store: RunStore, clock: Clock, recovery: Recovery, executor: Executor, *,
                 lease_seconds: float, max_recoveries: int | None) -> None:
        self.store, self.clock, self.recovery, self.executor = store, clock, recovery, executor
        self.lease_seconds, self.max_recoveries = lease_seconds, max_recoveries

    def lease(self, run_id: str) -> LeaseHolder:
        """A new lease on ``run_id`` for this process (not yet recorded)."""
        return LeaseHolder(self.store.url, run_id, self.clock, self.lease_seconds)

    # ---- start

    def start(self, run_id: str, wf: Workflow, input_text: str, traceparent: str | None = None) -> Claim:
        """Record a new run of ``wf`` (its planned steps pending, the first one started) owned by
        this process, as one change; ``traceparent``: its run span's, for its ``run_started``
        event (see :mod:`relaypoint.tracing`)."""
        driver = wf.driver()
        definition = driver.definition()
        lease = self.lease(run_id)
        at = now_of(self.clock)
        planned = driver.planned()
        # what a step sees is the input as stored (a tuple reads back as a list), as on resume
        input = encoding.loads(input_text)
        # a fresh run: resolving reads nothing of the store, so everything is written at once after it
        state, action, cur = self.executor.resolve(run_id, driver, driver.initial_state(), input, fresh_from=0)
        claim = Claim(run_id, driver, lease, input, state, action, cur, steps_done=0, fresh_from=0, workflow=wf.name)
        claim.next_seq = len(planned)  # an execution the driver appends comes after the planned rows
        started, checkpoints, made = self._begin(claim, at)
        self.store.commit(Change(
            run_id, at, fence=lease.token,
            new=NewRun(run_id=run_id, workflow=wf.name, status=RunStatus.RUNNING, input=input_text,
                       definition=encoding.dumps_trusted(definition, "definition"), fingerprint=wf.fingerprint(),
                       created_at=at, steps_total=len(planned), current_step=planned[0].name if planned else None,
                       lease=lease.lease()),
            inserted=[NewStep(seq=i, name=s.name, idempotency_key=idempotency_key(run_id, Call(s.name)),
                              options=encoding.dumps_trusted(s.options(), "options")) for i, s in enumerate(planned)],
            started=started,
            checkpoints=[NewCheckpoint(run_id, CheckpointKind.START, 0, cur.call.name if cur else None, at,
                                       state=state_json(state)), *checkpoints],
            events=[events.run_started(wf.name, lease.pid, HOST, traceparent, wf.prices), *made]))
        return claim

    def enqueue(self, run_id: str, wf: Workflow, input_text: str, traceparent: str | None = None) -> None:
        """Record a new run of ``wf`` ``queued``, owned by no one, as one change: the rows
        :meth:`start` writes (the run, its planned steps, its start checkpoint, and when the driver
        begins with an execution it appends, that row with a checkpoint naming it), every step
        pending, and a ``run_queued`` event (with ``traceparent``, as :meth:`start`'s); nothing executes. A worker's claim (:meth:`resume`)
        goes on from there."""
        driver = wf.driver()
        planned = driver.planned()
        at = now_of(self.clock)
        # a fresh run: resolving reads nothing of the store; it names the execution the run begins with
        state, _, cur = self.executor.resolve(run_id, driver, driver.initial_state(), encoding.loads(input_text),
                                              fresh_from=0)
        steps = [NewStep(seq=i, name=s.name, idempotency_key=idempotency_key(run_id, Call(s.name)),
                         options=encoding.dumps_trusted(s.options(), "options")) for i, s in enumerate(planned)]
        named = None
        if cur is not None and cur.seq is None:  # appended by the driver: its row after the planned ones
            cur = replace(cur, seq=len(planned))
            steps.append(self.executor.appended(driver, cur))
            # a checkpoint naming the row, so the claim goes on with it instead of appending another
            named = NewCheckpoint(run_id, CheckpointKind.BOUNDARY, cur.seq, cur.call.name, at, state=state_json(state))
        self.store.commit(Change(
            run_id, at, run=None,
            new=NewRun(run_id=run_id, workflow=wf.name, status=RunStatus.QUEUED, input=input_text,
                       definition=encoding.dumps_trusted(driver.definition(), "definition"),
                       fingerprint=wf.fingerprint(), created_at=at, steps_total=len(planned),
                       current_step=planned[0].name if planned else None),
            inserted=steps,
            checkpoints=[NewCheckpoint(run_id, CheckpointKind.START, 0, cur.call.name if cur else None, at,
                                       state=state_json(state)), *([] if named is None else [named])],
            events=[events.run_queued(wf.name, traceparent, wf.prices)]))

    def _begin(self, claim: Claim, at: datetime) -> tuple[StepStart | None, list[NewCheckpoint], list[NewEvent]]:
        """How the claim's change starts the execution the run continues with (none when the
        driver's next action is no step): its start, with a checkpoint naming an appended row (so
        a resume after a crash re-runs that row instead of appending another), and its event."""
        cur = claim.current
        if cur is None:
            return None, [], []
        started, claim.current = self.executor.start_of(claim, cur)
        named = [NewCheckpoint(claim.run_id, CheckpointKind.BOUNDARY, claim.current.seq, cur.call.name, at,
                               state=state_json(claim.state))] if isinstance(started.step, NewStep) else []
        return started, named, [events.step_started(cur.call, cur.attempt)]

    # ---- resume

    def resume(self, rid: str, workflow_of: Callable[[str], Workflow], allow_drift: bool, *,
               replan: bool = False, only_if: RunStatus | None = None, skip_locked: bool = False) -> Claim | RunStatus:
        """Claim an existing run (see :meth:`relaypoint.Runtime.resume`) in one transaction of that
        run. Returns the claim, or the status the run was left in without executing anything (failed
        as a poison pill, or paused to hold an orphan step). ``replan``: the planner the run is
        inside decomposes its goal again (the driver refuses, nothing written, when the run is not
        inside one). ``only_if``: ``RefusedTransition``, nothing written, unless the run is in this
        status (a run whose owner is gone counts as interrupted). ``skip_locked``: ``RunLocked``,
        nothing written, when another process holds the run in a transaction."""
        lease = self.lease(rid)
        while True:
            with self.store.transaction(rid, skip_locked=skip_locked):
                head = self.store.run(rid, documents=False)
                owner = head.lease
                if not (head.status == RunStatus.RUNNING and owner and owner_gone(
                        owner.host, owner.pid, owner.pid_start, owner.expires_at, self.clock())):
                    return self._claim(head, lease, workflow_of, allow_drift, replan, only_if)
            # Its owner is gone: every run that process executed is marked interrupted. That writes
            # beyond this run, so as the store's only writer; then the claim is tried again.
            with self.store.transaction():
                self.recovery.interrupt_owner(Owner(host=owner.host, pid=owner.pid, pid_start=owner.pid_start,
                                                    expires_at=owner.expires_at))

    def _claim(self, head: RunHead, lease: LeaseHolder, workflow_of: Callable[[str], Workflow], allow_drift: bool,
               replan: bool, only_if: RunStatus | None) -> Claim | RunStatus:
        """Inside the run's transaction, its owner not gone: the rest of :meth:`resume`."""
        rid = head.run_id
        if only_if is not None and head.status != only_if:
            raise RefusedTransition(f"run {rid} is {head.status}, no longer {only_if}")
        if (refusal := resume_refusal(head)) is not None:
            raise RefusedTransition(refusal)
        self._refuse_unless_decided(rid)
        wf = workflow_of(head.workflow)
        driver = wf.driver()
        at = now_of(self.clock)
        steps_done = self._reconcile(head, wf, driver, allow_drift, at)
        input = self.store.run_document(rid, "input")
        checkpoint = self.store.checkpoint(rid, Lookup.LATEST)
        state = driver.initial_state() if checkpoint is None else self._restored(driver, checkpoint)
        resume_at = checkpoint.seq if checkpoint else None
        state, action, cur = self.executor.resolve(rid, driver, state, input, resume_at=resume_at)
        made: list[NewEvent] = []
        if replan:
            made.append(events.replan_requested(checkpoint.step if checkpoint else None))
            if cur is not None and cur.seq is not None and cur.status != StepStatus.FAILED:
                # the execution the run stopped at (interrupted, or answered) finishes first
                state = driver.replan(state)
            else:  # a subtask failed for good is re-planned, not run again
                state, action, cur = self.executor.resolve(rid, driver, driver.replan(state), input)
        if (lacking := driver.lacking(state)) is not None:  # rolled back with the rest of the claim
            raise DriftError(f"run {rid} cannot go on: {lacking}")
        abandoned = self._abandon(rid, checkpoint, cur) if checkpoint is not None else None
        ended = [] if abandoned is None else [StepEnd(abandoned["seq"], StepStatus.CANCELLED)]
        if head.status == RunStatus.INTERRUPTED and (poisoned := self._poisoned(head, cur)) is not None:
            step, reason = poisoned
            self.store.commit(Change(
                rid, at, run=RunUpdate(status=RunStatus.FAILED, error=reason),
                ended=[*ended, *([] if step is None else [StepEnd(step.seq, StepStatus.FAILED, error=reason)])],
                events=[*made, events.run_failed(step.call if step else None, reason, poison_pill=True)]))
            return RunStatus.FAILED
        # independent calls that never finished run again in their own rows
        open_calls = self.executor.open_calls(rid, action)
        if cur is not None and (row := open_calls.pop(call_key(cur.call), None)) is not None and cur.seq is None:
            cur = Current(cur.call, row.seq, row.attempts + 1, row.idempotency_key, row.status)
        if cur is not None and cur.seq is not None:
            self.store.responses(rid, cur.seq)  # fail closed before claiming: answers it will consume
        orphans = [] if cur is None else [cur]
        orphans += [Current(Call.of(r), r.seq, r.attempts + 1, r.idempotency_key, r.status) for r in open_calls.values()]
        held = next((o for o in orphans if o.status == StepStatus.INTERRUPTED
                     and driver.spec(o.call).on_orphan == "hold"), None)
        if held is not None:
            self._hold(rid, held, state, at, ended, made)
            return RunStatus.AWAITING_APPROVAL
        claim = Claim(rid, driver, lease, input, state, action, cur, steps_done=steps_done, open_calls=open_calls,
                      workflow=head.workflow)
        started, checkpoints, starting = self._begin(claim, at)
        self.store.commit(Change(
            rid, at, run=RunUpdate(status=RunStatus.RUNNING, error=None, lease=lease.lease(),
                                   current_step=cur.call.name if cur else None),
            ended=ended, started=started, checkpoints=checkpoints,
            events=[*made, events.resumed(lease.pid, HOST, head.status, abandoned), *starting]))
        return claim

    def _abandon(self, rid: str, checkpoint: Checkpoint, cur: Current | None) -> dict[str, Any] | None:
        """The execution the run stopped at, named by its latest ``checkpoint`` (the execution its
        pause is about, else the one it went on with), when the run does not go on with it and it
        never finished (an allowed drift removed its agent): the claim cancels it, it will not run
        again. A pattern's row is not, while the run goes on inside the pattern (the row records the
        pattern's result once it ends). Returns it as the ``resumed`` event names it, or None."""
        seq = checkpoint.paused_seq if checkpoint.kind in PAUSE_KINDS else checkpoint.seq
        row = self.store.step(rid, seq) if seq is not None else None
        if row is None or row.status not in OPEN_STEPS or (cur is not None and seq in (cur.seq, cur.call.parent)):
            return None
        return {"seq": seq, "step": row.name, **located(Call.of(row))}

    @staticmethod
    def _restored(driver: Driver, checkpoint: Checkpoint) -> State:
        """The driver state to go on from ``checkpoint``: restored, with the decision of a decided
        pause applied."""
        state = driver.restore(checkpoint.state, checkpoint)
        if checkpoint.kind in PAUSE_KINDS and goes_on(checkpoint.kind, checkpoint.decision):
            state = driver.decided(state, checkpoint)
        return state

    def _refuse_unless_decided(self, rid: str) -> None:
        """Fail closed: the run's latest pause must carry a readable decision that lets it go on."""
        last = self.store.checkpoint(rid, Lookup.LAST_PAUSE)
        if last is not None and not goes_on(last.kind, last.decision):
            raise RefusedTransition(
                f"run {rid} waits on checkpoint {last.checkpoint_id}, whose decision {last.decision!r} does not "
                "let it go on (unreadable decisions are never taken as approvals); "
                f"decide it with `relaypoint approve {rid}` or reject it")

    def _hold(self, rid: str, cur: Current, state: dict, at: datetime, ended: list[StepEnd],
              made: list[NewEvent]) -> None:
        """Pause the run for a person to decide about an orphan step (``on_orphan="hold"``), with
        the claim's ``ended`` executions and events ``made``."""
        reason = (f"step '{cur.call.name}' was running (attempt {cur.attempt - 1}) when its process died and its "
                  "output was not recorded; approve to re-run it, or approve with an output to record what it did")
        self.store.commit(Change(
            rid, at, run=RunUpdate(status=RunStatus.AWAITING_APPROVAL, current_step=cur.call.name, lease=None),
            ended=ended, checkpoints=[NewCheckpoint(rid, CheckpointKind.ORPHAN, cur.seq, cur.call.name, at,
                                                    reason=reason, state=state_json(state), paused_seq=cur.seq)],
            events=[*made, events.paused(CheckpointKind.ORPHAN, cur.call.name, reason, None)]))

    def _poisoned(self, head: RunHead, cur: Current | None) -> tuple[Current | None, str] | None:
        """Whether to fail a run whose executor keeps dying: more than ``max_recoveries`` deaths
        charged to it (``runs.suspect_deaths``; see :mod:`relaypoint.recovery`). Returns the
        execution it fails (None: in no step) and why, or None."""
        deaths = head.suspect_deaths
        if self.max_recoveries is None or deaths <= self.max_recoveries:
            return None
        step = cur if cur is not None and cur.status == StepStatus.INTERRUPTED else None
        return step, (f"its executor died {deaths} time{'s' if deaths != 1 else ''} while executing it alone (more than the "
                      f"{self.max_recoveries} recoveries allowed)"
                      + (f" in step '{step.call.name}'{where(step.call)}" if step else ""))

    def _reconcile(self, head: RunHead, wf: Workflow, driver: Driver, allow_drift: bool, at: datetime) -> int:
        """Check the run against the loaded definition (fingerprints first); returns the run's
        completed-step count. Refuses drift with ``DriftError`` unless ``allow_drift``: then the
        chain is rebuilt in the new order, steps kept by name (a pattern's executions with it),
        and a checkpoint records where the run goes on."""
        rid = head.run_id
        if head.fingerprint == wf.fingerprint():
            return head.steps_done
        defined = driver.definition()
        recorded = self.store.run_document(rid, "definition") or []
        if recorded == defined:
            return head.steps_done
        change = describe_drift(recorded, defined)
        if not allow_drift:
            raise DriftError(f"workflow {wf.name!r} changed since run {rid} was recorded ({change}); "
                             "fork the run, or resume with --allow-drift to map completed steps by name")
        latest = self.store.checkpoint(rid, Lookup.LATEST)
        under_way = [s.name for s in self.store.steps(rid) if s.parent is None and s.options.get("pattern")
                     and s.status != StepStatus.COMPLETED and self.store.steps(rid, parent=s.seq)]
        planned = driver.planned()
        # The rebuilt chain is read back before the rest of the drift is written: a change of its own.
        dropped = self.store.commit(Change(
            rid, at, replaced=[NewStep(seq=i, name=s.name, idempotency_key=idempotency_key(rid, Call(s.name)),
                                       options=encoding.dumps_trusted(s.options(), "options"))
                               for i, s in enumerate(planned)],
            run=RunUpdate(definition=encoding.dumps_trusted(defined, "definition"), fingerprint=fingerprint(defined),
                          steps_total=len(planned), touch=False))).dropped
        top = [s for s in self.store.steps(rid) if s.parent is None]
        done = sum(s.status == StepStatus.COMPLETED for s in top)
        # The run goes on at its first top-level step not completed, recorded as a checkpoint, so a
        # resume after a crash restores it from there. When that step is where the latest state
        # went on (a pattern under way), that state is carried over, so the pattern keeps its progress.
        first = next((s for s in top if s.status != StepStatus.COMPLETED), None)
        carried = self._carried(rid, driver, latest, first, [d["name"] for d in recorded])
        withdrawn: list[StepRecord] = []
        if carried is not None:
            state, seq, step = carried
            assert first is not None
            withdrawn = self._withdrawn(rid, driver, state, first.seq)
        else:
            if under_way:  # rolled back with the rest of the claim
                raise DriftError(f"workflow {wf.name!r} changed since run {rid} was recorded ({change}), and the "
                                 f"change would drop or restart pattern '{under_way[0]}', whose recorded executions "
                                 "would run again; fork the run instead")
            seq = first.seq if first is not None else len(top)
            step = first.name if first is not None else None
            state = driver.restore(None, NewCheckpoint(rid, CheckpointKind.BOUNDARY, seq, step, at))
        self.store.commit(Change(
            rid, at, run=RunUpdate(steps_done=done, touch=False), marked={c.seq: StepStatus.CANCELLED for c in withdrawn},
            checkpoints=[NewCheckpoint(rid, CheckpointKind.BOUNDARY, seq, step, at, state=state_json(state))],
            events=[events.drift_allowed(change, dropped, [{"seq": c.seq, "step": c.name, **located(Call.of(c))}
                                                           for c in withdrawn])]))
        return done

    def _withdrawn(self, rid: str, driver: Driver, state: State, group: int) -> list[StepRecord]:
        """After an allowed drift, ``state`` carried over: the completed calls of the pattern under
        way (group row ``group``) that the new definition no longer counts (a round past a lowered
        limit, a removed voter's vote), which the drift cancels, keeping their records and outputs.
        (Its open call is the one the run stopped at, which :meth:`_abandon` cancels if the run does
        not go on with it; a failed call stays failed.)"""
        return [c for c in self.store.steps(rid, parent=group)
                if c.status == StepStatus.COMPLETED and not driver.kept(state, Call.of(c))]

    def _carried(self, rid: str, driver: Driver, latest: Checkpoint | None, first: StepRecord | None,
                 recorded: list[str]) -> tuple[State, int, str | None] | None:
        """After an allowed drift: the state of ``latest`` (the latest checkpoint, read before the
        chain was rebuilt; nodes then named ``recorded``) carried over to the new definition, with
        the seq and step it goes on at, when it went on at ``first`` (the first top-level step not
        completed) or inside it; None otherwise, or when the driver cannot carry it over."""
        moved = self.store.checkpoint(rid, Lookup.LATEST)  # ``latest``, its seq moved with its execution
        if latest is None or first is None or moved is None or moved.seq < 0:
            return None
        row = self.store.step(rid, moved.seq)
        if row is None or first.seq not in (row.seq, row.parent):
            return None
        state = driver.remap(self._restored(driver, latest), recorded)
        return None if state is None else (state, moved.seq, moved.step)
