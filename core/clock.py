"""UTC time and id sources, injectable so tests and snapshots are stable."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
IdFactory = Callable[[], str]


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def new_run_id() -> str:
    """A random 16-hex-character run id (64 bits): short unique prefixes, no clock in it."""
    return secrets.token_hex(8)


def to_text(dt: datetime) -> str:
    """Store form of a time: ISO 8601 UTC with milliseconds, fixed width, so text order is time order.

    Example: ``2026-11-30T07:55:54.123Z``. Naive datetimes are taken as UTC.
    """
    if dt.tzinfo is None:
        return dt.isoformat(timespec="milliseconds") + "Z"
    return dt.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"  # drop "+00:00"


def from_text(text: str | None) -> datetime | None:
    """Parse the store form back to an aware UTC datetime (None stays None)."""
    return None if text is None else datetime.fromisoformat(text)  # reads the "Z" since Python 3.11
