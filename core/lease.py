"""Ownership of a run by an executing process: lease, heartbeat, and the owner-liveness rule.

A lease is (token, pid, pid start, host, expires_at). The executor renews it from a heartbeat thread
while a step runs; every executor write is fenced on the token (``UPDATE ... WHERE lease_token = ?``),
so a process that lost its lease cannot record anything.

The owner-liveness rule (:func:`owner_gone`): on this host the process decides — the owner is gone
when its pid is dead or now belongs to another process (the start identity recorded with the lease
differs), and never while it lives, even when its heartbeat stopped (a step holding the GIL, a
stopped process). Only for an owner on another host, whose process cannot be seen, does the lease
expiry decide.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .clock import Clock
from .errors import LeaseLost, UnknownRun
from .models import Lease
from .store import Change, RunStore, RunUpdate, open_store

HOST = socket.gethostname()


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


_BOOT_ID = (_read("/proc/sys/kernel/random/boot_id") or b"").strip().decode() or None


def _stat(pid: int) -> list[bytes] | None:
    """Fields 3 onward of ``/proc/<pid>/stat`` (Linux; the name in field 2 may hold spaces and
    parentheses, so split after its last ``)``), or None where there is no such file."""
    text = _read(f"/proc/{pid}/stat")
    if text is None or b")" not in text:
        return None
    return text.rsplit(b")", 1)[1].split()


def process_start(pid: int) -> str | None:
    """The start identity of process ``pid`` on this host, recorded with a lease so that a pid reused
    by another process is told apart from the owner: on Linux ``"<boot id>:<start time in clock
    ticks since boot>"`` (``/proc/<pid>/stat`` field 22; exact, two processes never share it). None
    where it cannot be read (another system, or the process is gone): the pid alone then decides."""
    fields = _stat(pid)
    if _BOOT_ID is None or fields is None or len(fields) < 20:
        return None
    return f"{_BOOT_ID}:{fields[19].decode()}"


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists on this host and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat(pid)  # a killed child not yet reaped still answers kill(0); its /proc state is Z
    return fields is None or fields[:1] != [b"Z"]


def owner_alive(pid: int, pid_start: str | None) -> bool:
    """True if the process that took a lease as ``pid`` (started as ``pid_start``, see
    :func:`process_start`) is still running on this host. Without a recorded start, or when the
    current one cannot be read (another user's process under ``hidepid``), a live pid counts as
    the owner: a run is never taken from a process that may be alive."""
    if not pid_alive(pid):
        return False
    if not pid_start:
        return True
    now = process_start(pid)
    return now is None or now == pid_start


def owner_gone(host: str | None, pid: int | None, pid_start: str | None, expires_at: datetime | None,
               now: datetime) -> bool:
    """The owner-liveness rule (see the module docstring): on this host, the owner process is dead
    or its pid was reused; on another host (or for a lease without a pid), the lease has expired
    (``expires_at`` UTC at or before ``now``; None counts as expired)."""
    if host == HOST and pid:
        return not owner_alive(pid, pid_start)
    return expires_at is None or expires_at <= now


@dataclass
class LeaseHolder:
    """This process's lease on one run, and the heartbeat that renews it.

    ``seconds``: lease length; the heartbeat renews every ``seconds / 3``. ``lost`` is set when a
    renewal finds the token no longer owns the run (taken over, cancelled, released), and then
    ``on_lost`` is called, on the heartbeat's thread (the executor cancels the calls in flight).
    """

    store_url: str
    run_id: str
    clock: Clock
    seconds: float
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    pid: int = field(default_factory=os.getpid)
    pid_start: str | None = field(default_factory=lambda: process_start(os.getpid()))
    lost: threading.Event = field(default_factory=threading.Event)
    on_lost: Callable[[], None] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def lease(self) -> Lease:
        """This lease as recorded on the run, with a fresh expiry (now + ``seconds``) and heartbeat."""
        now = self.clock()
        return Lease(token=self.token, pid=self.pid, pid_start=self.pid_start, host=HOST,
                     expires_at=now + timedelta(seconds=self.seconds), heartbeat_at=now)

    def lose(self) -> None:
        """Mark the lease lost (the token no longer owns the run) and call ``on_lost``."""
        self.lost.set()
        if self.on_lost is not None:
            self.on_lost()

    def start_heartbeat(self) -> None:
        """Renew the lease every ``seconds / 3`` on a thread, through :func:`heartbeat_store`."""
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.run_id}", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        """Stop renewing (the lease itself is released by the executor's last write)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        store: RunStore | None = None
        try:
            while not self._stop.wait(self.seconds / 3):
                try:
                    store = store or heartbeat_store(self.store_url)
                    store.commit(Change(self.run_id, self.clock(), fence=self.token,
                                        run=RunUpdate(lease=self.lease(), touch=False)))
                    renewed = True
                except (LeaseLost, UnknownRun):
                    renewed = False
                except Exception:
                    # A beat that cannot write (busy, I/O) is retried at the next one; if none gets
                    # through the lease lapses, and the fence keeps this process from writing.
                    continue
                if not renewed:
                    self.lose()
                    return
        finally:
            if store is not None:
                store.close()


def heartbeat_store(url: str) -> RunStore:
    """The store a heartbeat renews through: on PostgreSQL it borrows a connection from its process's
    pool for each renewal (a worker's heartbeats share a few connections, instead of one per run);
    on SQLite it has its own. Hold one open for as long as heartbeats may start (a worker does) and
    the pool stays open between runs. Raises what :func:`open_store` raises."""
    return open_store(url, pooled=True)
