"""Pydantic models of what the store holds; also the JSON shapes the CLI prints with ``--json``.

Times are aware UTC datetimes; in JSON they are ISO 8601 strings ending in ``Z``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer
from pydantic.json_schema import SkipJsonSchema

from . import usage
from .clock import to_text
from .status import RunStatus, StepStatus


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)

    @field_serializer("*", when_used="json")
    def _times(self, value: Any) -> Any:
        return to_text(value) if isinstance(value, datetime) else value


class Lease(_Model):
    """Who is executing a run: an owner token, process id, the process's start identity
    (``pid_start``, see :func:`relaypoint.lease.process_start`; None where it cannot be read), host,
    and when the lease expires (UTC). The token is the fence; it is never printed (nor in the JSON
    schema of the models that hold a lease, which describes what is printed)."""

    token: SkipJsonSchema[str] = Field(exclude=True)
    pid: int
    pid_start: str | None = None
    host: str
    expires_at: datetime | None
    heartbeat_at: datetime | None


class RunSummary(_Model):
    """One row of a run listing. Built from the ``runs`` table alone: never reads step outputs."""

    run_id: str
    workflow: str
    status: RunStatus
    parent_run_id: str | None
    forked_from_step: str | None
    created_at: datetime
    updated_at: datetime
    current_step: str | None
    steps_done: int
    steps_total: int
    error: str | None = None
    lease: Lease | None = None


class CallRecord(_Model):
    """A call execution ``seq`` recorded (see :meth:`relaypoint.workflow.Context.call`), at its
    ``position`` there (0-based, the order of its calls). ``kind``: call, model (a model request)
    or tool (:class:`~relaypoint.status.CallKind`); ``status``: completed or failed; ``attempt``:
    the execution's attempt that recorded it; ``value``: a completed call's result; ``error``: a
    failed one's line; ``detail``: what it shows besides its result (a model request's messages, a
    tool call's arguments), or None; ``model`` and the usage (``requests``, ``input_tokens``,
    ``output_tokens``): a model request's, else None. Times UTC."""

    seq: int
    position: int
    name: str
    kind: str
    status: StepStatus
    attempt: int
    value: Any = None
    error: str | None = None
    detail: Any = None
    model: str | None = None
    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    started_at: datetime
    finished_at: datetime


class StepRecord(_Model):
    """One step execution of a run, keyed by its sequence number ``seq`` in the run (0, 1, ...).

    For a chain, the top-level steps are ``seq`` 0..n-1 in definition order; executions a driver
    appends later (a repeated name in a later ``iteration``, a call by an ``agent``) get the next
    numbers, with ``parent`` the ``seq`` of the execution that spawned them (None at top level).
    ``output`` is None when not loaded or when the step returned None; ``has_output`` tells the
    two apart. ``calls``: the calls the execution recorded, in order (empty when not loaded).
    ``progress``: the last line the execution gave ``ctx.progress`` (None: none)."""

    seq: int
    name: str
    iteration: int = 1
    agent: str | None = None
    parent: int | None = None
    status: StepStatus
    attempts: int
    options: dict[str, Any]
    output: Any = None
    has_output: bool = False
    error: str | None = None
    traceback: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    idempotency_key: str
    progress: str | None = None
    calls: list[CallRecord] = []


class Checkpoint(_Model):
    """A durable boundary of a run. ``kind``: start, boundary, approval, input, orphan, fork.

    Pausing kinds (approval, input, orphan) wait for a decision: ``decision`` is None until one of
    approved, rejected or responded is recorded, once. ``seq`` is the sequence number of the step
    execution the run continues with from this boundary; ``state`` is the driver's state (JSON) at
    this boundary, restored on resume (None for checkpoints written before schema version 3).

    ``paused_seq``: what a pause is about, the seq of its execution: the gated execution whose
    output an approval approves (the run then continues at ``seq``, another execution), the
    execution that asked for input, a person's turn, a held orphan (these continue where they
    paused: ``seq`` is the same). None for kinds that do not pause, and for a pause whose execution
    is no longer in the run (an allowed drift removed it; negative then, as ``seq`` is). Every
    reader resolves a pause through this one field, never through ``seq``.
    """

    checkpoint_id: int
    run_id: str
    seq: int
    step: str | None
    kind: str
    created_at: datetime
    reason: str | None = None
    state: Any = None
    decision: str | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    comment: str | None = None
    value: Any = None
    deadline_at: datetime | None = None
    paused_seq: int | None = None


class PendingDecision(Checkpoint):
    """A decision a person or host owes: the undecided pausing checkpoint (approval, input, orphan)
    a paused run waits on, with the run's ``workflow`` and ``status`` (awaiting_approval or
    awaiting_input), and where the execution it is about (``paused_seq``) is inside its pattern:
    its ``iteration`` and ``agent`` (both None for a top-level step). The review queue's entries,
    oldest first."""

    workflow: str
    status: RunStatus
    iteration: int | None = None
    agent: str | None = None


class RunHead(RunSummary):
    """A run's own row: its summary with the input and definition (decoded leniently, for display:
    a damaged value reads ``{"unreadable": <raw text>}``), the definition's ``fingerprint``, and
    ``suspect_deaths``, the deaths of its executor charged to it (the poison-pill count)."""

    input: Any = None
    definition: Any = None
    fingerprint: str | None = None
    suspect_deaths: int = 0


class Owner(_Model):
    """The process a running run's lease names: host, pid, its start identity (see
    :func:`relaypoint.lease.process_start`) and when the lease expires (UTC; None when unreadable)."""

    host: str | None
    pid: int | None
    pid_start: str | None
    expires_at: datetime | None


class Event(_Model):
    """One entry of a run's audit trail (``kind`` e.g. step_completed, approved, interruption_detected)."""

    event_id: int
    run_id: str
    at: datetime
    kind: str
    step: str | None = None
    actor: str | None = None
    detail: dict[str, Any] | None = None


class Run(RunSummary):
    """A run with its input, step chain (``tasks``), the checkpoint it waits on, its forks, for a
    fork from an iteration of a pattern that iteration (``forked_from_iteration``, of the pattern
    ``forked_from_step``; None otherwise), and whether the run it was forked from has since been
    deleted (``parent_deleted``)."""

    input: dict[str, Any]
    tasks: list[StepRecord]
    pending: Checkpoint | None = None
    forks: list[str] = []
    forked_from_iteration: int | None = None
    definition: Any = None
    parent_deleted: bool = False
    prices: dict[str, tuple[float, float]] = {}

    @property
    def forked_at(self) -> datetime | None:
        """When the run was created as a fork (its usage counts only the calls it made since, see
        :func:`relaypoint.usage.own`); None when it is no fork."""
        return usage.forked_at(self.created_at, self.parent_run_id)

    def shown(self) -> dict[str, Any]:
        """The run as JSON values, as ``relaypoint show --json`` prints it and the MCP server's
        ``show_run`` returns it: the summary's fields with ``input``, ``forks`` and
        ``forked_from_iteration``, then ``tasks``
        (each execution's seq, name, iteration, agent, parent (its pattern's seq), status, attempts,
        output, error, traceback, started_at, finished_at, recorded ``calls`` and ``usage``, in tree
        order: a pattern's executions follow its row), ``pending`` (the checkpoint it waits on, or
        None) and the run's ``usage`` (see :mod:`relaypoint.usage`: ``{"requests", "input_tokens",
        "output_tokens"}``, with ``"cost"`` in US dollars when priced). Times are ISO 8601 UTC strings."""
        each = usage.per_execution(self.tasks, self.prices)
        data = self.model_dump(mode="json", include={
            "run_id", "workflow", "status", "input", "parent_run_id", "forked_from_step", "forked_from_iteration",
            "created_at", "updated_at", "current_step", "steps_done", "steps_total", "error", "forks", "lease"})
        data["tasks"] = [t.model_dump(mode="json", include={
            "seq", "name", "iteration", "agent", "parent", "status", "attempts", "output", "error", "traceback",
            "started_at", "finished_at", "calls"}) | {"usage": each[t.seq].as_json()} for t in self.tasks]
        data["pending"] = self.pending.model_dump(mode="json") if self.pending else None
        data["usage"] = usage.of_run(self.tasks, self.prices, self.forked_at).as_json()
        return data
