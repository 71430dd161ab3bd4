"""Shared helpers for the real-process tests (test_races.py, the crash matrix): launching relaypoint
commands as separate Python processes, a start barrier that lines racers up, polling the store
(either backend, through stores.py), and reading the executions log the test apps append to.

A launched command is ``sys.executable -m relaypoint --db DB ...`` run in the sandbox directory. With
a :class:`Barrier`, a ``sitecustomize`` module in the sandbox makes each process finish its imports,
say it is ready, and wait for the go signal, so racers reach the store within a millisecond of each
other instead of whenever their interpreters happen to finish starting.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import stores

T = TypeVar("T")

# With a barrier, each ``python -m relaypoint`` process of a sandbox runs this first (Python imports
# ``sitecustomize`` from PYTHONPATH at startup): the CLI's imports, then "ready", then wait for "go".
# Without RP_TEST_GO it does nothing.
SITECUSTOMIZE = r"""
import os
if os.environ.get("RP_TEST_GO"):
    import time
    import relaypoint.cli  # noqa: F401  (the heavy imports, before the barrier)
    if os.environ.get("RP_TEST_READY"):
        open(os.environ["RP_TEST_READY"], "w").close()
    _limit = time.monotonic() + 120
    while not os.path.exists(os.environ["RP_TEST_GO"]) and time.monotonic() < _limit:
        time.sleep(0.001)
"""

USER_VISIBLE_FAILURES = ("Traceback", "locked", "stayed busy")


@dataclass
class Done:
    """A finished process: exit code and what it printed."""

    args: tuple[str, ...]
    code: int
    out: str
    err: str
    pid: int = 0

    @property
    def text(self) -> str:
        return self.out + self.err

    def one_line_error(self) -> str | None:
        """The single ``Error: ...`` line (click's form) of a refused command, or None if stderr is not exactly that."""
        lines = self.err.strip().splitlines()
        return lines[0] if len(lines) == 1 and lines[0].startswith("Error: ") else None

    def leaks(self) -> list[str]:
        """Words that must never reach a user (a traceback, a lock error) found in the output."""
        return [w for w in USER_VISIBLE_FAILURES if w in self.text]


class Barrier:
    """Lines several launched processes up: each waits, imports done, for :meth:`release`."""

    def __init__(self, directory: Path, name: str) -> None:
        self.dir = Path(directory)
        self.go = self.dir / f".go-{name}"
        self.name = name
        self._n = 0
        self.ready_files: list[Path] = []

    def env(self) -> dict[str, str]:
        self._n += 1
        ready = self.dir / f".ready-{self.name}-{self._n}"
        self.ready_files.append(ready)
        return {"RP_TEST_READY": str(ready), "RP_TEST_GO": str(self.go)}

    def wait_ready(self, procs: list[subprocess.Popen], timeout: float = 60.0) -> None:
        """Wait until every process is ready (or has already exited, e.g. a usage error)."""
        wait_until(lambda: all(f.exists() or p.poll() is not None for f, p in zip(self.ready_files, procs)),
                   timeout, f"processes of barrier {self.name} to be ready")

    def release(self) -> float:
        self.go.touch()
        return time.monotonic()


@dataclass
class Sandbox:
    """One test's directory: the app module(s), the executions log, the environment, and the store:
    ``db``, the ``--db`` every command gets (a store URL of either backend, such as the ``store_url``
    fixture's; by default the SQLite file ``runs.db`` in the directory)."""

    dir: Path
    app: str = ""
    lease_seconds: float | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    db: Path | str = ""

    def __post_init__(self) -> None:
        self.dir = Path(self.dir)
        if not self.db:
            self.db = self.dir / "runs.db"

    @property
    def exec_log(self) -> Path:
        return self.dir / "exec.log"

    def environ(self, **more: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
        path = os.pathsep.join(p for p in (str(self.dir), os.environ.get("PYTHONPATH", "")) if p)
        env.update(PYTHONPATH=path, EXEC_LOG=str(self.exec_log), PYTHONUNBUFFERED="1", **self.extra_env, **more)
        if self.lease_seconds is not None:
            env["RELAYPOINT_LEASE_SECONDS"] = str(self.lease_seconds)
        return env

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "relaypoint", "--db", str(self.db), *args]

    def spawn(self, *args: str, barrier: Barrier | None = None, env: dict[str, str] | None = None
              ) -> subprocess.Popen:
        """Start ``python -m relaypoint --db DB ARGS`` in a new process (held at ``barrier``)."""
        if barrier is not None and not (self.dir / "sitecustomize.py").exists():
            (self.dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
        more = {**(barrier.env() if barrier else {}), **(env or {})}
        proc = subprocess.Popen(self.argv(*args), cwd=self.dir, env=self.environ(**more),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        proc.rp_args = args  # type: ignore[attr-defined]
        return proc

    def run(self, *args: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> Done:
        """Run a command to its end."""
        return finish(self.spawn(*args, env=env), timeout)

    def race(self, *commands: tuple[str, ...], timeout: float = 60.0) -> list[Done]:
        """Run several commands released together by a barrier; results in the order given."""
        barrier = Barrier(self.dir, f"race{time.monotonic_ns()}")
        procs = [self.spawn(*cmd, barrier=barrier) for cmd in commands]
        barrier.wait_ready(procs, timeout)
        barrier.release()
        return [finish(p, timeout) for p in procs]

    def executions(self) -> list[tuple[str, ...]]:
        """Lines of the executions log, split on whitespace (the apps write ``... step attempt pid``)."""
        return read_lines(self.exec_log)


def finish(proc: subprocess.Popen, timeout: float = 60.0) -> Done:
    """Wait for ``proc`` (killing it if it outlives ``timeout``) and collect its output."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{getattr(proc, 'rp_args', proc.args)} did not finish within {timeout} s; "
                             f"stderr: {err[-2000:]}") from None
    return Done(tuple(getattr(proc, "rp_args", ())), proc.returncode, out, err, proc.pid)


def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to a process started here, if it has not been reaped yet."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            pass


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.01) -> T:
    """Poll ``predicate`` until it returns something truthy; AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def read_lines(path: Path) -> list[tuple[str, ...]]:
    try:
        return [tuple(line.split()) for line in Path(path).read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def append_line(path: str, line: str) -> None:
    """Append one line with a single write on an O_APPEND descriptor (whole even under SIGKILL)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


# ---- reading the store (either backend: see stores.py) --------------------------------------------

query = stores.query


def run_row(db: Path | str, run_id: str) -> dict[str, Any] | None:
    rows = query(db, "SELECT * FROM runs WHERE run_id = ?", (run_id,))
    return rows[0] if rows else None


def run_status(db: Path | str, run_id: str) -> str | None:
    row = run_row(db, run_id)
    return row["status"] if row else None


def steps(db: Path | str, run_id: str) -> list[dict[str, Any]]:
    return query(db, "SELECT s.*, o.value AS output FROM steps s LEFT JOIN outputs o USING (run_id, seq) "
                     "WHERE s.run_id = ? ORDER BY s.seq", (run_id,))


def step_row(db: Path | str, run_id: str, name: str) -> dict[str, Any] | None:
    rows = query(db, "SELECT s.*, o.value AS output FROM steps s LEFT JOIN outputs o USING (run_id, seq) "
                     "WHERE s.run_id = ? AND s.name = ?", (run_id, name))
    return rows[0] if rows else None


def outputs(db: Path | str, run_id: str) -> dict[str, str]:
    """Stored output text of each completed step (compared as text: not a byte may change)."""
    return {r["name"]: r["output"] for r in query(
        db, "SELECT s.name, o.value AS output FROM steps s JOIN outputs o USING (run_id, seq) "
            "WHERE s.run_id = ? AND s.status = 'completed'", (run_id,))}


def events(db: Path | str, run_id: str) -> list[dict[str, Any]]:
    return query(db, "SELECT * FROM events WHERE run_id = ? ORDER BY event_id", (run_id,))


def event_kinds(db: Path | str, run_id: str) -> list[str]:
    return [e["kind"] for e in events(db, run_id)]


def checkpoints(db: Path | str, run_id: str) -> list[dict[str, Any]]:
    return query(db, "SELECT * FROM checkpoints WHERE run_id = ? ORDER BY checkpoint_id", (run_id,))


dump = stores.dump


def wait_status(db: Path | str, run_id: str, statuses: str | tuple[str, ...], timeout: float = 30.0) -> str:
    wanted = (statuses,) if isinstance(statuses, str) else statuses
    return wait_until(lambda: (s := run_status(db, run_id)) in wanted and s, timeout,
                      f"run {run_id} to become {' or '.join(wanted)} (it is {run_status(db, run_id)})")


def wait_step(db: Path | str, step: str, status: str = "running", run_id: str | None = None,
              timeout: float = 30.0) -> dict[str, Any]:
    """The first step row named ``step`` in ``status`` (of ``run_id`` if given), once there is one."""
    sql = "SELECT * FROM steps WHERE name = ? AND status = ?" + (" AND run_id = ?" if run_id else "")
    params = (step, status) + ((run_id,) if run_id else ())
    rows = wait_until(lambda: query(db, sql, params), timeout, f"step {step} to be {status}")
    return rows[0]


def utc_text(dt: datetime | None = None) -> str:
    """The store's time form (see relaypoint.clock.to_text), for comparing with stored times."""
    dt = (dt or datetime.now(UTC)).astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_utc(text: str) -> datetime:
    return datetime.fromisoformat(text)
