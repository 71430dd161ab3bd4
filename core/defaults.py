"""Defaults, defined once and imported wherever they apply."""

from __future__ import annotations

DURABILITY = "full"
"""How a committed write survives: "full" (on disk when the commit returns: survives a power cut)
or "normal" (survives a process crash; an OS crash or power cut may lose the last commits)."""

DURABILITIES = ("full", "normal")

BUSY_TIMEOUT_SECONDS = 30.0
"""How long a write waits for another process's write lock before giving up (StoreBusy)."""
