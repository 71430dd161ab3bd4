"""``relaypoint worker --on-pause CMD``: real worker processes run a real hook command, with the pause
as JSON on its standard input, once per pause of the store, wherever it was made (``relaypoint
start``, this process, a worker), across several workers and restarts; a worker without the option
marks nothing; hooks that fail, are missing or hang are logged in one line and never stop a worker
from executing the next runs."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from relaypoint import Runtime
from relaypoint.pausehook import HOOK_THREADS, PauseHook
from relaypoint.worker import Worker

from helpers import kill_owner
from procs import checkpoints, parse_utc, wait_status, wait_until

APP = textwrap.dedent('''
    from relaypoint import Workflow

    gated = Workflow("gated")

    @gated.step
    def draft(ctx):
        return {"n": ctx.input.get("n", 0)}

    @gated.step(approval=True, timeout=3600)
    def check(ctx):
        return ctx.results["draft"]

    @gated.step(approval=True)
    def confirm(ctx):
        return ctx.results["check"]

    asking = Workflow("asking")

    @asking.step
    def ask(ctx):
        return {"title": ctx.request_input("Title?")}

    held = Workflow("held")

    @held.step(on_orphan="hold")
    def slow(ctx):
        return "done"

    plain = Workflow("plain")

    @plain.step
    def only(ctx):
        return ctx.input

    workflows = [gated, asking, held, plain]
''')

# The hook: appends what it reads on stdin to OUT with one write (hooks run side by side), then
# behaves as MODE says: ok, fail (a message on stderr, exit 3), hang (writes its pid, sleeps), flaky
# (fails its first two attempts at each pause, then succeeds) or broken (fails until OUT.fixed exists).
HOOK = textwrap.dedent('''
    import json, os, sys, time
    mode, out = sys.argv[1], sys.argv[2]
    data = sys.stdin.buffer.read()
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, data)
    os.close(fd)
    if mode == "flaky":
        key = json.loads(data)["idempotency_key"]
        with open(out) as f:
            tries = sum(json.loads(line)["idempotency_key"] == key for line in f)
        mode = "fail" if tries <= 2 else "ok"
    if mode == "broken":
        mode = "ok" if os.path.exists(out + ".fixed") else "fail"
    if mode == "fail":
        print("the chat webhook answered 500", file=sys.stderr)
        sys.exit(3)
    if mode == "hang":
        with open(out + ".pid", "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(600)
''')

NOTICE_KEYS = {"run_id", "workflow", "kind", "step", "iteration", "agent", "reason", "deadline", "checkpoint_id",
               "idempotency_key"}


class Box:
    """A directory with the app and the hook, a store ``db``, and the worker processes started."""

    def __init__(self, tmp_path: Path, db: str) -> None:
        self.dir, self.db = tmp_path, db
        (tmp_path / "gates.py").write_text(APP)
        (tmp_path / "hook.py").write_text(HOOK)
        self.out = tmp_path / "notices.jsonl"
        self.workers: list[tuple[subprocess.Popen, Path]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
        namespace: dict[str, Any] = {}
        exec(compile(APP, "gates.py", "exec"), namespace)
        self.rt = Runtime(db, namespace["workflows"])

    def hook(self, mode: str) -> str:
        return shlex.join([sys.executable, str(self.dir / "hook.py"), mode, str(self.out)])

    def worker(self, on_pause: str | None, *options: str) -> subprocess.Popen:
        """Start ``relaypoint worker`` with ``--on-pause ON_PAUSE`` (none when None); stderr to a file
        (:meth:`log`)."""
        err = self.dir / f"worker{len(self.workers)}.err"
        hook = [] if on_pause is None else ["--on-pause", on_pause]
        with open(err, "wb") as f:
            proc = subprocess.Popen([sys.executable, "-m", "relaypoint", "--db", self.db, "worker", "--app",
                                     "gates:workflows", "--poll", "0.1", *hook, *options],
                                    cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=f)
        self.workers.append((proc, err))
        # its signal handlers are in place once it says it is on (a SIGTERM before would kill it)
        deadline = time.monotonic() + 60
        while "worker on" not in err.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.02)
        return proc

    def start(self, workflow: str, **input: Any) -> str:
        """``relaypoint start WORKFLOW``: the run executes in that process up to its first pause."""
        done = subprocess.run([sys.executable, "-m", "relaypoint", "--db", self.db, "start", workflow, "--app",
                               "gates:workflows", "--input", json.dumps(input)], cwd=self.dir, env=self.env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def log(self, proc: subprocess.Popen) -> str:
        return next(err for p, err in self.workers if p is proc).read_text()

    def stop(self, proc: subprocess.Popen) -> str:
        """SIGTERM the worker, wait for it (it waits for its hooks), and return its stderr."""
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        return self.log(proc)

    def queued(self, workflow: str, step: str, **input: Any) -> str:
        """A queued run of ``workflow`` (one that never pauses) for a worker: started here, where it
        completes, then forked from ``step``."""
        parent = self.rt.start(workflow, input)
        assert self.rt.get(parent).status == "completed"
        return self.rt.fork(parent, step)

    def notices(self) -> list[dict[str, Any]]:
        text = self.out.read_text() if self.out.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    def wait_notices(self, count: int) -> list[dict[str, Any]]:
        return wait_until(lambda: len(n := self.notices()) >= count and n, 60, f"{count} notices in {self.out}")

    def pauses(self, *run_ids: str) -> list[tuple[str, int]]:
        """Every pause these runs made, (run, checkpoint), decided or not."""
        return sorted((c.run_id, c.checkpoint_id) for rid in run_ids for c in self.rt.store.checkpoints(rid)
                      if c.kind in ("approval", "input", "orphan"))

    def close(self) -> None:
        for proc, _ in self.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.rt.close()


@pytest.fixture
def box(tmp_path: Path, db: str):
    made = Box(tmp_path, db)
    yield made
    made.close()


@pytest.fixture
def sqlite_box(tmp_path: Path):
    made = Box(tmp_path, str(tmp_path / "store.db"))
    yield made
    made.close()


def pending_of(rt: Runtime, run_id: str) -> dict[str, Any]:
    run = rt.get(run_id, with_outputs=False)
    assert run.pending is not None, run.status
    paused = next(t for t in run.tasks if t.seq == run.pending.paused_seq)
    inside = paused.parent is not None
    return {"run_id": run.run_id, "workflow": run.workflow, "kind": run.pending.kind, "step": run.pending.step,
            "iteration": paused.iteration if inside else None, "agent": paused.agent if inside else None,
            "reason": run.pending.reason, "checkpoint_id": run.pending.checkpoint_id}


def when(stamp: str | datetime) -> datetime:
    """A time read from either store: a datetime (PostgreSQL), or ISO 8601 text (SQLite)."""
    return stamp if isinstance(stamp, datetime) else parse_utc(stamp)


def announced(box: Box) -> list[tuple[str, int]]:
    return sorted((n["run_id"], n["checkpoint_id"]) for n in box.notices())


def test_every_pause_is_announced_once_wherever_it_was_made_and_never_again_after_a_restart(box: Box):
    # Pauses made before any worker announces: the first gate of a run started with `relaypoint start`
    # (executed in that process), an input request in this process, and an orphan step held by a
    # worker without --on-pause, which marks nothing.
    gate = box.start("gated", n=1)                        # an approval with a deadline
    ask = box.rt.start("asking")
    held = box.rt.fork(box.rt.start("held"), "slow")
    kill_owner(box.db, held, "slow")                      # its step's process died: a worker holds it
    plain = box.queued("plain", "only")                   # completes: nothing to announce
    quiet = box.worker(None)
    wait_status(box.db, held, "awaiting_approval")
    wait_status(box.db, plain, "completed")
    box.stop(quiet)
    assert len(box.rt.pending_decisions()) == 3

    worker = box.worker(box.hook("ok"))
    notices = {n["run_id"]: n for n in box.wait_notices(3)}
    assert set(notices) == {gate, ask, held}
    for run_id, notice in notices.items():
        assert set(notice) == NOTICE_KEYS
        assert {k: v for k, v in notice.items() if k not in ("deadline", "idempotency_key")} == pending_of(box.rt, run_id)
        assert notice["idempotency_key"] == f"{run_id}/pause/{notice['checkpoint_id']}"  # stable per pause
    assert notices[gate]["kind"] == "approval" and notices[gate]["step"] == "check"
    deadline = box.rt.get(gate).pending.deadline_at
    assert notices[gate]["deadline"] == deadline.strftime("%Y-%m-%dT%H:%M:%S.") + f"{deadline.microsecond // 1000:03d}Z"
    assert notices[ask]["kind"] == "input" and notices[ask]["reason"] == "Title?" and notices[ask]["deadline"] is None
    assert notices[held]["kind"] == "orphan" and notices[held]["step"] == "slow"

    # approved, the gated run is executed by the worker up to its second gate: a new pause, announced
    box.rt.approve(gate, checkpoint_id=notices[gate]["checkpoint_id"])
    second = box.wait_notices(4)[3]
    assert (second["run_id"], second["step"]) == (gate, "confirm")
    assert "Traceback" not in box.stop(worker)

    # a restarted worker announces the pauses made since, and none of the old ones again
    box.worker(box.hook("ok"))
    later = box.start("gated", n=2)
    assert box.wait_notices(5)[4]["run_id"] == later
    box.stop(box.workers[-1][0])  # waits for the hooks under way: whatever it announced is in the file
    assert announced(box) == box.pauses(gate, ask, held, later)  # each once


def test_two_workers_announce_each_pause_once_between_them(box: Box):
    gates = [box.rt.start("gated", {"n": i}) for i in range(3)]   # paused here before the workers start
    workers = [box.worker(box.hook("ok")) for _ in range(2)]
    first = box.wait_notices(3)
    for notice in first:  # each approved run is executed by either worker up to its second gate
        box.rt.approve(notice["run_id"], checkpoint_id=notice["checkpoint_id"])
    asks = [box.rt.start("asking") for _ in range(2)]              # paused here while the workers poll
    box.wait_notices(8)
    for worker in workers:
        assert "Traceback" not in box.stop(worker)
    assert announced(box) == box.pauses(*gates, *asks)
    assert len(announced(box)) == 8 and {n["step"] for n in box.notices()} == {"check", "confirm", "ask"}


def test_a_failing_hook_is_retried_in_one_line_per_attempt_and_the_worker_goes_on(sqlite_box: Box):
    box = sqlite_box
    worker = box.worker(box.hook("fail"))
    first = box.rt.start("asking")
    then = [box.queued("plain", "only", k=i) for i in range(2)]
    second = box.rt.start("gated")
    for run_id in then:
        wait_status(box.db, run_id, "completed")
    about = {rid: f"run {rid}: on-pause hook for checkpoint {box.rt.get(rid).pending.checkpoint_id} exited with "
                  "status 3: the chat webhook answered 500" for rid in (first, second)}
    lines = [line for rid, said in about.items() for line in (
        f"{said} (attempt 1 of 3; again in 1 s)", f"{said} (attempt 2 of 3; again in 2 s)",
        f"{said} (attempt 3 of 3); the pause stays unannounced: `relaypoint announce {rid}` announces it again")]
    log = wait_until(lambda: all(line in (t := box.log(worker)) for line in lines) and t, 60, "the failures logged")
    assert sorted(n["run_id"] for n in box.notices()) == sorted([first, second] * 3)
    for line in lines:
        assert f"{line}\n" in log
    assert "Traceback" not in box.stop(worker)
    assert [c["announced_at"] for rid in (first, second) for c in checkpoints(box.db, rid)
            if c["kind"] in ("approval", "input")] == [None, None]  # failed: never marked announced
    assert box.rt.announce_pauses(10, box.rt.clock() + timedelta(seconds=60)) == []  # nor tried again


@pytest.mark.parametrize("hook, said", [
    ("{dir}/no-such-hook --flag", "--on-pause: cannot run '{dir}/no-such-hook': no such file"),
    ("{dir}/gates.py", "--on-pause: cannot run '{dir}/gates.py': it is not executable (chmod +x it)"),
    ("{dir}", "--on-pause: cannot run '{dir}': it is a directory"),
    ("no-such-notifier-xyz 'a run waits'", "--on-pause: cannot run 'no-such-notifier-xyz': no such program on PATH"),
], ids=["missing", "not-executable", "directory", "not-on-path"])
def test_a_hook_that_cannot_be_started_is_refused_before_the_worker_starts(sqlite_box: Box, hook: str, said: str):
    box = sqlite_box
    command, said = hook.format(dir=box.dir), said.format(dir=box.dir)
    done = subprocess.run([sys.executable, "-m", "relaypoint", "--db", box.db, "worker", "--app", "gates:workflows",
                           "--on-pause", command], cwd=box.dir, env=box.env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"Error: {said}"), line


def test_a_hook_that_leaves_a_background_child_has_finished_when_it_exits(box: Box):
    # `cmd &` in a hook: the child keeps the hook's stderr open long after the hook itself exited
    child = box.dir / "child.pid"
    hook = shlex.join(["sh", "-c", f'cat >> {shlex.quote(str(box.out))}; sleep 30 & echo $! > {child}; exit 0'])
    worker = box.worker(hook, "--on-pause-timeout", "10")
    try:
        run_id = box.rt.start("asking")
        [notice] = box.wait_notices(1)
        began = time.monotonic()
        [pause] = wait_until(lambda: [c for c in checkpoints(box.db, run_id) if c["announced_at"]], 60,
                             "the pause to be marked announced")
        assert time.monotonic() - began < 5  # as soon as the hook exited, not at its timeout
        assert pause["checkpoint_id"] == notice["checkpoint_id"]
        log = box.stop(worker)
        assert "did not finish" not in log and "on-pause hook" not in log, log
        assert announced(box) == box.pauses(run_id)  # once
    finally:
        if child.exists():
            with suppress(ProcessLookupError):
                os.kill(int(child.read_text()), signal.SIGKILL)


def test_a_pause_whose_worker_died_while_announcing_it_is_announced_by_the_next_worker(box: Box):
    # at least once: the first worker is killed while its hook runs; its claim expires, and another
    # worker announces the pause, with the same idempotency key
    run_id = box.start("gated", n=1)
    first = box.worker(box.hook("hang"), "--on-pause-timeout", "1")
    pid_file = box.dir / "notices.jsonl.pid"
    [hook_pid] = wait_until(lambda: pid_file.exists() and pid_file.read_text().split(), 60, "the hook to start")
    first.kill()
    first.wait()
    os.killpg(int(hook_pid), signal.SIGKILL)  # the hook has a session of its own
    [claim] = [c for c in checkpoints(box.db, run_id) if c["kind"] == "approval"]
    assert claim["announced_at"] is None and claim["announcing_until"] is not None  # claimed, never announced
    second = box.worker(box.hook("ok"))
    notices = box.wait_notices(2)
    announced_then = wait_until(lambda: announced_at(box, run_id)[0], 60, "the pause to be marked announced")
    assert when(announced_then) >= when(claim["announcing_until"])  # not before the dead worker's claim expired
    assert [n["idempotency_key"] for n in notices] == [f"{run_id}/pause/{claim['checkpoint_id']}"] * 2
    assert "Traceback" not in box.stop(second)
    assert len(box.notices()) == 2  # the dead worker's attempt, and the one that counted


@contextmanager
def announcer(box: Box, command: str, *, attempts: int = 3) -> Iterator[list[str]]:
    """A worker in this process announcing with ``command``, its retries waiting 0.05 s and
    doubling; yields the lines it logs."""
    lines: list[str] = []
    hook = PauseHook(shlex.split(command), timeout=10, attempts=attempts, backoff=0.05, log=lines.append)
    worker = Worker(box.db, box.rt.workflows.values(), poll_seconds=0.05, log=lines.append, on_pause=hook)
    thread = threading.Thread(target=worker.run, name="announcer")
    thread.start()
    try:
        yield lines
    finally:
        worker.stop()
        thread.join(60)
        assert not thread.is_alive()


def announced_at(box: Box, run_id: str) -> list[Any]:
    return [c["announced_at"] for c in checkpoints(box.db, run_id) if c["kind"] in ("approval", "input", "orphan")]


def test_a_hook_failing_twice_is_announced_once_after_three_attempts(box: Box):
    run_id = box.rt.start("asking")
    with announcer(box, box.hook("flaky")) as lines:
        wait_until(lambda: announced_at(box, run_id) != [None], 30, "the pause to be marked announced")
        time.sleep(0.5)  # ten polls: none announces it again
    notices = box.notices()
    assert len(notices) == 3 and len({n["idempotency_key"] for n in notices}) == 1  # one key for every attempt
    cp = notices[0]["checkpoint_id"]
    assert lines == [
        f"run {run_id}: on-pause hook for checkpoint {cp} exited with status 3: the chat webhook answered 500 "
        f"(attempt {n} of 3; again in {0.05 * 2 ** (n - 1):g} s)" for n in (1, 2)] + ["stopping: finishing the steps under way"]
    assert box.rt.announce_pauses(10, box.rt.clock() + timedelta(seconds=60)) == []


def test_a_pause_whose_hook_always_fails_stays_unannounced_until_announce_asks_again(box: Box):
    run_id = box.rt.start("asking")
    done = box.rt.start("plain")
    cli = [sys.executable, "-m", "relaypoint", "--db", box.db, "announce"]

    def announce(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], cwd=box.dir, env=box.env, capture_output=True, text=True, timeout=60)

    gave_up = f"the pause stays unannounced: `relaypoint announce {run_id}` announces it again"
    with announcer(box, box.hook("broken")) as lines:
        wait_until(lambda: any(gave_up in line for line in lines), 30, "the hook to be given up on")
        time.sleep(0.5)  # ten polls: a pause given up on is not tried again by itself
        assert len(box.notices()) == 3 and announced_at(box, run_id) == [None]
        # by hand, once the webhook is fixed: the next poll announces it again
        (box.dir / "notices.jsonl.fixed").touch()
        said = announce(run_id[:8])
        assert said.returncode == 0 and said.stderr == "", said.stderr
        cp = box.notices()[0]["checkpoint_id"]
        assert said.stdout == (f"run {run_id}: the pause at checkpoint {cp} (step 'ask') will be announced by the "
                               "next poll of a worker with --on-pause\n")
        wait_until(lambda: announced_at(box, run_id) != [None], 30, "the pause to be marked announced")
        assert len(box.notices()) == 4
        # an announced pause can be announced again, as often as asked
        assert announce(run_id).returncode == 0
        wait_until(lambda: len(box.notices()) == 5, 30, "the pause announced a second time")
    assert len({n["idempotency_key"] for n in box.notices()}) == 1
    # a run that waits on no one, and an id that names no run: one line, nothing recorded
    for args, line in (([done], f"Error: run {done} is completed: it waits on no one, so there is no pause to "
                                "announce"),
                       (["nope"], "Error: no run with id 'nope'")):
        refused = announce(*args)
        assert refused.returncode == 1 and refused.stdout == "" and refused.stderr.startswith(line), refused.stderr
        assert len(refused.stderr.splitlines()) == 1


def test_hanging_hooks_are_killed_and_hold_neither_the_runs_nor_more_pauses_than_they_can_start(sqlite_box: Box):
    box = sqlite_box
    asks = [box.rt.start("asking") for _ in range(HOOK_THREADS + 2)]
    worker = box.worker(box.hook("hang"), "--on-pause-timeout", "10")
    pid_file = box.dir / "notices.jsonl.pid"
    pids = wait_until(lambda: pid_file.exists() and len(p := pid_file.read_text().split()) == HOOK_THREADS and p, 60,
                      "the hooks to start")
    # as many claimed as hooks can start at once: the rest stay unannounced, for whoever claims next
    assert [p.run_id for p in box.rt.announce_pauses(10, box.rt.clock() + timedelta(seconds=60))] == asks[HOOK_THREADS:]
    # while the hooks hang, the worker executes the next runs
    then = [box.queued("plain", "only", k=i) for i in range(3)]
    for run_id in then:
        wait_status(box.db, run_id, "completed")
    for pid in pids:
        os.kill(int(pid), 0)  # still hanging: the runs above did not wait for them
    lines = [f"run {rid}: on-pause hook for checkpoint {box.rt.get(rid).pending.checkpoint_id} did not finish "
             f"within 10 s; killed (attempt 1 of 3; again in 1 s)\n" for rid in asks[:HOOK_THREADS]]
    wait_until(lambda: all(line in box.log(worker) for line in lines), 60, "the hanging hooks to be killed")
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)
    assert "Traceback" not in box.stop(worker)


@pytest.mark.parametrize("command, said", [("", "--on-pause needs a command"),
                                           ('notify "unclosed', "--on-pause: No closing quotation")])
def test_a_command_that_cannot_be_split_is_refused_before_the_worker_starts(sqlite_box: Box, command: str, said: str):
    done = subprocess.run([sys.executable, "-m", "relaypoint", "--db", sqlite_box.db, "worker", "--app", "gates:workflows",
                           "--on-pause", command], cwd=sqlite_box.dir, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"Error: {said}")
