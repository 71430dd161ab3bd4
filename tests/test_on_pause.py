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
import time
from pathlib import Path
from typing import Any

import pytest

from relaypoint import Runtime
from relaypoint.pausehook import HOOK_THREADS

from helpers import kill_owner
from procs import wait_status, wait_until

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
# behaves as MODE says: ok, fail (a message on stderr, exit 3) or hang (writes its pid, sleeps).
HOOK = textwrap.dedent('''
    import os, sys, time
    mode, out = sys.argv[1], sys.argv[2]
    data = sys.stdin.buffer.read()
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, data)
    os.close(fd)
    if mode == "fail":
        print("the chat webhook answered 500", file=sys.stderr)
        sys.exit(3)
    if mode == "hang":
        with open(out + ".pid", "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(600)
''')

NOTICE_KEYS = {"run_id", "workflow", "kind", "step", "iteration", "agent", "reason", "deadline", "checkpoint_id"}


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
        assert {k: v for k, v in notice.items() if k != "deadline"} == pending_of(box.rt, run_id)
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


@pytest.mark.parametrize("mode", ["fail", "missing"])
def test_a_failing_or_missing_hook_is_one_line_and_the_worker_goes_on(sqlite_box: Box, mode: str):
    box = sqlite_box
    command = box.hook("fail") if mode == "fail" else shlex.join([str(box.dir / "no-such-hook"), "--flag"])
    worker = box.worker(command)
    first = box.rt.start("asking")
    then = [box.queued("plain", "only", k=i) for i in range(2)]
    second = box.rt.start("gated")
    for run_id in then:
        wait_status(box.db, run_id, "completed")
    about = [f"run {rid}: on-pause hook for checkpoint {box.rt.get(rid).pending.checkpoint_id}" for rid in (first, second)]
    if mode == "fail":
        said = " exited with status 3: the chat webhook answered 500"
        assert sorted(n["run_id"] for n in box.wait_notices(2)) == sorted([first, second])
    else:
        said = f" could not start {str(box.dir / 'no-such-hook')!r}: No such file or directory"
    log = wait_until(lambda: all(a in (t := box.log(worker)) for a in about) and t, 60, "the failures logged")
    for line in about:
        assert f"{line}{said}\n" in log
    assert "Traceback" not in box.stop(worker)
    assert box.rt.announce_pauses(10) == []  # a failed announcement is not made again: at most once


def test_hanging_hooks_are_killed_and_hold_neither_the_runs_nor_more_pauses_than_they_can_start(sqlite_box: Box):
    box = sqlite_box
    asks = [box.rt.start("asking") for _ in range(HOOK_THREADS + 2)]
    worker = box.worker(box.hook("hang"), "--on-pause-timeout", "10")
    pid_file = box.dir / "notices.jsonl.pid"
    pids = wait_until(lambda: pid_file.exists() and len(p := pid_file.read_text().split()) == HOOK_THREADS and p, 60,
                      "the hooks to start")
    # as many claimed as hooks can start at once: the rest stay unannounced, for whoever claims next
    assert [p.run_id for p in box.rt.announce_pauses(10)] == asks[HOOK_THREADS:]
    # while the hooks hang, the worker executes the next runs
    then = [box.queued("plain", "only", k=i) for i in range(3)]
    for run_id in then:
        wait_status(box.db, run_id, "completed")
    for pid in pids:
        os.kill(int(pid), 0)  # still hanging: the runs above did not wait for them
    lines = [f"run {rid}: on-pause hook for checkpoint {box.rt.get(rid).pending.checkpoint_id} did not finish "
             f"within 10 s; killed\n" for rid in asks[:HOOK_THREADS]]
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
