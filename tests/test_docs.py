"""Every example of the documentation runs as written: the README and the site's pages (docs/).

Each page's examples run in order, in a directory of their own: its ``python`` blocks in one
namespace (a block with ``title="NAME"`` is also saved as the file NAME, as the page asks the reader
to), then its ``sh`` and ``bash`` blocks as one bash session (``-euo pipefail``; the test
environment's ``relaypoint`` first on ``PATH``, ``RELAYPOINT_*`` cleared). A block that cannot run
here (it installs from the network, opens the interactive console, serves until stopped, needs a
server of its own) is preceded by ``<!-- not run: REASON -->``, and a test checks every fenced block
names its language, so nothing is skipped silently. Then each page's checks compare what ran with
what the page says it gives (the results shown in its comments and JSON blocks)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
PROGRAMS = {"python", "sh", "bash"}
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)(?P<attrs>[^\n]*)\n(?P<body>.*?)^(?P=indent)```[ ]*$",
                   re.M | re.S)
NOT_RUN = re.compile(r"<!-- not run: (?P<why>.+?) -->\s*$")
SUBPROCESS = {"docs/how-to/traces.md"}
"""Pages whose Python runs in a process of its own: it sets the global tracer provider, as an
application does once."""


@dataclass
class Block:
    lang: str
    title: str | None
    code: str
    not_run: str | None
    line: int


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n ").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        title = re.search(r'title="([^"]+)"', m["attrs"])
        found.append(Block(m["lang"], title and title.group(1), textwrap.dedent(m["body"]),
                           marker and marker["why"], text.count("\n", 0, m.start()) + 1))
    return found


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in PROGRAMS and b.not_run is None]


@dataclass
class Ran:
    namespace: dict[str, Any]
    stdout: str  # the Python's, for a page run in a subprocess, then the shell session's
    cwd: Path


def run_page(page: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> Ran:
    monkeypatch.chdir(cwd)
    todo = runnable(page)
    namespace: dict[str, Any] = {}
    stdout = ""
    python = [b for b in todo if b.lang == "python"]
    for b in python:
        if b.title:
            (cwd / b.title).write_text(b.code)
    if name(page) in SUBPROCESS:
        done = subprocess.run([sys.executable, "-c", "\n".join(b.code for b in python)], cwd=cwd,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        stdout = done.stdout
    else:
        monkeypatch.syspath_prepend(str(cwd))
        for b in python:
            exec(compile(b.code, f"{page}:{b.line}", "exec"), namespace)
    session = "\n".join(b.code for b in todo if b.lang in ("sh", "bash"))
    if session:
        env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        env = {k: v for k, v in env.items() if not k.startswith("RELAYPOINT_")}
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", session], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name(page)}: {done.stderr}"
        assert "Traceback" not in done.stdout + done.stderr
        stdout += done.stdout
    return Ran(namespace, stdout, cwd)


def commented(code: str, after: str) -> Any:
    """The JSON value in the ``# ...`` comment lines that follow the line starting with ``after``."""
    lines = re.search(r"\n((?:# .*\n)+)", code.split(after, 1)[1]).group(1)
    return json.loads(re.sub(r"^# ?", "", lines, flags=re.M))


def python_of(page: str) -> list[str]:
    return [b.code for b in runnable(ROOT / page) if b.lang == "python"]


# --- what each page says its examples give ---------------------------------------------------------

def check_readme(ran: Ran) -> None:
    assert ran.stdout.strip().splitlines()[-1].endswith(" is completed")
    from relaypoint import Runtime

    with Runtime(str(ran.cwd / "relaypoint.db"), create=False) as rt:
        (run,) = rt.list()
        assert run.status == "completed" and rt.step_output(run.run_id, "publish")["title"] == "Final title"


def check_workflows(ran: Ran) -> None:
    """The definition, then the API tour, then the same workflow from the command line."""
    rt = ran.namespace["rt"]
    run = rt.get(ran.namespace["run_id"])
    assert run.status == "completed"
    assert run.tasks[-1].output["title"] == "Final title"
    assert rt.get(ran.namespace["new_id"]).status == "cancelled"
    rt.close()
    assert ran.stdout.strip().splitlines()[-1].endswith(" is completed")


def check_patterns(ran: Ran) -> None:
    """Every pattern in one workflow, whose report is the JSON the page shows; the nodes of
    independent calls, whose results are the comment under them; async voters at once; a debate
    with a person answering two rounds."""
    ns = ran.namespace
    text = (DOCS / "concepts/patterns.md").read_text()
    (shown,) = [b.code for b in blocks(DOCS / "concepts/patterns.md") if b.lang == "json"]
    assert ns["result"] == json.loads(shown)
    assert ns["fanned"] == commented(python_of("docs/concepts/patterns.md")[1], "fanned = ")
    assert ns["published"] == "published: ship"
    with ns["Runtime"]("agents.db") as rt:
        voters = [t for t in rt.get(rt.list()[0].run_id).tasks if t.agent is not None]
    assert max(t.started_at for t in voters) < min(t.finished_at for t in voters), "the voters run at once"
    run = ns["rt"].get(ns["run_id"])
    assert run.status == "completed"
    assert [t.output for t in run.tasks if t.agent == "con"] == ["Caching hides bugs.", "Still not convinced."]
    assert "A person as an agent" in text


def check_traces(ran: Ran) -> None:
    (code,) = python_of("docs/how-to/traces.md")
    check = code + "\nimport json\nprint(json.dumps(tree))\n"
    done = subprocess.run([sys.executable, "-c", check], cwd=ran.cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == commented(code, "tree = ")


def check_typed_outputs(ran: Ran) -> None:
    """An edit refused by the recorded schema with the line its comment shows, then a good one,
    which the next step reads as the model."""
    (code,) = python_of("docs/concepts/values.md")
    assert ran.namespace["refused"] == re.search(r"refused = str\(e\)  # (.*)", code).group(1)
    assert ran.namespace["published"] == re.search(r"published = .*# '(.*)'", code).group(1)


def check_recorded_calls(page: str) -> Callable[[Ran], None]:
    """Each model request sent once across a pause and a run again, the calls recorded as the
    block's comments show."""
    def check(ran: Ran) -> None:
        (code,) = python_of(page)
        for var in ("sent", "recorded"):
            shown = re.search(rf"^# {var} == (.*?)(?::.*)?$", code, flags=re.M).group(1)
            assert repr(ran.namespace[var]) == shown, var
    return check


def check_tutorial(ran: Ran) -> None:
    from relaypoint import Runtime

    with Runtime(str(ran.cwd / "relaypoint.db"), create=False) as rt:
        (run,) = rt.list()
        assert run.status == "completed"
        research = [t for t in rt.get(run.run_id).tasks if t.name == "research"][0]
        assert research.attempts == 2, "research ran again after the kill; draft did not"
        assert [t.attempts for t in rt.get(run.run_id).tasks if t.name == "draft"] == [1]


def check_async_app(ran: Ran) -> None:
    sent = (ran.cwd / "requests.log").read_text().splitlines()
    assert sent.count("facts about crash test") == 1, "the recorded request was not sent again"
    assert sent.count("an angle on crash test") == 2, "the request in flight at the kill was sent again"
    from relaypoint import Runtime

    with Runtime(str(ran.cwd / "app.db"), create=False) as rt:
        statuses = {r.run_id: r.status for r in rt.list()}
        served = [r for r in rt.list() if rt.get(r.run_id, with_outputs=False).input == {"topic": "the web"}]
    assert sorted(statuses.values()) == ["awaiting_approval", "awaiting_approval", "completed"]
    assert len(served) == 1 and f'{{"run_id":"{served[0].run_id}","status":"awaiting_approval","step":"draft"}}' \
        in ran.stdout, "the server answered where the run it started stands"


def check_cli_session(ran: Ran) -> None:
    assert "run_completed" in ran.stdout


CHECKS: dict[str, Callable[[Ran], None]] = {
    "README.md": check_readme,
    "docs/tutorial/index.md": check_tutorial,
    "docs/how-to/async-app.md": check_async_app,
    "docs/concepts/workflows.md": check_workflows,
    "docs/concepts/patterns.md": check_patterns,
    "docs/how-to/traces.md": check_traces,
    "docs/concepts/values.md": check_typed_outputs,
    "docs/concepts/boundaries.md": check_recorded_calls("docs/concepts/boundaries.md"),
    "docs/how-to/pydantic-ai.md": check_recorded_calls("docs/how-to/pydantic-ai.md"),
    "docs/how-to/openai-agents.md": check_recorded_calls("docs/how-to/openai-agents.md"),
    "docs/reference/cli.md": check_cli_session,
}


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)], ids=name)
def test_the_examples_run_as_written(page, tmp_path, monkeypatch):
    ran = run_page(page, tmp_path, monkeypatch)
    CHECKS.get(name(page), lambda ran: None)(ran)


def test_every_example_runs_or_says_why():
    """Every fenced block names its language; the programs among them run (above) unless a
    comment says why not; every page that has checks still has the examples they check."""
    unnamed = [f"{name(p)}:{b.line}" for p in PAGES for b in blocks(p) if not b.lang]
    assert unnamed == [], "a fenced block without a language (```sh, ```text, ...)"
    for page in CHECKS:
        assert runnable(ROOT / page), f"{page} has checks but no example that runs"
    referred = [(p, b) for p in PAGES for b in blocks(p) if b.not_run and "tests/" in b.not_run]
    for page, b in referred:
        for test in re.findall(r"tests/[\w/]+\.py", b.not_run):
            assert (ROOT / test).exists(), f"{name(page)}:{b.line} names {test}, which does not exist"


def test_help_links_to_the_pages_that_explain_each_command():
    """``relaypoint --help`` and every command's help end with the address of an existing page of
    the site (and an existing heading, when the address has an anchor)."""
    from click.testing import CliRunner
    from markdown.extensions.toc import slugify

    from relaypoint.cli import cli
    from relaypoint.docs import DOCS_URL, PAGES as DOC_PAGES

    assert set(DOC_PAGES) == {None, *cli.commands}
    for command in [None, *cli.commands]:
        args = ["--help"] if command is None else [command, "--help"]
        out = CliRunner().invoke(cli, args, env={"RELAYPOINT_DOCS": ""}).output
        link = out.strip().splitlines()[-1]
        assert link == f"Docs: {DOCS_URL}{DOC_PAGES[command]}", (command, link)
        path, _, anchor = DOC_PAGES[command].partition("#")
        source = DOCS / (path.rstrip("/") + ".md" if path else "index.md")
        if not source.exists():
            source = DOCS / path / "index.md"
        assert source.exists(), (command, path)
        if anchor:
            headings = re.findall(r"^#+ (.*)$", source.read_text(), flags=re.M)
            assert anchor in [slugify(h, "-") for h in headings], (command, anchor)
