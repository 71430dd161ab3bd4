"""Worker throughput on PostgreSQL: ``runs`` queued 5-step runs executed by ``workers`` worker
processes (``relaypoint worker``, one thread each, at the default durability "full") sharing one
store.

The runs are queued the way a user queues work for workers: one run of the chain is executed, then
forked ``runs`` times from its first step (``Runtime.fork``), so each fork is a ``queued`` run with
all five steps to execute. The workers start together; runs per second are counted from the first
claim (the first ``resumed`` event) to the last completion (the last ``run_completed`` event).
While they work, the machine's CPU (``/proc/stat``) and the CPU of the worker processes and of
the server's processes (every process named ``postgres``) are sampled, from the first claim seen to
the last completion seen, as a share of one core.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from common import serve
from worker_app import STEPS, workflows

from relaypoint import Runtime
from relaypoint.status import EventKind

BENCH = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")
WAIT_SECONDS = 600


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / TICK, sum(fields[:8]) / TICK


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (all its threads) so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def server_pids() -> list[int]:
    """The processes of the PostgreSQL server on this machine (named ``postgres``)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == "postgres":
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def snapshot(workers: list[int]) -> dict[str, object]:
    busy, total = machine_cpu()
    return {"at": time.monotonic(), "busy": busy, "total": total,
            "workers": sum(process_cpu(p) for p in workers),
            "server": {p: process_cpu(p) for p in server_pids()}}


def queue(rt: Runtime, runs: int) -> list[str]:
    """``runs`` queued runs of the chain: forks from the first step of one executed run."""
    parent = rt.start("bench")
    return [rt.fork(parent, "s0") for _ in range(runs)]


def throughput(url: str, runs: int, workers: int, poll: str = "0.1") -> dict[str, object]:
    """Runs per second of ``workers`` worker processes on ``runs`` queued runs, and the CPU shares
    (fractions of one core) of the machine, the workers and the server over the same stretch."""
    with Runtime(url, workflows) as rt:
        forks = queue(rt, runs)
        done_target = rt.counts().get("completed", 0) + runs
        cmd = [sys.executable, "-m", "relaypoint", "--db", url, "worker", "--app", "worker_app:workflows",
               "--poll", poll]
        procs = [subprocess.Popen(cmd, cwd=BENCH, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(workers)]
        pids = [p.pid for p in procs]
        try:
            first = last = None
            deadline = time.monotonic() + WAIT_SECONDS
            while time.monotonic() < deadline:
                counts = rt.counts()
                if first is None and counts.get("queued", 0) < runs:
                    first = snapshot(pids)
                if counts.get("completed", 0) >= done_target:
                    last = snapshot(pids)
                    break
                time.sleep(0.05)
            else:
                raise SystemExit(f"the workers did not complete {runs} runs in {WAIT_SECONDS} s")
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(timeout=60)
        claims, ends, twice = [], [], 0
        for rid in forks:
            events = rt.events(rid)
            claims.append(min(e.at for e in events if e.kind == EventKind.RESUMED))
            ends.append(max(e.at for e in events if e.kind == EventKind.RUN_COMPLETED))
            twice += sum(e.kind == EventKind.STEP_STARTED for e in events) > STEPS
    seconds = (max(ends) - min(claims)).total_seconds()
    wall = last["at"] - first["at"]
    server = sum(cpu - first["server"].get(pid, 0.0) for pid, cpu in last["server"].items())
    return {"runs_per_s": runs / seconds, "seconds": seconds, "runs_executed_twice": twice,
            "machine_cores": (last["busy"] - first["busy"]) / (last["total"] - first["total"]) * os.cpu_count(),
            "workers_cpu": (last["workers"] - first["workers"]) / wall, "server_cpu": server / wall}


if __name__ == "__main__":
    serve(globals())
