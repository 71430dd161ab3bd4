"""Shared workflows and helpers for the runtime, store, boundary and CLI tests.

Everything works on a real store: ``db`` is a store URL (conftest's ``db`` fixture: a SQLite file
under pytest's ``tmp_path`` or a PostgreSQL schema of the test's own). Direct SQL (``sql``,
``kill_owner``, ``set_owner``, through tests/stores.py on either backend) stands for what another
process would have left in the store.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any


import pytest

from relaypoint import Runtime, Workflow
from relaypoint.clock import to_text
from relaypoint.lease import HOST
from relaypoint.workflow import Context

import stores

DB = "store.db"
sqlite_only = pytest.mark.parametrize("db", ["sqlite"], indirect=True)
"""Mark a test taking conftest's ``db`` to run on SQLite alone: what it checks happens before any
store is touched (a refusal of bad input), so a PostgreSQL run would add time and no coverage."""
StepBehaviour = Callable[[Context], Any]


# ---- workflows that record what they do -----------------------------------------------------------


class Flow:
    """A workflow named ``name`` whose steps count their executions and keep each context they saw.

    ``steps``: step names, or ``(name, options)`` pairs passed to ``Workflow.step``. A step returns
    ``{"step": name}`` unless :meth:`on` gives it another behaviour.
    """

    def __init__(self, *steps: str | tuple[str, dict[str, Any]], name: str = "flow") -> None:
        self.wf = Workflow(name)
        self.calls: Counter[str] = Counter()
        self.seen: dict[str, list[Context]] = defaultdict(list)
        self.behaviour: dict[str, StepBehaviour] = {}
        for spec in steps:
            step_name, options = (spec, {}) if isinstance(spec, str) else spec
            self.wf.step(name=step_name, **options)(self._runner(step_name))

    def _runner(self, name: str) -> StepBehaviour:
        def run(ctx: Context) -> Any:
            self.calls[name] += 1
            self.seen[name].append(ctx)
            behaviour = self.behaviour.get(name)
            return behaviour(ctx) if behaviour else {"step": name}
        return run

    def on(self, step: str, behaviour: StepBehaviour) -> Flow:
        """Make ``step`` run ``behaviour(ctx)`` (after counting the call)."""
        self.behaviour[step] = behaviour
        return self

    def attempts(self, step: str) -> list[int]:
        """``ctx.attempt`` of each execution of ``step``, in order."""
        return [ctx.attempt for ctx in self.seen[step]]


def returns(value: Any) -> StepBehaviour:
    return lambda ctx: value


def fails(times: int | None = None, message: str = "boom") -> StepBehaviour:
    """Raise ``RuntimeError(message)`` on the first ``times`` calls (every call if None), then
    return ``{"ok": attempt}``."""
    calls = Counter()

    def behaviour(ctx: Context) -> Any:
        calls["n"] += 1
        if times is None or calls["n"] <= times:
            raise RuntimeError(message)
        return {"ok": ctx.attempt}
    return behaviour


def with_attempt(ctx: Context) -> Any:
    """Return ``{"step": name, "attempt": ctx.attempt}``."""
    return {"step": ctx.step, "attempt": ctx.attempt}


def asks(*prompts: str) -> StepBehaviour:
    """Ask each prompt with ``ctx.request_input`` in order; return the answers."""
    return lambda ctx: [ctx.request_input(p) for p in prompts]


# ---- time, ids, runtimes --------------------------------------------------------------------------


class FakeClock:
    """A clock that moves only when told (UTC)."""

    def __init__(self, start: datetime = datetime(2031, 1, 1, 12, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def ids(*run_ids: str) -> Callable[[], str]:
    """An id factory handing out ``run_ids`` in order."""
    return iter(run_ids).__next__


def runtime(db: str | Path, *flows: Flow | Workflow, **options: Any) -> Runtime:
    """A Runtime with the flows' workflows (close it, or use ``with``) on the store ``db``: a store
    URL (conftest's ``db`` fixture), or a directory (a SQLite-only test's ``tmp_path``) whose
    ``store.db`` file is the store."""
    workflows = [f.wf if isinstance(f, Flow) else f for f in flows]
    return Runtime(str(db / DB) if isinstance(db, Path) else db, workflows, **options)


# ---- processes that die mid-step ------------------------------------------------------------------


KILLED_APP = "killedflow"
KILLED_SOURCE = '''
import os, signal
from relaypoint import Workflow

wf = Workflow({name!r})

def step(name, kill):
    def run(ctx):
        with open("executions.log", "a") as log:
            log.write(name + "\\n")
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        return {{"step": name}}
    return run

for name, options in {steps!r}:
    wf.step(name=name, **options)(step(name, name == {kill!r}))

workflows = [wf]
'''


def die_in(tmp_path: Path, db: str, flow: Flow, step: str, *args: str) -> None:
    """Run ``relaypoint --db DB ARGS --app`` in a separate process in ``tmp_path`` with an app
    defining ``flow``'s workflow (same name, step names and options: no drift for the in-process
    flow) whose step ``step`` SIGKILLs its own process, and wait for that death. The executions
    of that process are added to ``flow.calls``, so a test counts executions across processes."""
    steps = [(s.name, s.options()) for s in flow.wf.steps]
    (tmp_path / f"{KILLED_APP}.py").write_text(KILLED_SOURCE.format(name=flow.wf.name, steps=steps, kill=step))
    log = tmp_path / "executions.log"
    log.unlink(missing_ok=True)
    done = relaypoint(tmp_path, *args, "--app", f"{KILLED_APP}:workflows", db=db)
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr)  # SIGKILL, nothing else
    flow.calls.update(log.read_text().split())


def killed_start(tmp_path: Path, db: str, flow: Flow, step: str) -> str:
    """Start ``flow``'s workflow on store ``db`` in a process that dies (SIGKILL) inside ``step``;
    return the id of the run it left behind (``running``, owned by a dead pid). See :func:`die_in`."""
    before = {r["run_id"] for r in stores.query(db, "SELECT run_id FROM runs")}
    die_in(tmp_path, db, flow, step, "start", flow.wf.name)
    (rid,) = {r["run_id"] for r in stores.query(db, "SELECT run_id FROM runs")} - before
    return rid


# ---- what another process leaves in the store -----------------------------------------------------


sql = stores.execute


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def set_owner(db: Path | str, run_id: str, *, pid: int, host: str = HOST, expires_in: float,
              step: str | None = None, now: datetime | None = None) -> None:
    """Record in the ``runs`` row that process ``pid`` on ``host`` executes ``run_id`` (status
    running) with a lease expiring ``expires_in`` seconds from ``now``; with ``step``, that step is
    marked running too."""
    now = now or datetime.now(UTC)
    sql(db, "UPDATE runs SET status = 'running', lease_token = 'owner-token', lease_pid = ?, lease_host = ?, "
            "lease_expires_at = ?, heartbeat_at = ? WHERE run_id = ?",
        pid, host, to_text(now + timedelta(seconds=expires_in)), to_text(now), run_id)
    if step is not None:
        sql(db, "UPDATE steps SET status = 'running' WHERE run_id = ? AND name = ?", run_id, step)


def kill_owner(db: Path | str, run_id: str, step: str, now: datetime | None = None) -> None:
    """Make ``run_id`` look as if its executor died while ``step`` ran: a dead pid on this host and
    an expired lease in the runs row, the step ``running``."""
    set_owner(db, run_id, pid=dead_pid(), expires_in=-60, step=step, now=now)


def rows(db: Path | str, run_id: str) -> dict[str, list[tuple]]:
    """Every row recorded of ``run_id``, table by table."""
    order = {"runs": "run_id", "run_inputs": "run_id", "steps": "seq", "outputs": "seq", "checkpoints": "checkpoint_id",
             "events": "event_id"}
    found = {t: sql(db, f"SELECT * FROM {t} WHERE run_id = ? ORDER BY {o}", run_id) for t, o in order.items()}
    found["definitions"] = sql(db, "SELECT * FROM definitions WHERE fingerprint = "
                               "(SELECT fingerprint FROM runs WHERE run_id = ?)", run_id)
    return found


snapshot = stores.dump


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def store_state(db: str) -> str | dict[str, list[tuple]]:
    """What a test compares before and after to prove nothing at all was written to store ``db``:
    a SQLite file's bytes (their digest), a PostgreSQL schema's rows (:func:`snapshot`)."""
    return snapshot(db) if stores.is_postgres(db) else digest(stores.sqlite_path(db))


def sidecars(path: Path) -> list[str]:
    """SQLite's -wal/-shm/-journal files next to ``path`` that exist."""
    return [s for s in ("-wal", "-shm", "-journal") if Path(f"{path}{s}").exists()]


# ---- traced SQL -----------------------------------------------------------------------------------


WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")


def _verb(statement: str) -> str:
    words = statement.split(None, 1)
    return words[0].upper() if words else ""


def committed_writes(statements: list[str]) -> list[list[str]]:
    """Group traced SQL (``Connection.set_trace_callback``) into the transactions SQLite committed
    and keep those that wrote. A statement outside BEGIN/SAVEPOINT is a transaction of its own
    (autocommit); an outermost SAVEPOINT..RELEASE is one transaction; a rolled-back one is dropped."""
    done: list[list[str]] = []
    current: list[str] | None = None
    explicit = False
    savepoints: list[str] = []
    for s in statements:
        verb, upper = _verb(s), s.upper()
        if verb == "BEGIN":
            current, explicit = [], True
        elif verb in ("COMMIT", "END"):
            done.append(current or [])
            current, explicit, savepoints = None, False, []
        elif verb == "ROLLBACK" and " TO " not in f" {upper} ":
            current, explicit, savepoints = None, False, []
        elif verb == "SAVEPOINT":
            if current is None:
                current = []
            savepoints.append(s.split(None, 1)[1].strip(' ;"'))
        elif verb == "RELEASE":
            name = s.split()[-1].strip(' ;"')
            if name in savepoints:
                del savepoints[savepoints.index(name):]
            if not savepoints and not explicit and current is not None:
                done.append(current)
                current = None
        elif current is None:
            done.append([s])
        else:
            current.append(s)
    return [t for t in done if any(_verb(s) in WRITES for s in t)]


def between(trace: list[str], start: str, end: str | None = None) -> list[str]:
    """The traced statements after marker ``start`` and before marker ``end`` (or the end)."""
    i = trace.index(start) + 1
    j = trace.index(end) if end is not None else len(trace)
    return trace[i:j]


# ---- the CLI --------------------------------------------------------------------------------------


APP_MODULE = "rpflows"
APP = f"{APP_MODULE}:workflows"
APP_SOURCE = textwrap.dedent('''
    from relaypoint import Workflow

    review = Workflow("review")

    def about(topic):
        return "about " + topic

    @review.step
    def draft(ctx):
        return {"text": ctx.call("about", about, ctx.input.get("topic", "nothing"))}  # a recorded call

    @review.step(approval=True)
    def check(ctx):
        return {"draft": ctx.results["draft"]["text"]}

    @review.step
    def publish(ctx):
        return {"published": ctx.results["check"]}

    ask = Workflow("ask")

    @ask.step
    def question(ctx):
        return {"title": ctx.request_input("Title?")}

    boom = Workflow("boom")

    @boom.step
    def fine(ctx):
        return 1

    @boom.step
    def explode(ctx):
        raise RuntimeError("kaboom")

    simple = Workflow("simple")

    @simple.step
    def only(ctx):
        return ctx.input

    workflows = [review, ask, boom, simple]
''')


def write_app(directory: Path) -> None:
    (directory / f"{APP_MODULE}.py").write_text(APP_SOURCE)


def app_workflows() -> list[Workflow]:
    """Fresh definitions from :data:`APP_SOURCE`, for preparing runs in-process."""
    namespace: dict[str, Any] = {}
    exec(compile(APP_SOURCE, f"{APP_MODULE}.py", "exec"), namespace)
    return namespace["workflows"]


def relaypoint(cwd: Path, *args: str, db: str | None = DB,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m relaypoint [--db DB] ARGS`` in ``cwd`` (RELAYPOINT_* cleared unless given)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    cmd = [sys.executable, "-m", "relaypoint", *(["--db", db] if db is not None else []), *args]
    return subprocess.run(cmd, cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=120)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """Assert ``result`` failed with exit 1, one line on stderr and no traceback; return that line."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].lower().startswith("error: "), lines[0]
    return lines[0]
