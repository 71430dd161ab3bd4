"""Forks: a new run from the boundary before one of a run's steps, or before an iteration of one of
its patterns, reusing the outputs upstream.

Upstream executions are copied as stored (never decoded, never re-run). A fork from an iteration
of a pattern copies the pattern's executions before that iteration too, and starts from the driver
state recorded at the boundary that began the iteration, so it goes on mid-pattern. A fork never turns an
unapproved gated output into an approved one: a copied gate the parent approved stays approved (the
decided checkpoint is copied, naming the parent's), and at the first copied gate the parent did not
approve the fork pauses ``awaiting_approval`` before anything downstream runs.
"""

from __future__ import annotations

from typing import Any

from . import encoding, events
from .clock import Clock, IdFactory
from .decisions import step_named
from .errors import InvalidValue, RefusedTransition
from .execution import deadline_of
from .models import Checkpoint, StepRecord
from .recovery import now_of
from .status import CheckpointKind, Decision, RunStatus, StepStatus
from .store import Change, Lookup, NewCheckpoint, NewEvent, NewRun, RunStore, RunUpdate
from .usage import recorded_prices


class Forks:
    """Forks runs of ``store``; new run ids come from ``id_factory``."""

    def __init__(self, store: RunStore, clock: Clock, id_factory: IdFactory) -> None:
        self.store, self.clock, self.id_factory = store, clock, id_factory

    def fork(self, run_id: str, from_step: str, input: dict[str, Any] | None, iteration: int | None = None) -> str:
        """See :meth:`relaypoint.Runtime.fork`."""
        if input is not None and not isinstance(input, dict):
            raise InvalidValue("the fork input must be a JSON object, e.g. '{\"topic\": \"x\"}'")
        input_text = None if input is None else encoding.dumps(input, "input")
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            parent = self.store.run(rid, documents=False)
            step = step_named(self.store, rid, from_step)
            # of the top-level executions the fork reuses, those not completed and the gates
            looked_at = self.store.steps(rid, before=step.seq)
            missing = next((s for s in looked_at if s.status != StepStatus.COMPLETED), None)
            if missing is not None:
                raise RefusedTransition(f"step '{missing.name}' of run {rid} has not completed, so there is no "
                                        f"output to reuse; fork from '{missing.name}' or earlier")
            origin: dict[str, Any] = {"parent_run_id": rid, "from_step": step.name}
            if iteration is None:
                cut, state = step.seq, origin
            else:
                boundary = self._iteration_boundary(rid, step, iteration)
                origin["iteration"] = iteration
                cut, state = boundary.seq, {**boundary.state, "fork": origin}
            new_id = self.id_factory()
            at = now_of(self.clock)
            # The run first, which the copy fills in; the fork's checkpoints and events after the copy's.
            self.store.commit(Change(new_id, at, run=None, new=NewRun(
                run_id=new_id, workflow=parent.workflow, status=RunStatus.QUEUED,
                input=input_text or encoding.dumps(self.store.run_document(rid, "input"), "input"),
                definition=self.store.run_document(rid, "definition", text=True), fingerprint=parent.fingerprint or "",
                created_at=at, steps_total=parent.steps_total, current_step=step.name,
                steps_done=step.seq,  # every top-level execution before it completed (else refused above)
                parent_run_id=rid, forked_from_step=step.name)))
            approved, hold = self._approvals(rid, looked_at)
            made = self.store.copy_for_fork(rid, new_id, step.seq, None if iteration is None else cut,
                                            approvals=[cp.checkpoint_id for _, cp in approved], at=at)
            fork = NewCheckpoint(new_id, CheckpointKind.FORK, cut, step.name, at, state=encoding.dumps(state, "state"))
            inherited = [(s, cp_id, cp) for (s, cp), cp_id in zip(approved, made)]
            self._carry_gates(rid, inherited, hold, fork, input is not None, iteration)
        return new_id

    def _iteration_boundary(self, rid: str, group: StepRecord, iteration: int) -> Checkpoint:
        """The boundary that began ``iteration`` of pattern ``group``: its checkpoint, whose ``seq``
        is the iteration's first execution and ``state`` the driver state there. Refuses (one line)
        a step that is not a pattern, an iteration it has not begun, an execution before it that
        neither completed nor failed (a failure the pattern went on from is copied as recorded),
        and a boundary with no recorded state."""
        where = f"'{group.name}' of run {rid}"
        if "pattern" not in group.options:
            raise RefusedTransition(f"step {where} is not a pattern, so it has no iterations; "
                                    f"fork from it without an iteration")
        children = self.store.steps(rid, parent=group.seq)
        first = next((c for c in children if c.iteration == iteration), None)
        if first is None:
            began = sorted({c.iteration for c in children})
            raise RefusedTransition(f"pattern {where} has no iteration {iteration}; " + (
                f"its iterations are {', '.join(map(str, began))}" if began else "it has not begun any"))
        for c in children:
            if c.seq >= first.seq:
                break
            if c.status not in (StepStatus.COMPLETED, StepStatus.FAILED):
                raise RefusedTransition(
                    f"execution {c.seq} of pattern {where} (iteration {c.iteration}"
                    f"{f', agent {c.agent!r}' if c.agent else ''}) is {c.status}, so there is no output to reuse; "
                    f"fork from iteration {c.iteration} or earlier")
        boundary = self.store.checkpoint(rid, Lookup.STATE_AT, first.seq)
        if boundary is None or not isinstance(boundary.state, dict):
            raise RefusedTransition(f"run {rid} recorded no driver state where iteration {iteration} of '{group.name}' "
                                    "began (its earlier iterations were copied from another run); fork that run")
        return boundary

    def _approvals(self, parent: str, gates: list[StepRecord]) -> tuple[list[tuple[StepRecord, Checkpoint]],
                                                                         tuple[StepRecord, str] | None]:
        """The parent's approvals a fork inherits: each copied gate with its approval checkpoint, up
        to the first gate the parent did not approve, and that gate with why (None when every one
        was approved)."""
        approved: list[tuple[StepRecord, Checkpoint]] = []
        for s in gates:
            cp = self.store.checkpoint(parent, Lookup.APPROVAL, s.seq)
            if cp is None or cp.decision != Decision.APPROVED:
                return approved, (s, "not yet decided" if cp is None or cp.decision is None
                                  else f"{cp.decision} by {cp.decided_by}")
            approved.append((s, cp))
        return approved, None

    def _carry_gates(self, parent: str, inherited: list[tuple[StepRecord, int, Checkpoint]],
                     hold: tuple[StepRecord, str] | None, fork: NewCheckpoint, input_replaced: bool,
                     iteration: int | None) -> None:
        """Record the fork (its checkpoint ``fork`` and events), naming the approvals it inherited
        (each gate, its new checkpoint's id, the parent's checkpoint); pause the fork at ``hold``,
        the first gate the parent did not approve. The fork's checkpoint comes after the inherited
        ones: a resume goes on from the latest checkpoint."""
        child, from_step, at = fork.run_id, fork.step, fork.at
        checkpoints = [fork]
        made: list[NewEvent] = [events.forked(from_step, parent, input_replaced, iteration,
                                                     recorded_prices(self.store.events(parent)))]
        made += [events.approval_inherited(s.name, cp_id, parent, cp.checkpoint_id, cp.decided_by)
                 for s, cp_id, cp in inherited]
        run = None
        if hold is not None:
            s, why = hold
            reason = f"approve the output of step '{s.name}', copied from run {parent}, where its approval was {why}"
            deadline = deadline_of(self.clock, s.options.get("timeout"))
            checkpoints.append(NewCheckpoint(child, CheckpointKind.APPROVAL, s.seq + 1, s.name, at, reason=reason,
                                             deadline_at=deadline, paused_seq=s.seq))
            run = RunUpdate(status=RunStatus.AWAITING_APPROVAL, current_step=s.name, lease=None)
            made.append(events.paused(CheckpointKind.APPROVAL, s.name, reason, deadline))
        self.store.commit(Change(child, at, run=run, checkpoints=checkpoints, events=made))
