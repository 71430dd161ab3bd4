"""Forks: a new run from the boundary before one of a run's steps, reusing the outputs upstream.

Upstream executions are copied as stored (never decoded, never re-run). A fork never turns an
unapproved gated output into an approved one: a copied gate the parent approved stays approved (the
decided checkpoint is copied, naming the parent's), and at the first copied gate the parent did not
approve the fork pauses ``awaiting_approval`` before anything downstream runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import encoding
from .clock import Clock, IdFactory, to_text
from .decisions import step_named
from .errors import InvalidValue, RefusedTransition
from .execution import deadline_of
from .models import StepRecord
from .recovery import now_of
from .status import CheckpointKind, Decision, EventKind, RunStatus
from .store import NewCheckpoint, NewRun, RunStore


class Forks:
    """Forks runs of ``store``; new run ids come from ``id_factory``."""

    def __init__(self, store: RunStore, clock: Clock, id_factory: IdFactory) -> None:
        self.store, self.clock, self.id_factory = store, clock, id_factory

    def fork(self, run_id: str, from_step: str, input: dict[str, Any] | None) -> str:
        """See :meth:`relaypoint.Runtime.fork`."""
        if input is not None and not isinstance(input, dict):
            raise InvalidValue("the fork input must be a JSON object, e.g. '{\"topic\": \"x\"}'")
        input_text = None if input is None else encoding.dumps(input, "input")
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            parent = self.store.head(rid)
            step = step_named(self.store, rid, from_step)
            missing = self.store.open_before(rid, step.seq)
            if missing is not None:
                raise RefusedTransition(f"step '{missing.name}' of run {rid} has not completed, so there is no "
                                        f"output to reuse; fork from '{missing.name}' or earlier")
            new_id = self.id_factory()
            at = now_of(self.clock)
            self.store.insert_run(NewRun(
                run_id=new_id, workflow=parent.workflow, status=RunStatus.QUEUED,
                input=input_text or encoding.dumps(self.store.run_input(rid), "input"),
                definition=self.store.definition_text(rid), fingerprint=parent.fingerprint or "",
                created_at=at, steps_total=parent.steps_total, current_step=step.name, steps_done=step.seq,
                parent_run_id=rid, forked_from_step=step.name))
            self.store.copy_for_fork(rid, new_id, step.seq)
            self._carry_gates(rid, new_id, self.store.gates_before(rid, step.seq), step.seq, step.name, at,
                              input is not None)
        return new_id

    def _carry_gates(self, parent: str, child: str, gates: list[StepRecord], cut: int, from_step: str,
                     at: datetime, input_replaced: bool) -> None:
        """Inherit the parent's approvals of the copied gates and record the fork; pause the fork
        at the first gate the parent did not approve. The fork's checkpoint comes after the
        inherited ones: a resume goes on from the latest checkpoint."""
        inherited: list[tuple[StepRecord, int, Any]] = []
        hold: tuple[StepRecord, str] | None = None
        for s in gates:
            cp = self.store.latest_approval(parent, s.name)
            if cp is not None and cp.decision == Decision.APPROVED:
                inherited.append((s, self.store.inherit_approval(cp.checkpoint_id, child, at), cp))
                continue
            hold = (s, "not yet decided" if cp is None or cp.decision is None else f"{cp.decision} by {cp.decided_by}")
            break
        origin = encoding.dumps({"parent_run_id": parent, "from_step": from_step})
        self.store.add_checkpoint(NewCheckpoint(child, CheckpointKind.FORK, cut, from_step, at, state=origin))
        self.store.add_event(child, at, EventKind.FORKED, step=from_step, parent_run_id=parent,
                             input_replaced=input_replaced)
        for s, cp_id, cp in inherited:
            self.store.add_event(child, at, EventKind.APPROVAL_INHERITED, step=s.name, checkpoint_id=cp_id,
                                 parent_run_id=parent, parent_checkpoint_id=cp.checkpoint_id, decided_by=cp.decided_by)
        if hold is None:
            return
        s, why = hold
        reason = f"approve the output of step '{s.name}', copied from run {parent}, where its approval was {why}"
        deadline = deadline_of(self.clock, s.options.get("timeout"))
        cp_id = self.store.add_checkpoint(NewCheckpoint(child, CheckpointKind.APPROVAL, s.seq + 1, s.name, at,
                                                        reason=reason, deadline_at=deadline))
        self.store.update_run(child, status=RunStatus.AWAITING_APPROVAL, updated_at=at, current_step=s.name, lease=None)
        self.store.add_event(child, at, EventKind.PAUSED, step=s.name, checkpoint_id=cp_id,
                             gate=CheckpointKind.APPROVAL, reason=reason,
                             deadline_at=None if deadline is None else to_text(deadline))
