"""``relaypoint worker --on-pause CMD``: a real worker process runs a real hook command, with the
pause as JSON on its standard input, once per pause its execution commits; hooks that fail, are
missing or hang are logged in one line and never stop the worker from executing the next runs."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from relaypoint import Runtime

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

NOTICE_KEYS = {"run_id", "workflow", "kind", "step", "reason", "deadline", "checkpoint_id"}


class Box:
    """A directory with the app and the hook, a store ``db``, and the worker processes started."""

    def __init__(self, tmp_path: Path, db: str) -> None:
        self.dir, self.db = tmp_path, db
        (tmp_path / "gates.py").write_text(APP)
        (tmp_path / "hook.py").write_text(HOOK)
        self.out = tmp_path / "notices.jsonl"
        self.workers: list[tuple[subprocess.Popen, Path]] = []
        namespace: dict[str, Any] = {}
        exec(compile(APP, "gates.py", "exec"), namespace)
        self.rt = Runtime(db, namespace["workflows"])

    def hook(self, mode: str) -> str:
        return shlex.join([sys.executable, str(self.dir / "hook.py"), mode, str(self.out)])

    def worker(self, on_pause: str, *options: str) -> subprocess.Popen:
        """Start ``relaypoint worker --on-pause ON_PAUSE`` (stderr to a file: :meth:`log`)."""
        err = self.dir / f"worker{len(self.workers)}.err"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
        with open(err, "wb") as f:
            proc = subprocess.Popen([sys.executable, "-m", "relaypoint", "--db", self.db, "worker", "--app",
                                     "gates:workflows", "--poll", "0.1", "--on-pause", on_pause, *options],
                                    cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=f)
        self.workers.append((proc, err))
        return proc

    def log(self, proc: subprocess.Popen) -> str:
        return next(err for p, err in self.workers if p is proc).read_text()

    def stop(self, proc: subprocess.Popen) -> str:
        """SIGTERM the worker, wait for it (it waits for its hooks), and return its stderr."""
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        return self.log(proc)

    def queued(self, workflow: str, step: str, **input: Any) -> str:
        """A queued run of ``workflow`` for the worker: started here (where it pauses at once, or
        completes), then forked from ``step``."""
        parent = self.rt.start(workflow, input)
        return self.rt.fork(parent, step)

    def notices(self) -> list[dict[str, Any]]:
        text = self.out.read_text() if self.out.exists() else ""
        return [json.loads(line) for line in text.splitlines()]

    def wait_notices(self, count: int) -> list[dict[str, Any]]:
        return wait_until(lambda: len(n := self.notices()) >= count and n, 60, f"{count} notices in {self.out}")

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
    return {"run_id": run.run_id, "workflow": run.workflow, "kind": run.pending.kind, "step": run.pending.step,
            "reason": run.pending.reason, "checkpoint_id": run.pending.checkpoint_id}


def test_each_pause_the_worker_commits_is_announced_once_with_its_fields(box: Box):
    # paused by this process, not the worker's execution: never announced
    here = box.rt.start("gated", {"n": 0})
    gate = box.queued("gated", "draft", n=1)             # pauses at check (an approval with a deadline)
    ask = box.queued("asking", "ask")                     # pauses for input
    plain = box.queued("plain", "only")                   # completes: nothing to announce
    held = box.rt.fork(box.rt.start("held"), "slow")
    kill_owner(box.db, held, "slow")                      # its step's process died: the worker holds it
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
    wait_status(box.db, plain, "completed")

    # approved, the gated run goes on to its second gate: a new pause, announced once more
    box.rt.approve(gate, checkpoint_id=notices[gate]["checkpoint_id"])
    second = box.wait_notices(4)[3]
    assert (second["run_id"], second["step"]) == (gate, "confirm")
    assert second["checkpoint_id"] != notices[gate]["checkpoint_id"]
    assert "Traceback" not in box.stop(worker)

    # a restarted worker announces only what its own execution pauses: the next run, not the old pauses
    box.worker(box.hook("ok"))
    later = box.queued("asking", "ask")
    assert box.wait_notices(5)[4]["run_id"] == later
    ids = [n["checkpoint_id"] for n in box.notices()]
    assert len(ids) == len(set(ids)) == 5
    assert here not in {n["run_id"] for n in box.notices()}


@pytest.mark.parametrize("mode", ["fail", "missing"])
def test_a_failing_or_missing_hook_is_one_line_and_the_worker_goes_on(sqlite_box: Box, mode: str):
    box = sqlite_box
    command = box.hook("fail") if mode == "fail" else shlex.join([str(box.dir / "no-such-hook"), "--flag"])
    worker = box.worker(command)
    first = box.queued("asking", "ask")
    wait_status(box.db, first, "awaiting_input")
    then = [box.queued("plain", "only", k=i) for i in range(2)]
    second = box.queued("gated", "draft")
    for run_id in then:
        wait_status(box.db, run_id, "completed")
    wait_status(box.db, second, "awaiting_approval")
    about = [f"run {rid}: on-pause hook for checkpoint {box.rt.get(rid).pending.checkpoint_id}" for rid in (first, second)]
    if mode == "fail":
        said = " exited with status 3: the chat webhook answered 500"
        assert [n["run_id"] for n in box.wait_notices(2)] == [first, second]
    else:
        said = f" could not start {str(box.dir / 'no-such-hook')!r}: No such file or directory"
    log = wait_until(lambda: all(a in (t := box.log(worker)) for a in about) and t, 60, "the failures logged")
    for line in about:
        assert f"{line}{said}\n" in log
    assert "Traceback" not in box.stop(worker)


def test_a_hanging_hook_is_killed_and_never_holds_the_worker(sqlite_box: Box):
    box = sqlite_box
    worker = box.worker(box.hook("hang"), "--on-pause-timeout", "10")
    first = box.queued("asking", "ask")
    pid = int(wait_until(lambda: (p := box.dir / "notices.jsonl.pid").exists() and p.read_text().strip(), 60,
                         "the hook to start"))
    # while the hook hangs, the worker executes the next runs
    then = [box.queued("plain", "only", k=i) for i in range(3)]
    for run_id in then:
        wait_status(box.db, run_id, "completed")
    os.kill(pid, 0)  # still hanging: the runs above did not wait for it
    checkpoint = box.rt.get(first).pending.checkpoint_id
    line = f"run {first}: on-pause hook for checkpoint {checkpoint} did not finish within 10 s; killed\n"
    wait_until(lambda: line in box.log(worker), 60, "the hanging hook to be killed")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "Traceback" not in box.stop(worker)


@pytest.mark.parametrize("command, said", [("", "--on-pause needs a command"),
                                           ('notify "unclosed', "--on-pause: No closing quotation")])
def test_a_command_that_cannot_be_split_is_refused_before_the_worker_starts(sqlite_box: Box, command: str, said: str):
    done = subprocess.run([sys.executable, "-m", "relaypoint", "--db", sqlite_box.db, "worker", "--app", "gates:workflows",
                           "--on-pause", command], cwd=sqlite_box.dir, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"Error: {said}")
