"""Why a change to a run is refused, told from what a reader knows of the run: its status, owner
and the checkpoint it waits on. Each function returns the one-line reason (what is wrong and what
to do instead), or None when the change may go ahead.

The runtime raises ``RefusedTransition`` with these reasons, deciding inside its write transaction;
the console asks the same functions about the run it shows, to grey out a key and, when the key is
pressed anyway, to say why. So the rule and its wording live here once.
"""

from __future__ import annotations

from .models import Checkpoint, RunSummary
from .status import APPROVAL_KINDS, INPUT_KINDS, RunStatus

__all__ = ["APPROVAL_KINDS", "INPUT_KINDS", "announce_refusal", "cancel_refusal", "decision_refusal", "resume_refusal"]


def resume_refusal(run: RunSummary) -> str | None:
    """Why ``run`` cannot be resumed: it is running, paused for a person or a host, or ended."""
    rid, status = run.run_id, run.status
    if status == RunStatus.RUNNING:
        who = f"pid {run.lease.pid} on {run.lease.host}" if run.lease else "another process"
        return f"run {rid} is being executed by {who}; wait for it, or cancel it"
    if status == RunStatus.AWAITING_APPROVAL:
        return f"run {rid} is awaiting approval; approve or reject it first (relaypoint approve {rid})"
    if status == RunStatus.AWAITING_INPUT:
        return f"run {rid} is awaiting input; answer it first (relaypoint respond {rid} --value JSON)"
    if status.is_terminal:
        return f"run {rid} is {status} and cannot be resumed; fork it instead (relaypoint fork {rid} --from STEP)"
    return None


def decision_refusal(run: RunSummary, pending: Checkpoint | None, kinds: tuple[str, ...], verb: str) -> str | None:
    """Why ``verb`` (approve, reject, respond to) cannot decide ``run``: no open checkpoint of one of
    ``kinds`` (``pending`` is the run's open checkpoint), or the run has ended. The open
    checkpoint decides, not the status alone: a pause whose decision cannot be read is open again."""
    if pending is None or pending.kind not in kinds or run.status.is_terminal:
        return f"run {run.run_id} is {run.status}; there is nothing to {verb}"
    return None


def cancel_refusal(run: RunSummary) -> str | None:
    """Why ``run`` cannot be cancelled: it has already ended."""
    if run.status.is_terminal:
        return f"run {run.run_id} is already {run.status}; nothing to cancel"
    return None


def announce_refusal(run: RunSummary, pending: Checkpoint | None) -> str | None:
    """Why the pause of ``run`` cannot be announced again: it waits on no one (``pending``, its open
    checkpoint, is None, or the run is not paused)."""
    if pending is None or not run.status.is_paused:
        return f"run {run.run_id} is {run.status}: it waits on no one, so there is no pause to announce"
    return None
