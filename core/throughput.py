"""A worker's throughput, as its stats line shows it: runs in flight, boundaries per second, and
changes per transaction (how many commits shared each one: group commit), measured between two
readings of its store's :class:`~relaypoint.store.group.CommitCounts`."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from .store.group import CommitCounts

STATS_SECONDS = 5.0
"""Seconds between two stats lines of a busy worker."""


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """The figures of one stats line, over the last ``seconds``: ``in_flight`` runs now,
    ``boundaries_per_second`` (step executions ended and committed), ``changes_per_transaction``
    (the mean size of a commit group; 1.0 where each change commits alone; None when nothing was
    committed)."""

    in_flight: int
    boundaries_per_second: float
    changes_per_transaction: float | None
    seconds: float

    def line(self) -> str:
        """The stats as one line, e.g. ``16 runs in flight, 1,420 boundaries/s, 4.7 changes per
        transaction (last 5 s)``."""
        runs = f"{self.in_flight} run{'' if self.in_flight == 1 else 's'} in flight"
        group = ("" if self.changes_per_transaction is None
                 else f", {self.changes_per_transaction:.1f} changes per transaction")
        return f"{runs}, {self.boundaries_per_second:,.0f} boundaries/s{group} (last {self.seconds:.0f} s)"

    def as_json(self) -> dict[str, Any]:
        """The stats as a JSON object (the worker's ``--json`` lines)."""
        return {"stats": {k: round(v, 2) if isinstance(v, float) else v for k, v in asdict(self).items()}}


class Meter:
    """Readings of ``counts`` turned into :class:`WorkerStats`, each over the time since the one before."""

    def __init__(self, counts: CommitCounts) -> None:
        self._counts = counts
        self._last = counts.read()
        self._at = time.monotonic()

    def read(self, in_flight: int) -> WorkerStats | None:
        """The stats since the previous reading, or None when the worker was idle (no run in
        flight, nothing committed): an idle worker prints nothing."""
        now, counts = time.monotonic(), self._counts.read()
        (changes, boundaries, transactions) = (a - b for a, b in zip(counts, self._last))
        seconds, self._last, self._at = now - self._at, counts, now
        if not in_flight and not changes:
            return None
        return WorkerStats(in_flight, boundaries / seconds if seconds > 0 else 0.0,
                           changes / transactions if transactions else None, seconds)
