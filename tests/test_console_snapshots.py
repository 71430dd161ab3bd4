"""Snapshots of the console on the fixed fixture store, with a fixed clock and cursor blink off.

Update after an intended change with ``pytest tests/test_console_snapshots.py --snapshot-update``
and look at the report before committing the SVGs under ``tests/__snapshots__/``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from console_pilot import select_run, settle, until
from fixtures import build_fixture_store, build_research_store, fixed_clock
from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from relaypoint.tui import RelaypointConsole
from relaypoint.tui.screens.forms import ApproveScreen, ForkScreen
from relaypoint.tui.screens.help import HelpScreen
from relaypoint.tui.screens.review import ReviewScreen

WIDE = (160, 45)
NARROW = (100, 30)
SMALL = (80, 24)


@pytest.fixture
def console(tmp_path: Path) -> tuple[RelaypointConsole, dict[str, str]]:
    path = tmp_path / "store.db"  # only the file name is shown
    runs = build_fixture_store(str(path))
    return RelaypointConsole(str(path), clock=fixed_clock()), runs


async def still(pilot: Pilot) -> None:
    """Wait for the workers and for a form's first focus, and stop text cursors from blinking."""
    await settle(pilot)
    screen = pilot.app.screen
    if screen.AUTO_FOCUS not in (None, "", "*") and screen.query(screen.AUTO_FOCUS):
        await until(pilot, lambda: screen.focused is not None and screen.focused.is_attached
                    and screen.focused in screen.query(screen.AUTO_FOCUS))
    for widget in pilot.app.screen.query("Input, TextArea"):
        assert isinstance(widget, Input | TextArea)
        widget.cursor_blink = False
    await pilot.pause()


def showing(run_id: str | None = None, key: str | None = None, modal: type | None = None,
            then: tuple[str, ...] = ()) -> Callable[[Pilot], Awaitable[None]]:
    """A ``run_before``: select ``run_id``, press ``key``, wait for ``modal``, press ``then``."""

    async def run_before(pilot: Pilot) -> None:
        await settle(pilot)
        if run_id is not None:
            await select_run(pilot, run_id)
        if key is not None:
            await pilot.press(key)
        if modal is not None:
            await until(pilot, lambda: isinstance(pilot.app.screen, modal))
        if then:
            await settle(pilot)
            await pilot.press(*then)
        await still(pilot)

    return run_before


def test_runs_list(snap_compare, console):
    app, _ = console
    assert snap_compare(app, terminal_size=WIDE, run_before=showing())


def test_detail_of_a_run_awaiting_approval(snap_compare, console):
    app, runs = console
    assert snap_compare(app, terminal_size=WIDE, run_before=showing(runs["awaiting_approval"]))


def test_approve_form(snap_compare, console):
    app, runs = console
    assert snap_compare(app, terminal_size=WIDE, run_before=showing(runs["awaiting_approval"], "a", ApproveScreen))


def test_fork_form(snap_compare, console):
    app, runs = console
    assert snap_compare(app, terminal_size=WIDE, run_before=showing(runs["completed"], "f", ForkScreen))


def test_fork_form_with_an_error(snap_compare, console):
    """The error wraps under the fields; the form stays open."""
    app, runs = console
    broken = ("ctrl+a", "left_curly_bracket", "t", "o", "p", "i", "c", "colon", "space", "n", "o", "ctrl+s")
    assert snap_compare(app, terminal_size=WIDE, run_before=showing(runs["completed"], "f", ForkScreen, broken))


def test_help(snap_compare, console):
    app, _ = console
    assert snap_compare(app, terminal_size=WIDE, run_before=showing(None, "question_mark", HelpScreen))


def test_approve_form_on_a_small_terminal(snap_compare, console):
    """Fields, key hints and buttons all fit at 100x30."""
    app, runs = console
    assert snap_compare(app, terminal_size=NARROW,
                        run_before=showing(runs["awaiting_approval"], "a", ApproveScreen))


def test_fork_form_on_a_small_terminal(snap_compare, console):
    app, runs = console
    assert snap_compare(app, terminal_size=NARROW, run_before=showing(runs["completed"], "f", ForkScreen))


def test_help_on_a_small_terminal(snap_compare, console):
    """The keys table fits without scrolling; the first line says how to close help."""
    app, _ = console
    assert snap_compare(app, terminal_size=NARROW, run_before=showing(None, "question_mark", HelpScreen))


def test_narrow_terminal(snap_compare, console):
    app, runs = console
    assert snap_compare(app, terminal_size=NARROW, run_before=showing(runs["awaiting_input"]))


def test_a_run_awaiting_approval_at_80x24(snap_compare, console):
    """At 80x24 the header starts with what the run waits for, and the step chain shows its rows
    with every column, above the selected step's output."""
    app, runs = console
    assert snap_compare(app, terminal_size=SMALL, run_before=showing(runs["awaiting_approval"]))


def test_a_run_awaiting_input_at_80x24(snap_compare, console):
    """The step that asked for input reads as awaiting input in the chain."""
    app, runs = console
    assert snap_compare(app, terminal_size=SMALL, run_before=showing(runs["awaiting_input"]))


def test_a_read_only_store_at_80x24(snap_compare, tmp_path):
    """The status line starts with read-only, so no width cuts it off."""
    path = tmp_path / "store.db"
    runs = build_fixture_store(str(path))
    app = RelaypointConsole(str(path), clock=fixed_clock(), readonly=True)
    assert snap_compare(app, terminal_size=SMALL, run_before=showing(runs["awaiting_approval"]))


def test_help_on_a_read_only_store(snap_compare, tmp_path):
    """Help says first why the store is read-only."""
    path = tmp_path / "store.db"
    build_fixture_store(str(path))
    app = RelaypointConsole(str(path), clock=fixed_clock(), readonly=True)
    assert snap_compare(app, terminal_size=SMALL, run_before=showing(None, "question_mark", HelpScreen))


async def scrolled_to_the_calls(pilot: Pilot) -> None:
    """A ``run_before``: the review screen loaded, its body scrolled to the step's usage and calls."""
    await until(pilot, lambda: isinstance(pilot.app.screen, ReviewScreen) and pilot.app.screen.loaded)
    await settle(pilot)
    screen = pilot.app.screen
    calls = screen.query_one("#review-output").children[-1]
    screen.query_one("#review-body").scroll_to_widget(calls, top=True, animate=False)
    await still(pilot)


def test_review_screen_with_recorded_calls(snap_compare, tmp_path):
    """The research example at its gate: the run's usage in the header, the writer's model
    requests (messages sent, tool calls back) and tool calls (arguments, result) under the output."""
    pytest.importorskip("pydantic_ai")
    path = tmp_path / "store.db"
    build_research_store(str(path))
    app = RelaypointConsole(str(path), clock=fixed_clock(), review=True)
    assert snap_compare(app, terminal_size=WIDE, run_before=scrolled_to_the_calls)
