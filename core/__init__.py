"""relaypoint: durable, resumable, human-approved multi-step runs, recorded in a local SQLite
file or a team's PostgreSQL database.

Public API: :class:`Workflow` to define a chain of steps and multi-agent patterns (with
:func:`human`, a person as an agent, and :func:`typed`, an agent with a pydantic output model), :class:`Runtime` to start, resume,
approve, reject, respond to, fork and cancel runs, the vocabulary (statuses, checkpoint kinds,
decisions, event kinds) and the typed errors. Drivers (what a run does next) live in
:mod:`relaypoint.drivers`.
"""

from .errors import (AppLoadError, DefinitionError, DriftError, InvalidValue, LeaseLost, RefusedTransition,
                     RelaypointError, StoreError, UnknownRun, UnknownStep, UnknownWorkflow)
from .models import Checkpoint, Event, PendingDecision, Run, RunSummary, StepRecord
from .patterns import human, typed
from .runtime import Runtime
from .status import CheckpointKind, Decision, EventKind, RunStatus, StepStatus
from .workflow import Context, Workflow

__all__ = [
    "AppLoadError", "Checkpoint", "CheckpointKind", "Context", "Decision", "DefinitionError", "DriftError", "Event",
    "EventKind", "InvalidValue", "LeaseLost", "PendingDecision", "RefusedTransition", "RelaypointError", "Run", "RunStatus",
    "RunSummary", "Runtime", "StepRecord", "StepStatus", "StoreError", "UnknownRun", "UnknownStep", "UnknownWorkflow",
    "Workflow", "human", "typed",
]
