"""``relaypoint demo``: fill a store with real runs of the bundled examples, ``repo-audit``,
``panel`` (multi-agent patterns over the audit's findings) and, with ``relaypoint[pydantic-ai]``
installed, ``research`` (PydanticAI agents).

Every run is really executed, including three whose processes are SIGKILLed (an audit mid-step, a
panel mid-debate, a research run in its writer's third model request), so the console shows each
state a run can rest in: completed, awaiting approval, awaiting input, interrupted, failed,
rejected, cancelled, and a queued fork of the completed audit; a panel completed, interrupted in
round 2 of its debate, and waiting for a person's turn in its debate; and a research run waiting
at its approval gate (with the agents' recorded calls and usage), and one interrupted mid-agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from .defaults import DURABILITY
from .errors import RelaypointError
from .examples import audit, panel
from .models import StepRecord
from .runtime import Runtime
from .status import RunStatus, StepStatus

try:
    from .examples import research
except ImportError as missing:  # the optional extra: the demo goes on without the research runs
    if (missing.name or "").split(".")[0] != "pydantic_ai":
        raise
    research = None

workflows = [*audit.workflows, *panel.workflows, *(research.workflows if research else [])]
"""Every workflow the demo's runs use: the app the demo's console resumes with (:data:`DEMO_APP`)."""
DEMO_APP = "relaypoint.demo:workflows"
KILL_WAIT_SECONDS = 60.0
NO_RESEARCH = "research: not added, PydanticAI is not installed (pip install 'relaypoint[pydantic-ai]' adds its runs)"
"""The progress line of a demo made without ``relaypoint[pydantic-ai]``."""


def _kill_while(db_url: str, example: ModuleType, workflow: str, input: dict, durability: str, where: str,
                running: Callable[[StepRecord], bool]) -> str:
    """Start a run of ``workflow`` of the bundled ``example`` (a module of :mod:`relaypoint.examples`:
    the child loads that example alone) in a child process and SIGKILL it as soon as an execution
    that ``running`` picks is running (``where`` names it in the error); returns the run id once the
    run is marked interrupted. Raises ``RelaypointError`` if the child never gets there."""
    child = subprocess.Popen(  # the URL in the environment: `ps` would show a password on the command line
        [sys.executable, "-m", "relaypoint", "--durability", durability, "start", workflow,
         "--app", f"{example.__name__}:workflows", "--input", json.dumps(input)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "RELAYPOINT_DB": db_url},
    )
    run_id = child.stdout.readline().strip()  # printed once the run is recorded, before its first step
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    with Runtime(db_url, create=False, durability=durability) as rt:
        while run_id and time.monotonic() < deadline:
            if any(s.status == StepStatus.RUNNING and running(s) for s in rt.steps(run_id)):
                child.send_signal(signal.SIGKILL)
                child.wait()
                rt.sweep()
                if (status := rt.get(run_id, with_outputs=False).status) != RunStatus.INTERRUPTED:
                    raise RelaypointError(f"demo: the killed run shows {status}, expected interrupted")
                return run_id
            if child.poll() is not None:
                break
            time.sleep(0.05)
    child.kill()
    child.wait()
    raise RelaypointError(f"demo: the child run never reached {where} (exit code {child.returncode})")


def build_demo(db_url: str, root: str | None = None, progress: Callable[[str], None] = lambda line: None,
               durability: str = DURABILITY) -> dict[str, str]:
    """Create the demo runs in the store at ``db_url`` (created if missing). ``root``: the directory
    audited (default: the installed relaypoint sources, a real and bounded tree). Reports (and
    the research runs' posts, once published) are written to the system temporary directory.
    Returns label -> run id. Raises ``RelaypointError``, before anything is recorded or reported
    to ``progress``, when ``root`` is not a readable directory or the store is read-only
    (``StoreReadOnly``)."""
    root = root or str(Path(__file__).resolve().parent)
    if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
        problem = "is not a readable directory" if os.path.exists(root) else "does not exist"
        raise RelaypointError(f"demo: the directory to audit, {root!r}, {problem}; give --root an existing directory")
    base = {"root": root}
    with Runtime(db_url, workflows, durability=durability) as rt:
        if rt.readonly_reason is not None:  # before the first progress line, which reads as success
            raise rt.read_only_error("the demo records the runs it makes, so it needs a store it can write")
        runs: dict[str, str] = {}

        progress("completed: audit, approve, resume to the end")
        rid = rt.start("repo-audit", base)
        rt.approve(rid, by="demo-reviewer", comment="Numbers look right; publish it.")
        rt.resume(rid)
        runs["completed"] = rid

        progress("awaiting approval: audit paused at its report gate")
        runs["awaiting_approval"] = rt.start("repo-audit", {**base, "title": "Audit awaiting review"})

        progress("awaiting input: the draft step asks for a title")
        runs["awaiting_input"] = rt.start("repo-audit", {**base, "ask_title": True})

        progress("failed: audit of a directory that does not exist")
        runs["failed"] = rt.start("repo-audit", {"root": os.path.join(root, "no-such-directory")})

        progress("rejected: audit rejected at its gate")
        rid = rt.start("repo-audit", {**base, "title": "Audit to reject"})
        rt.reject(rid, comment="Docstring coverage too low; document the public API first.", by="demo-reviewer")
        runs["rejected"] = rid

        progress("cancelled: an audit waiting for its title, cancelled by its operator")
        rid = rt.start("repo-audit", {**base, "ask_title": True, "title": "never asked"})
        rt.cancel(rid, by="demo-operator")
        runs["cancelled"] = rid

        progress("fork: the completed run, forked from its draft with a new title")
        runs["fork"] = rt.fork(runs["completed"], "draft", {**base, "title": "Audit (forked draft)"})

        progress("panel: the audit's findings debated, ranked, triaged, planned and summarised, to the end")
        runs["panel_completed"] = rt.start("panel", base)

        progress("panel with a person: the debate waits for the skeptic's answer")
        runs["panel_awaiting_input"] = rt.start("panel-with-person", base)

        if research is not None:
            progress("research: PydanticAI agents draft, vote and revise; the revision awaits approval")
            runs["research_awaiting_approval"] = rt.start("research")
        else:
            progress(NO_RESEARCH)

    progress("interrupted: a child process SIGKILLed during its analyze step")
    runs["interrupted"] = _kill_while(db_url, audit, "repo-audit", {**base, "delay": 30}, durability, "step 'analyze'",
                                      lambda s: s.name == "analyze")

    progress("panel interrupted: a child process SIGKILLed in round 2 of the debate, as the skeptic speaks")
    runs["panel_interrupted"] = _kill_while(
        db_url, panel, "panel", {**base, "delay": 30}, durability, "round 2 of the debate",
        lambda s: s.name == "argue" and s.iteration == 2 and s.agent == "skeptic")

    if research is not None:
        progress("research interrupted: a child process SIGKILLed in the writer's third model request")
        runs["research_interrupted"] = _kill_while(
            db_url, research, "research", {"delay": 30}, durability, "the writer's third model request",
            lambda s: s.name == "draft" and s.progress == "model request 3")
    return runs
