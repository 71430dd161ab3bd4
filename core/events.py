"""The audit events a run records, one builder per kind: each returns the :class:`NewEvent` a change
commits (see :mod:`relaypoint.store.writes`), so every event of a kind has one shape.

``call`` arguments name a pattern's execution in the event (its iteration, agent and task; nothing
for a top-level step, see :func:`relaypoint.drivers.located`). Times in details are store text (UTC).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .clock import to_text
from .drivers import Call, located
from .status import EventKind
from .store import NewEvent
from .usage import Prices


def _priced(prices: Prices | None) -> dict[str, Any]:
    return {"prices": {m: list(p) for m, p in prices.items()}} if prices else {}


def run_started(workflow: str, pid: int, host: str, traceparent: str | None = None, prices: Prices | None = None) -> NewEvent:
    """A run started by this process (``pid`` on ``host``); ``traceparent``: the W3C trace context
    of its run span, when traced (see :mod:`relaypoint.tracing`); ``prices``: the workflow's, the
    run's from then on (see :mod:`relaypoint.usage`)."""
    return NewEvent(EventKind.RUN_STARTED, detail={"workflow": workflow, "pid": pid, "host": host,
                                                   **({"traceparent": traceparent} if traceparent else {}),
                                                   **_priced(prices)})


def run_queued(workflow: str, traceparent: str | None = None, prices: Prices | None = None) -> NewEvent:
    """A run recorded for a worker to execute; ``traceparent`` and ``prices`` as for :func:`run_started`."""
    return NewEvent(EventKind.RUN_QUEUED, detail={"workflow": workflow,
                                                  **({"traceparent": traceparent} if traceparent else {}),
                                                  **_priced(prices)})


def step_started(call: Call, attempt: int) -> NewEvent:
    """Attempt ``attempt`` (1-based) of ``call`` started."""
    return NewEvent(EventKind.STEP_STARTED, step=call.name, detail={"attempt": attempt, **located(call)})


def step_completed(call: Call, attempt: int) -> NewEvent:
    """Attempt ``attempt`` of ``call`` returned its output."""
    return NewEvent(EventKind.STEP_COMPLETED, step=call.name, detail={"attempt": attempt, **located(call)})


def step_failed(call: Call, attempt: int, error: str, will_retry: bool) -> NewEvent:
    """Attempt ``attempt`` of ``call`` raised ``error`` (one line); ``will_retry``: another attempt follows."""
    return NewEvent(EventKind.STEP_FAILED, step=call.name, detail={
        "attempt": attempt, "error": error, "will_retry": will_retry, **located(call)})


def run_completed() -> NewEvent:
    """The run's driver finished."""
    return NewEvent(EventKind.RUN_COMPLETED)


def run_failed(call: Call | None, error: str, *, poison_pill: bool = False) -> NewEvent:
    """The run failed with ``error``, in ``call`` (None: in no step). ``poison_pill``: failed at
    resume because its executor kept dying."""
    detail: dict[str, Any] = {"error": error, **({"poison_pill": True} if poison_pill else {})}
    return NewEvent(EventKind.RUN_FAILED, step=call.name if call else None,
                    detail={**detail, **(located(call) if call else {})})


def paused(gate: str, step: str, reason: str | None, deadline: datetime | None, call: Call | None = None) -> NewEvent:
    """A pause of kind ``gate`` (approval, input, orphan) at ``step``, naming the checkpoint the
    same change inserts; ``deadline``: when it expires (UTC), or None; ``call``: the execution
    that asked, for a pattern's."""
    return NewEvent(EventKind.PAUSED, step=step, names_checkpoint=True, detail={
        "gate": gate, "reason": reason, "deadline_at": None if deadline is None else to_text(deadline),
        **(located(call) if call is not None else {})})


def resumed(pid: int, host: str, previous_status: str, abandoned: dict[str, Any] | None) -> NewEvent:
    """A run claimed by this process; ``abandoned``: the execution it stopped at and will not run
    again (see :meth:`relaypoint.claims.Claims.resume`), or None."""
    return NewEvent(EventKind.RESUMED, detail={"pid": pid, "host": host, "previous_status": previous_status,
                                               **({"abandoned": abandoned} if abandoned else {})})


def released(step: str, reason: str) -> NewEvent:
    """The run was released ``queued`` before ``step`` (the executor is stopping)."""
    return NewEvent(EventKind.RELEASED, step=step, detail={"reason": reason})


def interruption_detected(call: Call, attempt: int, pid: int | None, host: str | None,
                          cause: dict[str, Any]) -> NewEvent:
    """Attempt ``attempt`` of ``call`` was running when its process (``pid`` on ``host``) stopped;
    ``cause``: why and whether the death is charged (see :mod:`relaypoint.recovery`)."""
    return NewEvent(EventKind.INTERRUPTION_DETECTED, step=call.name, detail={
        "pid": pid, "host": host, "attempt": attempt, **cause, **located(call)})


def approved(step: str | None, by: str, checkpoint_id: int, comment: str | None, output_edited: bool) -> NewEvent:
    """Checkpoint ``checkpoint_id`` approved by ``by``."""
    return NewEvent(EventKind.APPROVED, step=step, actor=by, detail={
        "checkpoint_id": checkpoint_id, "comment": comment, "output_edited": output_edited})


def rejected(step: str | None, by: str, checkpoint_id: int, comment: str) -> NewEvent:
    """Checkpoint ``checkpoint_id`` rejected by ``by``, with the reason ``comment``."""
    return NewEvent(EventKind.REJECTED, step=step, actor=by, detail={"checkpoint_id": checkpoint_id,
                                                                     "comment": comment})


def responded(step: str | None, by: str, checkpoint_id: int) -> NewEvent:
    """Input checkpoint ``checkpoint_id`` answered by ``by``."""
    return NewEvent(EventKind.RESPONDED, step=step, actor=by, detail={"checkpoint_id": checkpoint_id})


def cancelled(by: str, previous_status: str) -> NewEvent:
    """The run cancelled by ``by``."""
    return NewEvent(EventKind.CANCELLED, actor=by, detail={"previous_status": previous_status})


def deadline_expired(step: str | None, checkpoint_id: int, reason: str) -> NewEvent:
    """Pause ``checkpoint_id`` expired undecided."""
    return NewEvent(EventKind.DEADLINE_EXPIRED, step=step, detail={"checkpoint_id": checkpoint_id, "reason": reason})


def forked(step: str | None, parent_run_id: str, input_replaced: bool, iteration: int | None,
           prices: Prices | None = None) -> NewEvent:
    """The run was forked from ``parent_run_id`` at ``step`` (and ``iteration`` of its pattern),
    with the ``prices`` its parent recorded (as for :func:`run_started`)."""
    return NewEvent(EventKind.FORKED, step=step, detail={
        "parent_run_id": parent_run_id, "input_replaced": input_replaced,
        **({} if iteration is None else {"iteration": iteration}), **_priced(prices)})


def approval_inherited(step: str, checkpoint_id: int, parent_run_id: str, parent_checkpoint_id: int,
                       decided_by: str | None) -> NewEvent:
    """A fork's copy ``checkpoint_id`` of its parent's approval ``parent_checkpoint_id``."""
    return NewEvent(EventKind.APPROVAL_INHERITED, step=step, detail={
        "checkpoint_id": checkpoint_id, "parent_run_id": parent_run_id, "parent_checkpoint_id": parent_checkpoint_id,
        "decided_by": decided_by})


def drift_allowed(change: str, dropped: list[str], cancelled: list[dict[str, Any]]) -> NewEvent:
    """The run was reconciled with a changed definition (``change``, described): steps ``dropped``,
    a pattern's calls ``cancelled`` (see :meth:`relaypoint.claims.Claims._withdraw`)."""
    return NewEvent(EventKind.DRIFT_ALLOWED, detail={"change": change, "dropped": sorted(dropped),
                                                     **({"cancelled": cancelled} if cancelled else {})})


def replan_requested(step: str | None) -> NewEvent:
    """A resume asked the run's planner to decompose its goal again."""
    return NewEvent(EventKind.REPLAN_REQUESTED, step=step)
