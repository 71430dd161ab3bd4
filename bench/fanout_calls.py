"""The simulated agent call every tool of fanout.py runs, and the call log that counts re-runs.

A call ``i`` sleeps ``delays[i]`` seconds (``asyncio.sleep`` in an async call, ``time.sleep`` in a
sync one) and returns ``"yes"``. With a log configured it appends ``start a<i>`` before and ``end
a<i>`` after, each line with the epoch time: fanout.py reads the log from outside the process it
kills, so a call that starts again after the kill was re-run, whatever the tool itself reports.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

ROUND = [0.5] * 5  # one round of five agents, each 0.5 s of I/O
STAGGER = [0.3, 0.6, 0.9, 1.2, 1.5]  # the kill -9 figure: three finish before KILL_AT, two do not
KILL_AT = 1.05  # seconds after the first call starts


@dataclass
class Calls:
    """What this process's calls sleep (``delays``, seconds by call index) and where they log
    (``log``: None, no log: the timed rounds)."""

    delays: list[float] = field(default_factory=lambda: list(ROUND))
    log: Path | None = None


CALLS = Calls()


def use(delays: list[float], log: Path | None = None) -> None:
    """Set this process's delays and call log (fanout.py's kill figure: ``STAGGER`` and a log)."""
    CALLS.delays, CALLS.log = list(delays), log


def mark(log: Path, event: str, name: str) -> None:
    """Append ``"<event> <name> <epoch seconds>"`` to ``log``: one ``write`` on an O_APPEND file,
    so the lines of concurrent calls, and of a process killed mid-call, never interleave."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{event} {name} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


def read_marks(log: Path) -> list[tuple[str, str, float]]:
    """The lines of a call log as (event, name, epoch seconds), in the order written; [] if absent."""
    if not log.exists():
        return []
    return [(e, n, float(t)) for e, n, t in (line.split() for line in log.read_text().splitlines() if line)]


def _note(event: str, i: int) -> None:
    if CALLS.log is not None:
        mark(CALLS.log, event, f"a{i}")


def sync_call(i: int) -> str:
    """Agent call ``i``, blocking: ``time.sleep(delays[i])``."""
    _note("start", i)
    time.sleep(CALLS.delays[i])
    _note("end", i)
    return "yes"


async def async_call(i: int) -> str:
    """Agent call ``i`` on the event loop: ``await asyncio.sleep(delays[i])``."""
    _note("start", i)
    await asyncio.sleep(CALLS.delays[i])
    _note("end", i)
    return "yes"
