"""The executor: drives a run's steps while this process holds its lease.

Each step boundary is one transaction (the finished step's output, the next step's start, the
checkpoint row and the events); every write is fenced on the lease token, so a process that lost
the run records nothing more. :class:`relaypoint.Runtime` inherits this loop; ``start`` and
``resume`` claim the run, then call :meth:`Executor._drive`.
"""

from __future__ import annotations

import traceback as tb
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from . import encoding
from .clock import to_text
from .errors import InvalidValue, LeaseLost
from .lease import HOST, LeaseHolder
from .models import StepRecord
from .status import RunStatus, StepStatus
from .store import Store
from .workflow import Context, InputRequested, StepSpec, Workflow

CLEAR_LEASE = dict(lease_token=None, lease_pid=None, lease_pid_start=None, lease_host=None, lease_expires_at=None,
                   heartbeat_at=None)


class Executor:
    """The step loop of :class:`relaypoint.Runtime` (which provides ``store``, ``clock``,
    ``lease_seconds``, ``_now`` and ``_mark_interrupted``)."""

    store: Store
    lease_seconds: float

    def _lease(self, run_id: str) -> LeaseHolder:
        return LeaseHolder(str(self.store.path), run_id, self.clock, self.lease_seconds)

    def _begin_step(self, run_id: str, position: int, name: str, attempt: int, at: str) -> None:
        self.store.update_step(run_id, position, status=StepStatus.RUNNING, attempts=attempt, started_at=at,
                               finished_at=None, error=None, traceback=None)
        self.store.add_event(run_id, at, "step_started", step=name, attempt=attempt)

    def _fenced(self, run_id: str, lease: LeaseHolder, **cols: Any) -> None:
        """A run update that applies only while ``lease`` owns the run; otherwise ``LeaseLost``."""
        if not self.store.update_run(run_id, fence=lease.token, **cols):
            self._lost(run_id)

    def _lost(self, run_id: str) -> None:
        """Raise ``LeaseLost`` saying why this process no longer owns the run."""
        status = self.store.run_row(run_id)["status"]
        why = ("it was cancelled" if status == RunStatus.CANCELLED
               else "its lease expired or another process took the run over")
        raise LeaseLost(f"run {run_id}: this process no longer owns the run ({why}); "
                        "the step's result was not recorded")

    def _drive(self, run_id: str, wf: Workflow, lease: LeaseHolder,
               should_stop: Callable[[], bool | str] | None = None) -> RunStatus:
        """Execute steps while this process holds the lease. Returns the status the run ends in.

        Whatever a step raises fails that step (retried per its ``retries``, except an unstorable
        output): ``SystemExit`` and other ``BaseException`` subclasses included, so ``sys.exit()``
        in a step never ends the process with the run left behind. Two exceptions: the executor's
        own ``InputRequested`` pauses the run, and ``KeyboardInterrupt`` (Ctrl-C) releases it
        ``interrupted`` and propagates.
        """
        lease.start_heartbeat()
        failures: dict[str, int] = {}
        try:
            while True:
                steps = self.store.steps(run_id, with_output=False)
                cur = next((s for s in steps if s.status == StepStatus.RUNNING), None)
                if cur is None:
                    with self.store.transaction():
                        at = self._now()
                        self._fenced(run_id, lease, status=RunStatus.COMPLETED, updated_at=at, current_step=None,
                                     **CLEAR_LEASE)
                        self.store.add_event(run_id, at, "run_completed")
                    return RunStatus.COMPLETED
                spec = wf.get(cur.name)
                ctx = Context(
                    run_id=run_id, step=cur.name, attempt=cur.attempts, idempotency_key=cur.idempotency_key,
                    input=self.store.strict(self.store.run_row(run_id)["input"], f"the input of run {run_id}") or {},
                    results=self.store.completed_outputs(run_id, cur.position),
                    responses=self.store.responses(run_id, cur.name),
                )
                try:
                    output = encoding.dumps(spec.fn(ctx), "output")
                except InputRequested as ask:
                    with self.store.transaction():
                        at = self._now()
                        self._fenced(run_id, lease, updated_at=at)
                        self.store.update_step(run_id, cur.position, status=StepStatus.AWAITING_INPUT)
                        self._pause(run_id, lease, "input", cur.position, cur.name, at, reason=ask.prompt,
                                    timeout=spec.timeout)
                    return RunStatus.AWAITING_INPUT
                except KeyboardInterrupt:
                    raise  # the operator's Ctrl-C: release the run (below), not a failed step
                except BaseException as exc:  # sys.exit() and any other raise in a step fail the step
                    failures[cur.name] = failures.get(cur.name, 0) + 1
                    retry = not isinstance(exc, InvalidValue) and failures[cur.name] <= spec.retries
                    if self._record_failure(run_id, lease, cur, exc, retry):
                        continue
                    return RunStatus.FAILED
                if lease.lost.is_set():
                    self._lost(run_id)
                stop = should_stop is not None and should_stop()
                ended = self._boundary(run_id, lease, cur, spec, output, steps, stop)
                if ended is not None:
                    return ended
        except LeaseLost:
            raise
        except (Exception, KeyboardInterrupt, SystemExit):  # the store failed, or Ctrl-C / exit
            self._release_after_crash(run_id, lease)
            raise
        finally:
            lease.stop_heartbeat()

    def _release_after_crash(self, run_id: str, lease: LeaseHolder) -> None:
        # Something outside the step failed (the store, a signal): show the run interrupted now
        # rather than when the lease expires. Not a death, so never charged to the run as one.
        # Best effort: the store may be what failed.
        try:
            with self.store.transaction():
                self._mark_interrupted(run_id, lease.token, lease.pid, HOST, co_executing=None)
        except Exception:
            pass

    def _record_failure(self, run_id: str, lease: LeaseHolder, cur: StepRecord, exc: BaseException,
                        retry: bool) -> bool:
        message = str(exc) if isinstance(exc, InvalidValue) else (
            f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
        trace = "".join(tb.format_exception(exc))
        with self.store.transaction():
            at = self._now()
            self._fenced(run_id, lease, updated_at=at)
            self.store.add_event(run_id, at, "step_failed", step=cur.name, attempt=cur.attempts, error=message,
                                 will_retry=retry)
            if retry:
                self._begin_step(run_id, cur.position, cur.name, cur.attempts + 1, at)
                return True
            self.store.update_step(run_id, cur.position, status=StepStatus.FAILED, error=message,
                                   traceback=trace, finished_at=at)
            self._fenced(run_id, lease, status=RunStatus.FAILED, error=f"step '{cur.name}' failed: {message}",
                         **CLEAR_LEASE)
            self.store.add_event(run_id, at, "run_failed", step=cur.name, error=message)
        return False

    def _boundary(self, run_id: str, lease: LeaseHolder, cur: StepRecord, spec: StepSpec, output: str,
                  steps: list[StepRecord], stop: bool | str) -> RunStatus | None:
        """Commit one step boundary. Returns the status the run stopped in (completed after its last
        step, paused at the step's approval gate, or released ``queued`` because ``stop``, which is
        the reason recorded in the ``released`` event when it is text), or None to go on."""
        with self.store.transaction():
            at = self._now()
            done = sum(s.status == StepStatus.COMPLETED for s in steps) + 1
            self._fenced(run_id, lease, updated_at=at, steps_done=done)
            self.store.update_step(run_id, cur.position, status=StepStatus.COMPLETED, output=output,
                                   finished_at=at, error=None, traceback=None)
            self.store.add_event(run_id, at, "step_completed", step=cur.name, attempt=cur.attempts)
            if spec.approval:
                self._pause(run_id, lease, "approval", cur.position + 1, cur.name, at,
                            reason=f"approve the output of step '{cur.name}'", timeout=spec.timeout)
                return RunStatus.AWAITING_APPROVAL
            nxt = next((s for s in steps if s.position > cur.position and s.status != StepStatus.COMPLETED), None)
            self.store.add_checkpoint(run_id, at, "boundary", cur.position + 1, nxt.name if nxt else None)
            if nxt is None:  # the last boundary completes the run in the same transaction
                self.store.update_run(run_id, status=RunStatus.COMPLETED, current_step=None, **CLEAR_LEASE)
                self.store.add_event(run_id, at, "run_completed")
                return RunStatus.COMPLETED
            self.store.update_run(run_id, current_step=nxt.name)
            if stop:
                self.store.update_run(run_id, status=RunStatus.QUEUED, **CLEAR_LEASE)
                self.store.add_event(run_id, at, "released", step=nxt.name,
                                     reason=stop if isinstance(stop, str) else "executor stopping")
                return RunStatus.QUEUED
            self._begin_step(run_id, nxt.position, nxt.name, nxt.attempts + 1, at)
        return None

    def _pause(self, run_id: str, lease: LeaseHolder | None, kind: str, position: int, step: str, at: str,
               reason: str, timeout: float | None) -> None:
        status = RunStatus.AWAITING_INPUT if kind == "input" else RunStatus.AWAITING_APPROVAL
        cols = dict(status=status, updated_at=at, current_step=step, **CLEAR_LEASE)
        if lease is not None:
            self._fenced(run_id, lease, **cols)
        else:
            self.store.update_run(run_id, **cols)
        deadline = None if timeout is None else to_text(self.clock() + timedelta(seconds=timeout))
        cp = self.store.add_checkpoint(run_id, at, kind, position, step, reason=reason, deadline_at=deadline)
        self.store.add_event(run_id, at, "paused", step=step, checkpoint_id=cp, gate=kind, reason=reason,
                             deadline_at=deadline)
