"""``relaypoint worker --on-pause CMD``: tells a person that a run waits for them, by running a
command of theirs (mail, chat, a desktop notification) with the pause as JSON on its standard input.

What is announced is the store's to decide: a worker with a hook claims the pauses no one has
announced yet (:meth:`relaypoint.Runtime.announce_pauses`), wherever they were made (by a worker,
by ``relaypoint start``, by a resume in the console), and hands them to :class:`PauseHook`, which
tries each with retries and says how it ended; the worker records that in the store
(:meth:`relaypoint.Runtime.settle_announcement`). A pause is marked announced once an attempt
succeeded, never before: at least once, each attempt given the pause's idempotency key.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any

from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from .clock import to_text
from .defaults import HOOK_ATTEMPTS, HOOK_BACKOFF_SECONDS, HOOK_SECONDS
from .models import PendingDecision
from .status import AnnouncementOutcome

HOOK_THREADS = 4
"""Hooks run at once; more pauses wait their turn (each hook is bounded by its timeout)."""

BACKOFF_MAX_SECONDS = 60.0
"""The longest wait between two attempts of a hook."""

CLAIM_MARGIN_SECONDS = 10.0
"""How much longer than its attempts and waits (and a worker's poll) a worker's claim on a pause
lasts: time to start and reap the hooks and to record the outcome, on a loaded machine."""

_ERROR_CHARS = 200
"""Characters of a failed hook's last stderr line quoted in the worker's log."""

_STDERR_TAIL = 4096
"""Bytes at the end of a failed hook's standard error read for its last line."""


def idempotency_key(pause: PendingDecision) -> str:
    """The key every attempt to announce ``pause`` is given, the same across attempts, workers and
    ``relaypoint announce``: ``RUN_ID/pause/CHECKPOINT_ID``."""
    return f"{pause.run_id}/pause/{pause.checkpoint_id}"


def notice(pause: PendingDecision) -> dict[str, Any]:
    """The JSON object a hook reads: ``run_id``, ``workflow``, ``kind`` (approval, input, orphan),
    ``step``, and for an execution inside a pattern its ``iteration`` and ``agent`` (None for a
    top-level step), ``reason``, ``deadline`` (ISO 8601 UTC, or None), ``checkpoint_id`` (what a
    decision cites: ``relaypoint approve RUN --checkpoint ID``) and ``idempotency_key`` (see
    :func:`idempotency_key`)."""
    return {"run_id": pause.run_id, "workflow": pause.workflow, "kind": pause.kind, "step": pause.step,
            "iteration": pause.iteration, "agent": pause.agent,
            "reason": pause.reason, "deadline": to_text(pause.deadline_at) if pause.deadline_at else None,
            "checkpoint_id": pause.checkpoint_id, "idempotency_key": idempotency_key(pause)}


def unstartable(program: str) -> str | None:
    """Why ``program`` (a path, or a name looked up on PATH) cannot be started, or None."""
    if os.sep not in program:
        return None if shutil.which(program) else f"cannot run {program!r}: no such program on PATH"
    path = Path(program)
    if not path.exists():
        return f"cannot run {program!r}: no such file"
    if path.is_dir():
        return f"cannot run {program!r}: it is a directory"
    if not os.access(path, os.X_OK):
        return f"cannot run {program!r}: it is not executable (chmod +x it)"
    return None


class HookFailed(Exception):
    """One attempt of a hook failed; the message says how (``exited with status 3: ...``)."""


class _Closing(Exception):
    """The hook is closing: no more attempts."""


class PauseHook:
    """Runs ``command`` (a program and its arguments; no shell) for each :meth:`announce`, with
    :func:`notice` as one line of JSON on its standard input, on threads of its own: the caller never
    waits. An attempt has succeeded when the command exits 0, and has ended when its process exits
    (a child it left in the background is its own). One still running after ``timeout`` seconds is
    killed with its process group. A failed attempt (it could not start, exited non-zero, or was
    killed) is one line to ``log`` and is tried again after ``backoff`` seconds, doubling (at most
    :data:`BACKOFF_MAX_SECONDS`), up to ``attempts`` in all. Its standard output is discarded; the
    last line of its standard error is quoted when it fails.

    Raises ``ValueError`` (one line) when ``command`` is empty or its program cannot be started.
    """

    def __init__(self, command: list[str], *, timeout: float = HOOK_SECONDS, attempts: int = HOOK_ATTEMPTS,
                 backoff: float = HOOK_BACKOFF_SECONDS, log: Callable[[str], None] = print) -> None:
        if not command:
            raise ValueError("no command given")
        if (why := unstartable(command[0])) is not None:
            raise ValueError(why)
        self.command = command
        self.timeout = timeout
        self.attempts = attempts
        self.log = log
        self._wait = wait_exponential(multiplier=backoff, max=BACKOFF_MAX_SECONDS)
        self._pool = ThreadPoolExecutor(max_workers=HOOK_THREADS, thread_name_prefix="on-pause")
        self._lock = threading.Lock()
        self._under_way = 0  # announcements handed over whose attempts have not ended
        self._closing = threading.Event()

    @property
    def hold_seconds(self) -> float:
        """How long a claim on a pause must last for every attempt of its announcement: the
        attempts' timeouts, the waits between them and :data:`CLAIM_MARGIN_SECONDS`."""
        waits = 0.0
        state = RetryCallState(None, None, (), {})  # what the wait strategy reads: the attempt number
        while state.attempt_number < self.attempts:
            waits += self._wait(state)
            state.attempt_number += 1
        return self.attempts * self.timeout + waits + CLAIM_MARGIN_SECONDS

    def free(self) -> int:
        """How many announcements would start at once now (``HOOK_THREADS`` less those under way or
        waiting to be tried again): a caller claims no more than this."""
        with self._lock:
            return max(0, HOOK_THREADS - self._under_way)

    def announce(self, pause: PendingDecision) -> Future[AnnouncementOutcome]:
        """Try the hook for ``pause`` soon, in the background; the future says how it ended:
        ``announced`` (an attempt succeeded), ``failed`` (every attempt failed) or ``released``
        (:meth:`close` came before the attempts ran out)."""
        with self._lock:
            self._under_way += 1
        return self._pool.submit(self._counted, pause)

    def _counted(self, pause: PendingDecision) -> AnnouncementOutcome:
        try:
            return self._deliver(pause)
        finally:
            with self._lock:
                self._under_way -= 1

    def _deliver(self, pause: PendingDecision) -> AnnouncementOutcome:
        about = f"run {pause.run_id}: on-pause hook for checkpoint {pause.checkpoint_id}"
        payload = (json.dumps(notice(pause), ensure_ascii=True) + "\n").encode()

        def again(state: RetryCallState) -> None:
            self.log(f"{about} {state.outcome.exception()} (attempt {state.attempt_number} of {self.attempts}; "
                     f"again in {state.next_action.sleep:g} s)")

        retrying = Retrying(stop=stop_after_attempt(self.attempts), wait=self._wait, sleep=self._sleep,
                            retry=retry_if_exception_type(HookFailed), before_sleep=again, reraise=True)
        try:
            retrying(self._attempt, payload)
        except HookFailed as e:
            self.log(f"{about} {e} (attempt {self.attempts} of {self.attempts}); the pause stays unannounced: "
                     f"`relaypoint announce {pause.run_id}` announces it again")
            return AnnouncementOutcome.FAILED
        except _Closing:
            self.log(f"{about} not tried again: the worker is stopping; the next worker announces the pause")
            return AnnouncementOutcome.RELEASED
        return AnnouncementOutcome.ANNOUNCED

    def _sleep(self, seconds: float) -> None:
        """Wait between attempts; raises ``_Closing`` as soon as :meth:`close` is called."""
        if self._closing.wait(seconds):
            raise _Closing

    def _attempt(self, payload: bytes) -> None:
        """Run the command once with ``payload`` on its standard input. Raises ``HookFailed``.

        Standard input and error are files, not pipes: the attempt ends when the process exits,
        not when every process holding a pipe (a child left in the background) has closed it."""
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stderr:
            stdin.write(payload)
            stdin.seek(0)
            try:
                proc = subprocess.Popen(self.command, stdin=stdin, stdout=subprocess.DEVNULL, stderr=stderr,
                                        start_new_session=True)
            except OSError as e:
                raise HookFailed(f"could not start {self.command[0]!r}: {e.strerror or e}") from None
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: the hook and what it started
                proc.wait()
                raise HookFailed(f"did not finish within {self.timeout:g} s; killed") from None
            if code == 0:
                return
            stderr.seek(max(0, stderr.seek(0, os.SEEK_END) - _STDERR_TAIL))
            lines = stderr.read().decode("utf-8", "replace").strip().splitlines()
            said = f": {lines[-1][:_ERROR_CHARS]}" if lines else ""
            ended = f"exited with status {code}" if code > 0 else f"was killed by signal {-code}"
            raise HookFailed(f"{ended}{said}")

    def close(self) -> None:
        """Stop trying again, and wait for the attempts under way (each bounded by the timeout)."""
        self._closing.set()
        self._pool.shutdown(wait=True)
