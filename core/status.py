"""The one vocabulary of relaypoint, shared by code, store, CLI and console: run and step statuses,
checkpoint kinds, decisions and event kinds.

Run lifecycle (see the diagram in docs/reference/statuses.md)::

    queued -> running -> completed
                      -> awaiting_approval -> queued (approved) | rejected
                      -> awaiting_input    -> queued (responded)
                      -> failed            -> running (resume retries the failed step)
                      -> interrupted       -> running (resume)
    any non-terminal  -> cancelled
"""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Status of a run, as stored in ``runs.status``."""

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_INPUT = "awaiting_input"
    INTERRUPTED = "interrupted"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """True for completed, rejected and cancelled: nothing more can happen but a fork."""
        return self in TERMINAL

    @property
    def is_paused(self) -> bool:
        """True when a checkpoint waits for a person (approval) or a host (input)."""
        return self in PAUSED


class StepStatus(StrEnum):
    """Status of one step of a run, as stored in ``steps.status``.

    ``pending`` -> ``running`` -> ``completed`` | ``failed`` | ``awaiting_input`` (it called
    ``request_input``; ``pending`` again once answered) | ``awaiting_approval`` (a person's turn in a
    pattern waits for their approval; ``pending`` again once approved) | ``interrupted`` (its
    process died); open steps (:data:`OPEN_STEPS`) become ``cancelled`` when the run is cancelled or
    rejected.
    """

    PENDING = "pending"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"  # asked with ``request_input``; re-runs once answered
    AWAITING_APPROVAL = "awaiting_approval"  # a person's turn (``human(kind="approval")``); re-runs once approved
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


OPEN_STEPS = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.AWAITING_INPUT,
                        StepStatus.AWAITING_APPROVAL, StepStatus.INTERRUPTED})
"""Steps that have neither ended nor been cancelled: what cancel, rejection and deadline expiry cancel."""

class CallKind(StrEnum):
    """Kind of a recorded call inside a step execution (``calls.kind``): ``call`` (any function given
    to :meth:`~relaypoint.workflow.Context.call`), ``model`` (a model request), ``tool`` (a tool
    call). A recorded call's status is ``completed`` or ``failed`` (:class:`StepStatus`)."""

    CALL = "call"
    MODEL = "model"
    TOOL = "tool"


class CheckpointKind(StrEnum):
    """Kind of a checkpoint, as stored in ``checkpoints.kind``: where a run's boundary came from.

    ``start`` (a run began), ``boundary`` (a step execution was recorded), ``fork`` (a run was
    forked); the pausing kinds wait for a decision: ``approval`` (a gate), ``input`` (a step
    called ``request_input``), ``orphan`` (a held step whose process died).
    """

    START = "start"
    BOUNDARY = "boundary"
    APPROVAL = "approval"
    INPUT = "input"
    ORPHAN = "orphan"
    FORK = "fork"


class Decision(StrEnum):
    """A decision recorded on a pausing checkpoint (``checkpoints.decision``), once."""

    APPROVED = "approved"
    REJECTED = "rejected"
    RESPONDED = "responded"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class EventKind(StrEnum):
    """Kind of an audit event (``events.kind``)."""

    RUN_STARTED = "run_started"
    RUN_QUEUED = "run_queued"  # recorded for a worker to execute (``start --queue``), nothing executed
    STEP_STARTED = "step_started"
    STEP_COMPLETED = "step_completed"
    STEP_FAILED = "step_failed"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    PAUSED = "paused"
    RESUMED = "resumed"
    RELEASED = "released"
    INTERRUPTION_DETECTED = "interruption_detected"
    APPROVED = "approved"
    REJECTED = "rejected"
    RESPONDED = "responded"
    CANCELLED = "cancelled"
    DEADLINE_EXPIRED = "deadline_expired"
    FORKED = "forked"
    APPROVAL_INHERITED = "approval_inherited"
    DRIFT_ALLOWED = "drift_allowed"
    REPLAN_REQUESTED = "replan_requested"


class AnnouncementOutcome(StrEnum):
    """How a worker's claim to announce a pause (``worker --on-pause``) ended: ``announced`` (an
    attempt of its hook succeeded: the pause is marked announced), ``failed`` (every attempt
    failed: no worker claims it again until ``relaypoint announce`` asks), ``released`` (its worker
    stopped before its attempts ran out: the next claimer takes it)."""

    ANNOUNCED = "announced"
    FAILED = "failed"
    RELEASED = "released"


PAUSE_KINDS = frozenset({CheckpointKind.APPROVAL, CheckpointKind.INPUT, CheckpointKind.ORPHAN})
"""Checkpoint kinds that wait for a decision."""

APPROVAL_KINDS = (CheckpointKind.APPROVAL, CheckpointKind.ORPHAN)
"""Checkpoint kinds that approve and reject decide (a gate, or a held orphan step)."""

INPUT_KINDS = (CheckpointKind.INPUT,)
"""Checkpoint kinds that respond answers."""


def goes_on(kind: str, decision: str | None) -> bool:
    """True when a pause of ``kind`` decided ``decision`` lets the run go on: an input responded,
    an approval or orphan approved. Anything else (undecided, rejected, unreadable) does not."""
    return decision == (Decision.RESPONDED if kind == CheckpointKind.INPUT else Decision.APPROVED)


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.REJECTED, RunStatus.CANCELLED})
PAUSED = frozenset({RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_INPUT})

# A symbol per status so the console and CLI stay readable without colour.
RUN_SYMBOLS: dict[RunStatus, str] = {
    RunStatus.QUEUED: "○",
    RunStatus.RUNNING: "▶",
    RunStatus.AWAITING_APPROVAL: "⏸",
    RunStatus.AWAITING_INPUT: "?",
    RunStatus.INTERRUPTED: "⚡",
    RunStatus.COMPLETED: "✔",
    RunStatus.FAILED: "✖",
    RunStatus.REJECTED: "⊘",
    RunStatus.CANCELLED: "■",
}

STEP_SYMBOLS: dict[StepStatus, str] = {
    StepStatus.PENDING: "·",
    StepStatus.RUNNING: "▶",
    StepStatus.AWAITING_INPUT: RUN_SYMBOLS[RunStatus.AWAITING_INPUT],
    StepStatus.AWAITING_APPROVAL: RUN_SYMBOLS[RunStatus.AWAITING_APPROVAL],
    StepStatus.COMPLETED: "✔",
    StepStatus.FAILED: "✖",
    StepStatus.INTERRUPTED: "⚡",
    StepStatus.CANCELLED: "■",
}
