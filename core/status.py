"""The one status vocabulary for runs and steps, shared by code, store, CLI and console.

Run lifecycle (see the README's diagram)::

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

    @property
    def is_resumable(self) -> bool:
        """True for queued, interrupted and failed (resuming a failed run retries its failed step)."""
        return self in RESUMABLE


class StepStatus(StrEnum):
    """Status of one step of a run, as stored in ``steps.status``.

    ``pending`` -> ``running`` -> ``completed`` | ``failed`` | ``awaiting_input`` (it called
    ``request_input``; ``pending`` again once answered) | ``interrupted`` (its process died);
    open steps (:data:`OPEN_STEPS`) become ``cancelled`` when the run is cancelled or rejected.
    """

    PENDING = "pending"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"  # asked with ``request_input``; re-runs once answered
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


OPEN_STEPS = frozenset({StepStatus.PENDING, StepStatus.RUNNING, StepStatus.AWAITING_INPUT, StepStatus.INTERRUPTED})
"""Steps that have neither ended nor been cancelled: what cancel, rejection and deadline expiry cancel."""

TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.REJECTED, RunStatus.CANCELLED})
PAUSED = frozenset({RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_INPUT})
RESUMABLE = frozenset({RunStatus.QUEUED, RunStatus.INTERRUPTED, RunStatus.FAILED})

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
    StepStatus.COMPLETED: "✔",
    StepStatus.FAILED: "✖",
    StepStatus.INTERRUPTED: "⚡",
    StepStatus.CANCELLED: "■",
}
