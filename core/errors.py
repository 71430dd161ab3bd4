"""Typed errors. Each message is one line a person can act on; the CLI prints it as is."""

from __future__ import annotations


QUOTED_CHARS = 100
"""At most this many characters of a text a person gave (a run id, a step or workflow name) are
quoted by the error that refuses it."""


def quoted(text: str) -> str:
    """``text`` as an error message quotes it: its ``repr``, cut after :data:`QUOTED_CHARS` characters
    (saying how long it is), so a megabyte pasted as a run id is not echoed whole."""
    if len(text) <= QUOTED_CHARS:
        return repr(text)
    return f"{text[:QUOTED_CHARS]!r}… ({len(text):,} characters)"


class RelaypointError(Exception):
    """Base of every error relaypoint raises on purpose (the CLI prints ``error: <message>``)."""


class StoreError(RelaypointError):
    """The store file cannot be used: missing, not a relaypoint store, corrupt, newer, read-only."""


class UnknownRun(RelaypointError):
    """No run matches the given id or id prefix (or the prefix matches several runs)."""


class UnknownWorkflow(RelaypointError):
    """The workflow named is not among the loaded definitions."""


class UnknownStep(RelaypointError):
    """The step named is not in the run's chain."""


class RefusedTransition(RelaypointError):
    """The operation does not apply to the run in its current status; the message says what does."""


class DriftError(RelaypointError):
    """The workflow definition changed since the run was recorded (steps added, removed or renamed)."""


class LeaseLost(RelaypointError):
    """This process no longer owns the run (its lease expired, was taken over, or the run was cancelled);
    the fence refused its write and nothing was recorded."""

    @classmethod
    def of(cls, run_id: str, *, cancelled: bool) -> LeaseLost:
        """The error for a refused fenced write of ``run_id``, saying why (``cancelled``: the run was
        cancelled; otherwise its lease expired or another process took it over)."""
        why = "it was cancelled" if cancelled else "its lease expired or another process took the run over"
        return cls(f"run {run_id}: this process no longer owns the run ({why}); the step's result was not recorded")


class RuntimeClosed(RelaypointError):
    """The runtime was closed while it executed the run: the run was released ``interrupted``."""


class DefinitionError(RelaypointError):
    """A workflow definition is invalid (for example, two steps share a name)."""


class InvalidValue(RelaypointError):
    """A value cannot be stored as JSON; the message names the offending path."""


class AppLoadError(RelaypointError):
    """``--app MODULE:ATTR`` could not be imported or does not name workflows."""
