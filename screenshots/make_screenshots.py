"""Make the console screenshots: SVG from Textual, then PNG.

    python screenshots/make_screenshots.py [--db PATH] [--out DIR] [--size 160x45] [--fixture] [--browser-only]

Without ``--db`` a new store is filled by ``relaypoint demo --no-console`` in a temporary
directory (``--fixture``: by the tests' fixed store builder instead, ``tests/fixtures.py``).
The console is driven headless with ``App.run_test()``; it shows, in order: the runs list, the
detail of a run awaiting approval with its output (the audit's, when the store has one), the
approve form, the fork form, help, the review screen on that run (``review``: its Markdown report
rendered), when the store has a research run at its gate (the demo's) the review screen on it
scrolled to the gated step's usage and recorded calls (``review-calls``), the same run at 80x24,
and, when the store has a completed run with a supervisor (the demo's panel), that run's patterns
with the supervisor's summary (``pattern``).
Files: ``<out>/<name>.svg`` and ``<out>/<name>.png``.

Then ``browser.png``: the console in a web browser, ``relaypoint serve`` opened in headless Debian
Chromium through Playwright (tests/browser_console.py, as the browser test does), a page of
:data:`BROWSER_VIEWPORT` CSS pixels showing the runs table, the name :data:`BROWSER_NAME` given
when the page asks who decides. Without Playwright or
``/usr/bin/chromium`` it is not made (the script says why). ``--browser-only`` makes it alone.
Chromium falls back per glyph too: with Symbola installed, ⏸ is drawn.

PNG conversion needs ``rsvg-convert`` (Debian ``librsvg2-bin``), DejaVu Sans Mono (Debian
``fonts-dejavu-core``) and, for the ⏸ status symbol that DejaVu lacks, a font that has it such as
Symbola (Debian ``fonts-symbola``); rsvg falls back per glyph. (cairosvg was tried: it draws a box
for every glyph its one font lacks.) Without rsvg-convert only the SVGs are written.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from relaypoint import Runtime
from relaypoint.tui import RelaypointConsole
from relaypoint.tui.screens.review import ReviewScreen
from relaypoint.tui.widgets.detail import StepsTable
from relaypoint.tui.widgets.runs_table import RunsTable
from relaypoint.views.patterns import kind_of

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from browser_console import INSTALL, BrowserTerminal, browser_problem, chromium_page, free_port, served  # noqa: E402
from fixtures import CONSOLE_NOW, build_fixture_store, fixed_clock  # noqa: E402

BROWSER_VIEWPORT = (1600, 900)
"""The browser page of ``browser.png``, in CSS pixels (the console gets as many cells as fit)."""

BROWSER_NAME = "alice"
"""The name ``browser.png``'s page is given (its status line shows it)."""

SMALL = (80, 24)
"""The last shot: the same run on an 80x24 terminal."""

# Textual's SVG asks for Fira Code from the web; the converter has no network, so a local font.
FONT = ("Fira Code, monospace", "DejaVu Sans Mono, monospace")


def build_demo_store(path: Path) -> None:
    """Fill ``path`` with the bundled demo runs (``relaypoint demo --no-console``), auditing the
    package's sources as ``core`` from the repository's root, so the runs' inputs and reports name
    the project's own folder rather than wherever this checkout happens to live."""
    subprocess.run([sys.executable, "-m", "relaypoint", "--db", str(path), "demo", "--no-console", "--root", "core"],
                   check=True, cwd=ROOT)


def paused_run(db: Path) -> str:
    """The id of a run awaiting approval, the audit's when there is one (the detail, approve, fork
    and review shots show it)."""
    with Runtime(str(db), create=False) as rt:
        runs = rt.list(status="awaiting_approval", search="repo-audit", limit=1) or \
            rt.list(status="awaiting_approval", limit=1)
    if not runs:
        raise SystemExit(f"{db} has no run awaiting approval to show")
    return runs[0].run_id


def research_run(db: Path) -> str | None:
    """The id of a research run awaiting approval (the review-calls shot shows its gated step's
    calls), or None."""
    with Runtime(str(db), create=False) as rt:
        runs = rt.list(status="awaiting_approval", search="research", limit=1)
    return runs[0].run_id if runs else None


async def review_run(app: RelaypointConsole, pilot: Any, run_id: str) -> None:
    """Move the review screen along its queue (``n``, oldest first) until it shows ``run_id``."""
    for _ in range(20):
        await app.workers.wait_for_complete()
        await pilot.pause(0.3)
        review = app.screen
        if not isinstance(review, ReviewScreen) or (review.item is not None and review.item.run.run_id == run_id):
            return
        await pilot.press("n")


def pattern_run(db: Path) -> tuple[str, str] | None:
    """A completed run with a supervisor, and the supervisor's name (the pattern shot shows its
    summary); None when the store has none."""
    with Runtime(str(db), create=False) as rt:
        for summary in rt.list(status="completed", limit=100):
            run = rt.get(summary.run_id, with_outputs=False)
            supervisor = next((s.name for s in run.tasks if kind_of(s) == "supervisor"), None)
            if supervisor is not None:
                return run.run_id, supervisor
    return None


def to_png(svg: Path) -> Path | None:
    """Convert one SVG to PNG beside it (None when rsvg-convert is missing)."""
    if shutil.which("rsvg-convert") is None:
        return None
    png = svg.with_suffix(".png")
    # Spaces are significant in a terminal picture: keep them.
    text = svg.read_text().replace(*FONT).replace("<svg ", '<svg xml:space="preserve" ', 1)
    subprocess.run(["rsvg-convert", "--width", "1600", "--output", str(png)], input=text.encode(), check=True)
    return png


async def shoot(db: Path, out: Path, size: tuple[int, int], app_spec: str | None, fixed: bool) -> list[Path]:
    """Drive the console and save each view as SVG; returns the files written. ``fixed``: the
    console's clock is the fixture's, so relative times read as in the snapshots."""
    app = RelaypointConsole(str(db), app_spec, clock=fixed_clock(CONSOLE_NOW)) if fixed else \
        RelaypointConsole(str(db), app_spec)
    target = paused_run(db)
    written: list[Path] = []

    async def save(name: str) -> None:
        await app.workers.wait_for_complete()
        await pilot.pause(0.3)
        written.append(Path(app.save_screenshot(f"{name}.svg", str(out))))

    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.5)
        await save("runs")
        table = app.screen.query_one("#runs", RunsTable)
        table.move_cursor(row=table.get_row_index(target))
        await pilot.pause(0.5)
        await save("detail-paused")
        await pilot.press("a")
        await save("approve")
        await pilot.press("escape")
        await pilot.press("f")
        await save("fork")
        await pilot.press("escape")
        await pilot.press("question_mark")
        await save("help")
        await pilot.press("escape")
        await pilot.press("n")  # the review queue, from its oldest pending decision to the paused run's
        await review_run(app, pilot, target)
        await pilot.pause(0.5)
        await save("review")
        research = research_run(db)
        if research is not None:
            await review_run(app, pilot, research)
            await pilot.pause(0.5)
            calls = app.screen.query_one("#review-output").children[-1]  # the usage and calls, under the output
            app.screen.query_one("#review-body").scroll_to_widget(calls, top=True, animate=False)
            await save("review-calls")
        await pilot.press("escape")
        await pilot.resize_terminal(*SMALL)
        await pilot.press("k", "j")  # as a person would, to bring the selected run back into view
        await save("small")
        patterns = pattern_run(db)
        if patterns is not None:
            await pilot.resize_terminal(*size)
            run_id, supervisor = patterns
            table.move_cursor(row=table.get_row_index(run_id))
            await pilot.pause(0.5)
            await pilot.press("enter")  # to the step chain, then to the supervisor's row
            steps = app.screen.query_one("#steps", StepsTable)
            steps.move_cursor(row=steps.index_of(supervisor))
            await pilot.pause(0.5)
            await save("pattern")
    return written


def shoot_browser(db: Path, out: Path) -> Path | None:
    """Serve the console on ``db`` (``relaypoint serve``), open it in headless Chromium, wait for
    the runs table and the footer, and save the page as ``<out>/browser.png``; None (and why, on
    stderr) when Playwright or Chromium is missing."""
    problem = browser_problem()
    if problem is not None:
        print(f"browser.png not made: {problem}; it needs {INSTALL}", file=sys.stderr)
        return None
    target = paused_run(db)
    with tempfile.TemporaryDirectory() as cwd, \
            served(Path(cwd), "--db", str(db.resolve()), "serve", "--port", str(free_port())) as server, \
            chromium_page(*BROWSER_VIEWPORT) as page:
        terminal = BrowserTerminal(page, server, name=BROWSER_NAME)
        terminal.wait_for_text(target[:8])
        terminal.wait_for(lambda lines: "Approve" in lines[-1], "the footer's keys")
        time.sleep(0.5)  # xterm.js draws on the next animation frames
        path = out / "browser.png"
        page.screenshot(path=str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="use this existing store instead of building one")
    parser.add_argument("--fixture", action="store_true", help="build the tests' fixed store, not the demo")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots",
                        help="where the images go (default: docs/screenshots, beside the pages they illustrate)")
    parser.add_argument("--size", default="160x45", help="terminal size, COLUMNSxROWS")
    parser.add_argument("--browser-only", action="store_true", help="make browser.png alone")
    args = parser.parse_args()
    width, height = (int(n) for n in args.size.lower().split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db
        app_spec = None
        if db is None:
            db = Path(tmp) / "relaypoint.db"
            if args.fixture:
                build_fixture_store(str(db))
            else:
                build_demo_store(db)
                app_spec = "relaypoint.examples.audit:workflows"
        if not args.browser_only:
            for svg in asyncio.run(shoot(db, args.out, (width, height), app_spec, args.fixture)):
                png = to_png(svg)
                print(png or svg)
        browser = shoot_browser(db, args.out)
        if browser is not None:
            print(browser)


if __name__ == "__main__":
    main()
