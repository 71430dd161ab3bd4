"""The changes the console asks of the runtime. Each takes a runtime (opened by the worker that
runs it) and returns the one line the console shows; the runtime's refusals propagate as
``RelaypointError``. Decisions pass the checkpoint the person saw, so a stale view is refused."""

from __future__ import annotations

from relaypoint.models import Run
from relaypoint.runtime import Runtime

from .format import short_id
from .screens.forms import Approval, ForkRequest, Response


def _checkpoint(run: Run) -> int:
    assert run.pending is not None, "decisions apply to a run with a pending checkpoint"
    return run.pending.checkpoint_id


def resumed_by(run_id: str, app_spec: str | None, key: str) -> str:
    """Who resumes the queued run ``run_id``: ``key`` (how to press r here) when the console was
    given the workflows (``app_spec``) and so can resume it, else a worker or ``relaypoint resume``."""
    if app_spec:
        return key
    return f"a worker resumes it, or `relaypoint resume {run_id} --app MODULE:ATTR`"


def approve(run: Run, approval: Approval, rt: Runtime, *, app_spec: str | None, by: str | None) -> str:
    """Approve the checkpoint shown, with the comment and the edited output if any, as ``by``
    (here and in each decision below, None is the OS user). ``app_spec``: the console's (see
    :func:`resumed_by`)."""
    rt.approve(run.run_id, by=by, comment=approval.comment, output=approval.output, checkpoint_id=_checkpoint(run))
    edited = " with an edited output" if approval.output is not None else ""
    return (f"approved run {short_id(run.run_id)}{edited}; it is queued: "
            f"{resumed_by(run.run_id, app_spec, 'r on the runs list resumes it')}")


def reject(run: Run, reason: str, rt: Runtime, *, by: str | None) -> str:
    """Reject the checkpoint shown as ``by``; the run ends."""
    rt.reject(run.run_id, reason, by=by, checkpoint_id=_checkpoint(run))
    return f"rejected run {short_id(run.run_id)}; the run has ended"


def respond(run: Run, response: Response, rt: Runtime, *, app_spec: str | None, by: str | None) -> str:
    """Answer the input request shown, as ``by``. ``app_spec``: the console's (see :func:`resumed_by`)."""
    rt.respond(run.run_id, response.value, by=by, checkpoint_id=_checkpoint(run))
    return (f"answered run {short_id(run.run_id)}; it is queued: "
            f"{resumed_by(run.run_id, app_spec, 'r on the runs list resumes it')}")


def fork(run: Run, request: ForkRequest, rt: Runtime, *, app_spec: str | None) -> str:
    """Fork the run from the chosen step, or from an iteration of a pattern, with the new input if
    any (the summary says which). ``app_spec``: the console's (see :func:`resumed_by`)."""
    if request.iteration is None:
        new_id = rt.fork(run.run_id, request.step, request.input)
        where = f"step {request.step!r}"
    else:
        new_id = rt.fork(run.run_id, request.step, request.input, iteration=request.iteration)
        where = f"{request.at} of {request.step!r}"
    given = "the parent's input" if request.input is None else "a new input"
    child = rt.get(new_id, with_outputs=False)
    then = (f"queued: {resumed_by(new_id, app_spec, 'select it and press r to resume it')}"
            if child.pending is None else  # a copied gate
            f"{child.status} at step {child.pending.step!r}: select it to decide")
    return f"forked run {short_id(run.run_id)} from {where} with {given} as {short_id(new_id)} ({then})"


def cancel(run: Run, rt: Runtime, *, by: str | None) -> str:
    """Cancel the run as ``by``."""
    was = rt.cancel(run.run_id, by=by)
    return f"cancelled run {short_id(run.run_id)} (it was {was})"
