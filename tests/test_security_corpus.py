"""A corpus of hostile stored text — markup, CSI and OSC sequences (OSC 52 clipboard, OSC 8 links,
title changes), C1 controls, BiDi overrides, zero-width characters, 100,000-character lines — in
outputs, errors, step names, workflow names, comments and prompts: the console and the CLI show
all of it literally (nothing styles or controls the terminal) and stay usable."""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from console_pilot import detail, runs_table, select_run, select_step, settle

from relaypoint import Runtime, RunStatus
from relaypoint.background import resume_log, spawn_resume
from relaypoint.tui import RelaypointConsole

CORPUS = {
    "markup": "[bold red]loud[/] [link=https://evil.example]click[/link] [@click=app.quit]q[/]",
    "csi": "\x1b[2J\x1b[31mred\x1b[0m\x1b[?1049h",
    "osc52": "\x1b]52;c;SGVsbG8gY2xpcGJvYXJk\x07",
    "osc8": "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "title": "\x1b]0;pwned title\x07\x1b]2;other\x1b\\",
    "c1": "\x9b31m\x9d0;t\x9c\x85",
    "bidi": "user\u202egnp.exe\u202c \u2066isolate\u2069",
    "zero_width": "a\u200bb\u200cc\u200dd\ufeffe\u2060f",
    "controls": "bell\x07 back\x08 cr\r del\x7f nul\x00",
}
LONG = "L" * 100_000
RAW = set("\x1b\x07\x08\x7f\x00\x9b\x9c\x9d\x85\u202e\u202c\u2066\u2069\u200b\u200c\u200d\ufeff\u2060\r")
HOSTILE = " ".join(CORPUS.values())
ARG = HOSTILE.replace("\x00", "")  # a command-line argument cannot hold NUL


# The workflow as a module in the test's directory, so CLI processes load it with --app.
APP_SOURCE = f"""
import sys
from relaypoint import Workflow

CORPUS = {CORPUS!r}
HOSTILE = " ".join(CORPUS.values())
LONG = "L" * 100_000
""" + '''
wf = Workflow(f"wf {CORPUS['markup']} {CORPUS['csi']}")
GATE = f"step {CORPUS['bidi']} {CORPUS['title']}"


@wf.step(name=GATE, approval=True)
def first(ctx):
    print(f"a step's own stdout {HOSTILE}")
    return {"text": HOSTILE, "long": LONG, "report": f"line one\\n{HOSTILE}\\n{LONG}"}


@wf.step(name="ask")
def ask(ctx):
    return ctx.request_input(f"prompt {HOSTILE}")


@wf.step(name=f"boom {CORPUS['osc52']}")
def boom(ctx):
    print(f"a step's own stderr {HOSTILE}", file=sys.stderr)
    raise ValueError(f"{HOSTILE} {LONG}")


workflows = [wf]
'''
APP = "hostileapp:workflows"


def load_app(directory: Path) -> Any:
    """Write the app module into ``directory`` and import it (a fresh module object)."""
    source = directory / "hostileapp.py"
    source.write_text(APP_SOURCE)
    spec = importlib.util.spec_from_file_location(f"hostileapp_{abs(hash(directory))}", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hostile_store(path: str, app_dir: Path) -> dict[str, str]:
    """Runs in store ``path`` whose every stored text field carries the corpus (the app written
    in ``app_dir``)."""
    app = load_app(app_dir)
    wf = app.wf
    with Runtime(path, [wf]) as rt:
        approved = rt.start(wf.name)
        rt.approve(approved, by=f"by {CORPUS['osc8']}", comment=f"comment {HOSTILE}")
        rt.resume(approved)
        rt.respond(approved, f"answer {HOSTILE}")
        rt.resume(approved)  # boom fails with the corpus in its error
        rejected = rt.start(wf.name)
        rt.reject(rejected, comment=f"reason {HOSTILE} {LONG}", by=f"{CORPUS['zero_width']}")
        asking = rt.start(wf.name)
        rt.approve(asking)
        rt.resume(asking)
    return {"failed": approved, "rejected": rejected, "asking": asking, "workflow": wf.name, "gate": app.GATE,
            "boom": wf.steps[2].name}


def assert_inert(text: str) -> None:
    found = sorted({f"U+{ord(c):04X}" for c in text if c in RAW})
    assert not found, f"raw control or format characters reached the output: {found}"


@pytest.fixture
def store(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    """The hostile store on each backend: its URL and its runs. The test runs in ``tmp_path``,
    where the app is (and where a PostgreSQL store's resume log goes)."""
    monkeypatch.chdir(tmp_path)
    return db, hostile_store(db, tmp_path)


async def test_the_console_shows_the_corpus_literally_and_stays_usable(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=(160, 45)) as pilot:
        screens = []
        for label in ("failed", "rejected", "asking"):
            await select_run(pilot, runs[label])
            pane = detail(pilot)
            for step in pane.run.tasks:
                await select_step(pilot, step.name)
                screens.append(app.export_screenshot())
        await pilot.press("?")
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        # still usable: the list answers keys and the app quits on q
        await pilot.press("j", "k")
        await settle(pilot)
        assert runs_table(pilot).runs[runs["failed"]].status == RunStatus.FAILED
        await pilot.press("q")
    for svg in screens:
        assert_inert(svg)
        assert "&#27;" not in svg and "&#x1b;" not in svg.lower()
    # The text the screens draw: escapes are drawn reversed, i.e. in spans of their own.
    everything = html.unescape(re.sub(r"<[^>]+>", "", "".join(screens))).replace("\xa0", " ")
    for needle in ("[bold", "red]loud[/]", "[link=https://evil.example]click[/link]", "\\x1b[2J", "\\x1b]52;c;",
                   "\\u202e", "\\u200b", "\\x9b31m"):
        assert needle in everything, needle


def relaypoint(path: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    return subprocess.run([sys.executable, "-m", "relaypoint", "--db", path, *args], capture_output=True,
                          text=True, env=env, timeout=120, cwd=Path.cwd())


def test_the_cli_shows_the_corpus_literally(store):
    path, runs = store
    outputs = [relaypoint(path, "list"), relaypoint(path, "list", "--json")]
    for rid in (runs["failed"], runs["rejected"], runs["asking"]):
        outputs += [relaypoint(path, "show", rid), relaypoint(path, "show", rid, "--json"),
                    relaypoint(path, "show", rid, "--output", runs["gate"]),
                    relaypoint(path, "events", rid), relaypoint(path, "events", rid, "--json")]
    for done in outputs:
        assert done.returncode == 0, done.stderr
        assert_inert(done.stdout + done.stderr)
    shown = relaypoint(path, "show", runs["failed"]).stdout
    assert "[link=https://evil.example]click[/link]" in shown and "\\x1b]52;c;" in shown
    assert f"relaypoint show {runs['failed']} --output " in shown  # the long output is a preview
    whole = relaypoint(path, "show", runs["failed"], "--output", runs["gate"]).stdout
    assert json.loads(whole)["long"] == LONG


def _inert_run(done: subprocess.CompletedProcess, code: int = 0) -> str:
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert_inert(done.stdout + done.stderr)
    return done.stdout.strip()


def test_every_cli_command_and_error_prints_the_corpus_inert(store):
    """Every command that acts, and every error built from stored or step-produced text (step
    names, exception messages, a step's own stderr): stdout and stderr hold no raw control."""
    path, runs = store
    gate, boom = runs["gate"], runs["boom"]
    start = relaypoint(path, "start", runs["workflow"], "--app", APP)  # pauses at the gate
    started = _inert_run(start)
    assert start.stdout == f"{started}\n"  # a step's prints go to stderr: RUN=$(relaypoint start ...) works
    assert "a step's own stdout [bold red]" in start.stderr
    assert f"is awaiting_approval at step 'step user\\u202egnp.exe" in start.stderr
    _inert_run(relaypoint(path, "approve", started, "--comment", ARG, "--by", ARG))
    _inert_run(relaypoint(path, "resume", started, "--app", APP))  # pauses for input
    _inert_run(relaypoint(path, "respond", started, "--value", json.dumps(HOSTILE)))
    failed = relaypoint(path, "resume", started, "--app", APP)  # boom: its exception and its own stderr
    _inert_run(failed, 1)
    error = failed.stderr.strip().splitlines()[-1]
    assert error.startswith(f"Error: run {started} failed: step 'boom \\x1b]52;c;") and "\\x1b[2J" in error
    assert "a step's own stderr [bold red]" in failed.stderr and "\\u202e" in failed.stderr
    _inert_run(relaypoint(path, "resume", started, "--app", APP), 1)  # fails again: resume's error line

    fork = _inert_run(relaypoint(path, "fork", runs["rejected"], "--from", "ask"))  # pauses at the gate
    _inert_run(relaypoint(path, "reject", fork, "--comment", ARG, "--by", ARG))
    _inert_run(relaypoint(path, "fork", runs["failed"], "--from", boom))  # inherits the approval
    _inert_run(relaypoint(path, "cancel", runs["asking"], "--by", ARG))
    _inert_run(relaypoint(path, "delete", runs["asking"]))
    _inert_run(relaypoint(path, "prune", "--days", "0", "--status", "rejected"))
    for refused in (("fork", runs["failed"], "--from", ARG),  # its steps are: <names>
                    ("show", runs["failed"], "--output", ARG), ("show", ARG), ("approve", runs["failed"]),
                    ("resume", runs["failed"][:1] + ARG), ("start", ARG, "--app", APP),
                    ("start", "x", "--app", f"{CORPUS['csi']}:x"), ("list", "--status", ARG),
                    ("respond", runs["failed"], "--value", ARG), (ARG,)):
        done = relaypoint(path, *refused)
        assert done.returncode in (1, 2) and len(done.stderr.strip().splitlines()) == 1, (refused, done.stderr)
        _inert_run(done, done.returncode)


def test_a_worker_logs_the_corpus_inert(store, tmp_path):
    path, runs = store
    with Runtime(path) as rt:
        rid = rt.fork(runs["failed"], runs["boom"])  # queued; fails with the corpus in its error
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    worker = subprocess.Popen([sys.executable, "-m", "relaypoint", "--db", path, "worker", "--app", APP,
                               "--poll", "0.1"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        limit = time.monotonic() + 60
        while time.monotonic() < limit:
            with Runtime(path, readonly=True) as rt:
                if rt.get(rid).status == RunStatus.FAILED:
                    break
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert rid in err and "Traceback" not in err
    assert_inert(out + err)


def test_the_console_resume_log_is_inert(store):
    path, runs = store
    with Runtime(path) as rt:
        rid = rt.fork(runs["failed"], runs["boom"])
    # the console's resume keeps the current directory (the store fixture's), where --app is found
    spawn_resume(path, APP, rid).wait(timeout=120)
    spawn_resume(path, APP, ARG).wait(timeout=120)  # refused: the id echoed in the error
    log = resume_log(path).read_text()
    errors = [line for line in log.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 2 and "a step's own stderr" in log and "Traceback" not in log
    assert errors[0].startswith(f"Error: run {rid} failed: step 'boom \\x1b]52;c;")
    assert_inert(log)


HOSTILE_MARKDOWN = f"""# Report {CORPUS['markup']}

Text with {CORPUS['csi']} and {CORPUS['osc8']} and {CORPUS['title']} and {CORPUS['c1']}.

[a link]({CORPUS['osc52']}https://evil.example/x) and [@click=app.quit]text[/] and ![img](https://evil.example/i.png)

<!-- hidden {CORPUS['bidi']} comment -->
<script>alert("x")</script>

| Cell {CORPUS['zero_width']} | {CORPUS['controls']} |
|---|---|
| [bold]b[/bold] | {CORPUS['osc52']} |

```{CORPUS['csi']}
code {CORPUS['title']}
```
"""


async def test_rendered_markdown_keeps_the_corpus_inert(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A stored Markdown output on the review screen, in the approve form and in the detail
    pane's output box: control characters and escapes appear as visible escapes, markup and HTML
    as text (HTML is shown, never hidden), and clicking a link opens nothing."""
    from relaypoint import Workflow
    from relaypoint.tui.screens.confirm import ConfirmScreen
    from relaypoint.tui.screens.forms import ApproveScreen
    from relaypoint.tui.screens.review import ReviewScreen
    from relaypoint.tui.widgets.readable_output import SafeMarkdown
    from textual.widgets import Markdown

    from console_pilot import until

    monkeypatch.chdir(tmp_path)
    wf = Workflow("md")

    @wf.step(approval=True)
    def report(ctx: Any) -> Any:
        return {"markdown": HOSTILE_MARKDOWN, "plain": HOSTILE_MARKDOWN}

    @wf.step(approval=True)
    def whole(ctx: Any) -> Any:
        return HOSTILE_MARKDOWN

    with Runtime(db, [wf]) as rt:
        rt.approve(rid := rt.start("md"))
        rt.resume(rid)  # waits at the second gate: a Markdown string output
        first = rt.start("md")  # the oldest pending: a Markdown field of a JSON output
    app = RelaypointConsole(db, review=True)
    opened: list[str] = []
    app.open_url = lambda url, **kw: opened.append(url)  # type: ignore[method-assign]
    screens = []
    async with app.run_test(size=(160, 45)) as pilot:
        for run_id in (rid, first):  # oldest first: rid paused at its second gate before first started
            await until(pilot, lambda: isinstance(app.screen, ReviewScreen) and app.screen.item is not None)
            if app.screen.item.run.run_id != run_id:
                await pilot.press("n")
                await until(pilot, lambda: app.screen.item.run.run_id == run_id)
            await settle(pilot)
            for md in app.screen.query(SafeMarkdown):
                await until(pilot, lambda: len(md.children) > 5)
            await settle(pilot)
            screens.append(app.export_screenshot())
            md = app.screen.query(SafeMarkdown).first()
            md.post_message(Markdown.LinkClicked(md, CORPUS["osc52"] + "https://evil.example/x"))
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            screens.append(app.export_screenshot())
            await pilot.press("escape")
            await settle(pilot)
            await pilot.press("a")
            await until(pilot, lambda: isinstance(app.screen, ApproveScreen))
            await settle(pilot)
            screens.append(app.export_screenshot())
            await pilot.press("escape")
            await settle(pilot)
        await pilot.press("escape")  # the runs list: the same outputs in the detail pane's output box
        await until(pilot, lambda: not isinstance(app.screen, ReviewScreen))
        for run_id in (rid, first):
            await select_run(pilot, run_id)  # the gated step is selected: its output is shown
            pane = detail(pilot)
            await until(pilot, lambda: pane.query("#output SafeMarkdown")
                        and all(len(md.children) > 5 for md in pane.query("#output SafeMarkdown")))
            await settle(pilot)
            screens.append(app.export_screenshot())
            md = pane.query("#output SafeMarkdown").first()
            md.post_message(Markdown.LinkClicked(md, CORPUS["osc52"] + "https://evil.example/x"))
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            screens.append(app.export_screenshot())
            await pilot.press("escape")
            await settle(pilot)
        await pilot.press("q")
    assert opened == []
    for svg in screens:
        assert_inert(svg)
        assert "&#27;" not in svg and "&#x1b;" not in svg.lower()
    everything = html.unescape(re.sub(r"<[^>]+>", "", "".join(screens))).replace("\xa0", " ")
    for needle in ("[bold red]loud[/]", "[@click=app.quit]text[/]", "\\x1b[2J", "\\x1b]52;c;", "\\u202e",
                   "<!--", "hidden", "<script>", "[bold]b[/bold]", "\\x9b31m", "Open this link"):
        assert needle in everything, needle
