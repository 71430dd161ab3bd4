"""The runtime: every operation on runs (start, resume, approve, reject, respond, fork, cancel, and
the queries), shared by the Python API, the CLI and the console.

Rules live here, not in the front ends. Each transition is one store transaction; each step boundary
(finished step's output, next step's start, checkpoint row, events) commits together.
"""

from __future__ import annotations

import functools
import getpass
import os
import sqlite3
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from . import encoding
from .clock import Clock, IdFactory, from_text, new_run_id, to_text, utcnow
from .errors import (DefinitionError, DriftError, InvalidValue, RefusedTransition,
                     UnknownStep, UnknownWorkflow)
from .executor import CLEAR_LEASE, Executor
from .lease import HOST, owner_gone, parse_expiry
from .models import Checkpoint, Event, Run, RunSummary, StepRecord
from .refusals import APPROVAL_KINDS, INPUT_KINDS, cancel_refusal, decision_refusal, resume_refusal
from .status import OPEN_STEPS, TERMINAL, RunStatus, StepStatus
from .store import PAUSE_KINDS, UNDECIDED, Store, readable, summary_from_row
from .workflow import Workflow, describe_drift, find_workflow

LEASE_SECONDS = 30.0


def os_user() -> str:
    """The operating-system user name, the default ``by`` of a decision."""
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (containers): record the uid
        return f"uid:{os.getuid()}"


def _store_errors(method: Callable) -> Callable:
    """Raise SQLite's own errors (a damaged file, a lock held too long) as one-line ``StoreError``."""

    @functools.wraps(method)
    def wrapper(self: Runtime, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            raise self.store.translate(e) from None

    return wrapper


class Runtime(Executor):
    """Operations on the runs of one store.

    ``path``: the SQLite file (created, owner-only, if missing and ``create`` is true).
    ``workflows``: definitions needed by ``start`` and ``resume``; decisions, forks, cancels and
    queries need none. ``clock``/``id_factory``: injectable for stable tests. ``lease_seconds``:
    how long an executor's lease lasts without a heartbeat (renewed every third of it).
    ``max_recoveries``: see :meth:`resume` (None: no limit).

    Raises ``StoreError`` when the file cannot be used, ``DefinitionError`` for two workflows with one name.
    """

    def __init__(self, path: str, workflows: Iterable[Workflow] = (), *, clock: Clock = utcnow,
                 id_factory: IdFactory = new_run_id, lease_seconds: float = LEASE_SECONDS,
                 create: bool = True, readonly: bool = False, max_recoveries: int | None = None) -> None:
        self.store = Store(path, create=create, readonly=readonly)
        self.clock = clock
        self.id_factory = id_factory
        self.lease_seconds = lease_seconds
        self.max_recoveries = max_recoveries
        self.workflows: dict[str, Workflow] = {}
        for wf in workflows:
            if wf.name in self.workflows:
                raise DefinitionError(f"two workflows are named {wf.name!r}")
            self.workflows[wf.name] = wf

    def close(self) -> None:
        """Close the store connection."""
        self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _now(self) -> str:
        return to_text(self.clock())

    # ---- queries --------------------------------------------------------------------------------

    @_store_errors
    def get(self, run_id: str, *, with_outputs: bool = True) -> Run:
        """The run (full id or unique prefix) with its input, step chain (with outputs unless
        ``with_outputs=False``: the console reads one at a time with :meth:`step_output`), pending
        checkpoint, forks, and whether its parent was deleted. Raises ``UnknownRun``."""
        self.sweep()
        rid = self.store.resolve(run_id)
        row = self.store.run_row(rid)
        summary = summary_from_row(row)
        parent = summary.parent_run_id
        return Run(
            **dict(summary), input=readable(row["input"], dict) or {},
            tasks=self.store.steps(rid, with_output=with_outputs), pending=self.store.pending_checkpoint(rid),
            forks=self.store.forks(rid), definition=readable(row["definition"]),
            parent_deleted=parent is not None and not self.store.exists(parent),
        )

    @_store_errors
    def counts(self) -> dict[str, int]:
        """Number of runs per status (the console's status line), kept by the store's triggers:
        a few rows read, whatever the number of runs."""
        return self.store.count_by_status()

    @_store_errors
    def data_version(self) -> tuple[int, int]:
        """A value that changes whenever anything is committed on the store, by this runtime or by
        any other connection or process (see :meth:`Store.data_version`); comparable only between
        calls on this same runtime. The console skips a refresh when it has not changed."""
        return self.store.data_version()

    @property
    def readonly_reason(self) -> str | None:
        """Why nothing can be recorded in this store, or None when it is writable."""
        return self.store.readonly_reason if self.store.readonly else None

    @_store_errors
    def list(self, status: str | None = None, workflow: str | None = None, limit: int = 100, *,
             before: tuple[str, str] | None = None, after: tuple[str, str] | None = None,
             within: tuple[tuple[str, str], tuple[str, str]] | None = None, oldest_first: bool = False,
             search: str | None = None) -> list[RunSummary]:
        """Newest-first runs (``oldest_first``: oldest first), at most ``limit``. Positions are
        (created_at text, run_id): ``before``/``after`` continue past a page's last row, ``within``
        keeps the runs between two positions (newest, oldest; both included); ``search`` is a run
        id or workflow name prefix (see :meth:`Store.list_runs`). Never reads step outputs."""
        if status is not None:
            RunStatus(status)  # ValueError for a word outside the vocabulary
        self.sweep()
        return self.store.list_runs(status=status, workflow=workflow, limit=limit, before=before, after=after,
                                    within=within, oldest_first=oldest_first, search=search)

    @_store_errors
    def events(self, run_id: str) -> list[Event]:
        """The run's audit trail, oldest first. Raises ``UnknownRun``."""
        return self.store.events(self.store.resolve(run_id))

    @_store_errors
    def steps(self, run_id: str) -> list[StepRecord]:
        """The run's chain without outputs (cheap; see :meth:`step_output`). Raises ``UnknownRun``."""
        return self.store.steps(self.store.resolve(run_id), with_output=False)

    @_store_errors
    def step_output(self, run_id: str, step: str) -> Any:
        """One step's output. Raises ``UnknownRun`` or ``UnknownStep``."""
        rid = self.store.resolve(run_id)
        return self.store.step_output(rid, self._step(rid, step).position)

    @_store_errors
    def sweep(self) -> list[str]:
        """Mark ``interrupted`` every running run whose owner is gone (see
        :func:`relaypoint.lease.owner_gone`: on this host a dead or reused pid, never a live process
        however late its heartbeat; on another host an expired lease). Each dead owner process is
        handled once, all its runs in one transaction (see :meth:`_interrupt_owner`). Returns the
        ids marked. Does nothing on a read-only store."""
        if self.store.readonly:
            return []
        now = self.clock()
        rows = self.store.conn.execute(
            "SELECT lease_host, lease_pid, lease_pid_start, lease_expires_at FROM runs WHERE status = ?",
            (RunStatus.RUNNING,)).fetchall()
        gone = {(host, pid, start) for host, pid, start, expires in rows
                if owner_gone(host, pid, start, parse_expiry(expires), now)}
        marked = []
        for host, pid, start in gone:
            with self.store.transaction():
                marked += self._interrupt_owner(host, pid, start)
        return marked

    def _interrupt_owner(self, host: str | None, pid: int | None, pid_start: str | None) -> list[str]:
        """Inside a transaction: mark ``interrupted`` every run the gone owner process (host, pid,
        start identity) was executing, and return their ids. Checked again under the write lock, so
        a run claimed meanwhile, or an owner that renewed its lease, is left alone.

        Each ``interruption_detected`` event records how many runs the process was executing
        (``co_executing``) and whether the death is charged to the run (``suspect``): only when it
        was the only one, since a death while several ran could have been caused by any of them (see
        :meth:`_poisoned`)."""
        rows = self.store.conn.execute(
            "SELECT run_id, lease_token, lease_expires_at FROM runs WHERE status = ? AND lease_host IS ? "
            "AND lease_pid IS ? AND lease_pid_start IS ?", (RunStatus.RUNNING, host, pid, pid_start)).fetchall()
        now = self.clock()
        if not any(owner_gone(host, pid, pid_start, parse_expiry(expires), now) for _, _, expires in rows):
            return []
        return [rid for rid, token, _ in rows
                if self._mark_interrupted(rid, token, pid, host, co_executing=len(rows))]

    def _mark_interrupted(self, run_id: str, token: str | None, pid: int | None, host: str | None, *,
                          co_executing: int | None) -> bool:
        """Inside a transaction: mark the run and its running step ``interrupted`` if ``token`` still
        owns it (False otherwise). ``co_executing``: how many runs the dead owner process was
        executing, or None when the owner released the run itself (Ctrl-C, a store failure), which is
        not a death and never charged."""
        at = self._now()
        if not self.store.update_run(run_id, fence=token, status=RunStatus.INTERRUPTED, updated_at=at,
                                     **CLEAR_LEASE):
            return False
        cause = {"cause": "released by its owner", "suspect": False} if co_executing is None else {
            "cause": "owner died", "co_executing": co_executing, "suspect": co_executing == 1}
        for s in self.store.steps(run_id, with_output=False):
            if s.status == StepStatus.RUNNING:
                self.store.update_step(run_id, s.position, status=StepStatus.INTERRUPTED)
                self.store.add_event(run_id, at, "interruption_detected", step=s.name, pid=pid, host=host,
                                     attempt=s.attempts, **cause)
        return True

    # ---- starting and resuming ------------------------------------------------------------------

    @_store_errors
    def start(self, workflow: str, input: dict[str, Any] | None = None, *,
              on_created: Callable[[str], None] | None = None) -> str:
        """Create a run of ``workflow`` and execute it in this process until it completes, pauses or
        fails. Returns the run id (check ``get(run_id).status``). ``on_created`` is called with the
        id once the run is recorded, before its first step runs.

        Raises ``UnknownWorkflow``, ``InvalidValue`` (input not a JSON object), ``LeaseLost``.
        """
        wf = find_workflow(self.workflows, workflow)
        input = {} if input is None else input
        if not isinstance(input, dict):
            raise InvalidValue("the run input must be a JSON object, e.g. '{\"topic\": \"x\"}'")
        input_text = encoding.dumps(input, "input")
        run_id = self.id_factory()
        lease = self._lease(run_id)
        at = self._now()
        first = wf.steps[0].name if wf.steps else None
        with self.store.transaction():
            self.store.db["runs"].insert({
                "run_id": run_id, "workflow": wf.name, "status": RunStatus.RUNNING, "input": input_text,
                "definition": encoding.dumps(wf.definition()), "fingerprint": wf.fingerprint(),
                "created_at": at, "updated_at": at, "current_step": first, "steps_done": 0,
                "steps_total": len(wf.steps), **lease.columns(),
            })
            self.store.db["steps"].insert_all({
                "run_id": run_id, "position": i, "name": s.name, "status": StepStatus.PENDING, "attempts": 0,
                "options": encoding.dumps(s.options()), "idempotency_key": f"{run_id}/{s.name}",
            } for i, s in enumerate(wf.steps))
            self.store.add_checkpoint(run_id, at, "start", 0, first)
            self.store.add_event(run_id, at, "run_started", workflow=wf.name, pid=lease.pid, host=HOST)
            if first is not None:
                self._begin_step(run_id, 0, first, 1, at)
        if on_created is not None:
            on_created(run_id)
        self._drive(run_id, wf, lease)
        return run_id

    @_store_errors
    def check_resumable(self, run_id: str) -> Run:
        """The run, if ``resume`` would act on it; otherwise ``RefusedTransition`` saying why and what
        to do instead. Used by the console before it starts a resume process."""
        run = self.get(run_id)
        self._refuse_unless_resumable(summary=run)
        return run

    def _refuse_unless_resumable(self, summary: RunSummary) -> None:
        if (refusal := resume_refusal(summary)) is not None:
            raise RefusedTransition(refusal)

    def _refuse_unless_decided(self, rid: str) -> None:
        """Fail closed: the run's latest pause must carry a readable decision that lets it go on."""
        last = self.store.conn.execute(
            f"SELECT checkpoint_id, kind, decision FROM checkpoints WHERE run_id = ? AND kind IN {PAUSE_KINDS!r} "
            "ORDER BY checkpoint_id DESC LIMIT 1", (rid,)).fetchone()
        if last is None:
            return
        cp_id, kind, decision = last
        if decision != ("responded" if kind == "input" else "approved"):
            raise RefusedTransition(f"run {rid} waits on checkpoint {cp_id}, whose decision {decision!r} does not "
                                    "let it go on (unreadable decisions are never taken as approvals); "
                                    f"decide it with `relaypoint approve {rid}` or reject it")

    @_store_errors
    def resume(self, run_id: str, *, allow_drift: bool = False,
               should_stop: Callable[[], bool | str] | None = None) -> RunStatus:
        """Continue a queued, interrupted or failed run at its first non-completed step, in this
        process, until it completes, pauses or fails; returns the status it ends in.

        A step found interrupted (running when its owner died: its output was never recorded) is
        re-run with attempt + 1 (``on_orphan="retry"``), or with ``on_orphan="hold"`` the run pauses
        ``awaiting_approval`` for a person to approve a re-run or record the output.

        ``allow_drift``: resume even though the workflow's definition changed, mapping completed steps
        by name. ``should_stop``: checked at each boundary; when it returns something true the
        finished step is recorded and the run is released ``queued`` for another executor (a worker's
        graceful stop), with the returned text, if any, as the reason in the ``released`` event.
        With ``max_recoveries`` set, an interrupted run whose executor has died more than that many
        times while executing it alone is marked ``failed`` instead (a poison-pill guard; see
        :meth:`_poisoned`).

        Raises ``UnknownRun``, ``RefusedTransition`` (paused, terminal, or owned by a live process,
        however long its step holds it — exactly one of several concurrent resumers executes),
        ``UnknownWorkflow``, ``DriftError``, ``LeaseLost``.
        """
        self.sweep()
        rid = self.store.resolve(run_id)
        lease = self._lease(rid)
        with self.store.transaction():
            row = self.store.run_row(rid)
            summary = summary_from_row(row)
            owner = summary.lease
            if summary.status == RunStatus.RUNNING and owner and owner_gone(
                    owner.host, owner.pid, owner.pid_start, owner.expires_at, self.clock()):
                self._interrupt_owner(row["lease_host"], row["lease_pid"], row["lease_pid_start"])
                summary = summary_from_row(self.store.run_row(rid))
            self._refuse_unless_resumable(summary)
            self._refuse_unless_decided(rid)
            wf = self._workflow_of(summary.workflow)
            at = self._now()
            steps = self._reconcile_definition(rid, row, wf, allow_drift, at)
            if summary.status == RunStatus.INTERRUPTED and self._poisoned(rid, steps, at):
                return RunStatus.FAILED
            self._check_readable(rid, steps)
            nxt = next((s for s in steps if s.status != StepStatus.COMPLETED), None)
            if nxt is not None and nxt.status == StepStatus.INTERRUPTED and wf.get(nxt.name).on_orphan == "hold":
                self._pause(rid, None, "orphan", nxt.position, nxt.name, at, reason=(
                    f"step '{nxt.name}' was running (attempt {nxt.attempts}) when its process died and its "
                    "output was not recorded; approve to re-run it, or approve with an output to record "
                    "what it did"), timeout=None)
                return RunStatus.AWAITING_APPROVAL
            self.store.update_run(rid, status=RunStatus.RUNNING, updated_at=at,
                                  current_step=nxt.name if nxt else None, error=None, **lease.columns())
            self.store.add_event(rid, at, "resumed", pid=lease.pid, host=HOST, previous_status=summary.status)
            if nxt is not None:
                self._begin_step(rid, nxt.position, nxt.name, nxt.attempts + 1, at)
        return self._drive(rid, wf, lease, should_stop)

    def _check_readable(self, rid: str, steps: list[StepRecord]) -> None:
        """Fail closed before claiming: what the next step will consume must decode
        (``StoreError`` otherwise, with nothing changed)."""
        row = self.store.run_row(rid)
        self.store.strict(row["input"], f"the input of run {rid}")
        nxt = next((s for s in steps if s.status != StepStatus.COMPLETED), None)
        if nxt is not None:
            self.store.completed_outputs(rid, nxt.position)
            self.store.responses(rid, nxt.name)

    def _poisoned(self, rid: str, steps: list[StepRecord], at: str) -> bool:
        """Fail a run whose executor keeps dying: more than ``max_recoveries`` deaths charged to it.

        A death is charged to a run (``suspect`` in its ``interruption_detected`` event) only when
        the run was the only one its process was executing: a healthy run interrupted because
        another run killed their shared worker is not a suspect. The worker recovers an interrupted
        run alone (see :class:`relaypoint.worker.Worker`), so a run that keeps killing its process
        is charged there."""
        if self.max_recoveries is None:
            return False
        deaths = self.store.conn.execute(
            "SELECT count(*) FROM events WHERE run_id = ? AND kind = 'interruption_detected' "
            "AND CASE WHEN json_valid(detail) THEN json_extract(detail, '$.suspect') END = 1", (rid,)).fetchone()[0]
        if deaths <= self.max_recoveries:
            return False
        step = next((s for s in steps if s.status == StepStatus.INTERRUPTED), None)
        reason = (f"its executor died {deaths} times while executing it alone (more than the "
                  f"{self.max_recoveries} recoveries allowed)" + (f" in step '{step.name}'" if step else ""))
        if step is not None:
            self.store.update_step(rid, step.position, status=StepStatus.FAILED, error=reason, finished_at=at)
        self.store.update_run(rid, status=RunStatus.FAILED, updated_at=at, error=reason)
        self.store.add_event(rid, at, "run_failed", step=step.name if step else None, error=reason,
                             poison_pill=True)
        return True

    def _reconcile_definition(self, rid: str, row: dict[str, Any], wf: Workflow, allow_drift: bool,
                              at: str) -> list[StepRecord]:
        """The run's chain, checked against the loaded definition. Refuses drift with ``DriftError``
        unless ``allow_drift``: then the chain is rebuilt in the new order, steps kept by name."""
        steps = self.store.steps(rid, with_output=False)
        recorded = self.store.strict(row["definition"], f"the definition of run {rid}") or []
        unknown = [s.name for s in steps if wf.get(s.name) is None]
        if recorded == wf.definition() and not unknown:
            return steps
        change = describe_drift(recorded, wf.definition()) if recorded != wf.definition() else (
            f"the chain has steps the definition lacks: {', '.join(unknown)}")
        if not allow_drift:
            raise DriftError(f"workflow {wf.name!r} changed since run {rid} was recorded ({change}); "
                             "fork the run, or resume with --allow-drift to map completed steps by name")
        old = {r["name"]: r for r in self.store.db.query("SELECT * FROM steps WHERE run_id = ?", [rid])}
        self.store.conn.execute("DELETE FROM steps WHERE run_id = ?", (rid,))
        for i, spec in enumerate(wf.steps):
            kept = old.pop(spec.name, None) or {
                "run_id": rid, "name": spec.name, "status": StepStatus.PENDING, "attempts": 0,
                "idempotency_key": f"{rid}/{spec.name}"}
            self.store.db["steps"].insert({**kept, "position": i, "options": encoding.dumps(spec.options())})
        self.store.update_run(rid, definition=encoding.dumps(wf.definition()), fingerprint=wf.fingerprint(),
                              steps_total=len(wf.steps), steps_done=sum(
                                  r["status"] == StepStatus.COMPLETED for r in self.store.db.query(
                                      "SELECT status FROM steps WHERE run_id = ?", [rid])))
        self.store.add_event(rid, at, "drift_allowed", change=change, dropped=sorted(old))
        return self.store.steps(rid, with_output=False)

    # ---- decisions ------------------------------------------------------------------------------

    def _pending(self, rid: str, kinds: tuple[str, ...], verb: str, checkpoint_id: int | None) -> Checkpoint:
        cp = self.store.pending_checkpoint(rid)
        # The open checkpoint decides, not the status column: a pause whose decision cannot be read
        # is open again (fail closed) and can be decided, whatever status a hand edit left.
        refusal = decision_refusal(summary_from_row(self.store.run_row(rid)), cp, kinds, verb)
        if refusal is not None:
            last = self.store.conn.execute(
                f"SELECT decision, decided_by FROM checkpoints WHERE run_id = ? AND kind IN {PAUSE_KINDS!r} "
                "ORDER BY checkpoint_id DESC LIMIT 1", (rid,)).fetchone()
            decided = f" (its last pause was already decided: {last[0]} by {last[1]})" if last and last[0] else ""
            raise RefusedTransition(refusal + decided)
        if checkpoint_id is not None and cp.checkpoint_id != checkpoint_id:
            raise RefusedTransition(f"run {rid} moved on since checkpoint {checkpoint_id}: it now waits on "
                                    f"checkpoint {cp.checkpoint_id} (step '{cp.step}'); review it again")
        if cp.deadline_at is not None and cp.deadline_at <= self.clock():
            raise RefusedTransition(f"the deadline of checkpoint {cp.checkpoint_id} of run {rid} passed at "
                                    f"{to_text(cp.deadline_at)}; it can no longer be decided")
        return cp

    def _decide(self, cp: Checkpoint, decision: str, by: str, at: str, comment: str | None,
                value: str | None) -> None:
        cur = self.store.conn.execute(
            "UPDATE checkpoints SET decision = ?, decided_by = ?, decided_at = ?, comment = ?, value = ? "
            f"WHERE checkpoint_id = ? AND {UNDECIDED}",
            (decision, by, at, comment, value, cp.checkpoint_id))
        if cur.rowcount != 1:  # unreachable under BEGIN IMMEDIATE; kept as the last guard of exactly-once
            raise RefusedTransition(f"checkpoint {cp.checkpoint_id} was already decided")

    @_store_errors
    def approve(self, run_id: str, by: str | None = None, comment: str | None = None, output: Any = None,
                *, checkpoint_id: int | None = None) -> Checkpoint:
        """Approve the run's pending approval checkpoint, once; the run becomes ``queued`` (a resume or
        worker continues it; approving never continues past a later gate).

        ``output`` (not None) replaces the gated step's output (an edited output), or for a held
        orphan step records it as the step's output instead of re-running it. ``checkpoint_id``: the
        checkpoint the person looked at; if the run has moved on, the approval is refused.
        ``by`` defaults to the OS user. Returns the decided checkpoint.

        Raises ``UnknownRun``, ``RefusedTransition`` (not awaiting approval, already decided, stale, or past
        its deadline: a pause whose deadline passed is expired first, as a worker would),
        ``InvalidValue`` (output not storable).
        """
        by = by or os_user()
        value = None if output is None else encoding.dumps(output, "output")
        self.expire_deadlines()  # a pause past its deadline is expired, never decided
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            cp = self._pending(rid, APPROVAL_KINDS, "approve", checkpoint_id)
            at = self._now()
            self._decide(cp, "approved", by, at, comment, value)
            step = self._step(rid, cp.step)
            if cp.kind == "orphan" and value is None:
                self.store.update_step(rid, step.position, status=StepStatus.PENDING)
            elif cp.kind == "orphan":
                self.store.update_step(rid, step.position, status=StepStatus.COMPLETED, output=value,
                                       finished_at=at)
            elif value is not None:
                self.store.update_step(rid, step.position, output=value)
            steps = self.store.steps(rid, with_output=False)
            nxt = next((s for s in steps if s.status != StepStatus.COMPLETED), None)
            self.store.update_run(rid, status=RunStatus.QUEUED, updated_at=at, current_step=nxt.name if nxt else None,
                                  steps_done=sum(s.status == StepStatus.COMPLETED for s in steps))
            self.store.add_event(rid, at, "approved", step=cp.step, actor=by, checkpoint_id=cp.checkpoint_id,
                                 comment=comment, output_edited=value is not None)
            return cp.model_copy(update={"decision": "approved", "decided_by": by, "decided_at": from_text(at),
                                         "comment": comment, "value": output})

    @_store_errors
    def reject(self, run_id: str, comment: str, by: str | None = None, *,
               checkpoint_id: int | None = None) -> Checkpoint:
        """Reject the pending approval, once: the run becomes ``rejected`` (terminal) and its
        remaining steps ``cancelled``. ``comment`` (the reason) is required.

        Raises ``UnknownRun``, ``RefusedTransition`` (as :meth:`approve`), ``InvalidValue`` (empty reason).
        """
        if not comment or not comment.strip():
            raise InvalidValue("a rejection needs a reason (--comment TEXT)")
        by = by or os_user()
        self.expire_deadlines()  # a pause past its deadline is expired, never decided
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            cp = self._pending(rid, APPROVAL_KINDS, "reject", checkpoint_id)
            at = self._now()
            self._decide(cp, "rejected", by, at, comment, None)
            self._cancel_open_steps(rid, at)
            self.store.update_run(rid, status=RunStatus.REJECTED, updated_at=at, current_step=None)
            self.store.add_event(rid, at, "rejected", step=cp.step, actor=by, checkpoint_id=cp.checkpoint_id,
                                 comment=comment)
        return cp.model_copy(update={"decision": "rejected", "decided_by": by, "decided_at": from_text(at),
                                     "comment": comment})

    @_store_errors
    def respond(self, run_id: str, value: Any, by: str | None = None, *,
                checkpoint_id: int | None = None) -> Checkpoint:
        """Record the answer to the run's pending input request, once; the run becomes ``queued`` and,
        when resumed, the asking step re-runs and its ``request_input`` returns ``value``.

        Raises ``UnknownRun``, ``RefusedTransition`` (as :meth:`approve`), ``InvalidValue``.
        """
        by = by or os_user()
        text = encoding.dumps(value, "value")
        self.expire_deadlines()  # a pause past its deadline is expired, never decided
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            cp = self._pending(rid, INPUT_KINDS, "respond to", checkpoint_id)
            at = self._now()
            self._decide(cp, "responded", by, at, None, text)
            # Answered: the step no longer waits; it re-runs from its top when the run is resumed.
            self.store.update_step(rid, self._step(rid, cp.step).position, status=StepStatus.PENDING)
            self.store.update_run(rid, status=RunStatus.QUEUED, updated_at=at)
            self.store.add_event(rid, at, "responded", step=cp.step, actor=by, checkpoint_id=cp.checkpoint_id)
        return cp.model_copy(update={"decision": "responded", "decided_by": by, "decided_at": from_text(at),
                                     "value": value})

    @_store_errors
    def cancel(self, run_id: str, by: str | None = None) -> RunStatus:
        """Cancel a non-terminal run: it becomes ``cancelled``, open steps ``cancelled``, and any
        executor's lease is revoked, so a step still running is never recorded as completed.
        Returns the status the run had. Raises ``UnknownRun``, ``RefusedTransition`` (terminal)."""
        by = by or os_user()
        self.sweep()  # a run whose owner died is reported as interrupted, not running
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            summary = summary_from_row(self.store.run_row(rid))
            if (refusal := cancel_refusal(summary)) is not None:
                raise RefusedTransition(refusal)
            status = summary.status
            at = self._now()
            self._cancel_open_steps(rid, at)
            self.store.conn.execute(
                "UPDATE checkpoints SET decision = 'cancelled', decided_by = ?, decided_at = ? "
                f"WHERE run_id = ? AND {UNDECIDED} AND kind IN {PAUSE_KINDS!r}", (by, at, rid))
            self.store.update_run(rid, status=RunStatus.CANCELLED, updated_at=at, current_step=None,
                                  **CLEAR_LEASE)
            self.store.add_event(rid, at, "cancelled", actor=by, previous_status=status)
        return status

    def _cancel_open_steps(self, rid: str, at: str) -> None:
        self.store.conn.execute(
            "UPDATE steps SET status = ?, finished_at = coalesce(finished_at, ?) "
            f"WHERE run_id = ? AND status IN ({', '.join('?' * len(OPEN_STEPS))})",
            (StepStatus.CANCELLED, at, rid, *sorted(OPEN_STEPS)))

    @_store_errors
    def expire_deadlines(self) -> list[str]:
        """Reject every paused run whose pause deadline (``checkpoints.deadline_at``, UTC) has passed,
        with the reason. Returns the ids rejected. Safe to call from many workers at once: each
        checkpoint is decided once."""
        now = self._now()
        rows = self.store.conn.execute(
            "SELECT checkpoint_id, run_id, step, kind, deadline_at FROM checkpoints "
            f"WHERE deadline_at <= ? AND {UNDECIDED}", (now,)).fetchall()
        expired = []
        for cp_id, rid, step, kind, deadline in rows:
            reason = f"the {'input' if kind == 'input' else 'approval'} deadline ({deadline}) passed"
            with self.store.transaction():
                decided = self.store.conn.execute(
                    "UPDATE checkpoints SET decision = 'expired', decided_by = 'deadline', decided_at = ?, "
                    f"comment = ? WHERE checkpoint_id = ? AND {UNDECIDED}", (now, reason, cp_id)).rowcount
                if not decided:
                    continue
                self._cancel_open_steps(rid, now)
                self.store.update_run(rid, status=RunStatus.REJECTED, updated_at=now, current_step=None,
                                      error=reason)
                self.store.add_event(rid, now, "deadline_expired", step=step, checkpoint_id=cp_id, reason=reason)
            expired.append(rid)
        return expired

    # ---- deletion -------------------------------------------------------------------------------

    @_store_errors
    def delete(self, run_id: str) -> str:
        """Delete a run and everything of it (steps, checkpoints, events) in one transaction; returns
        its id. Forks of it keep their ``parent_run_id``, shown as a deleted parent.

        Raises ``UnknownRun``, ``RefusedTransition`` (a live process is executing it: cancel it first).
        """
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            row = self.store.run_row(rid)  # raw: a run damaged by hand can still be deleted
            if self._owned_by_live_process(row):
                raise RefusedTransition(f"run {rid} is being executed by pid {row['lease_pid']} on "
                                        f"{row['lease_host']}; cancel it before deleting it")
            self._delete_rows([rid])
        return rid

    def _owned_by_live_process(self, row: dict[str, Any]) -> bool:
        return row["status"] == RunStatus.RUNNING and not owner_gone(
            row["lease_host"], row["lease_pid"], row["lease_pid_start"], parse_expiry(row["lease_expires_at"]),
            self.clock())

    @_store_errors
    def prune(self, older_than: timedelta, statuses: Iterable[str] = tuple(TERMINAL)) -> list[str]:
        """Delete runs in ``statuses`` (default: the terminal ones) last updated more than
        ``older_than`` ago, in one transaction; a run a live process executes is kept. Returns the
        ids deleted. Raises ``ValueError`` for a status outside the vocabulary."""
        wanted = [RunStatus(s).value for s in statuses]
        cutoff = to_text(self.clock() - older_than)
        with self.store.transaction():
            marks = ", ".join("?" * len(wanted))
            rows = self.store.db.query(f"SELECT * FROM runs WHERE status IN ({marks}) AND updated_at < ?",
                                       [*wanted, cutoff])
            ids = [r["run_id"] for r in rows if not self._owned_by_live_process(r)]
            self._delete_rows(ids)
        return ids

    def _delete_rows(self, ids: list[str]) -> None:
        for table in ("events", "checkpoints", "steps", "runs"):
            self.store.conn.executemany(f"DELETE FROM {table} WHERE run_id = ?", [(i,) for i in ids])

    # ---- forks ----------------------------------------------------------------------------------

    @_store_errors
    def fork(self, run_id: str, from_step: str, input: dict[str, Any] | None = None) -> str:
        """Create a new ``queued`` run from the boundary before ``from_step``: steps before it are
        completed with the parent's outputs (copied, never re-run), ``from_step`` onward pending.
        ``input`` replaces the parent's input when given. The parent is untouched.
        Returns the new run id.

        A fork never turns an unapproved gated output into an approved one: a copied approval gate
        whose latest decision in the parent is ``approved`` stays approved (the decided checkpoint
        is copied into the fork, naming the parent's, with an ``approval_inherited`` event, so a
        fork of the fork sees it even once the parent is deleted); at the first copied gate that
        was not approved (rejected, expired, cancelled or still undecided) the fork pauses
        ``awaiting_approval`` with the copied output as what is reviewed, before anything
        downstream runs.

        Raises ``UnknownRun``, ``UnknownStep``, ``RefusedTransition`` (an upstream step has no output
        to reuse), ``InvalidValue``.
        """
        if input is not None and not isinstance(input, dict):
            raise InvalidValue("the fork input must be a JSON object, e.g. '{\"topic\": \"x\"}'")
        input_text = None if input is None else encoding.dumps(input, "input")
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            parent = self.store.run_row(rid)
            step = self._step(rid, from_step)
            upstream = [s for s in self.store.steps(rid, with_output=False) if s.position < step.position]
            missing = [s.name for s in upstream if s.status != StepStatus.COMPLETED]
            if missing:
                raise RefusedTransition(f"step '{missing[0]}' of run {rid} has not completed, so there is no "
                                        f"output to reuse; fork from '{missing[0]}' or earlier")
            new_id = self.id_factory()
            at = self._now()
            self.store.db["runs"].insert({
                "run_id": new_id, "workflow": parent["workflow"], "status": RunStatus.QUEUED,
                "input": input_text or parent["input"], "parent_run_id": rid, "forked_from_step": step.name,
                "definition": parent["definition"], "fingerprint": parent["fingerprint"], "created_at": at,
                "updated_at": at, "current_step": step.name, "steps_done": len(upstream),
                "steps_total": parent["steps_total"],
            })
            self._copy_steps(rid, new_id, step.position)
            self.store.add_checkpoint(new_id, at, "fork", step.position, step.name,
                                      state={"parent_run_id": rid, "from_step": step.name})
            self.store.add_event(new_id, at, "forked", step=step.name, parent_run_id=rid,
                                 input_replaced=input is not None)
            self._carry_gates(rid, new_id, upstream, at)
        return new_id

    def _carry_gates(self, parent: str, child: str, copied: list[StepRecord], at: str) -> None:
        """Inherit the parent's approvals of the copied gates; pause the fork at the first gate the
        parent did not approve (see :meth:`fork`)."""
        for s in copied:
            if not s.options.get("approval"):
                continue
            row = self.store.conn.execute(
                "SELECT checkpoint_id, decision, decided_by FROM checkpoints WHERE run_id = ? AND kind = 'approval' "
                "AND step = ? ORDER BY checkpoint_id DESC LIMIT 1", (parent, s.name)).fetchone()
            if row is not None and row[1] == "approved":
                cp_id = self._inherit_approval(parent, row[0], child, at)
                self.store.add_event(child, at, "approval_inherited", step=s.name, checkpoint_id=cp_id,
                                     parent_run_id=parent, parent_checkpoint_id=row[0], decided_by=row[2])
                continue
            why = "not yet decided" if row is None or row[1] is None else f"{row[1]} by {row[2]}"
            self._pause(child, None, "approval", s.position + 1, s.name, at, timeout=s.options.get("timeout"),
                        reason=f"approve the output of step '{s.name}', copied from run {parent}, where "
                               f"its approval was {why}")
            return

    def _inherit_approval(self, parent: str, checkpoint_id: int, child: str, at: str) -> int:
        # The decision keeps its original author and time; the comment names where it came from.
        cur = self.store.conn.execute(
            """INSERT INTO checkpoints (run_id, position, step, kind, created_at, reason, state, decision,
                                        decided_by, decided_at, comment, value)
               SELECT :child, position, step, kind, :at, reason, :state, decision, decided_by, decided_at,
                      'inherited from checkpoint ' || checkpoint_id || ' of run ' || run_id
                          || coalesce(': ' || comment, ''),
                      value
               FROM checkpoints WHERE checkpoint_id = :cp""",
            {"child": child, "at": at, "cp": checkpoint_id,
             "state": encoding.dumps({"inherited_from": {"run_id": parent, "checkpoint_id": checkpoint_id}})})
        return int(cur.lastrowid)

    def _copy_steps(self, parent: str, child: str, cut: int) -> None:
        # In SQL: upstream outputs move as stored text, never decoded or re-run.
        self.store.conn.execute(
            """INSERT INTO steps (run_id, position, name, status, attempts, options, output, started_at,
                                  finished_at, idempotency_key)
               SELECT :child, position, name,
                      CASE WHEN position < :cut THEN status ELSE :pending END,
                      CASE WHEN position < :cut THEN attempts ELSE 0 END,
                      options,
                      CASE WHEN position < :cut THEN output END,
                      CASE WHEN position < :cut THEN started_at END,
                      CASE WHEN position < :cut THEN finished_at END,
                      CASE WHEN position < :cut THEN idempotency_key ELSE :child || '/' || name END
               FROM steps WHERE run_id = :parent ORDER BY position""",
            {"child": child, "parent": parent, "cut": cut, "pending": StepStatus.PENDING},
        )

    # ---- lookups --------------------------------------------------------------------------------

    def _step(self, rid: str, name: str | None) -> StepRecord:
        steps = self.store.steps(rid, with_output=False)
        found = next((s for s in steps if s.name == name), None)
        if found is None:
            names = ", ".join(s.name for s in steps) or "none"
            raise UnknownStep(f"run {rid} has no step {name!r}; its steps are: {names}")
        return found


    def _workflow_of(self, name: str) -> Workflow:
        if name not in self.workflows:
            if not self.workflows:
                raise UnknownWorkflow(f"resuming needs the definition of workflow {name!r}: pass --app MODULE:ATTR")
            raise UnknownWorkflow(f"workflow {name!r} is not defined by the loaded app (it defines: "
                                  f"{', '.join(sorted(self.workflows))}); pass the --app that defines it")
        return self.workflows[name]
