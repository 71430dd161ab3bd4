"""Defaults, defined once and imported wherever they apply."""

from __future__ import annotations

DURABILITY = "full"
"""How a committed write survives: "full" (on disk when the commit returns: survives a power cut)
or "normal" (survives a process crash; an OS crash or power cut may lose the last commits)."""

DURABILITIES = ("full", "normal")

BUSY_TIMEOUT_SECONDS = 30.0
"""How long a write waits for another process's write lock before giving up (StoreBusy)."""

LEASE_SECONDS = 30.0
"""How long an executor's lease lasts without a heartbeat (renewed every third of it)."""

POLL_SECONDS = 1.0
"""How often an idle worker looks for runnable runs."""

MAX_RECOVERIES = 3
"""Deaths charged to a run (its executor died while executing it alone) before a worker fails it."""

RETRIES = 0
"""Automatic re-executions of a step after an exception (a step's ``retries`` default)."""

HOOK_SECONDS = 30.0
"""How long a worker's ``--on-pause`` hook may run before it is killed."""

HOOK_ATTEMPTS = 3
"""Attempts of a worker's ``--on-pause`` hook at one pause before it is given up (until
``relaypoint announce`` asks again)."""

HOOK_BACKOFF_SECONDS = 1.0
"""The wait before a failed ``--on-pause`` hook is tried again, doubling after each attempt."""
