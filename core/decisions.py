"""Decisions on runs: approve, reject, respond, cancel, and the expiry of pause deadlines.

Each checks the run under the write lock and writes one change deciding its open checkpoint
exactly once (a change's decision writes only an undecided checkpoint). None needs the workflows:
an edited output of a typed step is checked against the JSON Schema its execution recorded, or,
when its workflow is loaded with the same model, by the model itself (:mod:`relaypoint.typed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import encoding, events
from .clock import Clock, to_text
from .drivers import Call
from .errors import InvalidValue, RefusedTransition, UnknownStep, quoted
from .models import Checkpoint, StepRecord
from .recovery import Recovery, now_of
from .refusals import cancel_refusal, decision_refusal
from .status import APPROVAL_KINDS, INPUT_KINDS, CheckpointKind, Decision, RunStatus, StepStatus
from .store import Change, ClosePauses, Decide, Lookup, RunStore, RunUpdate, StepEnd, Superseded
from .typed import check_edit

if TYPE_CHECKING:
    from .workflow import Workflow


def step_named(store: RunStore, rid: str, name: str | None) -> StepRecord:
    """The run's top-level step ``name``; ``UnknownStep`` listing its steps otherwise."""
    found = store.step(rid, name=name) if name is not None else None
    if found is None:
        names = ", ".join(s.name for s in store.steps(rid) if s.parent is None) or "none"
        raise UnknownStep(f"run {rid} has no step {quoted(name)}; its steps are: {names}")
    return found


def said(text: str | None) -> str | None:
    """Free text a person gives with a decision (who decides, a comment) as it is recorded: a lone
    surrogate (bytes that are not UTF-8 on a command line) as its escape, which any store can hold."""
    return None if text is None else encoding.readable(text)


class Decisions:
    """Decisions on the runs of ``store``; ``recovery`` sweeps dead owners before a cancel;
    ``workflows``: the loaded definitions by name, whose output models check edited outputs."""

    def __init__(self, store: RunStore, clock: Clock, recovery: Recovery,
                 workflows: Mapping[str, Workflow] | None = None) -> None:
        self.store, self.clock, self.recovery = store, clock, recovery
        self.workflows = workflows or {}

    def _pending(self, rid: str, kinds: tuple[str, ...], verb: str, checkpoint_id: int | None) -> Checkpoint:
        cp = self.store.checkpoint(rid, Lookup.PENDING)
        # The open checkpoint decides, not the status column: a pause whose decision cannot be read
        # is open again (fail closed) and can be decided, whatever status a hand edit left.
        refusal = decision_refusal(self.store.run(rid, documents=False), cp, kinds, verb)
        if refusal is not None:
            last = self.store.checkpoint(rid, Lookup.LAST_PAUSE)
            decided = (f" (its last pause was already decided: {last.decision} by {last.decided_by})"
                       if last is not None and last.decision else "")
            raise RefusedTransition(refusal + decided)
        assert cp is not None
        if checkpoint_id is not None and cp.checkpoint_id != checkpoint_id:
            if all(c.checkpoint_id != checkpoint_id for c in self.store.checkpoints(rid)):
                raise RefusedTransition(f"checkpoint {checkpoint_id} is not one of run {rid}'s; it waits on "
                                        f"checkpoint {cp.checkpoint_id} (step '{cp.step}')")
            raise RefusedTransition(f"run {rid} moved on since checkpoint {checkpoint_id}: it now waits on "
                                    f"checkpoint {cp.checkpoint_id} (step '{cp.step}'); review it again")
        if cp.deadline_at is not None and cp.deadline_at <= self.clock():
            raise RefusedTransition(f"the deadline of checkpoint {cp.checkpoint_id} of run {rid} passed at "
                                    f"{to_text(cp.deadline_at)}; it can no longer be decided")
        return cp

    def approve(self, run_id: str, by: str, comment: str | None, output: Any,
                checkpoint_id: int | None) -> Checkpoint:
        """See :meth:`relaypoint.Runtime.approve`."""
        value = None if output is None else encoding.dumps(output, "output")
        by, comment = said(by), said(comment)
        self.expire_deadlines()  # a pause past its deadline is expired, never decided
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            cp = self._pending(rid, APPROVAL_KINDS, "approve", checkpoint_id)
            own = self._paused_execution(rid, cp)
            at = now_of(self.clock)
            head = self.store.run(rid, documents=False)
            if value is not None and own.status != StepStatus.AWAITING_APPROVAL:  # it becomes the step's output
                value = self._fitting(head.workflow, own, output)
            ended, marked, outputs = [], {}, {}
            if cp.kind == CheckpointKind.APPROVAL and own.status != StepStatus.AWAITING_APPROVAL:
                # a gate: the output of the gated execution, approved (or edited); the run goes on after it
                if value is not None:
                    outputs[own.seq] = value
                run = RunUpdate(status=RunStatus.QUEUED, steps_done=head.steps_done,
                                current_step=self._next_open(rid, cp.seq))
            elif cp.kind == CheckpointKind.ORPHAN and value is not None:  # record what the orphan did
                ended.append(StepEnd(own.seq, StepStatus.COMPLETED))
                outputs[own.seq] = value
                run = RunUpdate(status=RunStatus.QUEUED) if own.parent is not None else RunUpdate(
                    status=RunStatus.QUEUED, steps_done=head.steps_done + 1,
                    current_step=self._next_open(rid, own.seq + 1))
            else:  # re-run it: an orphan, or a person's turn (their decision stays in the checkpoint)
                marked[own.seq] = StepStatus.PENDING
                run = RunUpdate(status=RunStatus.QUEUED) if own.parent is not None else RunUpdate(
                    status=RunStatus.QUEUED, current_step=own.name)
            self._commit(Change(rid, at, decided=Decide(cp.checkpoint_id, Decision.APPROVED, by, comment, value),
                                run=run, ended=ended, marked=marked, outputs=outputs,
                                events=[events.approved(cp.step, by, cp.checkpoint_id, comment, value is not None)]))
        return cp.model_copy(update={"decision": Decision.APPROVED.value, "decided_by": by, "decided_at": at,
                                     "comment": comment, "value": output})

    def _fitting(self, workflow: str, own: StepRecord, output: Any) -> str:
        """``output``, to be recorded as execution ``own``'s output, as JSON text once it fits the
        model the execution recorded (if any: an untyped one takes any JSON value). Raises
        ``InvalidValue`` naming the first field that does not fit."""
        entry = own.options.get("output")
        if entry is None:
            return encoding.dumps(output, "output")
        wf = self.workflows.get(workflow)
        model = wf.driver().model(Call.of(own)) if wf is not None else None
        fitting = check_edit(entry if isinstance(entry, dict) else {}, output, model,
                             f"the edited output of step '{own.name}'")
        return encoding.dumps(fitting, "output")

    def _paused_execution(self, rid: str, cp: Checkpoint) -> StepRecord:
        """The execution pause ``cp`` is about (its ``paused_seq``): a gated step, a held orphan, a
        person's turn, a step asking for input. Raises ``UnknownStep`` when the run no longer has it
        (an allowed drift removed it)."""
        row = self.store.step(rid, cp.paused_seq) if cp.paused_seq is not None else None
        if row is None:
            raise UnknownStep(f"run {rid} no longer has the execution of step '{cp.step}' that checkpoint "
                              f"{cp.checkpoint_id} is about; fork the run from an earlier step, or delete it")
        return row

    def _next_open(self, rid: str, seq: int) -> str | None:
        """The name of the first execution from ``seq`` on that has not completed (a fork's copied
        steps have), or None."""
        after = self.store.step(rid, seq)
        while after is not None and after.status == StepStatus.COMPLETED:
            after = self.store.step(rid, after.seq + 1)
        return after.name if after is not None else None

    def reject(self, run_id: str, comment: str, by: str, checkpoint_id: int | None) -> Checkpoint:
        """See :meth:`relaypoint.Runtime.reject`."""
        if not comment or not comment.strip():
            raise InvalidValue("a rejection needs a reason: a comment that is not blank")
        by, comment = said(by), said(comment)
        self.expire_deadlines()
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            cp = self._pending(rid, APPROVAL_KINDS, "reject", checkpoint_id)
            at = now_of(self.clock)
            self._commit(Change(rid, at, decided=Decide(cp.checkpoint_id, Decision.REJECTED, by, comment),
                                cancel_open=True, run=RunUpdate(status=RunStatus.REJECTED, current_step=None),
                                events=[events.rejected(cp.step, by, cp.checkpoint_id, comment)]))
        return cp.model_copy(update={"decision": Decision.REJECTED.value, "decided_by": by, "decided_at": at,
                                     "comment": comment})

    def respond(self, run_id: str, value: Any, by: str, checkpoint_id: int | None) -> Checkpoint:
        """See :meth:`relaypoint.Runtime.respond`."""
        text = encoding.dumps(value, "value")
        by = said(by)
        self.expire_deadlines()
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            cp = self._pending(rid, INPUT_KINDS, "respond to", checkpoint_id)
            at = now_of(self.clock)
            asking = self._paused_execution(rid, cp)
            # Answered: the step no longer waits; it re-runs from its top when the run is resumed.
            self._commit(Change(rid, at, decided=Decide(cp.checkpoint_id, Decision.RESPONDED, by, value_json=text),
                                marked={asking.seq: StepStatus.PENDING}, run=RunUpdate(status=RunStatus.QUEUED),
                                events=[events.responded(cp.step, by, cp.checkpoint_id)]))
        return cp.model_copy(update={"decision": Decision.RESPONDED.value, "decided_by": by, "decided_at": at,
                                     "value": value})

    def cancel(self, run_id: str, by: str) -> RunStatus:
        """See :meth:`relaypoint.Runtime.cancel`."""
        by = said(by)
        self.recovery.sweep()  # a run whose owner died is reported as interrupted, not running
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            head = self.store.run(rid, documents=False)
            if (refusal := cancel_refusal(head)) is not None:
                raise RefusedTransition(refusal)
            self.store.commit(Change(rid, now_of(self.clock), cancel_open=True, closed=ClosePauses(Decision.CANCELLED, by),
                                     run=RunUpdate(status=RunStatus.CANCELLED, current_step=None, lease=None),
                                     events=[events.cancelled(by, head.status)]))
        return head.status

    def expire_deadlines(self) -> list[str]:
        """See :meth:`relaypoint.Runtime.expire_deadlines`."""
        now = now_of(self.clock)
        expired = []
        for cp in self.store.checkpoints(due=now):
            gate = "input" if cp.kind == CheckpointKind.INPUT else "approval"
            reason = f"the {gate} deadline ({to_text(cp.deadline_at)}) passed"
            try:
                self.store.commit(Change(
                    cp.run_id, now, decided=Decide(cp.checkpoint_id, Decision.EXPIRED, "deadline", reason),
                    cancel_open=True, run=RunUpdate(status=RunStatus.REJECTED, current_step=None, error=reason),
                    events=[events.deadline_expired(cp.step, cp.checkpoint_id, reason)]))
            except Superseded:  # decided meanwhile
                continue
            expired.append(cp.run_id)
        return expired

    def _commit(self, change: Change) -> None:
        """Commit a decision (inside the transaction that checked it)."""
        try:
            self.store.commit(change)
        except Superseded:
            # unreachable under the write transaction; kept as the last guard of exactly-once
            raise RefusedTransition(f"checkpoint {change.decided.checkpoint_id} was already decided") from None
