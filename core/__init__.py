"""relaypoint: durable, resumable, human-approved multi-step runs on a local SQLite file.

Public API: :class:`Workflow` to define a chain of steps, :class:`Runtime` to start, resume,
approve, reject, respond to, fork and cancel runs, the status vocabulary and the typed errors.
"""

from .errors import (AppLoadError, DefinitionError, DriftError, InvalidValue, LeaseLost, RefusedTransition,
                     RelaypointError, StoreError, UnknownRun, UnknownStep, UnknownWorkflow)
from .models import Checkpoint, Event, Run, RunSummary, StepRecord
from .runtime import Runtime
from .status import RunStatus, StepStatus
from .workflow import Context, Workflow

__all__ = [
    "AppLoadError", "Checkpoint", "Context", "DefinitionError", "DriftError", "Event", "InvalidValue",
    "LeaseLost", "RefusedTransition", "RelaypointError", "Run", "RunStatus", "RunSummary", "Runtime",
    "StepRecord", "StepStatus", "StoreError", "UnknownRun", "UnknownStep", "UnknownWorkflow", "Workflow",
]
