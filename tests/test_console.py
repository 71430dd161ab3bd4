"""The console driven with Textual's pilot on real stores: decisions, forks, cancel, resume in a
separate process, greyed-out actions, live refresh from another process, paging, filters, focus
between the runs table and the step chain, type-ahead, forms that fit small terminals, and hostile
stored text shown literally."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from console_pilot import (detail, is_visible, main_screen, open_form, press_to_run, rendered, runs_table, screen_lines,
                           select_run, select_step, settle, type_ahead, type_text, until, write_apps)
from fixtures import WORKFLOWS, build_fixture_store
from helpers import snapshot
from textual.widgets import Button, Label, Markdown, Select, Static, TextArea


from relaypoint import Runtime, RunStatus, Workflow
from relaypoint.background import resume_log
from relaypoint.store import Lookup
from relaypoint.tui import RelaypointConsole
from relaypoint.tui.screens.confirm import ConfirmScreen
from relaypoint.tui.screens.forms import ApproveScreen, ForkScreen, RejectScreen, RespondScreen
from relaypoint.tui.screens.help import HelpScreen

SIZE = (160, 45)


@pytest.fixture
def store(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    """The fixture store (fixtures.build_fixture_store) on each backend: its URL and its runs by role."""
    monkeypatch.chdir(tmp_path)  # where the resume log of a PostgreSQL store goes
    return db, build_fixture_store(db)


def recorded_notifications(app: RelaypointConsole) -> list[tuple[str, str]]:
    """Replace ``app.notify`` with a recorder of (message, severity)."""
    notes: list[tuple[str, str]] = []
    app.notify = lambda message, **kw: notes.append((message, kw.get("severity", "information")))  # type: ignore[method-assign]
    return notes


def run_status(path: str, run_id: str) -> RunStatus:
    with Runtime(path, create=False) as rt:
        return rt.get(run_id).status


def form_error(app: RelaypointConsole) -> str:
    return str(app.screen.query_one(".form-error", Label).content)


# ---- decisions ---------------------------------------------------------------------------------


async def test_approve_with_a_comment_queues_the_run(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_approval"], "a", ApproveScreen)
        await type_text(pilot, "ship it")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: run_status(path, runs["awaiting_approval"]) == RunStatus.QUEUED)
        await until(pilot, lambda: runs_table(pilot).runs[runs["awaiting_approval"]].status == RunStatus.QUEUED)
    with Runtime(path, create=False) as rt:
        approved = [e for e in rt.events(runs["awaiting_approval"]) if e.kind == "approved"]
    assert len(approved) == 1
    assert approved[0].detail["comment"] == "ship it"
    assert approved[0].detail["output_edited"] is False


async def test_enter_in_the_comment_approves(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_approval"], "a", ApproveScreen)
        assert app.focused.id == "comment"
        await pilot.press("enter")
        await until(pilot, lambda: run_status(path, runs["awaiting_approval"]) == RunStatus.QUEUED)
    with Runtime(path, create=False) as rt:
        [approved] = [e for e in rt.events(runs["awaiting_approval"]) if e.kind == "approved"]
    assert approved.detail["comment"] is None


async def test_approve_with_an_edited_output_replaces_it(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_approval"], "a", ApproveScreen)
        app.screen.query_one("#output-json", TextArea).load_text('{"title": "Edited"}')
        await pilot.press("ctrl+s")  # an edited output: its diff first, recorded on the second ctrl+s
        await settle(pilot)
        assert isinstance(app.screen, ApproveScreen) and '+  "title": "Edited"' in str(
            app.screen.query_one("#output-diff", Static).content)
        assert run_status(path, runs["awaiting_approval"]) == RunStatus.AWAITING_APPROVAL
        await pilot.press("ctrl+s")
        await until(pilot, lambda: run_status(path, runs["awaiting_approval"]) == RunStatus.QUEUED)
    with Runtime(path, create=False) as rt:
        assert rt.step_output(runs["awaiting_approval"], "review") == {"title": "Edited"}


async def test_ctrl_e_opens_the_editor_with_the_focus_in_the_comment(store):
    # The comment box, focused when the form opens from the runs list, took ctrl+e (end of line).
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_approval"], "a", ApproveScreen)
        await until(pilot, lambda: app.screen.loaded)
        assert app.focused.id == "comment"
        await pilot.press("ctrl+e")
        await settle(pilot)
        editor = app.screen.query_one("#output-json", TextArea)
        assert editor.display and editor.has_focus


@pytest.mark.parametrize("text, error", [('{"title": ', "not valid JSON"), ("null", "cannot be null")])
async def test_approve_with_broken_json_or_null_keeps_the_form_open(store, text, error):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_approval"], "a", ApproveScreen)
        await until(pilot, lambda: app.screen.loaded)
        app.screen.query_one("#output-json", TextArea).load_text(text)
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, ApproveScreen)
        assert error in form_error(app)
    assert run_status(path, runs["awaiting_approval"]) == RunStatus.AWAITING_APPROVAL


async def test_reject_needs_a_reason_then_ends_the_run(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_approval"], "x", RejectScreen)
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, RejectScreen), "an empty reason must be refused"
        assert "reason" in form_error(app)
        assert run_status(path, runs["awaiting_approval"]) == RunStatus.AWAITING_APPROVAL
        await type_text(pilot, "wrong audience")
        await pilot.press("enter")
        await until(pilot, lambda: run_status(path, runs["awaiting_approval"]) == RunStatus.REJECTED)
    with Runtime(path, create=False) as rt:
        rejected = [e for e in rt.events(runs["awaiting_approval"]) if e.kind == "rejected"]
    assert rejected[0].detail["comment"] == "wrong audience"


async def test_respond_answers_an_input_request(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_input"], "i", RespondScreen)
        await type_text(pilot, '"finance"')
        await pilot.press("ctrl+s")
        await until(pilot, lambda: run_status(path, runs["awaiting_input"]) == RunStatus.QUEUED)
    with Runtime(path, create=False) as rt:
        asking = rt.store.step(runs["awaiting_input"], name="route")
        assert rt.store.responses(runs["awaiting_input"], asking.seq) == ["finance"]


async def test_a_decision_on_a_stale_view_is_refused_with_one_line(store):
    path, runs = store
    app = RelaypointConsole(path)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_approval"], "a", ApproveScreen)
        with Runtime(path, create=False) as other:  # someone else decides while the form is open
            other.approve(runs["awaiting_approval"], by="someone-else")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(sev == "error" for _, sev in notes))
    errors = [msg for msg, sev in notes if sev == "error"]
    assert len(errors) == 1
    assert "nothing to approve" in errors[0]
    assert "\n" not in errors[0] and "Traceback" not in errors[0]
    with Runtime(path, create=False) as rt:
        assert [e.actor for e in rt.events(runs["awaiting_approval"]) if e.kind == "approved"] == ["someone-else"]


# ---- fork, cancel, resume ------------------------------------------------------------------------


@pytest.mark.parametrize("app_spec", [None, "fixtures:WORKFLOWS"], ids=["without-app", "with-app"])
async def test_fork_from_the_selected_step_creates_a_child_run(store, app_spec):
    path, runs = store
    app = RelaypointConsole(path, app_spec)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["completed"])
        await select_step(pilot, "review")
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        await pilot.press("ctrl+s")
        with Runtime(path, create=False) as rt:
            await until(pilot, lambda: len(rt.get(runs["completed"]).forks) == 2)
            child = rt.get(rt.get(runs["completed"]).forks[-1])
        await until(pilot, lambda: any(m.startswith("forked run") for m, _ in notes))
    (said,) = [m for m, _ in notes if m.startswith("forked run")]
    # press r only where r can resume (the console was given the workflows)
    assert said.endswith("(queued: select it and press r to resume it)" if app_spec else
                         f"(queued: a worker resumes it, or `relaypoint resume {child.run_id} --app MODULE:ATTR`)")
    assert child.parent_run_id == runs["completed"]
    assert child.forked_from_step == "review"
    assert child.status == RunStatus.QUEUED
    assert child.input == {"topic": "weekly update"}  # unchanged input: the parent's is reused


async def test_a_fork_that_stops_at_a_copied_gate_says_it_waits_for_a_decision(store):
    path, runs = store
    app = RelaypointConsole(path)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["rejected"])
        await select_step(pilot, "publish_post")
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        await pilot.press("ctrl+s")
        await until(pilot, lambda: any(m.startswith("forked run") for m, _ in notes))
    with Runtime(path, create=False) as rt:
        child = rt.get(rt.get(runs["rejected"]).forks[-1])
    assert child.status == RunStatus.AWAITING_APPROVAL
    (said,) = [m for m, _ in notes if m.startswith("forked run")]
    assert said.endswith("(awaiting_approval at step 'review': select it to decide)")


async def test_fork_with_broken_json_shows_an_error_and_creates_nothing(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["completed"], "f", ForkScreen)
        app.screen.query_one("#input-json", TextArea).load_text("{topic: nope")
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, ForkScreen)
        assert "not valid JSON" in form_error(app)
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is main_screen(pilot)
    with Runtime(path, create=False) as rt:
        assert len(rt.list(limit=1000)) == len(runs)


async def test_cancel_asks_first_and_y_cancels(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, runs["awaiting_input"], "c", ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert run_status(path, runs["awaiting_input"]) == RunStatus.AWAITING_INPUT
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: run_status(path, runs["awaiting_input"]) == RunStatus.CANCELLED)


async def test_every_decision_of_a_console_given_a_name_is_recorded_under_it(store):
    # relaypoint serve gives each browser session's console the name its page asked for (--by).
    path, runs = store
    name = "[bold]Ada[/bold] L"  # Rich markup, shown and recorded as typed
    with Runtime(path, WORKFLOWS) as rt:
        to_reject = rt.start("publish-post", {"topic": "to reject"})
    app = RelaypointConsole(path, by=name)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        (line,) = screen_lines(main_screen(pilot).query_one("#status-line", Static))
        assert line.strip().startswith(f"as {name} "), line  # under which name you decide, said first
        await open_form(pilot, runs["awaiting_approval"], "a", ApproveScreen)
        await pilot.press("enter")
        await until(pilot, lambda: run_status(path, runs["awaiting_approval"]) == RunStatus.QUEUED)
        await open_form(pilot, runs["awaiting_input"], "i", RespondScreen)
        await type_text(pilot, '"finance"')
        await pilot.press("ctrl+s")
        await until(pilot, lambda: run_status(path, runs["awaiting_input"]) == RunStatus.QUEUED)
        await open_form(pilot, runs["fork"], "c", ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: run_status(path, runs["fork"]) == RunStatus.CANCELLED)
        await pilot.press("n")  # the review queue: the one pending decision left
        await until(pilot, lambda: any(getattr(s, "loaded", False) for s in app.screen_stack))
        await settle(pilot)
        assert f"as {name}" in "".join(screen_lines(app.screen.query_one("#review-head")))
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, RejectScreen))
        await type_text(pilot, "not now")
        await pilot.press("enter")
        await until(pilot, lambda: run_status(path, to_reject) == RunStatus.REJECTED)
    with Runtime(path, create=False) as rt:
        for run_id, kind in ((runs["awaiting_approval"], "approved"), (runs["awaiting_input"], "responded"),
                             (runs["fork"], "cancelled"), (to_reject, "rejected")):
            assert [e.actor for e in rt.events(run_id) if e.kind == kind] == [name], (run_id, kind)
        for run_id in (runs["awaiting_approval"], runs["awaiting_input"], to_reject):
            assert rt.store.checkpoint(run_id, Lookup.LAST_PAUSE).decided_by == name


TINY_APP = '''
from relaypoint import Workflow

tiny = Workflow("tiny")


@tiny.step(approval=True)
def one(ctx):
    return {"n": 1}


@tiny.step
def two(ctx):
    return {"n": ctx.results["one"]["n"] + 1}


workflows = [tiny]
'''


async def test_resume_runs_the_run_to_the_end_in_another_process(db, tmp_path, monkeypatch):
    write_apps(tmp_path, monkeypatch, tinyapp=TINY_APP)
    monkeypatch.chdir(tmp_path)  # a PostgreSQL store's resume log goes to the current directory
    import tinyapp

    path = db
    with Runtime(path, tinyapp.workflows) as rt:
        run_id = rt.start("tiny")
        rt.approve(run_id, by="test")
    app = RelaypointConsole(path, "tinyapp:workflows")
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, run_id)
        await pilot.press("r")
        await until(pilot, lambda: run_status(path, run_id) == RunStatus.COMPLETED, timeout=30)
        await until(pilot, lambda: runs_table(pilot).runs[run_id].status == RunStatus.COMPLETED)
    with Runtime(path, create=False) as rt:
        assert rt.step_output(run_id, "two") == {"n": 2}


async def test_resume_without_an_app_says_how_to_give_one(store):
    path, runs = store
    app = RelaypointConsole(path)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["fork"])
        screen = main_screen(pilot)  # greyed out, with the reason, in the footer, the button and the palette
        assert screen.check_action("resume", ()) is not True and screen.query_one("#do-resume", Button).disabled
        assert "--app MODULE:ATTR" in screen.palette_why_not("resume")
        await pilot.press("r")
        await settle(pilot)
    assert any("--app MODULE:ATTR" in msg for msg, _ in notes)
    assert run_status(path, runs["fork"]) == RunStatus.QUEUED


# ---- what applies, live refresh, paging, filters ---------------------------------------------------


async def test_actions_that_do_not_apply_are_greyed_out(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["completed"])
        screen = main_screen(pilot)
        for action in ("approve", "reject", "respond", "resume", "cancel"):
            assert screen.check_action(action, ()) is not True, action
            assert screen.query_one(f"#do-{action}", Button).disabled, action
        assert screen.check_action("fork", ()) is True
        assert not screen.query_one("#do-fork", Button).disabled
        await pilot.press("a")  # a greyed-out key does nothing
        await settle(pilot)
        assert app.screen is screen

        await select_run(pilot, runs["awaiting_approval"])
        assert screen.check_action("approve", ()) is True
        assert screen.check_action("respond", ()) is not True


async def test_a_read_only_console_records_nothing_and_says_why(store):
    path, runs = store
    before = snapshot(path)
    app = RelaypointConsole(path, "fixtures:WORKFLOWS", readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["awaiting_approval"])
        screen = main_screen(pilot)
        for action in ("approve", "reject", "respond", "resume", "fork", "cancel"):
            assert screen.check_action(action, ()) is not True, action
        await pilot.press("a", "x", "f", "c")
        await settle(pilot)
        assert app.screen is screen
        assert "read-only" in "".join(app.export_screenshot().split())
    assert snapshot(path) == before


@pytest.fixture
def reader(store: tuple[str, dict[str, str]], request: pytest.FixtureRequest) -> tuple[str, str]:
    """The fixture store opened by someone who may only read it: on PostgreSQL a role granted SELECT
    only (dropped afterwards), on SQLite the console's --read-only. Its URL and why it is read-only."""
    path, _ = store
    if "://" not in path:
        return path, "opened read-only"
    import psycopg

    from conftest import POSTGRES_URL

    schema = path.rpartition("schema=")[2]
    role = f"{schema}_ro"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")

    def drop() -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")

    request.addfinalizer(drop)
    return (path.replace("postgres@", f"{role}@", 1), f"{role} may only read schema {schema}; the schema's owner "
            f"can grant what relaypoint needs: `relaypoint --db URL migrate --grant {role}`")


@pytest.mark.parametrize("size", [(80, 24), SIZE])
async def test_the_status_line_says_read_only_at_any_width_and_help_and_refusals_say_why(store, reader, size):
    # The reason followed the counts, the time and the store: cut mid-sentence at 160 columns, gone at 80.
    (path, runs), (url, why) = store, reader
    app = RelaypointConsole(url, "fixtures:WORKFLOWS", readonly="://" not in url)
    notes = recorded_notifications(app)
    async with app.run_test(size=size) as pilot:
        await select_run(pilot, runs["awaiting_approval"])
        (line,) = screen_lines(main_screen(pilot).query_one("#status-line", Static))
        assert "read-only" in line, line
        assert why not in line  # the whole reason is for help and refusals; a part of it would be cut
        await pilot.press("a")
        await settle(pilot)
        assert notes == [(f"approve: the store is read-only: {why}", "warning")]
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await settle(pilot)
        assert "".join(f"This store is read-only: {why}.".split()) in rendered(app.screen)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is main_screen(pilot))


async def test_the_status_line_names_the_store_as_messages_do(store):
    # A PostgreSQL store was "relaypoint_t...@127.0.0.1/test" (schema@host/db), which reads as a user
    # called after the schema; messages say user@host:port/db/schema.
    path, _ = store
    with Runtime(path, create=False) as rt:
        where = rt.store.where
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        (line,) = screen_lines(main_screen(pilot).query_one("#status-line", Static))
    if "://" in path:
        schema = path.rpartition("schema=")[2]
        assert where == f"{path.split('://', 1)[1].split('?')[0]}/{schema}"  # postgres@127.0.0.1:5432/test/<schema>
        assert f" {where} " in line and f"{schema}@" not in line, line
    else:
        assert f" {Path(path).name} " in line, line  # the file's name: its path is in the title of the terminal's shell


async def test_a_change_by_another_process_appears_without_moving_the_cursor(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["awaiting_approval"])
        table = runs_table(pilot)
        row, scroll = table.cursor_row, table.scroll_y
        with Runtime(path, create=False) as other:
            other.approve(runs["awaiting_approval"], by="someone-else")
        await until(pilot, lambda: "queued" in table.get_cell(runs["awaiting_approval"], "status").plain, timeout=3)
        assert (table.cursor_row, table.scroll_y) == (row, scroll)
        assert table.selected_key() == runs["awaiting_approval"]
        await until(pilot, lambda: detail(pilot).run.status == RunStatus.QUEUED, timeout=3)

        with Runtime(path, create=False) as other:  # a new run appears above: the cursor stays on its run
            new_id = other.fork(runs["completed"], "draft")
        await until(pilot, lambda: new_id in table.runs, timeout=3)
        assert table.keys()[0] == new_id
        assert table.selected_key() == runs["awaiting_approval"]
        assert table.cursor_row == row + 1


async def test_a_run_deleted_by_another_process_disappears(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["rejected"])
        with Runtime(path, create=False) as other:
            other.delete(runs["rejected"])
        table = runs_table(pilot)
        await until(pilot, lambda: runs["rejected"] not in table.runs, timeout=3)
        await until(pilot, lambda: detail(pilot).run is not None and detail(pilot).run.run_id == table.selected_key())


async def test_the_refresh_pauses_while_a_modal_is_open(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["awaiting_approval"])
        table = runs_table(pilot)
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        with Runtime(path, create=False) as other:
            other.approve(runs["awaiting_approval"], by="someone-else")
        await pilot.pause(2.0)  # two refresh periods
        assert table.runs[runs["awaiting_approval"]].status == RunStatus.AWAITING_APPROVAL
        await pilot.press("n")
        await until(pilot, lambda: table.runs[runs["awaiting_approval"]].status == RunStatus.QUEUED, timeout=3)


async def test_the_list_reads_a_page_at_a_time(db):
    wf = Workflow("bulk")
    wf.step(lambda ctx: None, name="only")
    path = db
    with Runtime(path, [wf]) as rt:
        for _ in range(120):
            rt.start("bulk")
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count > 0)
        await settle(pilot)
        assert table.row_count == 50
        table.move_cursor(row=table.row_count - 1)
        await until(pilot, lambda: table.row_count == 100)
        table.move_cursor(row=table.row_count - 1)
        await until(pilot, lambda: table.row_count == 120)
        assert table.selected_key() == table.keys()[99]  # the cursor stayed where it was
        await settle(pilot)
        assert not table.more


async def test_search_and_status_filters(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count == len(runs))
        await pilot.press("slash")
        await type_text(pilot, "ticket")
        await until(pilot, lambda: set(table.runs) == {runs["awaiting_input"], runs["cancelled"]})
        await pilot.press("escape")  # closes and clears the search
        await until(pilot, lambda: table.row_count == len(runs))
        await pilot.press("slash")
        await type_text(pilot, runs["failed"][:6])
        await pilot.press("enter")
        await until(pilot, lambda: list(table.runs) == [runs["failed"]])
        assert table.has_focus
        await pilot.press("escape")  # with the list focused: clears the filters
        await until(pilot, lambda: table.row_count == len(runs))
        await pilot.press("s")  # first status of the cycle: queued
        await until(pilot, lambda: list(table.runs) == [runs["fork"]])
        await pilot.press("s")  # running: none
        await until(pilot, lambda: table.row_count == 0)
        assert "No run matches" in str(main_screen(pilot).query_one("#run-header", Static).content)


async def test_at_80x24_the_runs_a_search_matches_stay_in_view(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=(80, 24)) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count == len(runs))
        await pilot.press("slash")
        await type_text(pilot, "ticket")
        await until(pilot, lambda: set(table.runs) == {runs["awaiting_input"], runs["cancelled"]})
        await settle(pilot)
        assert main_screen(pilot).search.has_focus
        shown = "".join(screen_lines(table))
        assert runs["awaiting_input"][:8] in shown and runs["cancelled"][:8] in shown


async def test_keys_j_and_k_move_like_the_arrows(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        table = runs_table(pilot)
        await until(pilot, lambda: table.row_count == len(runs))
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1


# ---- focus: the runs table and the step chain ---------------------------------------------------


async def test_enter_goes_to_the_step_chain_and_escape_comes_back(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["completed"])
        table, steps = runs_table(pilot), detail(pilot).steps
        row = table.cursor_row
        await pilot.press("enter")
        assert steps.has_focus
        assert steps.selected_key() == "publish_post"  # a completed run starts at its last step
        await pilot.press("k")
        assert steps.selected_key() == "review"
        assert table.cursor_row == row, "k in the step chain must not move the runs cursor"
        await until(pilot, detail(pilot).output_is_current)
        assert detail(pilot).output.step == "review"
        await pilot.press("escape")
        assert table.has_focus
        await pilot.press("k")
        assert table.cursor_row == row - 1

        await pilot.press("j")  # back on the completed run
        await settle(pilot)
        await type_ahead(pilot, "enter", "k")  # typed faster than the console reacts
        assert steps.has_focus
        assert table.cursor_row == row
        assert steps.selected_key() == "review"


async def test_tab_and_shift_tab_switch_between_the_runs_table_and_the_step_chain(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["awaiting_approval"])
        table, steps = runs_table(pilot), detail(pilot).steps
        row = table.cursor_row
        await pilot.press("tab")
        assert steps.has_focus, "one tab reaches the step chain"
        await pilot.press("k")
        assert steps.selected_key() == "draft"
        assert table.cursor_row == row
        await pilot.press("tab")
        assert table.has_focus
        await pilot.press("shift+tab")
        assert steps.has_focus
        await pilot.press("shift+tab")
        assert table.has_focus
        await pilot.press("/", "tab")  # from the search box too
        assert table.has_focus
        for button in main_screen(pilot).query("#run-actions Button").results(Button):
            assert not button.focusable, "the action buttons are for the mouse; keys act directly"


async def test_fork_starts_from_the_step_highlighted_in_the_chain(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["completed"])
        await pilot.press("enter", "k", "k")  # publish_post -> review -> draft
        await until(pilot, detail(pilot).output_is_current)
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        assert app.screen.query_one("#from-step", Select).value == "draft"
        await pilot.press("ctrl+s")
        with Runtime(path, create=False) as rt:
            await until(pilot, lambda: len(rt.get(runs["completed"]).forks) == 2)
            child = rt.get(rt.get(runs["completed"]).forks[-1])
    assert child.forked_from_step == "draft"


async def test_the_fork_form_can_change_the_step(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["completed"])
        await pilot.press("enter", "k")  # review
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        select = app.screen.query_one("#from-step", Select)
        assert select.value == "review"
        assert app.screen.query_one("#input-json", TextArea).has_focus, "the form opens on the input"
        await pilot.press("shift+tab")
        assert select.has_focus
        await pilot.press("enter")  # open the list
        await settle(pilot)
        await pilot.press("up", "enter")
        await settle(pilot)
        assert select.value == "draft"
        await pilot.press("ctrl+s")
        with Runtime(path, create=False) as rt:
            await until(pilot, lambda: len(rt.get(runs["completed"]).forks) == 2)
            child = rt.get(rt.get(runs["completed"]).forks[-1])
    assert child.forked_from_step == "draft"


async def test_the_input_typed_in_the_fork_form_is_the_forks_input(store):
    path, runs = store
    app = RelaypointConsole(path)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["completed"])
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        editor = app.screen.query_one("#input-json", TextArea)
        await pilot.press("ctrl+a")  # select all: typing replaces the parent's input
        assert editor.selected_text == editor.text
        await type_text(pilot, '{"topic": "typed by hand"}')
        await pilot.press("ctrl+s")
        with Runtime(path, create=False) as rt:
            await until(pilot, lambda: len(rt.get(runs["completed"]).forks) == 2)
            child = rt.get(rt.get(runs["completed"]).forks[-1])
    assert child.input == {"topic": "typed by hand"}
    assert any("with a new input" in msg for msg, _ in notes)


async def test_a_fork_input_that_is_not_an_object_keeps_the_form_open(store):
    path, runs = store
    app = RelaypointConsole(path)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["awaiting_input"])
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        form = app.screen
        assert isinstance(form, ForkScreen)
        editor = form.query_one("#input-json", TextArea)
        await pilot.press("ctrl+a")
        await type_text(pilot, "[1,2]")
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is form
        assert "must be a JSON object" in form.error and "not a list" in form.error
        await type_text(pilot, "cxiq")  # typed on: into the editor, never to the run's actions
        await settle(pilot)
        assert app.screen is form
        assert editor.text == "[1,2]cxiq"

        await pilot.press("ctrl+a")
        await type_text(pilot, "{oops")
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is form
        assert "not valid JSON" in form.error
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is main_screen(pilot)
    assert notes == []
    assert run_status(path, runs["awaiting_input"]) == RunStatus.AWAITING_INPUT
    with Runtime(path, create=False) as rt:
        assert len(rt.list(limit=1000)) == len(runs)


async def test_a_fork_from_a_step_whose_predecessors_did_not_complete_is_refused_in_the_form(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["awaiting_approval"])
        await pilot.press("enter", "j")  # publish_post: draft and review completed, so allowed
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        await pilot.press("ctrl+s")
        with Runtime(path, create=False) as rt:
            await until(pilot, lambda: len(rt.get(runs["awaiting_approval"]).forks) == 1)
        await until(pilot, lambda: app.screen is main_screen(pilot))
        await pilot.press("escape")  # back to the runs table
        await press_to_run(pilot, runs["failed"])
        await pilot.press("enter", "j")  # review, after the failed draft
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert isinstance(app.screen, ForkScreen)
        assert "step 'draft' has not completed" in app.screen.error


# ---- type-ahead ------------------------------------------------------------------------------------


async def test_keys_typed_right_after_slash_go_to_the_search_box(store):
    path, runs = store
    app = RelaypointConsole(path, "fixtures:WORKFLOWS")  # so that r would really resume
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = main_screen(pilot)
        await press_to_run(pilot, runs["fork"])  # queued: resumable
        await pilot.press("/", "r", "e", "p", "o")
        assert screen.search.has_focus
        assert screen.search.value == "repo"
        await pilot.press("escape")
        await until(pilot, lambda: runs_table(pilot).row_count == len(runs))
        await press_to_run(pilot, runs["fork"])
        await type_ahead(pilot, "/", "r", "e", "p", "o")  # all queued before the first is handled
        assert screen.search.value == "repo"
        assert screen._resumes == []
    assert not any("resum" in msg for msg, _ in notes), notes
    assert run_status(path, runs["fork"]) == RunStatus.QUEUED


async def test_keys_typed_right_after_a_go_to_the_approve_form(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["awaiting_approval"])
        await until(pilot, detail(pilot).output_is_current)  # the gated step's output, shown by default
        await type_ahead(pilot, "a", "c")  # c would open the cancel question on the main screen
        assert isinstance(app.screen, ApproveScreen)
        assert not any(isinstance(s, ConfirmScreen) for s in app.screen_stack)
        await pilot.press("escape")
        await settle(pilot)

        await pilot.press("enter", "k", "escape")  # the chain shows draft: the gated output is read
        await type_ahead(pilot, "a", "c")          # after the form opened
        form = app.screen
        assert isinstance(form, ApproveScreen)
        assert not any(isinstance(s, ConfirmScreen) for s in app.screen_stack)
        await until(pilot, lambda: form.loaded)
        assert '"title": "Release Notes"' in form.query_one("#output-json", TextArea).text
        await pilot.press("ctrl+s")
        await until(pilot, lambda: run_status(path, runs["awaiting_approval"]) == RunStatus.QUEUED)


# ---- what the detail pane shows first --------------------------------------------------------------


async def test_a_waiting_run_shows_the_step_it_waits_on(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        for role, step in (("awaiting_approval", "review"), ("awaiting_input", "route"),
                           ("failed", "draft"), ("fork", "review"), ("completed", "publish_post")):
            await press_to_run(pilot, runs[role])
            pane = detail(pilot)
            assert pane.selected_step().name == step, role
            await until(pilot, pane.output_is_current)
            assert pane.output.step == step
            assert str(pane.query_one("#output-box").border_title) == f"Output of {step}"


async def test_the_step_cursor_follows_the_run_until_the_user_moves_it(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["awaiting_approval"])
        pane = detail(pilot)
        assert pane.selected_step().name == "review"
        with Runtime(path, WORKFLOWS) as other:  # decided and finished elsewhere
            other.approve(runs["awaiting_approval"], by="someone-else")
            other.resume(runs["awaiting_approval"])
        await until(pilot, lambda: pane.run.status == RunStatus.COMPLETED, timeout=5)
        await settle(pilot)
        assert pane.selected_step().name == "publish_post"

        await press_to_run(pilot, runs["fork"])
        assert pane.selected_step().name == "review"
        await pilot.press("enter", "k")  # the user looks at draft
        with Runtime(path, WORKFLOWS) as other:
            other.resume(runs["fork"])  # pauses at review's approval gate
        await until(pilot, lambda: pane.run.status == RunStatus.AWAITING_APPROVAL, timeout=5)
        await settle(pilot)
        assert pane.selected_step().name == "draft"


# ---- the run's input --------------------------------------------------------------------------------


async def test_the_run_header_shows_the_input_on_one_line(db):
    wf = Workflow("echo")
    wf.step(lambda ctx: ctx.input, name="only")
    path = db
    with Runtime(path, [wf]) as rt:
        short = rt.start("echo", {"topic": "release notes"})
        long = rt.start("echo", {"topic": "x" * 400, "n": 1})
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        for run_id, ending in ((short, '{"topic": "release notes"}'), (long, "…")):
            await press_to_run(pilot, run_id)
            lines = screen_lines(detail(pilot).query_one("#run-header"))
            at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("input"))
            assert lines[at].rstrip().endswith(ending)
            assert lines[at + 1].lstrip().startswith("progress"), "the input takes one line"


# ---- small terminals: forms, footer, help ------------------------------------------------------------


@pytest.mark.parametrize("size", [(100, 30), (160, 45)])
async def test_forms_fit_the_terminal_and_name_their_keys(store, size):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=size) as pilot:
        for role, key, form in (("awaiting_approval", "a", ApproveScreen), ("completed", "f", ForkScreen),
                                ("awaiting_input", "i", RespondScreen), ("awaiting_approval", "x", RejectScreen)):
            await press_to_run(pilot, runs[role])
            await pilot.press(key)
            await until(pilot, lambda form=form: isinstance(app.screen, form))
            await settle(pilot)
            screen = app.screen
            assert is_visible(screen.query_one("#submit", Button)), form
            assert is_visible(screen.query_one("#close", Button)), form
            dialog = screen.query_one(".dialog")
            assert "ctrl+s" in str(dialog.border_subtitle) and "esc" in str(dialog.border_subtitle)
            assert screen.region.contains_region(dialog.region), form
            for hint in screen.query(".hint").results(Static):
                # under an editor its keys; the approve form opens on the output as it reads
                keys = "ctrl+e edit as JSON" if form is ApproveScreen else "ctrl+a select all"
                assert keys in str(hint.content) and "ctrl+s" in str(hint.content)
                assert is_visible(hint)
            await pilot.press("escape")
            await settle(pilot)


async def test_a_long_form_error_wraps_instead_of_being_cut(store):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await press_to_run(pilot, runs["completed"])
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, ForkScreen))
        await pilot.press("ctrl+a")
        await type_text(pilot, "{topic: nope")
        await pilot.press("ctrl+s")
        await settle(pilot)
        error = app.screen.query_one(".form-error", Label)
        assert is_visible(error)
        assert error.size.height > 1
        shown = squash("".join(screen_lines(error)))
        assert squash(app.screen.error) == shown  # every word shown
        assert shown.endswith(squash("""'{"key": 1}'"""))


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (160, 45)])
async def test_help_and_quit_stay_in_the_footer(store, size):
    path, runs = store
    app = RelaypointConsole(path)
    async with app.run_test(size=size) as pilot:
        await press_to_run(pilot, runs["awaiting_approval"])
        keys = {getattr(k, "action", None): k for k in main_screen(pilot).query("FooterKey")}
        assert is_visible(keys["help"]) and is_visible(keys["quit"])
        assert "Quit" in "".join(screen_lines(keys["quit"]))


@pytest.mark.parametrize("size", [(100, 30), (160, 45)])
async def test_help_opens_on_its_keys_and_says_how_to_close_it(store, size):
    path, _ = store
    app = RelaypointConsole(path)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await settle(pilot)
        help_screen = app.screen
        dialog = help_screen.query_one(".dialog")
        assert "escape" in str(dialog.border_subtitle)
        first = help_screen.query_one(Markdown).children[0]
        assert first.region.y == dialog.content_region.y, "no blank lines above the first line"
        assert "escape" in "".join(screen_lines(first))
        keys_table = help_screen.query("MarkdownTable").first()
        cells = list(keys_table.query("MarkdownTableCellContents"))
        assert len(cells) > 30 and all(is_visible(cell) for cell in cells), "the keys fit without scrolling"
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is main_screen(pilot)


# ---- hostile stored text -------------------------------------------------------------------------

HOSTILE = "[bold red]X[/] [link=http://e]y[/link] \x1b[31mred \x1b]52;c;SGVsbG8=\x07 \x1b]0;title\x07 \x9b2J"


def hostile_store(path: str) -> str:
    wf = Workflow(f"wf {HOSTILE}")

    @wf.step(name=f"out {HOSTILE}")
    def out(ctx: Any) -> Any:
        return f"a text output\n{HOSTILE}"

    @wf.step(name="json")
    def as_json(ctx: Any) -> Any:
        return {"text": HOSTILE}

    @wf.step(name="boom")
    def boom(ctx: Any) -> Any:
        raise ValueError(HOSTILE)

    with Runtime(path, [wf]) as rt:
        return rt.start(wf.name, {"note": "\x9b\u202e" + HOSTILE})


def squash(text: str) -> str:
    return "".join(text.split())


async def test_hostile_stored_text_is_shown_literally(db):
    path = db
    run_id = hostile_store(path)
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, run_id)
        pane = detail(pilot)
        await select_step(pilot, f"out {HOSTILE}")
        output = rendered(pane.query_one("#output"))
        await select_step(pilot, "json")
        as_json = rendered(pane.query_one("#output"))
        await select_step(pilot, "boom")
        error = rendered(pane.query_one("#output"))
        header = rendered(pane.query_one("#run-header"))
        input_row = next(line for line in screen_lines(pane.query_one("#run-header"))
                         if line.lstrip().startswith("input"))
        steps = rendered(pane.steps)
        row = rendered(runs_table(pilot))
        svg = app.export_screenshot()
    for shown in (output, as_json, error, header, steps, row, svg):
        assert not any(c in shown for c in "\x1b\x07\x9b"), shown
    assert "&#27;" not in svg
    assert squash(input_row).startswith('input{"note":"\\x9b\\u202e[boldred]X[/]')  # escaped, on one line
    for needle in ("[bold red]X[/]", "[link=http://e]y[/link]", "\\x1b[31mred", "\\x1b]52;c;SGVsbG8=\\x07",
                   "\\x1b]0;title\\x07", "\\x9b2J"):
        assert squash(needle) in output, needle
        assert squash(needle) in error, needle  # the step's error and traceback
        assert squash(needle) in header, needle  # the run's error quotes the step's
    assert squash('"text": "[bold red]X[/] [link=http://e]y[/link] \\u001b[31mred') in as_json
    assert "\\u001b]52;c;SGVsbG8=\\u0007" in as_json
    assert squash("out [bold red]X[/]") in steps
    assert squash("wf [bold red]") in row
    assert "[/link]" in svg


async def test_the_demos_report_reads_as_markdown_in_the_detail_pane(db, tmp_path):
    from relaypoint.examples import audit
    from relaypoint.tui.widgets.readable_output import SafeMarkdown

    source = tmp_path / "src"
    source.mkdir()
    (source / "tool.py").write_text('"""A tool."""\n\n\ndef run():\n    return 1\n')
    (source / "more.py").write_text("class Thing:\n    pass\n")
    with Runtime(db, audit.workflows) as rt:
        run_id = rt.start("repo-audit", {"root": str(source), "title": "Audit awaiting review"})
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, run_id)  # paused at its draft: the gated output is shown
        pane = detail(pilot)
        assert pane.output.step == "draft"
        await until(pilot, lambda: len(pane.query(SafeMarkdown)) == 1
                    and len(pane.query_one(SafeMarkdown).children) > 5)
        await settle(pilot)
        shown = rendered(pane.query_one("#output"))
        assert pane.query("#output MarkdownH1") and pane.query("#output MarkdownTable")
    assert '"markdown":‹text,' in shown  # the JSON says the report is below it
    assert "AuditawaitingreviewRoot:" in shown and "SummaryMeasureValueFiles2Size(bytes)" in shown  # headings, a table
    for source_text in ("\\n", "|---", "##", "| Files |"):
        assert source_text not in shown, source_text


# ---- big outputs, greyed keys, a failed resume ---------------------------------------------------

BIG = "0123456789" * 1_000_000 + "THE-END"


def big_output_store(path: str) -> str:
    wf = Workflow("big")

    @wf.step
    def huge(ctx: Any) -> Any:
        return "first line\n" + BIG

    @wf.step
    def small(ctx: Any) -> Any:
        return {"ok": True}

    with Runtime(path, [wf]) as rt:
        return rt.start("big")


async def test_a_10_mb_output_shows_a_bounded_preview_with_its_size_and_more_on_demand(db):
    from relaypoint.views.display import PREVIEW_CHARS

    path = db
    run_id = big_output_store(path)
    app = RelaypointConsole(path)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, run_id)
        await pilot.press("enter")  # to the step chain; the last step with an output is selected
        assert detail(pilot).steps.selected_key() == "small"
        await pilot.press("m")  # nothing more to show: it says why
        await pilot.press("k")
        await until(pilot, lambda: detail(pilot).output_is_current() and detail(pilot).output.step == "huge")
        await settle(pilot)
        shown = rendered(detail(pilot).query_one("#output"))
        assert len(shown) < 2 * PREVIEW_CHARS  # one page, not 10 MB
        assert "9.5MiBinall(10,000,018bytes);thefirst" in shown
        assert "THE-END" not in shown
        assert squash(f"relaypoint --db {shlex.quote(path)} show {run_id[:8]} --output huge") in shown
        await pilot.press("m")  # a second page
        await until(pilot, lambda: detail(pilot).output.pages == 2)
        await settle(pilot)
        more = rendered(detail(pilot).query_one("#output"))
        assert 1.5 * len(shown) < len(more) < 3 * PREVIEW_CHARS
        await pilot.press("p")  # no terminal in a headless test: it says how else to see it all
        await settle(pilot)
        await pilot.press("j")  # keys keep working
        await until(pilot, lambda: detail(pilot).output_is_current() and detail(pilot).output.step == "small")
    messages = [msg for msg, _ in notes]
    assert "more output: the output of step small is shown whole" in messages
    assert any("no terminal to open a pager in" in msg and "--output huge" in msg for msg in messages)


async def test_pressing_a_greyed_out_key_says_why(store):
    path, runs = store
    app = RelaypointConsole(path, "fixtures:WORKFLOWS")
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, runs["completed"])
        await pilot.press("a", "r", "c")
        await settle(pilot)
        assert app.screen is main_screen(pilot)
        await select_run(pilot, runs["awaiting_approval"])
        await pilot.press("i")
        await settle(pilot)
    rid, waiting = runs["completed"], runs["awaiting_approval"]
    assert [(msg, severity) for msg, severity in notes] == [
        (f"approve: run {rid} is completed; there is nothing to approve", "warning"),
        (f"resume: run {rid} is completed and cannot be resumed; fork it instead (relaypoint fork {rid} --from STEP)",
         "warning"),
        (f"cancel: run {rid} is already completed; nothing to cancel", "warning"),
        (f"respond: run {waiting} is awaiting_approval; there is nothing to respond to", "warning"),
    ]


DRIFTED_APP = '''
from relaypoint import Workflow

tiny = Workflow("tiny")


@tiny.step(approval=True)
def one(ctx):
    return {"n": 1}


@tiny.step
def three(ctx):
    return {"n": ctx.results["one"]["n"] + 2}


workflows = [tiny]
'''


async def test_a_resume_refused_for_drift_says_why_and_offers_to_allow_it(db, tmp_path, monkeypatch):
    write_apps(tmp_path, monkeypatch, tinyapp=TINY_APP, driftedapp=DRIFTED_APP)
    monkeypatch.chdir(tmp_path)  # a PostgreSQL store's resume log goes to the current directory
    import tinyapp

    path = db
    with Runtime(path, tinyapp.workflows) as rt:
        run_id = rt.start("tiny")
        rt.approve(run_id, by="test")
    app = RelaypointConsole(path, "driftedapp:workflows")
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, run_id)
        await pilot.press("r")  # a real resume process, refused: the definition changed
        await until(pilot, lambda: any(severity == "error" for _, severity in notes), timeout=30)
        failure = next(msg for msg, severity in notes if severity == "error")
        assert failure.startswith(f"resume of run {run_id[:8]} failed: workflow 'tiny' changed since run {run_id}")
        assert failure.endswith("; press r on it again to resume allowing the drift (it asks first), or fork it")
        assert "\n" not in failure
        assert run_status(path, run_id) == RunStatus.QUEUED
        await pilot.press("r")  # asks first
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert "changed since run" in app.screen.question.plain
        await pilot.press("y")
        await until(pilot, lambda: run_status(path, run_id) == RunStatus.COMPLETED, timeout=30)
    with Runtime(path, create=False) as rt:
        assert rt.step_output(run_id, "three") == {"n": 3}
        assert any(e.kind == "drift_allowed" for e in rt.events(run_id))
    assert os.stat(resume_log(path)).st_mode & 0o777 == 0o600  # like the store: errors may quote data


async def test_the_step_chain_is_usable_at_80x24_with_a_long_step_name(db):
    wf = Workflow("long")
    long_name = "extract_every_invoice_line_item_and_reconcile_it_against_the_ledger_of_the_month"

    @wf.step(name=long_name)
    def first(ctx: Any) -> Any:
        return 1

    @wf.step
    def second(ctx: Any) -> Any:
        return 2

    path = db
    with Runtime(path, [wf]) as rt:
        run_id = rt.start("long")
    app = RelaypointConsole(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await select_run(pilot, run_id)
        steps = detail(pilot).steps
        assert is_visible(steps)
        lines = screen_lines(steps)
        assert lines[1].split() == ["Step", "Status", "Tries", "Took"]  # under the border title
        first_row = next(line for line in lines if line.lstrip().startswith("extract_every"))
        assert first_row.rstrip().endswith("ms")  # its duration is in view, the name is cut
        assert "…" in first_row and "second" in "".join(lines)


async def test_a_gated_10_mb_output_is_approved_as_is_without_an_editor_of_megabytes(db):
    wf = Workflow("big-gate")

    @wf.step(approval=True)
    def huge(ctx: Any) -> Any:
        return BIG

    path = db
    with Runtime(path, [wf]) as rt:
        run_id = rt.start("big-gate")
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, run_id, "a", ApproveScreen)
        form = app.screen
        await until(pilot, lambda: form.loaded)
        area = form.query_one("#output-json", TextArea)
        assert area.disabled and area.text == ""
        assert "too long to edit here" in str(area.placeholder)
        # where the person looks: the label and the hint (the editor is hidden); ctrl+e says why not
        assert "too long to edit here" in str(form.query_one("#output-label", Label).content)
        assert "ctrl+e" not in str(form.query_one("#approve-hint", Static).content)
        await pilot.press("ctrl+e")
        await settle(pilot)
        assert "too long to edit here" in form_error(app)
        await pilot.press("ctrl+s")
        await until(pilot, lambda: run_status(path, run_id) == RunStatus.QUEUED)
    with Runtime(path, create=False) as rt:
        assert rt.step_output(run_id, "huge") == BIG


def text_length(table: Any) -> int:
    """Characters in the cells of a rich table (what the console would lay out)."""
    return sum(len(str(cell)) for column in table.columns for cell in column.cells)


async def test_a_long_error_is_bounded_in_the_header_the_events_and_the_output_box(db):
    from relaypoint.tui.widgets.detail import events_view, run_header
    from relaypoint.views.display import PREVIEW_CHARS

    wf = Workflow("loud")

    @wf.step
    def boom(ctx: Any) -> Any:
        raise ValueError("E" * 1_000_000 + "TAIL-OF-THE-ERROR")

    path = db
    with Runtime(path, [wf]) as rt:
        run_id = rt.start("loud")
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, run_id)
        pane = detail(pilot)
        run, now = pane.run, app.clock()
        output = rendered(pane.query_one("#output"))
        with Runtime(path, create=False) as rt:
            events = rt.events(run_id)
    assert text_length(run_header(run, now)) < 2_000
    assert text_length(events_view(events)) < 10_000
    assert len(output) < 3 * PREVIEW_CHARS
    assert "morecharactersoftheerrornotshown" in output
    assert "TAIL-OF-THE-ERROR" in output  # the traceback's end, where the error is raised, is kept


async def test_a_burst_of_pgdn_in_the_step_chain_moves_the_output_a_page_per_key(db):
    from textual import events
    from textual.containers import VerticalScroll

    path = db
    run_id = big_output_store(path)
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, run_id)
        await pilot.press("enter", "k")
        await until(pilot, lambda: detail(pilot).output_is_current() and detail(pilot).output.step == "huge")
        for pages in (2, 3):  # three pages of the output
            await pilot.press("m")
            await until(pilot, lambda: detail(pilot).output.pages == pages)
        await settle(pilot)
        box = detail(pilot).query_one("#output-box", VerticalScroll)
        page = box.scrollable_content_region.height
        assert box.max_scroll_y > 5 * page
        for _ in range(5):  # faster than an animated scroll ends, slower than a screen refresh
            app.post_message(events.Key("pagedown", None))
            await pilot.pause(0.03)
        await settle(pilot)
        assert box.scroll_y == 5 * page
        await pilot.press("pageup")
        await settle(pilot)
        assert box.scroll_y == 4 * page


async def test_a_big_json_output_is_previewed_without_encoding_it_whole(db):
    from relaypoint.views.display import PREVIEW_CHARS

    wf = Workflow("big-json")

    @wf.step
    def rows(ctx: Any) -> Any:
        return [{"i": i, "name": f"item {i}"} for i in range(200_000)]

    path = db
    with Runtime(path, [wf]) as rt:
        run_id = rt.start("big-json")
    app = RelaypointConsole(path)
    async with app.run_test(size=SIZE) as pilot:
        await select_run(pilot, run_id)
        folded = rendered(detail(pilot).query_one("#output"))
        assert detail(pilot).output.editor is None  # too long for the approve form's editor
        await pilot.press("e")  # the list whole: a page of it
        await until(pilot, lambda: detail(pilot).output.expanded)
        await settle(pilot)
        shown = rendered(detail(pilot).query_one("#output"))
    assert '"name":"item9"},…199,990moreitems(e:showall)]' in folded
    assert len(shown) < 2 * PREVIEW_CHARS
    assert "MiBinall(" in shown and '"name":"item0"' in shown and "item199999" not in shown
    assert "moreitems" not in shown and '"name":"item10"' in shown
