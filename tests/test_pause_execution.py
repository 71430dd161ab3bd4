"""A pause names the execution it is about (``Checkpoint.paused_seq``), and every surface resolves
it through that: a gate on the step after a pattern shows and edits the gated step's own output
(it was recorded at the seq of the pattern's first call, and the CLI's wait message, the review
screen, the runs list's detail, the approve form and MCP took pro's speech for it); a resume
from a gate on the step before a pattern no longer cancels the pattern's row. On both backends,
through the CLI, the console (real key presses), MCP and the store's rows; and the migration of
stores made before the field existed (tests/data/store_v4.db, store_pg_v8.sql)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from console_pilot import main_screen, rendered, select_run, settle, until
from test_review import review_loaded, review_screen
from textual.widgets import Static, TextArea

from relaypoint import Runtime, RunStatus, StepStatus
from relaypoint.pausehook import notice
from relaypoint.store.migrations.postgres import MIGRATIONS as PG_MIGRATIONS
from relaypoint.store.url import parse
from relaypoint.tui import RelaypointConsole
from relaypoint.tui.screens.forms import ApproveScreen

from helpers import relaypoint
from test_mcp import call, server

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
from v4_workflows import WORKFLOWS  # noqa: E402

SIZE = (160, 45)
REAL = {"publish": "THE REAL GATED OUTPUT"}
APP = "v4_workflows:WORKFLOWS"
FIXTURE_IDS: dict[str, str] = json.loads((DATA / "store_v4.json").read_text())


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A directory with the workflows' module, where the CLI and the MCP server run."""
    shutil.copyfile(DATA / "v4_workflows.py", tmp_path / "v4_workflows.py")
    return tmp_path


def gated_after_pattern(db: str) -> str:
    with Runtime(db, WORKFLOWS) as rt:
        return rt.start("gate_after_pattern")


def titles(widget: Any) -> str:
    """The border titles of ``widget`` and the widgets in it (the boxes naming whose output they show)."""
    return " | ".join(str(w.border_title) for w in widget.walk_children(with_self=True) if w.border_title)


def tasks(db: str, rid: str) -> dict[tuple[str, int, str | None], Any]:
    """The run's executions by (name, iteration, agent): status and output."""
    with Runtime(db, WORKFLOWS, create=False) as rt:
        return {(t.name, t.iteration, t.agent): (t.status, t.output) for t in rt.get(rid).tasks}


# ---- 1: a gate after a pattern ----------------------------------------------------------------


def test_the_cli_names_the_gated_step_and_approve_edits_its_output(app: Path, db: str):
    started = relaypoint(app, "start", "gate_after_pattern", "--app", APP, db=db)
    assert started.returncode == 0, started.stderr
    assert "awaiting_approval at step 'final'" in started.stdout + started.stderr
    assert "iteration" not in started.stdout + started.stderr
    with Runtime(db, create=False) as rt:
        (run,) = rt.list()
        rid = run.run_id
        pending = rt.get(rid).pending
        final = next(t for t in rt.get(rid).tasks if t.name == "final")
    assert (pending.step, pending.paused_seq) == ("final", final.seq) and pending.seq != final.seq
    shown = relaypoint(app, "show", rid, db=db).stdout
    assert "waiting: approve the output of step 'final'" in shown
    edited = relaypoint(app, "approve", rid, "--output", '{"publish": "EDITED"}', db=db)
    assert edited.returncode == 0, edited.stderr
    recorded = tasks(db, rid)
    assert recorded["final", 1, None][1] == {"publish": "EDITED"}
    assert recorded["argue", 1, "pro"][1] == {"speech": "pro speaks in round 1"}  # the speech is not touched


async def test_the_review_screen_shows_the_gated_output_and_the_form_edits_it(db: str):
    rid = gated_after_pattern(db)
    app = RelaypointConsole(db, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        item = review_screen(pilot).item
        assert item.run.run_id == rid and item.execution.name == "final" and item.execution.parent is None
        text = rendered(review_screen(pilot))
        assert "THEREALGATEDOUTPUT" in text and "prospeaks" not in text and "round1·pro" not in text
        assert "waitsapprovalatstepfinal" in text
        assert "Output of final as it reads" in titles(review_screen(pilot))
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, ApproveScreen))
        form = app.screen
        await until(pilot, lambda: form.loaded)
        assert "thepatterngets" not in rendered(form)  # a gate's output, not a person's turn's value
        await pilot.press("ctrl+e")
        await settle(pilot)
        editor = form.query_one("#output-json", TextArea)
        assert "THE REAL GATED OUTPUT" in editor.text and "pro speaks" not in editor.text
        editor.load_text(editor.text.replace("THE REAL GATED OUTPUT", "EDITED", 1))
        await pilot.press("ctrl+s")
        await settle(pilot)
        diff = str(form.query_one("#output-diff", Static).content).splitlines()
        assert '-  "publish": "THE REAL GATED OUTPUT"' in diff and '+  "publish": "EDITED"' in diff
        await pilot.press("ctrl+s")
        await until(pilot, lambda: tasks(db, rid)["final", 1, None][1] == {"publish": "EDITED"})
    assert tasks(db, rid)["argue", 1, "pro"][1] == {"speech": "pro speaks in round 1"}


async def test_the_runs_list_detail_shows_the_gated_output(db: str):
    rid = gated_after_pattern(db)
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await select_run(pilot, rid)
        await until(pilot, lambda: "THEREALGATEDOUTPUT" in rendered(main_screen(pilot).detail))
        assert "waitingapprovalatstepfinal" in rendered(main_screen(pilot).detail)
        assert "Output of final" in titles(main_screen(pilot).detail)


async def test_mcp_pending_names_the_gated_step(app: Path, db: str):
    rid = gated_after_pattern(db)
    with Runtime(db, create=False) as rt:
        final = next(t for t in rt.get(rid).tasks if t.name == "final")
    async with server(app, db) as session:
        (pending,) = await call(session, "pending_decisions")
        assert (pending["run_id"], pending["step"], pending["paused_seq"]) == (rid, "final", final.seq)
        shown = await call(session, "show_run", run_id=rid)
        assert shown["pending"]["paused_seq"] == final.seq


def test_the_queue_and_the_on_pause_notice_say_where_each_pause_is(db: str):
    with Runtime(db, WORKFLOWS) as rt:
        gate, turn, asked = rt.start("gate_after_pattern"), rt.start("turn_approval"), rt.start("ask")
        owed = rt.pending_decisions()
        claimed = rt.store.claim_announcements(10, rt.clock(), rt.clock())  # what a worker's --on-pause announces
    for decisions in (owed, claimed):
        where = {d.run_id: (notice(d)["step"], notice(d)["iteration"], notice(d)["agent"]) for d in decisions}
        assert where == {gate: ("final", None, None), turn: ("argue", 1, "person"), asked: ("question", None, None)}


# ---- 2: a gate before a pattern ---------------------------------------------------------------


def test_a_resume_after_a_gate_before_a_pattern_does_not_cancel_the_pattern(db: str):
    with Runtime(db, WORKFLOWS) as rt:
        rid = rt.start("gate_before_pattern", {"fail": True})
        assert rt.get(rid).pending.paused_seq == 0  # draft's, not the pattern's row after it
        rt.approve(rid, by="alice")
        assert rt.resume(rid) == RunStatus.FAILED  # pro fails
        resumed = [e for e in rt.events(rid) if e.kind == "resumed"]
        group = next(t for t in rt.get(rid).tasks if t.name == "argue" and t.parent is None)
    assert group.status == StepStatus.PENDING  # it was marked cancelled, for good
    assert all("abandoned" not in (e.detail or {}) for e in resumed)


def test_a_failed_run_shows_its_pattern_pending_not_cancelled(app: Path, db: str):
    with Runtime(db, WORKFLOWS) as rt:
        rid = rt.start("gate_before_pattern", {"fail": True})
        rt.approve(rid, by="alice")
        rt.resume(rid)
    shown = relaypoint(app, "show", rid, db=db).stdout
    assert "argue  pending" in shown and "cancelled" not in shown


async def test_the_console_shows_the_failed_run_s_pattern_not_cancelled(db: str):
    with Runtime(db, WORKFLOWS) as rt:
        rid = rt.start("gate_before_pattern", {"fail": True})
        rt.approve(rid, by="alice")
        rt.resume(rid)
    app = RelaypointConsole(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await select_run(pilot, rid)
        await until(pilot, lambda: "profailedonpurpose" in rendered(main_screen(pilot).detail))
        assert "cancelled" not in rendered(main_screen(pilot).detail)


async def test_a_person_s_turn_shows_the_calls_before_it_as_its_upstream(db: str):
    # The person playing a debate's agent answers pro's speech: `u` said "its step has no upstream outputs".
    with Runtime(db, WORKFLOWS) as rt:
        rt.start("turn_input")
    app = RelaypointConsole(db, review=True)
    async with app.run_test(size=SIZE) as pilot:
        await review_loaded(pilot)
        assert review_screen(pilot).item.execution.agent == "person"
        assert "u: upstream outputs" in titles(review_screen(pilot))
        await pilot.press("u")
        await until(pilot, lambda: "prospeaksinround1" in rendered(review_screen(pilot)))
        assert "argue,round1·pro" in rendered(review_screen(pilot))


def test_a_person_s_turn_is_its_own_execution(db: str):
    with Runtime(db, WORKFLOWS) as rt:
        rid = rt.start("turn_approval")
        run = rt.get(rid)
        person = next(t for t in run.tasks if t.agent == "person")
        assert run.pending.paused_seq == run.pending.seq == person.seq
        rt.approve(rid, by="ann", output={"verdict": "fine"})
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "argue")["person"] == {"approved": True, "by": "ann", "comment": None,
                                                          "value": {"verdict": "fine"}}


# ---- migration of stores made before the field ------------------------------------------------


def load_fixture(db: str, tmp_path: Path) -> str:
    """The store of ``db``'s backend made at d9cd0d1 (SQLite schema 4, PostgreSQL schema 8), at ``db``."""
    where = parse(db)
    if where.backend == "sqlite":
        shutil.copyfile(DATA / "store_v4.db", where.path)
        return db
    with psycopg.connect(where.conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {where.schema}")
        conn.execute(f"SET search_path = {where.schema}")
        for migrate in PG_MIGRATIONS[:8]:
            for statement in migrate(where.schema):
                conn.execute(statement)
        conn.execute((DATA / "store_pg_v8.sql").read_text().replace("rp_fixture_v8.", f"{where.schema}."))
    return db


def paused_on(rt: Runtime, rid: str) -> list[str]:
    """What each of the run's pauses is about, as ``step`` or ``step/agent``."""
    by_seq = {t.seq: t for t in rt.get(rid).tasks}
    return [by_seq[c.paused_seq].name + (f"/{by_seq[c.paused_seq].agent}" if by_seq[c.paused_seq].agent else "")
            for c in rt.store.checkpoints(rid) if c.kind in ("approval", "input", "orphan")]


def test_the_migration_derives_what_each_recorded_pause_is_about(db: str, tmp_path: Path):
    load_fixture(db, tmp_path)
    with Runtime(db, WORKFLOWS, create=False) as rt:
        about = {label: paused_on(rt, rid) for label, rid in FIXTURE_IDS.items()}
        repaired = next(t for t in rt.get(FIXTURE_IDS["gate_before_pattern_failed"]).tasks
                        if t.name == "argue" and t.parent is None)
    assert about == {"gate_after_pattern": ["final"], "gate_before_pattern": ["draft"],
                     "gate_before_pattern_failed": ["draft"], "turn_approval": ["argue/person"],
                     "turn_input": ["argue/person"], "ask": ["question"]}
    assert repaired.status == StepStatus.PENDING and repaired.finished_at is None


def test_a_migrated_store_resolves_and_decides_its_pending_pauses(app: Path, db: str, tmp_path: Path):
    load_fixture(db, tmp_path)
    ids = FIXTURE_IDS
    assert relaypoint(app, "list", db=db).returncode == 0  # opens the store, and upgrades it
    edited = relaypoint(app, "approve", ids["gate_after_pattern"], "--output", '{"publish": "EDITED"}', db=db)
    assert edited.returncode == 0, edited.stderr
    assert tasks(db, ids["gate_after_pattern"])["final", 1, None][1] == {"publish": "EDITED"}
    assert tasks(db, ids["gate_after_pattern"])["argue", 1, "pro"][1] == {"speech": "pro speaks in round 1"}
    with Runtime(db, WORKFLOWS, create=False) as rt:
        assert rt.resume(ids["gate_after_pattern"]) == RunStatus.COMPLETED
        rt.approve(ids["gate_before_pattern"], by="alice")
        assert rt.resume(ids["gate_before_pattern"]) == RunStatus.FAILED  # its input makes pro fail
        group = next(t for t in rt.get(ids["gate_before_pattern"]).tasks if t.name == "argue" and t.parent is None)
        assert group.status == StepStatus.PENDING
        rt.approve(ids["turn_approval"], by="ann")
        assert rt.resume(ids["turn_approval"]) == RunStatus.COMPLETED
        rt.respond(ids["turn_input"], "my view", by="ann")
        assert rt.resume(ids["turn_input"]) == RunStatus.COMPLETED
        assert rt.step_output(ids["turn_input"], "argue")["person"] == "my view"
        rt.respond(ids["ask"], "blue", by="ann")
        assert rt.resume(ids["ask"]) == RunStatus.COMPLETED
        assert rt.step_output(ids["ask"], "question") == {"answer": "blue"}
        # new pauses on the migrated store record their execution (PostgreSQL: the new commit_change)
        rid = rt.start("gate_after_pattern")
        final = next(t for t in rt.get(rid).tasks if t.name == "final")
        assert rt.get(rid).pending.paused_seq == final.seq
