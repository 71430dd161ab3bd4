"""Recovery of runs whose executing process is gone: the sweep, marking runs interrupted, the
poison-pill charge and the release of a run its own executor could not finish.

A death is charged to a run (``runs.suspect_deaths``, and ``suspect`` in its
``interruption_detected`` event) only when the run was the only one its process was executing: a
healthy run interrupted because another run killed their shared worker is not a suspect.
"""

from __future__ import annotations

from datetime import datetime

from . import events
from .clock import Clock, from_text, to_text
from .drivers import Call
from .errors import LeaseLost, UnknownRun
from .lease import owner_gone
from .models import Owner, StepRecord
from .status import RunStatus, StepStatus
from .store import Change, Lookup, RunStore, RunUpdate


def now_of(clock: Clock) -> datetime:
    """The clock's time at the store's resolution (milliseconds, UTC), so what a call returns
    equals what it recorded."""
    return from_text(to_text(clock()))


class Recovery:
    """Sweeps and interruptions on ``store``, with ``clock`` for lease expiry."""

    def __init__(self, store: RunStore, clock: Clock) -> None:
        self.store, self.clock = store, clock

    def sweep(self) -> list[str]:
        """Mark ``interrupted`` every running run whose owner is gone (see
        :func:`relaypoint.lease.owner_gone`), each dead owner process in one transaction. Returns
        the ids marked. Does nothing on a read-only store."""
        if self.store.readonly_reason is not None:
            return []
        now = self.clock()
        owners = dict.fromkeys(r.owner for r in self.store.runs_in([RunStatus.RUNNING]) if r.owner is not None)
        gone = [o for o in owners if owner_gone(o.host, o.pid, o.pid_start, o.expires_at, now)]
        marked: list[str] = []
        for owner in gone:
            with self.store.transaction():
                marked += self.interrupt_owner(owner)
        return marked

    def interrupt_owner(self, owner: Owner) -> list[str]:
        """Inside a transaction: mark ``interrupted`` every run the gone ``owner`` process was
        executing; returns their ids. Checked again under the write lock, so a run claimed
        meanwhile, or an owner that renewed its lease, is left alone."""
        runs = self.store.runs_in([RunStatus.RUNNING], owner=owner)
        now = self.clock()
        if not any(owner_gone(owner.host, owner.pid, owner.pid_start, r.owner.expires_at, now)
                   for r in runs if r.owner is not None):
            return []
        return [r.run_id for r in runs
                if self.mark_interrupted(r.run_id, r.token, owner.pid, owner.host, co_executing=len(runs))]

    def mark_interrupted(self, run_id: str, token: str | None, pid: int | None, host: str | None, *,
                         co_executing: int | None) -> bool:
        """Inside a transaction: mark the run and its running step ``interrupted`` if ``token``
        still owns it (False otherwise). ``co_executing``: how many runs the dead owner process was
        executing, or None when the owner released the run itself (Ctrl-C, a store failure), which
        is not a death and never charged."""
        at = now_of(self.clock)
        suspect = co_executing == 1
        cause = {"cause": "released by its owner", "suspect": False} if co_executing is None else {
            "cause": "owner died", "co_executing": co_executing, "suspect": suspect}
        try:
            head = self.store.run(run_id, documents=False)
        except UnknownRun:
            return False
        running = self.running_steps(run_id, head.current_step)
        # suspect: the poison-pill count, read by one column at resume
        run = RunUpdate(status=RunStatus.INTERRUPTED, lease=None,
                        **({"suspect_deaths": head.suspect_deaths + 1} if running and suspect else {}))
        try:
            self.store.commit(Change(
                run_id, at, fence=token, run=run, marked={step.seq: StepStatus.INTERRUPTED for step in running},
                events=[events.interruption_detected(Call.of(step), step.attempts, pid, host, cause)
                        for step in running]))
        except (LeaseLost, UnknownRun):
            return False
        return True

    def running_steps(self, run_id: str, current_step: str | None) -> list[StepRecord]:
        """The executions that were running: the one the latest checkpoint names (an execution is
        started with the boundary that checkpoints it, and a pattern's executions share its name)
        with, when it is a pattern's row or call, every running call of that pattern (independent
        calls run at once), else the top-level step ``current_step`` (a resume that went past
        copied steps); [] when none is running."""
        checkpoint = self.store.checkpoint(run_id, Lookup.LATEST)
        named = self.store.step(run_id, checkpoint.seq) if checkpoint is not None else None
        group = named if named is None or named.parent is None else self.store.step(run_id, named.parent)
        if named is not None and group is not None and "pattern" in group.options:
            calls = [c for c in self.store.steps(run_id, parent=group.seq) if c.status == StepStatus.RUNNING]
            return ([group] if group.status == StepStatus.RUNNING else []) + calls
        for step in (named, self.store.step(run_id, name=current_step) if current_step else None):
            if step is not None and step.status == StepStatus.RUNNING:
                return [step]
        return []

    def release(self, run_id: str, token: str, pid: int, host: str) -> bool:
        """Show a run interrupted now rather than when its lease expires: something outside the
        step failed (the store, a signal). Not a death, so never charged. Best effort: the store
        may be what failed. Returns whether the release was recorded."""
        try:
            with self.store.transaction(run_id):
                self.mark_interrupted(run_id, token, pid, host, co_executing=None)
        except Exception:
            return False
        return True
