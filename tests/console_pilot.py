"""Driving the console in tests: wait for its workers, select a run or a step, type text, type
ahead faster than the console reacts, and check what is on the screen."""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from textual import events
from textual.errors import NoWidget
from textual.geometry import Region
from textual.keys import _character_to_key
from textual.pilot import Pilot
from textual.widget import Widget
from textual.worker import WorkerCancelled

from relaypoint.tui.screens.runs import RunsScreen
from relaypoint.tui.widgets.detail import DetailPane
from relaypoint.tui.widgets.runs_table import RunsTable


def write_apps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **sources: str) -> None:
    """Write each app module ``name=source`` into ``tmp_path``, importable here and by the
    processes the console starts (a resume)."""
    for name, source in sources.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))


async def settle(pilot: Pilot) -> None:
    """Let every chain of worker -> message -> handler -> worker run to its end."""
    for _ in range(4):
        await pilot.pause()
        for worker in list(pilot.app.workers):
            # A newer read in an exclusive group cancels an older one: that is the console
            # working as designed, not a failure to wait for.
            with contextlib.suppress(WorkerCancelled):
                await worker.wait()
    await pilot.pause()


async def until(pilot: Pilot, condition: Callable[[], bool], timeout: float = 15.0) -> None:
    """Wait (letting the app run) until ``condition()`` holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await pilot.pause(0.05)


def main_screen(pilot: Pilot) -> RunsScreen:
    """The console's main screen (under any modal)."""
    screen = pilot.app.screen_stack[0]
    assert isinstance(screen, RunsScreen)
    return screen


def runs_table(pilot: Pilot) -> RunsTable:
    """The runs list of the console's main screen."""
    return main_screen(pilot).query_one("#runs", RunsTable)


def detail(pilot: Pilot) -> DetailPane:
    """The detail pane of the console's main screen."""
    return main_screen(pilot).query_one("#detail", DetailPane)


async def select_run(pilot: Pilot, run_id: str) -> None:
    """Put the runs cursor on ``run_id`` and wait until its detail (and output) are shown."""
    await until(pilot, lambda: run_id in runs_table(pilot).runs)
    table = runs_table(pilot)
    table.move_cursor(row=table.get_row_index(run_id))
    await until(pilot, lambda: detail(pilot).run is not None and detail(pilot).run.run_id == run_id)
    await settle(pilot)


async def press_to_run(pilot: Pilot, run_id: str) -> None:
    """Move the runs cursor onto ``run_id`` with ``j``/``k`` presses (the runs table must have the
    focus) and wait until its detail (and output) are shown."""
    await until(pilot, lambda: run_id in runs_table(pilot).runs)
    table = runs_table(pilot)
    assert table.has_focus, "the runs table must have the focus"
    delta = table.get_row_index(run_id) - table.cursor_row
    await pilot.press(*(["j"] * delta if delta > 0 else ["k"] * -delta))
    assert table.selected_key() == run_id
    await until(pilot, lambda: detail(pilot).run is not None and detail(pilot).run.run_id == run_id)
    await settle(pilot)


async def open_form(pilot: Pilot, run_id: str, key: str, form: type) -> None:
    """Select ``run_id``, press ``key`` and wait until the ``form`` modal is on screen."""
    await select_run(pilot, run_id)
    await pilot.press(key)
    await until(pilot, lambda: isinstance(pilot.app.screen, form))


async def select_step(pilot: Pilot, name: str) -> None:
    """Put the steps cursor on step ``name`` and wait for its output."""
    steps = detail(pilot).steps
    steps.move_cursor(row=steps.get_row_index(name))
    await until(pilot, detail(pilot).output_is_current)
    await settle(pilot)


async def type_text(pilot: Pilot, text: str) -> None:
    """Type ``text`` key by key into the focused widget."""
    await pilot.press(*("space" if c == " " else c for c in text))


async def type_ahead(pilot: Pilot, *keys: str) -> None:
    """Queue every key at once, as a fast typist or a paste does, before the console handles the
    first (``pilot.press`` lets the app settle between keys, which hides type-ahead races).
    ``keys``: characters (``"/"``, ``"r"``) or key names (``"enter"``, ``"ctrl+a"``)."""
    for key in keys:
        if len(key) == 1:
            pilot.app.post_message(events.Key(_character_to_key(key), key))
        else:
            pilot.app.post_message(events.Key(key, None))
    await settle(pilot)


def is_visible(widget: Widget) -> bool:
    """True when the middle of ``widget`` is on the screen and not covered or scrolled away."""
    region = widget.region
    if not region or not widget.screen.region.contains_region(region):
        return False
    try:
        found, _ = widget.screen.get_widget_at(*region.center)
    except NoWidget:
        return False
    return found is widget or widget in found.ancestors


def rendered(widget: Widget) -> str:
    """What ``widget`` and the widgets in it draw (each that holds no other, in document order),
    as text with all whitespace removed (so wrapping does not matter)."""
    leaves = [w for w in widget.walk_children(with_self=True) if not w.children]
    return "".join("".join(strip.text for w in leaves
                           for strip in w.render_lines(Region(0, 0, *w.outer_size))).split())


def screen_lines(widget: Widget) -> list[str]:
    """What ``widget`` draws (padding included), one string per row."""
    strips = widget.render_lines(Region(0, 0, *widget.outer_size))
    return ["".join(segment.text for segment in strip) for strip in strips]
