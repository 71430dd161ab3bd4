"""Starting a resume in a separate, detached process (the console uses it so runs outlive it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def spawn_resume(db_path: str | os.PathLike, app_spec: str, run_id: str) -> subprocess.Popen:
    """Start ``python -m relaypoint --db DB resume RUN_ID --app APP`` in its own session, so it survives
    the caller closing. Its stderr goes to ``<db>.resume.log`` beside the store (appended); the run's
    own progress and errors are recorded in the store. Returns the process handle.

    The current directory is kept, so an ``--app`` module found there is found by the child too.
    """
    log_path = Path(f"{db_path}.resume.log")
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "relaypoint", "--db", str(db_path), "resume", run_id, "--app", app_spec],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
        )
