"""The review queue (``relaypoint review``, ``n``/``N``), outputs as they read (Markdown, folded
JSON), the approve form's diff of an edited output, and the command palette: driven by real key
presses through the Textual pilot on a real store; what is recorded is read back through Runtime."""

from __future__ import annotations

from datetime import timedelta

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from console_pilot import main_screen, open_form, runs_table, screen_lines, settle, until
from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import Markdown, Static, TextArea

from relaypoint import Runtime, RunStatus, Workflow
from relaypoint.tui import RelaypointConsole
from relaypoint.tui.actions import GENERAL_BINDINGS, QUEUE_BINDINGS, REVIEW_BINDINGS, RUN_ACTIONS
from relaypoint.tui.data import ReviewWant, pick
from relaypoint.tui.palette import ConsoleCommands, palette_entries
from relaypoint.tui.readable import FOLD_ITEMS, MARKDOWN_ELEMENTS, looks_like_markdown, readable
from relaypoint.tui.screens.confirm import ConfirmScreen
from relaypoint.tui.screens.forms import ApproveScreen
from relaypoint.tui.screens.review import ReviewScreen
from relaypoint.tui.widgets.readable_output import SafeMarkdown
from relaypoint.status import RUN_SYMBOLS, RunStatus as Status

SIZE = (160, 45)
REPORT = """# Weekly report

Numbers from [the dashboard](https://dashboard.example/weekly).

| Measure | Value |
|---|---:|
| Files | 41 |
| Classes | 93 |

- first finding
- second finding
"""

report = Workflow("report")


@report.step
def gather(ctx: Any) -> dict[str, Any]:
    return {"rows": list(range(1000)), "source": "warehouse"}


@report.step(approval=True)
def draft(ctx: Any) -> dict[str, Any]:
    return {"title": "Weekly report", "markdown": REPORT, "rows": ctx.results["gather"]["rows"]}


@report.step
def publish(ctx: Any) -> dict[str, Any]:
    return {"published": True}


asking = Workflow("asking")


@asking.step
def ask(ctx: Any) -> Any:
    return ctx.request_input("Which team owns this?")


def pending_store(path: str, approvals: int = 2, inputs: int = 1) -> list[str]:
    """Runs waiting for a decision, oldest first: ``approvals`` report runs, then ``inputs``
    asking runs."""
    with Runtime(path, [report, asking]) as rt:
        return [rt.start("report", {"week": n}) for n in range(approvals)] + \
               [rt.start("asking", {"n": n}) for n in range(inputs)]


def recorded_notifications(app: RelaypointConsole) -> list[tuple[str, str]]:
    notes: list[tuple[str, str]] = []
    app.notify = lambda message, **kw: notes.append((message, kw.get("severity", "information")))  # type: ignore[method-assign]
    return notes


def review_screen(pilot: Pilot) -> ReviewScreen:
    screen = next(s for s in pilot.app.screen_stack if isinstance(s, ReviewScreen))
    return screen


def shown_run(pilot: Pilot) -> str | None:
    item = review_screen(pilot).item
    return item.run.run_id if item is not None else None


async def review_loaded(pilot: Pilot) -> None:
    await until(pilot, lambda: any(isinstance(s, ReviewScreen) and s.loaded for s in pilot.app.screen_stack))
    await settle(pilot)


class Keys:
    """Presses keys one at a time, letting the console settle after each, and counts them."""

    def __init__(self, pilot: Pilot) -> None:
        self.pilot, self.count = pilot, 0

    async def __call__(self, *keys: str) -> None:
        for key in keys:
            await self.pilot.press(key)
            self.count += 1
            await settle(self.pilot)


def approvals(path: str, run_id: str) -> list[Any]:
    with Runtime(path, create=False) as rt:
        return [e for e in rt.events(run_id) if e.kind == "approved"]


# ---- the queue -----------------------------------------------------------------------------------


async def test_relaypoint_review_records_the_oldest_pending_approval_in_two_keys(db):
    runs = pending_store(db)
    with Runtime(db, create=False) as rt:
        oldest = rt.pending_decisions(10)[0]
    assert oldest.run_id == runs[0] and oldest.kind == "approval"
    app = RelaypointConsole(db, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        assert shown_run(pilot) == runs[0]
        keys = Keys(pilot)
        await keys("a")
        assert isinstance(app.screen, ApproveScreen) and app.screen.focused is app.screen.query_one("#submit")
        await keys("enter")
        await until(pilot, lambda: shown_run(pilot) == runs[1])  # the next one comes into view
    assert keys.count == 2
    (approved,) = approvals(db, runs[0])
    assert approved.detail["checkpoint_id"] == oldest.checkpoint_id
    with Runtime(db, create=False) as rt:
        assert rt.get(runs[0]).status == RunStatus.QUEUED
        assert [d.run_id for d in rt.pending_decisions(10)] == runs[1:]


async def test_from_the_console_n_then_the_same_two_keys(db):
    runs = pending_store(db)
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        keys = Keys(pilot)
        await keys("n")
        await review_loaded(pilot)
        await keys("a", "enter")
        await until(pilot, lambda: len(approvals(db, runs[0])) == 1)
    assert keys.count == 3


async def test_n_and_N_move_along_the_queue_and_escape_returns_to_the_runs_list(db):
    runs = pending_store(db, approvals=2, inputs=1)
    app = RelaypointConsole(db)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("N")  # from the runs list: the newest
        await review_loaded(pilot)
        assert shown_run(pilot) == runs[2]
        assert review_screen(pilot).item.run.pending.reason == "Which team owns this?"
        await pilot.press("n")  # none newer: it says so and stays
        await settle(pilot)
        assert shown_run(pilot) == runs[2]
        await pilot.press("N", "N")
        await settle(pilot)
        assert shown_run(pilot) == runs[0]
        await pilot.press("N")
        await settle(pilot)
        assert ("previous pending: this is the oldest pending decision", "warning") in notes
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is main_screen(pilot)


@pytest.mark.parametrize("app_spec", [None, "test_review:report"], ids=["without-app", "with-app"])
async def test_after_a_decision_the_console_says_how_the_run_goes_on(db, app_spec):
    # `relaypoint review` without --app said "r on the runs list resumes it"; r then said --app was needed.
    runs = pending_store(db, approvals=1, inputs=1)
    app = RelaypointConsole(db, app_spec, review=True)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        await Keys(pilot)("a", "enter")
        await until(pilot, lambda: shown_run(pilot) == runs[1])
        await Keys(pilot)("i", *'"ops"', "ctrl+s")
        await until(pilot, lambda: any(m.startswith("answered") for m, _ in notes))
        said = [m for m, _ in notes if m.startswith(("approved", "answered"))]
        if app_spec:
            assert said == [f"approved run {runs[0][:8]}; it is queued: r on the runs list resumes it",
                            f"answered run {runs[1][:8]}; it is queued: r on the runs list resumes it"]
            return
        assert said == [f"approved run {runs[0][:8]}; it is queued: a worker resumes it, or `relaypoint resume "
                        f"{runs[0]} --app MODULE:ATTR`",
                        f"answered run {runs[1][:8]}; it is queued: a worker resumes it, or `relaypoint resume "
                        f"{runs[1]} --app MODULE:ATTR`"]
        await Keys(pilot)("escape")
        await until(pilot, lambda: runs[0] in runs_table(pilot).runs)
        table = runs_table(pilot)
        table.move_cursor(row=table.get_row_index(runs[0]))
        await settle(pilot)
        await Keys(pilot)("r")  # and r says what the hint said: it cannot resume here
        assert notes[-1][0].startswith("resume: resuming needs the workflow definitions")


async def test_upstream_outputs_are_one_key_away(db):
    pending_store(db, approvals=1, inputs=0)
    app = RelaypointConsole(db, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        screen = review_screen(pilot)
        await pilot.press("u")
        await until(pilot, lambda: screen.upstream is not None)
        await settle(pilot)
        titles = [str(s.content) for s in screen.query(".field-title").results(Static)]
        assert titles[0] == "── output of gather ──"
        assert "Upstream" in str(screen.query_one("#review-body").border_title)
        assert screen.upstream.outputs[0][1].folded and screen.why_not("expand") is None
        await pilot.press("e")  # the upstream lists whole
        await until(pilot, lambda: not screen.upstream.outputs[0][1].folded)
        assert screen.why_not("expand") == "no list of the upstream outputs is folded"
        await pilot.press("u")
        await settle(pilot)
        assert screen.query(SafeMarkdown)  # the report again


def approve_elsewhere(db: str, run_id: str) -> None:
    """Approve ``run_id`` as another terminal would: a real ``relaypoint approve`` process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    done = subprocess.run([sys.executable, "-m", "relaypoint", "--db", db, "approve", run_id, "--by",
                           "someone-else"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def head_text(pilot: Pilot) -> str:
    return "\n".join(screen_lines(review_screen(pilot).query_one("#review-head", Static)))


async def test_a_decision_made_elsewhere_meanwhile_is_refused_in_one_line_and_the_queue_moves_on(db, tmp_path):
    runs = pending_store(db)
    app = RelaypointConsole(db, review=True)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        assert shown_run(pilot) == runs[0]
        with app.reader.runtime():  # the screen reads nothing meanwhile: it cannot see the approval
            approve_elsewhere(db, runs[0])
            await pilot.press("a")
            await until(pilot, lambda: isinstance(app.screen, ApproveScreen))
        await pilot.press("enter")
        await until(pilot, lambda: any(sev == "error" for _, sev in notes))
        await until(pilot, lambda: shown_run(pilot) == runs[1])
    (error,) = [m for m, sev in notes if sev == "error"]
    assert "\n" not in error and "Traceback" not in error and runs[0] in error
    assert [e.actor for e in approvals(db, runs[0])] == ["someone-else"]
    assert not any("elsewhere" in m for m, _ in notes)  # the form was open: no live refresh


async def test_the_review_screen_moves_on_by_itself_when_the_decision_shown_is_decided_elsewhere(db):
    runs = pending_store(db, approvals=2, inputs=1)
    app = RelaypointConsole(db, review=True)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        assert shown_run(pilot) == runs[0] and "pending 1 of 3" in head_text(pilot)
        approve_elsewhere(db, runs[0])
        await until(pilot, lambda: shown_run(pilot) == runs[1])
        await settle(pilot)
        assert "pending 1 of 2" in head_text(pilot)
        assert review_screen(pilot).query(SafeMarkdown)  # the next one's report, as it reads
    said = [m for m, _ in notes if "decided elsewhere" in m]
    assert said == [f"run {runs[0][:8]}: its approval at step draft was decided elsewhere; "
                    "showing the next pending decision"]
    assert approvals(db, runs[1]) == []


async def test_a_live_refresh_keeps_the_reviewers_place_and_updates_the_count(db):
    runs = pending_store(db, approvals=2, inputs=1)
    app = RelaypointConsole(db, review=True)
    notes = recorded_notifications(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await review_loaded(pilot)
        await pilot.press("n")
        await until(pilot, lambda: shown_run(pilot) == runs[1])
        await settle(pilot)
        screen = review_screen(pilot)
        body = screen.query_one("#review-body")
        body.scroll_to(y=5, animate=False)
        await settle(pilot)
        shown = list(screen.query_one("#review-output").children)
        assert body.scroll_y == 5 and "pending 2 of 3" in head_text(pilot)
        approve_elsewhere(db, runs[0])  # an older one, not the one on screen
        await until(pilot, lambda: len(screen.item.queue) == 2)
        await settle(pilot)
        assert shown_run(pilot) == runs[1] and "pending 1 of 2" in head_text(pilot)
        assert list(screen.query_one("#review-output").children) == shown and body.scroll_y == 5
        with Runtime(db, [report, asking]) as rt:  # a new pause arrives
            newest = rt.start("asking", {"n": 9})
        await until(pilot, lambda: len(screen.item.queue) == 3)
        await settle(pilot)
        assert shown_run(pilot) == runs[1] and "pending 1 of 3" in head_text(pilot)
        await pilot.press("n", "n")
        await until(pilot, lambda: shown_run(pilot) == newest)
    assert not any("elsewhere" in m for m, _ in notes)


async def test_no_live_refresh_while_a_form_is_open_over_the_review_screen(db):
    runs = pending_store(db)
    app = RelaypointConsole(db, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        screen = review_screen(pilot)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, ApproveScreen))
        looks: list[int] = []
        look = screen.refresh_now
        screen.refresh_now = lambda: looks.append(1) or look()  # type: ignore[method-assign]
        approve_elsewhere(db, runs[0])
        looks.clear()
        await until(pilot, lambda: len(looks) >= 2)  # it looked twice since, the form open
        assert shown_run(pilot) == runs[0] and isinstance(app.screen, ApproveScreen)
        await pilot.press("escape")  # the form closed: the screen catches up
        await until(pilot, lambda: shown_run(pilot) == runs[1])


async def test_how_long_the_decision_has_waited_goes_on_while_nothing_changes(db):
    runs = pending_store(db)
    with Runtime(db, create=False) as rt:
        since = rt.pending_decisions(1)[0].created_at
    now = [since + timedelta(seconds=5)]
    app = RelaypointConsole(db, review=True, clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        assert shown_run(pilot) == runs[0]
        head = lambda: "\n".join(screen_lines(review_screen(pilot).query_one("#review-head", Static)))  # noqa: E731
        assert "waiting 5.0s" in head()
        now[0] = since + timedelta(minutes=7)
        await until(pilot, lambda: "waiting 7m 00s" in head())


async def test_an_empty_queue_says_there_is_nothing_to_review(db):
    with Runtime(db, [report]):
        pass
    app = RelaypointConsole(db, review=True)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        head = str(review_screen(pilot).query_one("#review-head", Static).content)
        assert head.startswith("Nothing to review")
        await pilot.press("a")
        await settle(pilot)
        assert isinstance(app.screen, ReviewScreen)
    assert notes == [("approve: nothing to review", "warning")]


def test_pick_moves_on_from_a_decided_checkpoint():
    assert pick([], ReviewWant()) is None
    assert pick([4, 7, 9], ReviewWant()) == 0
    assert pick([4, 7, 9], ReviewWant(move=-1)) == 2
    assert pick([4, 7, 9], ReviewWant(7, 1)) == 2
    assert pick([4, 7, 9], ReviewWant(9, 1)) == 2  # kept at the end
    assert pick([4, 9], ReviewWant(7, 0, (4, 7, 9))) == 1  # 7 decided: the one after it
    assert pick([4], ReviewWant(9, 0, (4, 7, 9))) == 0  # the last decided: the oldest left


# ---- outputs as they read ----------------------------------------------------------------------


def test_markdown_and_json_read_as_text():
    assert looks_like_markdown(REPORT) and not looks_like_markdown("one line") and \
        not looks_like_markdown("a\nb\nc")
    shown = readable({"title": "x", "markdown": REPORT, "rows": list(range(1000))}, "CMD")
    json_part, field = shown.blocks
    assert shown.folded
    text = json_part.text.plain
    assert f"… {1000 - FOLD_ITEMS:,} more items (e: show all)" in text and "\\n" not in text
    assert '"markdown": ‹text, 12 lines, shown below›' in text
    assert field.title == "markdown" and field.markdown == REPORT
    whole = readable({"rows": list(range(1000))}, "CMD", expanded=True)
    assert not whole.folded and "999" in whole.blocks[0].text.plain
    plain = readable("line one\nline two", "CMD").blocks[0]
    assert plain.markdown is None and plain.text.plain == "line one\nline two"


def test_what_reads_is_bounded_whatever_the_output():
    from relaypoint.views.display import PREVIEW_CHARS

    table = "# Rows\n\n| a | b | c |\n|---|---|---|\n" + "| 1 | 2 | 3 |\n" * 100  # 400 cells: too many widgets
    (block,) = readable(table, "CMD").blocks
    assert block.markdown is None
    assert block.text.plain.startswith(f"(Markdown of more than {MARKDOWN_ELEMENTS} elements")
    assert readable(table[:200], "CMD").blocks[0].markdown is not None
    blob = readable({"blob": "x" * 10_000_000}, "CMD", pages=1)  # one string longer than the page
    assert blob.cut and blob.size == 10_000_000 + len('{"blob":""}')
    assert len(blob.blocks[0].text.plain) < 2 * PREVIEW_CHARS and "prints it whole" in blob.blocks[0].text.plain
    longer = readable({"blob": "x" * 10_000_000}, "CMD", pages=3)
    assert 2 * PREVIEW_CHARS < len(longer.blocks[0].text.plain) < 4 * PREVIEW_CHARS


async def test_the_report_reads_as_markdown_and_a_link_opens_only_after_y(db):
    pending_store(db, approvals=1, inputs=0)
    app = RelaypointConsole(db, review=True)
    opened: list[str] = []
    app.open_url = lambda url, **kw: opened.append(url)  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        (md,) = review_screen(pilot).query(SafeMarkdown)
        await until(pilot, lambda: len(md.children) > 3)
        assert md.query("MarkdownTable")
        md.post_message(Markdown.LinkClicked(md, "https://dashboard.example/weekly"))
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await settle(pilot)
        assert opened == []
        md.post_message(Markdown.LinkClicked(md, "https://dashboard.example/weekly"))
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await settle(pilot)
    assert opened == ["https://dashboard.example/weekly"]


async def test_an_edited_output_shows_its_diff_before_it_is_recorded(db):
    runs = pending_store(db, approvals=1, inputs=0)
    app = RelaypointConsole(db, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, ApproveScreen))
        form = app.screen
        await pilot.press("ctrl+e")  # the JSON editor
        await settle(pilot)
        editor = form.query_one("#output-json", TextArea)
        assert editor.display and editor.has_focus
        editor.load_text(editor.text.replace('"Weekly report"', '"Monthly report"', 1))
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert app.screen is form  # not yet: the diff first
        diff = form.query_one("#output-diff", Static)
        lines = str(diff.content).splitlines()
        assert '-  "title": "Weekly report",' in lines and '+  "title": "Monthly report",' in lines
        assert "ctrl+s again" in str(form.query_one(".form-error").content)
        assert approvals(db, runs[0]) == []
        await pilot.press("ctrl+s")
        await until(pilot, lambda: len(approvals(db, runs[0])) == 1)
    with Runtime(db, create=False) as rt:
        assert rt.step_output(runs[0], "draft")["title"] == "Monthly report"


# ---- the command palette ---------------------------------------------------------------------------


def test_the_palette_is_generated_from_the_action_registry():
    names = {entry.action for entry in palette_entries()}
    registry = {a.name for a in RUN_ACTIONS} | {b.action for b in (*QUEUE_BINDINGS, *GENERAL_BINDINGS)}
    registry -= {"back"}  # escape backs out of the palette itself
    assert registry <= names
    statuses = [e for e in palette_entries() if e.action == "filter_status"]
    assert [e.argument for e in statuses] == [None, *(s.value for s in Status)]
    for entry in statuses[1:]:
        assert RUN_SYMBOLS[Status(entry.argument)] in entry.title


async def palette_hits(pilot: Pilot, query: str) -> list[str]:
    await pilot.press("ctrl+p")
    await until(pilot, lambda: isinstance(pilot.app.screen, CommandPalette))
    for char in query:
        await pilot.press("space" if char == " " else char)
    palette = pilot.app.screen
    await until(pilot, lambda: not palette._list_visible or palette.query_one("CommandList").option_count > 0)
    await settle(pilot)
    options = palette.query_one("CommandList")
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


async def test_the_palette_lists_every_action_and_runs_one_by_keys(db):
    runs = pending_store(db, approvals=1, inputs=1)
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await settle(pilot)
        listed = app.screen.query_one("CommandList")
        prompts = "\n".join(str(listed.get_option_at_index(i).prompt) for i in range(listed.option_count))
        for entry in palette_entries():
            assert entry.title in prompts, entry.title
        await pilot.press("escape")
        await settle(pilot)
        hits = await palette_hits(pilot, "status awaiting_input")
        assert any("awaiting_input" in h for h in hits)
        await pilot.press("enter")
        await until(pilot, lambda: main_screen(pilot).query_state.status == "awaiting_input")
        await until(pilot, lambda: list(runs_table(pilot).runs) == [runs[1]])


async def palette_titles(pilot: Pilot) -> list[str]:
    """The titles of the commands the palette lists before anything is typed."""
    await pilot.press("ctrl+p")
    await until(pilot, lambda: isinstance(pilot.app.screen, CommandPalette))
    palette = pilot.app.screen
    await until(pilot, lambda: palette.query_one("CommandList").option_count > 0)
    await settle(pilot)
    listed = palette.query_one("CommandList")
    titles = [str(listed.get_option_at_index(i).prompt).splitlines()[0] for i in range(listed.option_count)]
    await pilot.press("escape")
    await settle(pilot)
    return titles


async def test_the_palette_lists_relaypoints_commands_only(db):
    # Textual's own commands (Theme, Screenshot, Keys, Maximize, its Quit) are not the console's.
    (run_id,) = pending_store(db, approvals=1, inputs=0)
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert sorted(await palette_titles(pilot)) == sorted(e.title for e in palette_entries())
        await open_form(pilot, run_id, "a", ApproveScreen)  # a form has no commands: no palette over it
        await pilot.press("ctrl+p")
        await settle(pilot)
        assert isinstance(app.screen, ApproveScreen)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ApproveScreen))
        await pilot.press("n")
        await review_loaded(pilot)
        assert sorted(await palette_titles(pilot)) == sorted(e.title for e in palette_entries(review=True))


async def test_the_palette_opens_a_run_by_id_prefix_and_says_why_an_action_does_not_apply(db):
    runs = pending_store(db, approvals=1, inputs=1)
    app = RelaypointConsole(db)
    notes = recorded_notifications(app)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        hits = await palette_hits(pilot, runs[1][:6])
        assert any(runs[1][:8] in h and "asking" in h for h in hits)
        await pilot.press("enter")
        await until(pilot, lambda: main_screen(pilot).selected == runs[1])
        hits = await palette_hits(pilot, "approve")
        assert any("Approve" in h for h in hits)
        await pilot.press("enter")  # the run selected awaits input: approve says why not
        await settle(pilot)
        assert app.screen is main_screen(pilot)
    assert any(sev == "warning" and "approve" in m and "awaiting_input" in m for m, sev in notes), notes
    with Runtime(db, create=False) as rt:
        assert rt.get(runs[1]).status == RunStatus.AWAITING_INPUT
