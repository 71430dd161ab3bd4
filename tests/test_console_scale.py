"""The console on big stores: memory flat over hundreds of refreshes, an idle refresh that reads
nothing, a refresh that re-reads only the rows on screen, movement never lost at page boundaries,
jumps to either end without loading the rows between, and a search that never sorts its matches.

Stores are real SQLite files. Big ones are filled in bulk through the store's own connection (the
runs are rows like any other; only what the console reads is under test)."""

from __future__ import annotations

import gc
import re
import sqlite3
import subprocess
import sys
import tracemalloc
from datetime import timedelta
from pathlib import Path

import pytest
from console_pilot import detail, main_screen, runs_table, screen_lines, select_run, settle, type_ahead, until
from fixtures import CONSOLE_NOW, FixtureClock, build_fixture_store, fixed_clock
from test_drift_and_delete import start_slow, wait_for_running
from textual import events
from textual.widget import Widget
from textual.widgets import Static

from relaypoint import Runtime
from relaypoint.clock import to_text
from relaypoint.store.sqlite import SqliteStore as Store
from relaypoint.tui import RelaypointConsole
from relaypoint.tui.data import PAGE_SIZE
from relaypoint.tui.screens import runs as screen_module
from relaypoint.tui.widgets.runs_table import MAX_ROWS, WINDOW_MARGIN

SIZE = (160, 45)
WORKFLOWS = ("ingest-orders", "ingest-users", "report")


def fill(path: str, n: int, workflows: tuple[str, ...] = WORKFLOWS) -> list[str]:
    """A store of ``n`` runs (one step each), a minute apart, newest last; returns their ids
    newest first (the console's order)."""
    ids = [f"{i:016x}" for i in range(n)]
    with Runtime(path) as rt:
        conn = rt.store.conn
        conn.execute("BEGIN")
        for i, rid in enumerate(ids):
            at = to_text(CONSOLE_NOW - timedelta(minutes=n - i))
            conn.execute("INSERT INTO runs (run_id, workflow, status, created_at, updated_at, steps_done, steps_total) "
                         "VALUES (?, ?, 'completed', ?, ?, 1, 1)", (rid, workflows[i % len(workflows)], at, at))
            conn.execute("INSERT INTO run_inputs (run_id, input) VALUES (?, '{}')", (rid,))
            conn.execute("INSERT INTO steps (run_id, seq, name, status, attempts, options, idempotency_key) "
                         "VALUES (?, 0, 'only', 'completed', 1, '{}', ?)", (rid, rid))
            conn.execute("INSERT INTO outputs (run_id, seq, value) VALUES (?, 0, '1')", (rid,))
        conn.execute("COMMIT")
    return ids[::-1]


TOUCH = "UPDATE runs SET steps_done = steps_done + 1, status = coalesce(?, status) WHERE run_id = ?"


def touch(path: str, run_id: str, status: str | None = None) -> None:
    """Change a run from another process (its step count, and its status if given)."""
    code = (f"import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            f"c.execute({TOUCH!r}, (sys.argv[3] or None, sys.argv[2])); c.commit()")
    subprocess.run([sys.executable, "-c", code, path, run_id, status or ""], check=True)


def touch_here(path: str, run_id: str) -> None:
    """Change a run's step count through a connection of this process (not the console's)."""
    with sqlite3.connect(path) as conn:
        conn.execute(TOUCH, (None, run_id))
    conn.close()


def add_run(path: str, run_id: str) -> None:
    """Insert a run newer than every other, from another process."""
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute(\"INSERT INTO runs (run_id, workflow, "
            "status, created_at, updated_at) VALUES (?, 'report', 'queued', ?, ?)\", (sys.argv[2], sys.argv[3], "
            "sys.argv[3])); c.execute(\"INSERT INTO run_inputs (run_id, input) VALUES (?, '{}')\", (sys.argv[2],)); "
            "c.commit()")
    subprocess.run([sys.executable, "-c", code, path, run_id, to_text(CONSOLE_NOW)], check=True)


async def refresh(pilot) -> None:
    """One live refresh, driven directly, and its result handled."""
    main_screen(pilot).refresh_now()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def traced(app: RelaypointConsole) -> list[str]:
    """Record every statement the console's read connection runs from now on."""
    statements: list[str] = []
    with app.reader.runtime() as rt:
        rt.store.trace(statements.append)
    return statements


def reads_runs(statements: list[str]) -> list[str]:
    return [s for s in statements if re.search(r"\bFROM runs\b", s)]


def burst(pilot, key: str, times: int) -> None:
    """Queue ``times`` presses of ``key`` at once, faster than the console reacts (a held key)."""
    for _ in range(times):
        pilot.app.post_message(events.Key(key, key))


def live_widgets() -> int:
    gc.collect()
    return sum(isinstance(o, Widget) for o in gc.get_objects())


# ---- item 8: memory stays flat ------------------------------------------------------------------


async def test_hundreds_of_refreshes_leave_widgets_and_memory_flat(tmp_path):
    path = str(tmp_path / "store.db")
    runs = build_fixture_store(path)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["awaiting_approval"])  # actions enabled: the footer has keys to rebuild
        done = detail(pilot).run.steps_done
        for _ in range(30):  # warm up
            await refresh(pilot)
        widgets = live_widgets()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for _ in range(300):  # idle: nothing changes
            await refresh(pilot)
        gc.collect()
        growth = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
        tracemalloc.stop()
        assert live_widgets() == widgets
        assert growth < 1024 * 1024, f"{growth} bytes more after 300 idle refreshes"

        for _ in range(100):  # the selected run changes at every refresh, its actions do not
            touch_here(path, runs["awaiting_approval"])
            await refresh(pilot)
        assert detail(pilot).run.steps_done == done + 100  # the changes were seen
        assert live_widgets() == widgets


async def test_the_footer_is_rebuilt_only_when_the_enabled_actions_change(tmp_path, monkeypatch):
    path = str(tmp_path / "store.db")
    runs = build_fixture_store(path)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["awaiting_approval"])
        done = detail(pilot).run.steps_done
        screen = main_screen(pilot)
        calls = []
        monkeypatch.setattr(screen, "refresh_bindings", lambda: calls.append(1))
        for _ in range(5):
            touch(path, runs["awaiting_approval"])
            await refresh(pilot)
        assert detail(pilot).run.steps_done == done + 5
        assert calls == []
        touch(path, runs["awaiting_approval"], status="rejected")  # approve and reject no longer apply
        await refresh(pilot)
        assert calls == [1]


# ---- item 9: an idle console does close to no work -----------------------------------------------


async def test_an_idle_refresh_reads_nothing_but_the_store_version(tmp_path):
    path = str(tmp_path / "store.db")
    runs = build_fixture_store(path)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["awaiting_approval"])
        statements = traced(app)
        for _ in range(3):
            await refresh(pilot)
        assert statements.count("PRAGMA data_version") >= 3
        assert reads_runs(statements) == []
        assert [s for s in statements if "run_counts" in s or "FROM steps" in s] == []

        touch(path, runs["failed"], status="queued")  # another process: seen at the next refresh
        await refresh(pilot)
        assert runs_table(pilot).runs[runs["failed"]].status == "queued"
        assert any("run_counts" in s for s in statements)
        assert main_screen(pilot).state.counts["queued"] == 2


async def test_a_refresh_deep_in_the_list_rereads_only_the_rows_on_screen(tmp_path, monkeypatch):
    path = str(tmp_path / "store.db")
    ids = fill(path, 3200)
    reads = []

    def recording(*args):
        read = read_refresh(*args)
        reads.append(read)
        return read

    read_refresh = screen_module.read_refresh
    monkeypatch.setattr(screen_module, "read_refresh", recording)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count > 0)
        while ids.index(table.selected_key()) < 3000:
            await pilot.press("pagedown")
        await settle(pilot)
        assert table.row_count <= MAX_ROWS  # rows far above were dropped
        on_screen = table.keys()[int(table.scroll_y):int(table.scroll_y) + 10]
        changed, far = on_screen[3], table.keys()[0]
        cells = []
        update_cell = table.update_cell
        monkeypatch.setattr(table, "update_cell", lambda *a, **kw: cells.append(a[:2]) or update_cell(*a, **kw))
        reads.clear()
        touch(path, changed, status="failed")
        touch(path, far)  # loaded, but far above the screen
        await refresh(pilot)
        [read] = [r for r in reads if r.changed]
        assert all(len(r.window or ()) <= table.size.height + 2 * WINDOW_MARGIN for r in reads)
        assert changed in {r.run_id for r in read.window}
        assert sorted(set(cells)) == [(changed, "progress"), (changed, "status")]
        assert table.runs[far].steps_done == 1, "rows off screen are not re-read..."
        while table.get_row_index(far) < int(table.scroll_y):
            await pilot.press("pageup")
        await settle(pilot)
        await refresh(pilot)
        assert table.runs[far].steps_done == 2, "...until they come into view"


# ---- item 10: movement is never lost --------------------------------------------------------------


async def test_a_burst_of_j_crosses_every_page_boundary(tmp_path):
    path = str(tmp_path / "store.db")
    ids = fill(path, 520)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count > 0)
        burst(pilot, "j", 500)
        await until(pilot, lambda: table.cursor_row == 500)
        assert table.selected_key() == ids[500]
        await until(pilot, lambda: detail(pilot).run is not None and detail(pilot).run.run_id == ids[500])
        burst(pilot, "j", 100)  # past the last run: stops there
        await until(pilot, lambda: table.selected_key() == ids[-1])


async def test_j_pressed_one_at_a_time_and_pgdn_cross_page_boundaries(tmp_path):
    path = str(tmp_path / "store.db")
    ids = fill(path, 300)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count > 0)
        await pilot.press(*["j"] * (PAGE_SIZE + 10))
        await until(pilot, lambda: table.selected_key() == ids[PAGE_SIZE + 10])
        page = table._page_rows()
        await pilot.press("pagedown", "pagedown", "pagedown")
        await until(pilot, lambda: table.selected_key() == ids[PAGE_SIZE + 10 + 3 * page])
        await pilot.press("pageup")
        await until(pilot, lambda: table.selected_key() == ids[PAGE_SIZE + 10 + 2 * page])


async def test_movement_typed_before_the_first_page_arrives_is_kept(tmp_path):
    path = str(tmp_path / "store.db")
    ids = fill(path, 300)
    reports = [rid for rid in ids if int(rid, 16) % 3 == 2]
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count > 0)
        await settle(pilot)
        with app.reader.runtime():  # the store is slow to answer: no read gets through meanwhile
            await pilot.press("slash", *"report", "enter")
            burst(pilot, "j", 70)
            await pilot.pause(0.3)
            assert reports[70] not in table.runs
        await until(pilot, lambda: table.selected_key() == reports[70])


@pytest.mark.parametrize(("last", "first"), [("G", "g"), ("end", "home")])
async def test_the_last_and_first_run_without_loading_the_rows_between(tmp_path, last, first):
    path = str(tmp_path / "store.db")
    ids = fill(path, 2000)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count > 0)
        await pilot.press(last)
        await until(pilot, lambda: table.selected_key() == ids[-1])
        assert table.row_count <= 2 * PAGE_SIZE
        assert detail(pilot).run is not None
        await until(pilot, lambda: detail(pilot).run.run_id == ids[-1])
        await pilot.press(*["k"] * (PAGE_SIZE + 20))  # up past the oldest page: newer pages come in
        await until(pilot, lambda: table.selected_key() == ids[-1 - PAGE_SIZE - 20])
        await pilot.press(first)
        await until(pilot, lambda: table.selected_key() == ids[0] and table.cursor_row == 0)
        assert table.row_count <= 2 * PAGE_SIZE
        await pilot.press("k")  # already the newest: stays
        await settle(pilot)
        assert table.selected_key() == ids[0]


async def test_a_run_started_while_at_the_oldest_page_waits_above_it(tmp_path):
    path = str(tmp_path / "store.db")
    ids = fill(path, 400)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count > 0)
        await pilot.press("G")
        await until(pilot, lambda: table.selected_key() == ids[-1])
        new_id = "ffffffffffffffff"
        add_run(path, new_id)
        await refresh(pilot)
        assert new_id not in table.runs and table.more_above
        await pilot.press("g")
        await until(pilot, lambda: table.selected_key() == new_id)


# ---- item 11: search uses the indexes for its order -------------------------------------------------


def plans(store: Store, statements: list[str]) -> dict[str, str]:
    """Each SELECT on runs issued, with its query plan."""
    return {s: " | ".join(row[3] for row in store.conn.execute("EXPLAIN QUERY PLAN " + s))
            for s in reads_runs(statements) if s.lstrip().upper().startswith(("SELECT", "WITH"))}


def test_a_workflow_prefix_search_reads_each_name_in_index_order(tmp_path):
    path = str(tmp_path / "store.db")
    ids = fill(path, 600, workflows=("ingest-orders", "ingest-users", "report", "ingestion"))
    store = Store(path)
    try:
        statements: list[str] = []
        store.trace(statements.append)
        found = store.list_runs(search="ingest", limit=50)
        store.trace(None)
        expected = [rid for rid in ids if int(rid, 16) % 4 != 2]  # not "report"
        assert [r.run_id for r in found] == expected[:50]
        by_name = {s: p for s, p in plans(store, statements).items() if "workflow = " in s}
        assert len(by_name) == 3  # ingest-orders, ingest-users, ingestion
        for plan in by_name.values():
            assert "TEMP B-TREE" not in plan and "runs_by_workflow" in plan, plan
        assert any("runs_by_workflow" in p for s, p in plans(store, statements).items() if "RECURSIVE" in s)
    finally:
        store.close()


def test_search_pages_both_ways_and_merges_run_ids_with_workflows(tmp_path):
    path = str(tmp_path / "store.db")
    ids = fill(path, 300, workflows=("alpha", "0beta"))
    store = Store(path)
    try:
        # "0" is the prefix of every run id and of the workflow "0beta": each run once, newest first
        assert [r.run_id for r in store.list_runs(search="0", limit=1000)] == ids
        assert [r.run_id for r in store.list_runs(search="00000000000000f", limit=1000)] == [
            rid for rid in ids if rid.startswith("00000000000000f")]
        found = store.list_runs(search="0b", limit=1000)
        assert [r.run_id for r in found] == [rid for rid in ids if int(rid, 16) % 2 == 1]
        first = store.list_runs(search="0b", limit=10)
        key = (to_text(first[-1].created_at), first[-1].run_id)
        older = store.list_runs(search="0b", limit=10, before=key)
        assert [r.run_id for r in first + older] == [r.run_id for r in found[:20]]
        oldest = store.list_runs(search="0b", limit=10, oldest_first=True)
        assert [r.run_id for r in oldest] == [r.run_id for r in found[::-1][:10]]
    finally:
        store.close()


async def test_typing_a_search_word_runs_one_query(tmp_path):
    path = str(tmp_path / "store.db")
    fill(path, 300)
    app = RelaypointConsole(path, clock=fixed_clock())
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count > 0)
        await settle(pilot)
        statements = traced(app)
        await type_ahead(pilot, "/", *"report")  # typed faster than the debounce
        await until(pilot, lambda: table.row_count > 0 and all(r.workflow == "report" for r in table.runs.values()))
        await settle(pilot)
        assert sum("WITH RECURSIVE" in s for s in statements) == 1


async def test_an_owner_that_dies_while_the_console_is_idle_is_noticed(tmp_path):
    # A death writes nothing, so the store's version does not move: while runs are running, each
    # refresh still looks for dead owners, and the interruption it records counts as a change.
    db = str(tmp_path / "store.db")
    proc = start_slow(tmp_path, db)
    try:
        run_id = wait_for_running(db, "wait")
        app = RelaypointConsole(db)
        async with app.run_test(size=SIZE) as pilot:
            table = runs_table(pilot)
            await until(pilot, lambda: run_id in table.runs and table.runs[run_id].status == "running")
            proc.kill()
            proc.wait()
            await until(pilot, lambda: table.runs[run_id].status == "interrupted")
            assert main_screen(pilot).state.counts.get("interrupted") == 1
    finally:
        proc.kill()
        proc.communicate()


async def test_relative_times_move_on_while_nothing_changes(tmp_path):
    path = str(tmp_path / "store.db")
    runs = build_fixture_store(path)
    clock = FixtureClock(CONSOLE_NOW)
    app = RelaypointConsole(path, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["awaiting_approval"])
        table, header = runs_table(pilot), main_screen(pilot).query_one("#run-header", Static)
        assert table.get_cell(runs["awaiting_approval"], "updated").plain == "1h ago"
        assert "(1h ago)" in "".join(screen_lines(header))
        clock.advance(minutes=60)
        statements = traced(app)
        await refresh(pilot)
        assert table.get_cell(runs["awaiting_approval"], "updated").plain == "2h ago"
        assert "(2h ago)" in "".join(screen_lines(header)) and "(1h ago)" not in "".join(screen_lines(header))
        assert reads_runs(statements) == []  # from what was read before
