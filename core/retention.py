"""Retention: deleting a run, and pruning old ones. A run a live process executes is never deleted."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from .clock import Clock
from .errors import RefusedTransition
from .lease import owner_gone
from .models import Owner
from .status import RunStatus
from .store import RunStore


class Retention:
    """Deletes runs of ``store``; ``clock`` decides lease expiry of owners on other hosts."""

    def __init__(self, store: RunStore, clock: Clock) -> None:
        self.store, self.clock = store, clock

    def _live(self, owner: Owner | None) -> bool:
        return owner is not None and not owner_gone(owner.host, owner.pid, owner.pid_start, owner.expires_at,
                                                    self.clock())

    def delete(self, run_id: str) -> str:
        """See :meth:`relaypoint.Runtime.delete`."""
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            # status and lease only: a run damaged by hand can still go
            owner = next((r.owner for r in self.store.runs_in([RunStatus.RUNNING], run_ids=[rid])), None)
            if self._live(owner):
                raise RefusedTransition(f"run {rid} is being executed by pid {owner.pid} on "
                                        f"{owner.host}; cancel it before deleting it")
            self.store.delete_runs([rid])
        return rid

    def prune(self, older_than: timedelta, statuses: Iterable[str]) -> list[str]:
        """See :meth:`relaypoint.Runtime.prune`."""
        wanted = [RunStatus(s).value for s in statuses]
        with self.store.transaction():
            ids = [r.run_id for r in self.store.runs_in(wanted, updated_before=self.clock() - older_than)
                   if not self._live(r.owner)]
            self.store.delete_runs(ids)
        return ids
