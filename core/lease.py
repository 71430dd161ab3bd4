"""Ownership of a run by an executing process: lease, heartbeat, and the owner-liveness rule.

A lease is (token, pid, host, expires_at). The executor renews it from a heartbeat thread while a
step runs; every executor write is fenced on the token (``UPDATE ... WHERE lease_token = ?``), so a
process that lost its lease cannot record anything. An owner is gone when, on this host, its pid is
dead (seen at once), or anywhere, when its lease has expired.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .clock import Clock, from_text, to_text
from .store import Store

HOST = socket.gethostname()


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
    try:  # A killed child not yet reaped still answers kill(0); its /proc state is Z.
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def owner_gone(host: str | None, pid: int | None, expires_at: datetime | None, now: datetime) -> bool:
    """The owner-liveness rule: dead pid on this host, or an expired lease anywhere."""
    if host == HOST and pid is not None and not pid_alive(pid):
        return True
    return expires_at is None or expires_at <= now


@dataclass
class LeaseHolder:
    """This process's lease on one run, and the heartbeat that renews it.

    ``seconds``: lease length; the heartbeat renews every ``seconds / 3``. ``lost`` is set when a
    renewal finds the token no longer owns the run (taken over, cancelled, released).
    """

    store_path: str
    run_id: str
    clock: Clock
    seconds: float
    token: str = field(default_factory=lambda: secrets.token_hex(8))
    pid: int = field(default_factory=os.getpid)
    lost: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def columns(self) -> dict[str, object]:
        """The ``runs`` columns that record this lease, with a fresh expiry."""
        now = self.clock()
        return {
            "lease_token": self.token, "lease_pid": self.pid, "lease_host": HOST,
            "lease_expires_at": to_text(now + timedelta(seconds=self.seconds)), "heartbeat_at": to_text(now),
        }

    def start_heartbeat(self) -> None:
        """Renew the lease every ``seconds / 3`` on a thread with its own connection."""
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.run_id}", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        """Stop renewing (the lease itself is released by the executor's last write)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        store: Store | None = None
        try:
            while not self._stop.wait(self.seconds / 3):
                try:
                    store = store or Store(self.store_path)
                    cols = self.columns()
                    with store.transaction():
                        renewed = store.update_run(self.run_id, fence=self.token,
                                                   lease_expires_at=cols["lease_expires_at"],
                                                   heartbeat_at=cols["heartbeat_at"])
                except Exception:
                    # A beat that cannot write (busy, I/O) is retried at the next one; if none gets
                    # through the lease lapses, and the fence keeps this process from writing.
                    continue
                if not renewed:
                    self.lost.set()
                    return
        finally:
            if store is not None:
                store.close()


def parse_expiry(text: str | None) -> datetime | None:
    """A stored lease expiry as UTC; an unreadable one (edited by hand) counts as no lease (None)."""
    try:
        return from_text(text)
    except ValueError:
        return None
