"""A corpus of hostile stored text — markup, CSI and OSC sequences (OSC 52 clipboard, OSC 8 links,
title changes), C1 controls, BiDi overrides, zero-width characters, 100,000-character lines — in
outputs, errors, step names, workflow names, comments and prompts: the console and the CLI show
all of it literally (nothing styles or controls the terminal) and stay usable."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from console_pilot import detail, runs_table, select_run, select_step, settle

from relaypoint import Runtime, RunStatus, Workflow
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


def hostile_store(path: str) -> dict[str, str]:
    """Runs whose every stored text field carries the corpus."""
    wf = Workflow(f"wf {CORPUS['markup']} {CORPUS['csi']}")

    @wf.step(name=f"step {CORPUS['bidi']} {CORPUS['title']}", approval=True)
    def first(ctx: Any) -> Any:
        return {"text": HOSTILE, "long": LONG, "report": f"line one\n{HOSTILE}\n{LONG}"}

    @wf.step(name="ask")
    def ask(ctx: Any) -> Any:
        return ctx.request_input(f"prompt {HOSTILE}")

    @wf.step(name="boom")
    def boom(ctx: Any) -> Any:
        raise ValueError(f"{HOSTILE} {LONG}")

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
    return {"failed": approved, "rejected": rejected, "asking": asking, "workflow": wf.name}


def assert_inert(text: str) -> None:
    found = sorted({f"U+{ord(c):04X}" for c in text if c in RAW})
    assert not found, f"raw control or format characters reached the output: {found}"


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, dict[str, str]]:
    path = str(tmp_path / "store.db")
    return path, hostile_store(path)


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
                          text=True, env=env, timeout=60)


def test_the_cli_shows_the_corpus_literally(store):
    path, runs = store
    outputs = [relaypoint(path, "list"), relaypoint(path, "list", "--json")]
    for rid in (runs["failed"], runs["rejected"], runs["asking"]):
        outputs += [relaypoint(path, "show", rid), relaypoint(path, "show", rid, "--json"),
                    relaypoint(path, "events", rid), relaypoint(path, "events", rid, "--json")]
    for done in outputs:
        assert done.returncode == 0, done.stderr
        assert_inert(done.stdout + done.stderr)
    shown = relaypoint(path, "show", runs["failed"]).stdout
    assert "[link=https://evil.example]click[/link]" in shown and "\\x1b]52;c;" in shown
    assert LONG in shown.replace("\n", "")
