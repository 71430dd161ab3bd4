"""How the console writes statuses, ids and times (all as ``rich.text.Text`` or plain ``str``)."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from relaypoint.status import RUN_SYMBOLS, STEP_SYMBOLS, RunStatus, StepStatus

SHORT_ID = 8

RUN_COLORS: dict[RunStatus, str] = {
    RunStatus.QUEUED: "bright_blue",
    RunStatus.RUNNING: "cyan",
    RunStatus.AWAITING_APPROVAL: "yellow",
    RunStatus.AWAITING_INPUT: "magenta",
    RunStatus.INTERRUPTED: "dark_orange",
    RunStatus.COMPLETED: "green",
    RunStatus.FAILED: "red",
    RunStatus.REJECTED: "red",
    RunStatus.CANCELLED: "bright_black",
}

STEP_COLORS: dict[StepStatus, str] = {
    StepStatus.PENDING: "bright_black",
    StepStatus.RUNNING: "cyan",
    StepStatus.AWAITING_INPUT: "magenta",
    StepStatus.AWAITING_APPROVAL: "yellow",
    StepStatus.COMPLETED: "green",
    StepStatus.FAILED: "red",
    StepStatus.INTERRUPTED: "dark_orange",
    StepStatus.CANCELLED: "bright_black",
}


def short_id(run_id: str | None) -> str:
    """The first 8 characters of a run id (ids are accepted by unique prefix everywhere)."""
    return (run_id or "")[:SHORT_ID]


def run_status(status: RunStatus) -> Text:
    """Symbol and name of a run status in its colour, e.g. ``⏸ awaiting_approval``."""
    return Text(f"{RUN_SYMBOLS[status]} {status.value}", style=RUN_COLORS[status])


def step_status(status: StepStatus) -> Text:
    """Symbol and name of a step status in its colour, e.g. ``✔ completed``."""
    return Text(f"{STEP_SYMBOLS[status]} {status.value}", style=STEP_COLORS[status])


AGO_UNITS = ((86400, "d"), (3600, "h"), (60, "m"))
"""The units of a relative time past a minute, largest first, in seconds (under a minute: ``s``)."""


def ago(when: datetime | None, now: datetime) -> str:
    """A past time relative to ``now``: ``12s ago``, ``3m ago``, ``5h ago``, ``4d ago`` (or ``-``)."""
    if when is None:
        return "-"
    seconds = max(0, int((now - when).total_seconds()))
    size, unit = next(((size, unit) for size, unit in AGO_UNITS if seconds >= size), (1, "s"))
    return f"{seconds // size}{unit} ago"


def ahead(when: datetime | None, now: datetime) -> str:
    """A future time relative to ``now``: ``in 12s``, ``in 3m``, ``in 5h``, ``in 4d`` (``passed``
    when it is not in the future, ``-`` for None)."""
    if when is None:
        return "-"
    if when <= now:
        return "passed"
    return "in " + ago(now, when).removesuffix(" ago")


def utc(when: datetime | None) -> str:
    """An absolute UTC time to the second, e.g. ``2026-03-14 09:00:05 UTC`` (or ``-``)."""
    return "-" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def clock_time(when: datetime) -> str:
    """A compact UTC time for event lists, e.g. ``03-14 09:00:05``."""
    return when.strftime("%m-%d %H:%M:%S")


def duration(start: datetime | None, end: datetime | None) -> str:
    """Elapsed time between two instants: ``850ms``, ``4.2s``, ``3m 04s``, ``2h 05m`` (or ``""``)."""
    if start is None or end is None:
        return ""
    seconds = max(0.0, (end - start).total_seconds())
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m {int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60):02d}m"
