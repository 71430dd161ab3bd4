"""Rows into models, shared by the backends: decoding stored JSON leniently for display, statuses
checked against the vocabulary, times read back as aware UTC datetimes (from SQLite's text or a
PostgreSQL ``timestamptz``). A damaged row raises :class:`StoreDamaged` naming what is damaged."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .. import encoding
from ..clock import from_text
from ..errors import StoreError
from ..models import CallRecord, Checkpoint, Lease, Owner, RunSummary, StepRecord
from ..status import RunStatus, StepStatus
from .base import StoreDamaged


def _as_time(value: Any) -> datetime | None:
    """A stored time as an aware UTC datetime: store text (SQLite) or a datetime (PostgreSQL)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return from_text(value)


def readable(text: str | None, shape: type | None = None) -> Any:
    """Decode a stored JSON value for display: damage, or a value not of ``shape`` (dict, list),
    shows as ``{"unreadable": <raw text>}``."""
    try:
        value = encoding.loads(text)
    except (ValueError, RecursionError):
        return {"unreadable": text}
    if shape is not None and value is not None and not isinstance(value, shape):
        return {"unreadable": text}
    return value


def _vocabulary(enum: type, value: str, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        raise StoreDamaged(f"{what} has status {value!r}, outside relaypoint's vocabulary (edited by hand?); "
                           "fix the row or delete the run") from None


def _position(r: dict[str, Any]) -> tuple[str, str]:
    return r["created_at"], r["run_id"]


def _summary_or_none(r: dict[str, Any]) -> RunSummary | None:
    # A listing skips a row damaged by hand (status outside the vocabulary, unreadable time);
    # `show` on it says what is wrong.
    try:
        return RunSummary(**_summary_fields(r))
    except StoreError:
        return None


def _time(r: dict[str, Any], column: str, what: str) -> datetime | None:
    try:
        return _as_time(r[column])
    except (ValueError, TypeError, AttributeError):
        raise StoreDamaged(f"{what} has an unreadable {column} {r[column]!r} (edited by hand?); "
                           "fix the row or delete the run") from None


def _lenient_time(text: str | None) -> datetime | None:
    # A lease expiry edited by hand counts as no lease (expired), never as a live one.
    try:
        return _as_time(text)
    except (ValueError, TypeError, AttributeError):
        return None


def _owner(r: dict[str, Any]) -> Owner:
    return Owner(host=r["lease_host"], pid=r["lease_pid"], pid_start=r["lease_pid_start"],
                 expires_at=_lenient_time(r["lease_expires_at"]))


def _summary_fields(r: dict[str, Any]) -> dict[str, Any]:
    """The :class:`RunSummary` fields of a ``runs`` row. Raises ``StoreDamaged`` for a damaged row."""
    what = f"run {r['run_id']}"
    lease = None
    if r.get("lease_token"):
        lease = Lease(token=r["lease_token"], pid=r["lease_pid"] or 0, pid_start=r.get("lease_pid_start") or None,
                      host=r["lease_host"] or "",
                      expires_at=_time(r, "lease_expires_at", what), heartbeat_at=_time(r, "heartbeat_at", what))
    return dict(
        run_id=r["run_id"], workflow=r["workflow"], status=_vocabulary(RunStatus, r["status"], what),
        parent_run_id=r["parent_run_id"], forked_from_step=r["forked_from_step"],
        created_at=_time(r, "created_at", what), updated_at=_time(r, "updated_at", what),
        current_step=r["current_step"], steps_done=r["steps_done"], steps_total=r["steps_total"],
        error=r["error"], lease=lease,
    )


def asks_approval(options: dict[str, Any]) -> bool:
    """Whether a step's stored options ask for approval (``"approval"`` true, 1 or 1.0, never
    "1"): the gates a fork carries over."""
    return not isinstance(flag := options.get("approval"), str) and flag == 1


def options_ask_approval(text: str | None) -> bool:
    """:func:`asks_approval` of a row's stored options text (unreadable options ask for nothing).
    Options as relaypoint writes them, one ``"approval":false`` key, are answered without
    decoding (a fork over a long chain reads every row's)."""
    if text is not None and '"approval":false' in text and text.count('"approval"') == 1:
        return False
    return asks_approval(readable(text, dict) or {})


def step_from_row(r: dict[str, Any]) -> StepRecord:
    """Build a :class:`StepRecord` (without output) from a ``steps`` row."""
    what = f"step {r['name']!r}"
    return StepRecord(
        seq=r["seq"], name=r["name"], iteration=r["iteration"], agent=r["agent"], parent=r["parent_seq"],
        status=_vocabulary(StepStatus, r["status"], what), attempts=r["attempts"],
        options=readable(r["options"], dict) or {}, has_output=bool(r["has_output"]), error=r["error"],
        traceback=r["traceback"], started_at=_time(r, "started_at", what), finished_at=_time(r, "finished_at", what),
        idempotency_key=r["idempotency_key"], progress=r["progress"],
    )


def call_from_row(r: dict[str, Any], value: Any) -> CallRecord:
    """Build a :class:`CallRecord` from a ``calls`` row and its decoded ``value``."""
    what = f"call {r['name']!r} of execution {r['seq']}"
    return CallRecord(
        seq=r["seq"], position=r["position"], name=r["name"], kind=r["kind"],
        status=_vocabulary(StepStatus, r["status"], what), attempt=r["attempt"], value=value, error=r["error"],
        detail=readable(r["detail"]), model=r["model"], requests=r["requests"], input_tokens=r["input_tokens"],
        output_tokens=r["output_tokens"], started_at=_time(r, "started_at", what),
        finished_at=_time(r, "finished_at", what))


def _execution(run_id: str, r: dict[str, Any]) -> str:
    """How a message names an execution of run ``run_id`` given its ``steps`` row."""
    agent = f", agent '{r['agent']}'" if r["agent"] is not None else ""
    return f"the output of execution {r['seq']} ('{r['name']}', iteration {r['iteration']}{agent}) of run {run_id}"


def checkpoint_from_row(r: dict[str, Any]) -> Checkpoint:
    """Build a :class:`Checkpoint` from a ``checkpoints`` row."""
    what = f"checkpoint {r['checkpoint_id']}"
    return Checkpoint(
        checkpoint_id=r["checkpoint_id"], run_id=r["run_id"], seq=r["seq"], step=r["step"],
        kind=r["kind"], created_at=_time(r, "created_at", what), reason=r["reason"],
        state=readable(r["state"]), decision=r["decision"], decided_by=r["decided_by"],
        decided_at=_time(r, "decided_at", what), comment=r["comment"], value=readable(r["value"]),
        deadline_at=_time(r, "deadline_at", what), paused_seq=r["paused_seq"],
    )
