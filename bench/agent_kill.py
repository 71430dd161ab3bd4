"""A kill -9 inside a PydanticAI agent's step: what the resume sends again, and how long it takes.

One step runs a ``RelaypointAgent`` on a ``FunctionModel`` that makes 5 model requests with a
``web_search`` tool call after each of the first 4; each request sleeps ``--latency`` seconds (a
stand-in for a model's latency). A child process runs the step and is SIGKILLed while request 3 is
in flight (it waits there on the step's first attempt); a second child resumes the run. Counted
from the model's and the tool's own log: requests and tool calls sent before the kill, on resume,
and sent again (sent before the kill too), every repeat's (a range when they differ). Timed: the resume in the resuming child (opening the
runtime and ``rt.resume``, to the run completed), the whole resuming process (interpreter start
and imports included), and, for scale, an uninterrupted run's ``rt.start`` in another child.
SQLite (a fresh file per repeat), and PostgreSQL with ``--postgres URL`` (a fresh schema per
repeat, dropped afterwards); times are medians of ``--repeat`` runs.

    python bench/agent_kill.py [--repeat 5] [--latency 0.2] [--postgres postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REQUESTS = 5
KILLED_IN = 3


def child(task: str, url: str, log: str, latency: float) -> None:
    """Run (``start``, the first attempt waiting in request :data:`KILLED_IN`; ``plain``, not
    waiting) or ``resume`` the one run of ``url``; print ``{"seconds": ...}`` for the run's
    Runtime and start or resume. Every model request and tool call appends a line to ``log``."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from relaypoint import Runtime, Workflow, recorded
    from relaypoint.integrations.pydantic_ai import RelaypointAgent

    def note(line: str) -> None:
        with open(log, "a") as f:
            f.write(line + "\n")

    async def model(messages, info):
        import asyncio

        n = sum(m.kind == "response" for m in messages) + 1
        note(f"request {n}")
        in_flight = task == "start" and n == KILLED_IN and recorded.current().attempt == 1
        await asyncio.sleep(600 if in_flight else latency)  # in flight: killed there
        if n < REQUESTS:
            return ModelResponse(parts=[ToolCallPart("web_search", {"query": f"q{n}"}, tool_call_id=f"c{n}")])
        return ModelResponse(parts=[TextPart(f"done after {REQUESTS - 1} searches")])

    base = Agent(FunctionModel(model, model_name="bench-model"), name="researcher")

    @base.tool_plain
    def web_search(query: str) -> str:
        note(f"tool {query}")
        return query.upper()

    agent = RelaypointAgent(base)
    wf = Workflow("agent-kill")

    @wf.step
    async def research(ctx):
        return (await agent.run("research")).output

    t = time.perf_counter()
    with Runtime(url, [wf]) as rt:
        if task == "resume":
            status = rt.resume(rt.list(limit=1)[0].run_id)
        else:
            status = rt.get(rt.start("agent-kill")).status
    print(json.dumps({"seconds": time.perf_counter() - t, "status": str(status)}))


def _child(task: str, url: str, log: Path, latency: float) -> list[str]:
    return [sys.executable, __file__, "--child", task, url, str(log), str(latency)]


def once(url: str, log: Path, latency: float) -> dict[str, float]:
    """One kill and resume on the empty store ``url``: counts and seconds."""
    proc = subprocess.Popen(_child("start", url, log, latency), stdout=subprocess.DEVNULL)
    limit = time.monotonic() + 120
    while f"request {KILLED_IN}" not in (log.read_text().splitlines() if log.exists() else []):
        if time.monotonic() > limit or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"the child never got to request {KILLED_IN} (exit code {proc.poll()})")
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = log.read_text().splitlines()
    t = time.perf_counter()
    done = subprocess.run(_child("resume", url, log, latency), capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"the resume failed: {done.stderr.strip().splitlines()[-1:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    if result["status"] != "completed":
        raise SystemExit(f"the resumed run is {result['status']}, not completed")
    after = log.read_text().splitlines()[len(before):]
    return {"requests_before": sum(line.startswith("request") for line in before),
            "requests_resume": sum(line.startswith("request") for line in after),
            "requests_again": sum(line in before for line in after if line.startswith("request")),
            "tools_again": sum(line in before for line in after if line.startswith("tool")),
            "resume": result["seconds"], "resume_process": wall}


def uninterrupted(url: str, log: Path, latency: float) -> float:
    """Seconds of an uninterrupted run's ``rt.start`` (in its child process)."""
    done = subprocess.run(_child("plain", url, log, latency), capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.splitlines()[-1])["seconds"]


@contextmanager
def fresh_store(directory: Path, postgres: str | None, n: int) -> Iterator[str]:
    """An empty store: a SQLite file in ``directory``, or a new schema on the server ``postgres``."""
    if postgres is None:
        yield str(directory / f"kill-{n}.db")
        return
    from pg_section import fresh_schema

    with fresh_schema(postgres, "agent_kill") as url:
        yield url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds each model request takes")
    parser.add_argument("--postgres", metavar="URL", help="also on this PostgreSQL server (a database, no query)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        task, url, log, latency = args.child
        child(task, url, log, float(latency))
        return
    if args.postgres:
        from pg_section import check

        check(args.postgres)
    print(f"| store | requests before the kill | sent on resume | sent again | tool calls again | resume, s "
          f"| resume process, s | uninterrupted run, s |  ({REQUESTS} requests of {args.latency} s, killed in "
          f"request {KILLED_IN}; median of {args.repeat})")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for store, postgres in (("SQLite", None), ("PostgreSQL", args.postgres)):
        if store == "PostgreSQL" and postgres is None:
            continue
        rows, plain = [], []
        with tempfile.TemporaryDirectory() as tmp:
            for n in range(args.repeat):
                with fresh_store(Path(tmp), postgres, n) as url:
                    rows.append(once(url, Path(tmp) / f"kill-{n}.log", args.latency))
                with fresh_store(Path(tmp), postgres, args.repeat + n) as url:
                    plain.append(uninterrupted(url, Path(tmp) / f"plain-{n}.log", args.latency))

        def med(key: str) -> float:
            return statistics.median(r[key] for r in rows)

        def span(key: str) -> str:  # counts: every repeat's, as a range when they differ
            low, high = min(r[key] for r in rows), max(r[key] for r in rows)
            return f"{low}" if low == high else f"{low}-{high}"

        counts = " | ".join(span(k) for k in ("requests_before", "requests_resume", "requests_again", "tools_again"))
        print(f"| {store} | {counts} | {med('resume'):.2f} | {med('resume_process'):.2f} "
              f"| {statistics.median(plain):.2f} |")


if __name__ == "__main__":
    main()
