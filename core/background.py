"""Starting a resume in a separate, detached process (the console uses it so runs outlive it), and
reading why one failed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .defaults import DURABILITY
from .store.url import log_stem
from .views.display import clean

REASON_CHARS = 300
"""Characters of a failed resume's reason shown (it is one line in the console)."""

_TAIL_BYTES = 1024 * 1024


def resume_log(db_url: str) -> Path:
    """The log of resumes started in the background for the store at ``db_url``: beside the
    store's file, ``<file>.resume.log`` (a PostgreSQL store: ``relaypoint-<schema>.resume.log`` in
    the current directory)."""
    return Path(f"{log_stem(db_url)}.resume.log")


def spawn_resume(db_url: str, app_spec: str, run_id: str, *, allow_drift: bool = False,
                 durability: str = DURABILITY) -> subprocess.Popen:
    """Start ``python -m relaypoint --durability D resume RUN_ID --app APP [--allow-drift]`` (the
    store's URL in ``RELAYPOINT_DB``)
    in its own session, so it survives the caller closing. Its stderr goes to :func:`resume_log`
    (appended; created readable by this user only, like the store, since errors may quote step
    data); the run's own progress and errors are recorded in the store. Returns the process handle.

    The current directory is kept, so an ``--app`` module found there is found by the child too.
    """
    # the store URL goes in the environment, not on the command line, where `ps` would show a password
    command = [sys.executable, "-m", "relaypoint", "--durability", durability, "resume", run_id, "--app", app_spec]
    with os.fdopen(os.open(resume_log(db_url), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab") as log:
        return subprocess.Popen(
            command + (["--allow-drift"] if allow_drift else []),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
            env={**os.environ, "RELAYPOINT_DB": db_url},
        )


def log_size(db_url: str) -> int:
    """The current size of the resume log in bytes (0 when there is none): where the output of a
    resume started now begins."""
    try:
        return resume_log(db_url).stat().st_size
    except FileNotFoundError:
        return 0


def failure_reason(db_url: str, since: int) -> str | None:
    """Why a background resume failed: the last ``Error: ...`` line the CLI wrote to the resume log
    after byte ``since`` (see :func:`log_size`), on one line, with terminal controls made visible
    and at most :data:`REASON_CHARS` characters; None when there is none. When several resumes
    fail at once their lines share the log, so this is the last failure written since ``since``."""
    try:
        with open(resume_log(db_url), "rb") as log:
            log.seek(max(since, log.seek(0, os.SEEK_END) - _TAIL_BYTES))
            text = log.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    errors = [line for line in text.splitlines() if line.startswith("Error: ")]
    if not errors:
        return None
    reason = clean(errors[-1].removeprefix("Error: ").strip())
    return reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS - 1] + "…"
