"""``relaypoint worker --on-pause CMD``: tells a person that a run waits for them, by running a
command of theirs (mail, chat, a desktop notification) with the pause as JSON on its standard input.

What is announced is the store's to decide: a worker with a hook claims the pauses no one has
announced yet (:meth:`relaypoint.Runtime.announce_pauses`), wherever they were made (by a worker,
by ``relaypoint start``, by a resume in the console), each once across every worker and restart,
and hands them to :class:`PauseHook`. A pause claimed by a worker that dies before its hook ran, or
whose hook fails, is not announced again: at most once, never twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

from .clock import to_text
from .defaults import HOOK_SECONDS
from .models import PendingDecision

HOOK_THREADS = 4
"""Hooks run at once; more pauses wait their turn (each hook is bounded by its timeout)."""

_ERROR_CHARS = 200
"""Characters of a failed hook's last stderr line quoted in the worker's log."""


def notice(pause: PendingDecision) -> dict[str, Any]:
    """The JSON object a hook reads: ``run_id``, ``workflow``, ``kind`` (approval, input, orphan),
    ``step``, and for an execution inside a pattern its ``iteration`` and ``agent`` (None for a
    top-level step), ``reason``, ``deadline`` (ISO 8601 UTC, or None) and ``checkpoint_id`` (what a
    decision cites: ``relaypoint approve RUN --checkpoint ID``)."""
    return {"run_id": pause.run_id, "workflow": pause.workflow, "kind": pause.kind, "step": pause.step,
            "iteration": pause.iteration, "agent": pause.agent,
            "reason": pause.reason, "deadline": to_text(pause.deadline_at) if pause.deadline_at else None,
            "checkpoint_id": pause.checkpoint_id}


class PauseHook:
    """Runs ``command`` (a program and its arguments; no shell) once per :meth:`announce`, with
    :func:`notice` as one line of JSON on its standard input, on threads of its own: the caller never
    waits. A hook still running after ``timeout`` seconds is killed with its process group. A hook
    that cannot start, exits non-zero or times out is reported to ``log`` as one line, never raised.
    Its standard output is discarded; the last line of its standard error is quoted when it fails.
    """

    def __init__(self, command: list[str], *, timeout: float = HOOK_SECONDS,
                 log: Callable[[str], None] = print) -> None:
        self.command = command
        self.timeout = timeout
        self.log = log
        self._pool = ThreadPoolExecutor(max_workers=HOOK_THREADS, thread_name_prefix="on-pause")
        self._lock = threading.Lock()
        self._under_way = 0  # announcements handed over whose hook has not ended

    def free(self) -> int:
        """How many announcements would start at once now (``HOOK_THREADS`` less those under way or
        waiting): a caller that claims no more than this keeps what a crash can lose that small."""
        with self._lock:
            return max(0, HOOK_THREADS - self._under_way)

    def announce(self, pause: PendingDecision) -> None:
        """Run the hook for ``pause`` soon, in the background."""
        payload = (json.dumps(notice(pause), ensure_ascii=True) + "\n").encode()
        with self._lock:
            self._under_way += 1
        self._pool.submit(self._counted, pause, payload)

    def _counted(self, pause: PendingDecision, payload: bytes) -> None:
        try:
            self._run(pause, payload)
        finally:
            with self._lock:
                self._under_way -= 1

    def _run(self, pause: PendingDecision, payload: bytes) -> None:
        about = f"run {pause.run_id}: on-pause hook for checkpoint {pause.checkpoint_id}"
        try:
            proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            self.log(f"{about} could not start {self.command[0]!r}: {e.strerror or e}")
            return
        try:
            _, err = proc.communicate(payload, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the hook and what it started
            proc.wait()
            proc.stderr.close()
            self.log(f"{about} did not finish within {self.timeout:g} s; killed")
            return
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            said = f": {lines[-1][:_ERROR_CHARS]}" if lines else ""
            ended = (f"exited with status {proc.returncode}" if proc.returncode > 0
                     else f"was killed by signal {-proc.returncode}")
            self.log(f"{about} {ended}{said}")

    def close(self) -> None:
        """Wait for the hooks started or waiting (each bounded by the timeout)."""
        self._pool.shutdown(wait=True)
