"""Broken stores: a corrupt file, a truncated WAL, rows edited by hand (damaged JSON, a status or a
decision outside the vocabulary), a store from a newer relaypoint, a read-only store and a full one.

Each gives a clear one-line message and no traceback, never takes damage for a decision, and loses
nothing that was committed.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from helpers import snapshot, APP, DB, app_workflows, digest, ids, one_line_error, relaypoint, rows, sql, write_app
from relaypoint.store.sqlite import SCHEMA_VERSION
from relaypoint import RefusedTransition, RunStatus, Runtime, StepStatus, StoreError, Workflow

PAD = "p" * 2000  # makes every run take room, so a store spans many pages


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr


def fill(db: Path, n: int, run_ids: list[str] | None = None) -> list[str]:
    """``n`` review runs (paused at their approval) in a store closed cleanly (no -wal left)."""
    with Runtime(str(db), app_workflows(), **({"id_factory": ids(*run_ids)} if run_ids else {})) as rt:
        return [rt.start("review", {"topic": f"t{i}", "pad": PAD}) for i in range(n)]


# ---- a corrupt file -------------------------------------------------------------------------------


def pages_of(db: Path, table: str, kind: str | None = None) -> list[int]:
    """The page numbers (from 1) of ``table``, of one ``kind`` (leaf, internal, overflow) if given."""
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("SELECT pageno FROM dbstat WHERE name = ? "
                                           "AND pagetype = coalesce(?, pagetype) ORDER BY pageno", (table, kind))]
    finally:
        conn.close()


def page_size(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


def overwrite(db: Path, offset: int, data: bytes) -> None:
    with open(db, "r+b") as f:
        f.seek(offset)
        f.write(data)


@pytest.fixture
def corrupt_middle(tmp_path: Path) -> tuple[Path, list[str]]:
    """A valid store whose leaf pages of the runs table, all but the first, are then overwritten with
    garbage: the newest runs (which listing reads first) are damaged, the oldest intact, and the schema
    page and the meta page are untouched."""
    write_app(tmp_path)
    db = tmp_path / DB
    run_ids = fill(db, 40)
    psize = page_size(db)
    leaves = pages_of(db, "runs", "leaf")
    assert len(leaves) >= 2, "precondition: the runs rows span several pages"
    assert not {1, *pages_of(db, "meta")} & set(leaves[1:]), "precondition: the schema and meta pages stay intact"
    for page in leaves[1:]:  # pageno counts from 1
        overwrite(db, (page - 1) * psize, b"\xff" * psize)
    return db, run_ids


def test_corrupt_middle_cli_says_one_line(corrupt_middle) -> None:
    db, run_ids = corrupt_middle
    line = one_line_error(relaypoint(db.parent, "list"))
    assert str(db.name) in line and "malformed" in line
    one_line_error(relaypoint(db.parent, "list", "--json"))
    damaged, intact = [], []
    conn = sqlite3.connect(db)
    for rid in run_ids:
        try:
            conn.execute("SELECT * FROM runs WHERE run_id = ?", (rid,)).fetchall()
            intact.append(rid)
        except sqlite3.DatabaseError:
            damaged.append(rid)
    conn.close()
    assert damaged and intact
    for rid in damaged[:2]:  # a run on a damaged page is one line
        line = one_line_error(relaypoint(db.parent, "show", rid))
        assert "malformed" in line
    shown = relaypoint(db.parent, "show", intact[0])  # one on an intact page shows, or is one line
    no_traceback(shown)
    if shown.returncode != 0:
        one_line_error(shown)
    one_line_error(relaypoint(db.parent, "approve", damaged[0]))
    one_line_error(relaypoint(db.parent, "resume", damaged[0], "--app", APP))


def test_corrupt_middle_console_runtime_raises_store_error(corrupt_middle) -> None:
    db, _ = corrupt_middle
    from relaypoint.tui.data import PageKind, RunQuery, read_page

    with Runtime(str(db), create=False) as rt:
        with pytest.raises(StoreError, match="malformed"):
            read_page(rt, RunQuery(), PageKind.FIRST)
        with pytest.raises(StoreError):
            rt.list()


@pytest.mark.parametrize("damage", ["schema-page", "header", "all-but-first-page", "not-sqlite"])
def test_corrupt_file_is_refused_at_open_and_left_untouched(tmp_path: Path, damage: str) -> None:
    db = tmp_path / DB
    fill(db, 20)
    psize, size = page_size(db), db.stat().st_size
    if damage == "schema-page":
        overwrite(db, 100, b"\xff" * (psize - 100))  # page 1 after the 100-byte file header
    elif damage == "header":
        overwrite(db, 0, b"\x00" * 100)
    elif damage == "all-but-first-page":
        overwrite(db, psize, b"\xff" * (size - psize))
    else:
        db.write_bytes(b"this is a text file, not a database\n" * 300)
    before = digest(db)
    for args in (["list"], ["show", "0123"], ["events", "0123"], ["delete", "0123"], ["prune", "--days", "1"]):
        line = one_line_error(relaypoint(tmp_path, *args))
        assert str(db.name) in line
    with pytest.raises(StoreError) as refused:
        Runtime(str(db), create=False)
    assert "\n" not in str(refused.value)
    assert digest(db) == before
    assert not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0


# ---- a truncated WAL ------------------------------------------------------------------------------

WAL_HEADER, FRAME_HEADER = 32, 24


def consistent(run) -> None:
    """What a recovered run holds is one of its committed boundaries, whole."""
    done = [t for t in run.tasks if t.status == StepStatus.COMPLETED]
    assert run.steps_done == len(done)
    assert all(t.has_output for t in done)
    assert all(not t.has_output for t in run.tasks if t.status == StepStatus.PENDING)


@pytest.mark.parametrize("cut", ["inside-wal-header", "first-quarter", "middle", "last-quarter", "last-frame"])
def test_truncated_wal_opens_with_every_whole_transaction(tmp_path: Path, cut: str) -> None:
    write_app(tmp_path)
    db = tmp_path / DB
    early = fill(db, 5)
    with Runtime(str(db), create=False) as rt:
        early_runs = {rid: rt.get(rid) for rid in early}
    assert not Path(f"{db}-wal").exists()  # the early runs are checkpointed into the main file

    reader = sqlite3.connect(db)  # an open read transaction: no checkpoint can pass it
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM runs").fetchone()
    try:
        with Runtime(str(db), app_workflows()) as rt:
            late = [rt.start("review", {"topic": f"late{i}", "pad": PAD}) for i in range(12)]
            late_runs = {rid: rt.get(rid) for rid in late}
            wal = Path(f"{db}-wal")
            assert wal.stat().st_size > WAL_HEADER
            copy = tmp_path / "copy"
            copy.mkdir()
            shutil.copy(db, copy / DB)
            shutil.copy(wal, copy / f"{DB}-wal")
    finally:
        reader.close()
    write_app(copy)

    cwal = copy / f"{DB}-wal"
    frame = FRAME_HEADER + page_size(db)
    frames = (cwal.stat().st_size - WAL_HEADER) // frame
    assert frames > 8
    at = {"inside-wal-header": 16, "first-quarter": WAL_HEADER + (frames // 4) * frame + frame // 2,
          "middle": WAL_HEADER + (frames // 2) * frame + frame // 3,
          "last-quarter": WAL_HEADER + (3 * frames // 4) * frame + 100,
          "last-frame": WAL_HEADER + (frames - 1) * frame + FRAME_HEADER + 10}[cut]
    os.truncate(cwal, at)

    listed = relaypoint(copy, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    no_traceback(listed)
    got = {r["run_id"] for r in json.loads(listed.stdout)}
    assert set(early) <= got
    recovered = [rid for rid in late if rid in got]
    assert recovered == late[:len(recovered)]  # transactions come back in commit order, never a gap
    if cut == "inside-wal-header":
        assert recovered == []  # a WAL without a valid header is ignored: nothing of it is used
    if cut == "last-frame":
        assert len(recovered) >= len(late) - 1
    with Runtime(str(copy / DB), app_workflows(), create=False) as rt:
        assert rt.store.conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for rid in early:
            assert rt.get(rid) == early_runs[rid]
        for rid in recovered[:-1]:
            assert rt.get(rid) == late_runs[rid]
        for rid in recovered:
            consistent(rt.get(rid))
        more = rt.start("simple", {"after": "recovery"})  # the recovered store is usable
        assert rt.get(more).status == RunStatus.COMPLETED
    for rid in recovered:
        shown = relaypoint(copy, "show", rid)
        assert shown.returncode == 0, shown.stderr


# ---- rows edited by hand: damaged JSON ------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The CLI app, and a store with ``paused00`` (review, awaiting the approval of ``check``),
    ``asked000`` (ask, answered and queued) and ``done0000`` (simple, completed)."""
    write_app(tmp_path)
    db = tmp_path / DB
    with Runtime(str(db), app_workflows(), id_factory=ids("paused00", "asked000", "done0000")) as rt:
        rt.start("review", {"topic": "t"})
        rt.start("ask")
        rt.respond("asked000", "a title", by="ana")
        rt.start("simple", {"kept": "é"})
    return db


DRAFT = "run_id = 'paused00' AND seq = (SELECT seq FROM steps WHERE run_id = 'paused00' AND name = 'draft')"
"""Where the output of paused00's first step is."""

PAUSED_DEFINITION = "fingerprint = (SELECT fingerprint FROM runs WHERE run_id = 'paused00')"
"""Where paused00's definition is (shared by the runs of its fingerprint)."""

DAMAGE = [  # (table, column, where, the damaged text)
    pytest.param("run_inputs", "input", "run_id = 'paused00'", '{"topic": "t', id="run_inputs.input"),
    pytest.param("outputs", "value", DRAFT, '{"text": ', id="outputs.value"),
    pytest.param("events", "detail", "run_id = 'paused00' AND kind = 'paused'", "{gate: approval}",
                 id="events.detail"),
    pytest.param("checkpoints", "value", "run_id = 'asked000' AND kind = 'input'", "'a title'",
                 id="checkpoints.value"),
    pytest.param("checkpoints", "state", "run_id = 'paused00' AND kind = 'approval'", "{{", id="checkpoints.state"),
]


def unreadable_in(value: Any, text: str) -> bool:
    """Whether ``{"unreadable": text}`` appears anywhere in ``value``."""
    if value == {"unreadable": text}:
        return True
    if isinstance(value, dict):
        return any(unreadable_in(v, text) for v in value.values())
    if isinstance(value, list):
        return any(unreadable_in(v, text) for v in value)
    return False


@pytest.mark.parametrize(("table", "column", "where", "text"), DAMAGE)
def test_damaged_json_is_shown_as_an_unreadable_placeholder(store: Path, table: str, column: str, where: str,
                                                            text: str) -> None:
    sql(store, f"UPDATE {table} SET {column} = ? WHERE {where}", text)
    rid = "asked000" if "asked000" in where else "paused00"
    before = snapshot(store)

    with Runtime(str(store), create=False) as rt:
        run, events = rt.get(rid), rt.events(rid)
        checkpoints = rt.store.checkpoints(rid)
        found = [run.model_dump(mode="json"), [e.model_dump(mode="json") for e in events],
                 [c.model_dump(mode="json") for c in checkpoints]]
        assert unreadable_in(found, text)
        from relaypoint.tui.data import load_detail, load_output

        detail = load_detail(rt, rid)
        if table == "outputs":
            assert load_output(rt, detail.run, detail.run.tasks[0]).value == {"unreadable": text}
        if column == "input":
            assert detail.run.input == {"unreadable": text}
        if column == "detail":
            assert unreadable_in([e.model_dump(mode="json") for e in detail.events], text)

    for args in (["show", rid], ["show", rid, "--json"], ["events", rid], ["events", rid, "--json"], ["list"]):
        result = relaypoint(store.parent, *args)
        assert result.returncode == 0, (args, result.stderr)
        no_traceback(result)
    shown = json.loads(relaypoint(store.parent, "show", rid, "--json").stdout)
    listed_events = json.loads(relaypoint(store.parent, "events", rid, "--json").stdout)
    if column in ("input", "value") and table != "checkpoints":  # (a decided checkpoint's value is not part of show)
        assert unreadable_in(shown, text)
    if column == "detail":
        assert unreadable_in(listed_events, text)
    assert snapshot(store) == before  # reading never repairs or rewrites anything



WRONG_SHAPES = [  # (table, column, where, text) that json.loads accepts or rejects without JSONDecodeError
    pytest.param("definitions", "definition", PAUSED_DEFINITION, "[{broken", id="definitions.definition-malformed"),
    pytest.param("run_inputs", "input", "run_id = 'paused00'", "[1, 2]", id="run_inputs.input-a-list"),
    pytest.param("events", "detail", "run_id = 'paused00'", '"text"', id="events.detail-a-string"),
    pytest.param("steps", "options", "run_id = 'paused00'", "[1]", id="steps.options-a-list"),
    pytest.param("outputs", "value", DRAFT, "1" + "0" * 5000, id="outputs.value-int-5001-digits"),
    pytest.param("outputs", "value", DRAFT, "[" * 20000 + "]" * 20000, id="outputs.value-nested-20000"),
    pytest.param("steps", "options", "run_id = 'paused00'", "{broken", id="steps.options-malformed"),
]


@pytest.mark.parametrize(("table", "column", "where", "text"), WRONG_SHAPES)
def test_hand_edited_json_of_any_kind_never_gives_a_traceback(store: Path, table: str, column: str, where: str,
                                                              text: str) -> None:
    assert sql(store, f"UPDATE {table} SET {column} = ? WHERE {where} RETURNING 1", text)  # the damage is made
    for args in (["show", "paused00"], ["show", "paused00", "--json"], ["events", "paused00", "--json"]):
        result = relaypoint(store.parent, *args)
        no_traceback(result)
        assert result.returncode == 0, (args, result.stderr)
    with Runtime(str(store), create=False) as rt:
        rt.get("paused00")
        rt.events("paused00")


def test_a_hand_edited_timestamp_does_not_break_listing(store: Path) -> None:
    sql(store, "UPDATE runs SET updated_at = 'yesterday' WHERE run_id = 'done0000'")
    listed = relaypoint(store.parent, "list")
    no_traceback(listed)
    assert listed.returncode == 0 and "paused00" in listed.stdout and "done0000" not in listed.stdout
    line = one_line_error(relaypoint(store.parent, "show", "done0000"))
    assert "'yesterday'" in line and "updated_at" in line


CHECK = "run_id = 'paused00' AND seq = (SELECT seq FROM steps WHERE run_id = 'paused00' AND name = 'check')"
"""Where the output of paused00's gated step is (its next step, publish, reads it)."""

DAMAGED_UPSTREAM = [  # (run, what is damaged, statement, the StoreError's words)
    pytest.param("paused00", f"UPDATE outputs SET value = '{{\"draft\":' WHERE {CHECK}",
                 "the output of step 'check'", id="upstream-output"),
    pytest.param("paused00", "UPDATE run_inputs SET input = '{\"topic\"' WHERE run_id = 'paused00'",
                 "the input of run paused00", id="run-input"),
    pytest.param("asked000", "UPDATE checkpoints SET value = '\"a tit' WHERE run_id = 'asked000' AND kind = 'input'",
                 "a response to step 'question'", id="recorded-answer"),
]


def ready(db: Path, rid: str) -> None:
    if rid == "paused00":
        with Runtime(str(db), create=False) as rt:
            rt.approve(rid, by="ana")


@pytest.mark.parametrize(("rid", "statement", "words"), DAMAGED_UPSTREAM)
def test_resuming_over_damaged_json_fails_closed_in_one_line(store: Path, rid: str, statement: str,
                                                             words: str) -> None:
    ready(store, rid)
    sql(store, statement)
    line = one_line_error(relaypoint(store.parent, "resume", rid, "--app", APP))
    assert words in line and "not valid JSON" in line
    with Runtime(str(store), app_workflows(), create=False) as rt:
        run = rt.get(rid)
        assert run.tasks[-1].status != StepStatus.COMPLETED  # the consuming step never completed
        assert run.status != RunStatus.COMPLETED


def test_resuming_over_a_damaged_input_changes_nothing(store: Path) -> None:
    # The input is read (strictly) before the run is claimed.
    ready(store, "paused00")
    sql(store, "UPDATE run_inputs SET input = '{\"topic\"' WHERE run_id = 'paused00'")
    before = rows(store, "paused00")
    with Runtime(str(store), app_workflows(), create=False) as rt:
        with pytest.raises(StoreError, match="not valid JSON"):
            rt.resume("paused00")
        assert rows(store, "paused00") == before
        with pytest.raises(StoreError, match="not valid JSON"):  # and again: not 'being executed by'
            rt.resume("paused00")


@pytest.mark.parametrize(("rid", "statement", "words", "left"), [
    pytest.param(*DAMAGED_UPSTREAM[0].values, RunStatus.INTERRUPTED, id="upstream-output"),  # read by the step
    pytest.param(*DAMAGED_UPSTREAM[2].values, RunStatus.QUEUED, id="recorded-answer"),  # read before the claim
])
def test_a_damaged_value_a_step_consumes_leaves_the_run_resumable_and_uncharged(
        store: Path, rid: str, statement: str, words: str, left: RunStatus) -> None:
    # An output is read when the step uses it: the run was claimed, so it is released interrupted
    # (not failed, no death charged), with nothing of the step recorded.
    ready(store, rid)
    sql(store, statement)
    outputs = sql(store, "SELECT * FROM outputs WHERE run_id = ? ORDER BY seq", rid)
    with Runtime(str(store), app_workflows(), create=False) as rt:
        for _ in range(2):  # and again: not 'being executed by'
            with pytest.raises(StoreError, match=f"{words}.*not valid JSON"):
                rt.resume(rid)
            head = rt.store.run(rid)
            assert (head.status, head.lease, head.suspect_deaths) == (left, None, 0)
            assert rt.get(rid).tasks[-1].status != StepStatus.COMPLETED
    assert sql(store, "SELECT * FROM outputs WHERE run_id = ? ORDER BY seq", rid) == outputs


# ---- rows edited by hand: statuses and decisions --------------------------------------------------


def test_unknown_run_status_is_skipped_by_listings_and_named_by_show(store: Path) -> None:
    sql(store, "UPDATE runs SET status = 'zombie' WHERE run_id = 'done0000'")
    listed = relaypoint(store.parent, "list")
    assert listed.returncode == 0, listed.stderr
    assert "paused00" in listed.stdout and "done0000" not in listed.stdout
    listed = json.loads(relaypoint(store.parent, "list", "--json").stdout)
    assert {r["run_id"] for r in listed} == {"paused00", "asked000"}
    for args in (["show", "done0000"], ["show", "done0000", "--json"], ["resume", "done0000", "--app", APP],
                 ["cancel", "done0000"], ["approve", "done0000"]):
        line = one_line_error(relaypoint(store.parent, *args))
        assert "'zombie'" in line and "outside relaypoint's vocabulary" in line
    from relaypoint.tui.data import PageKind, RunQuery, read_page

    with Runtime(str(store), create=False) as rt:
        assert {r.run_id for r in rt.list()} == {"paused00", "asked000"}
        assert {r.run_id for r in read_page(rt, RunQuery(), PageKind.FIRST).runs} == {"paused00", "asked000"}
        assert rt.store.count_by_status()["zombie"] == 1
        with pytest.raises(StoreError, match="outside relaypoint's vocabulary"):
            rt.get("done0000")


def test_a_run_with_an_unknown_status_can_be_deleted_as_the_message_says(store: Path) -> None:
    sql(store, "UPDATE runs SET status = 'zombie' WHERE run_id = 'done0000'")
    deleted = relaypoint(store.parent, "delete", "done0000")
    assert deleted.returncode == 0, deleted.stderr
    assert all(r == [] for r in rows(store, "done0000").values())


def test_unknown_step_status_is_one_line(store: Path) -> None:
    sql(store, "UPDATE steps SET status = 'halfway' WHERE run_id = 'paused00' AND name = 'publish'")
    line = one_line_error(relaypoint(store.parent, "show", "paused00"))
    assert "'halfway'" in line and "outside relaypoint's vocabulary" in line
    assert relaypoint(store.parent, "list").returncode == 0


MALFORMED_DECISIONS = ["maybe", "APPROVED", "approved ", "", "yes", "1", None]


@pytest.mark.parametrize("decision", MALFORMED_DECISIONS)
@pytest.mark.parametrize("status", ["queued", "awaiting_approval"])
def test_a_decision_that_cannot_be_read_is_never_taken_as_an_approval(store: Path, decision: str | None,
                                                                      status: str) -> None:
    sql(store, "UPDATE checkpoints SET decision = ?, decided_by = 'mallory' WHERE run_id = 'paused00' "
               "AND kind = 'approval'", decision)
    sql(store, "UPDATE runs SET status = ? WHERE run_id = 'paused00'", status)
    before = rows(store, "paused00")
    line = one_line_error(relaypoint(store.parent, "resume", "paused00", "--app", APP))
    assert ("awaiting approval" in line) if status == "awaiting_approval" else (
        f"decision {decision!r} does not let it go on" in line)
    assert rows(store, "paused00") == before
    with Runtime(str(store), app_workflows(), create=False) as rt:
        with pytest.raises(RefusedTransition):
            rt.resume("paused00")
        assert rt.get("paused00").tasks[-1].status == StepStatus.PENDING  # publish never ran
        assert rt.get("paused00").pending is not None  # the pause is still open
    assert rows(store, "paused00") == before


def approve_then_resume(store: Path) -> None:
    approved = relaypoint(store.parent, "approve", "paused00", "--by", "ana", "--comment", "checked")
    assert approved.returncode == 0, approved.stderr
    with Runtime(str(store), create=False) as rt:
        cp = [c for c in rt.store.checkpoints("paused00") if c.kind == "approval"][-1]
        assert (cp.decision, cp.decided_by, cp.comment) == ("approved", "ana", "checked")
        assert [e.kind for e in rt.events("paused00")][-1] == "approved"
    resumed = relaypoint(store.parent, "resume", "paused00", "--app", APP)
    assert resumed.returncode == 0, resumed.stderr
    with Runtime(str(store), create=False) as rt:
        run = rt.get("paused00")
        assert run.status == RunStatus.COMPLETED
        assert run.tasks[-1].output == {"published": {"draft": "about t"}}


def test_malformed_decision_on_a_paused_run_can_then_be_approved(store: Path) -> None:
    sql(store, "UPDATE checkpoints SET decision = 'maybe' WHERE run_id = 'paused00' AND kind = 'approval'")
    approve_then_resume(store)


def test_malformed_decision_on_a_queued_run_can_then_be_approved(store: Path) -> None:
    sql(store, "UPDATE checkpoints SET decision = 'maybe' WHERE run_id = 'paused00' AND kind = 'approval'")
    sql(store, "UPDATE runs SET status = 'queued' WHERE run_id = 'paused00'")
    approve_then_resume(store)


def test_malformed_answer_decision_is_not_taken_as_answered(store: Path) -> None:
    with Runtime(str(store), app_workflows(), id_factory=ids("waiting0")) as rt:
        rt.start("ask")
    sql(store, "UPDATE checkpoints SET decision = 'respondedd', value = '\"forged\"' WHERE run_id = 'waiting0'")
    sql(store, "UPDATE runs SET status = 'queued' WHERE run_id = 'waiting0'")
    before = rows(store, "waiting0")
    line = one_line_error(relaypoint(store.parent, "resume", "waiting0", "--app", APP))
    assert "'respondedd' does not let it go on" in line
    assert rows(store, "waiting0") == before


# ---- a store from a newer relaypoint, or not a relaypoint store -----------------------------------


def test_newer_schema_is_refused_in_one_line_and_untouched(store: Path) -> None:
    sql(store, "UPDATE meta SET value = ? WHERE key = 'schema_version'", str(SCHEMA_VERSION + 1))
    before = snapshot(store)
    for args in (["list"], ["show", "paused00"], ["approve", "paused00"], ["resume", "paused00", "--app", APP]):
        line = one_line_error(relaypoint(store.parent, *args))
        assert f"schema version {SCHEMA_VERSION + 1}, newer than this relaypoint understands ({SCHEMA_VERSION})" in line
    with pytest.raises(StoreError, match="newer"):
        Runtime(str(store), create=False)
    with pytest.raises(StoreError, match="newer"):
        Runtime(str(store), create=False, readonly=True)
    assert snapshot(store) == before


def test_an_sqlite_file_of_another_application_is_refused_and_untouched(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sql(other, "CREATE TABLE notes (body TEXT)")
    sql(other, "INSERT INTO notes VALUES ('mine')")
    before = digest(other)
    line = one_line_error(relaypoint(tmp_path, "list", db=str(other)))
    assert "not a relaypoint store" in line
    assert digest(other) == before
    assert sql(other, "SELECT name FROM sqlite_master") == [("notes",)]


# ---- a read-only store ----------------------------------------------------------------------------

TRANSITIONS: list[tuple[str, Callable[[Runtime], Any]]] = [
    ("start", lambda rt: rt.start("simple")),
    ("resume", lambda rt: rt.resume("asked000")),
    ("approve", lambda rt: rt.approve("paused00", by="ana")),
    ("reject", lambda rt: rt.reject("paused00", "no", by="ana")),
    ("respond", lambda rt: rt.respond("asked000", "x", by="ana")),
    ("cancel", lambda rt: rt.cancel("paused00", by="ana")),
    ("fork", lambda rt: rt.fork("done0000", "only")),
    ("delete", lambda rt: rt.delete("done0000")),
    ("prune", lambda rt: rt.prune(timedelta(0))),
]


@pytest.mark.parametrize("name", [name for name, _ in TRANSITIONS])
def test_runtime_opened_read_only_reads_and_refuses_every_transition(store: Path, name: str) -> None:
    action = dict(TRANSITIONS)[name]
    before, file_before = snapshot(store), digest(store)
    with Runtime(str(store), app_workflows(), create=False, readonly=True) as rt:
        assert rt.get("paused00").status == RunStatus.AWAITING_APPROVAL
        assert {r.run_id for r in rt.list()} == {"paused00", "asked000", "done0000"}
        assert rt.events("done0000") and rt.steps("done0000")
        assert rt.step_output("done0000", "only") == {"kept": "é"}
        from relaypoint.tui.data import RefreshRequest, RunQuery, read_refresh

        assert rt.store.readonly and rt.store.readonly_reason == "opened read-only"
        read = read_refresh(rt, 1, RefreshRequest(RunQuery(), version=None, sweep=True, window=None,
                                                  window_stale=False, top=None, first_page=True, selected=None))
        assert read.state.readonly_reason == "opened read-only"  # what the console shows as the reason
        with pytest.raises(StoreError) as refused:
            action(rt)
        assert "read-only" in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(store) == before
    assert digest(store) == file_before


# An unprivileged process: as root, uid 65534 when it can run this interpreter (it cannot when the
# interpreter lives under a 0700 /root), otherwise root without the capabilities that bypass file
# permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER dropped from the bounding set).


def _as_nobody() -> None:
    os.setgid(65534)
    os.setuid(65534)


def _without_dac_override() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _cannot_write(preexec: Callable[[], None] | None, probe_dir: Path) -> bool:
    target = probe_dir / "probe"
    target.write_text("x")
    os.chmod(target, 0o444)
    code = ("import os, sys, relaypoint\n"
            f"sys.exit(0 if not os.access({str(target)!r}, os.W_OK) else 3)\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], preexec_fn=preexec, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        target.unlink()
    return done.returncode == 0


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory outside pytest's 0700 tree, which another user can reach."""
    path = Path(tempfile.mkdtemp(prefix="relaypoint-ro-"))
    os.chmod(path, 0o755)
    yield path
    for p in [path, *path.iterdir()]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    shutil.rmtree(path)


@pytest.fixture
def unprivileged(shared_dir: Path) -> Callable[[], None] | None:
    """A preexec_fn making the child a user that file permissions apply to (None: we already are)."""
    if os.geteuid() != 0:
        return None
    for candidate in (_as_nobody, _without_dac_override):
        if _cannot_write(candidate, shared_dir):
            return candidate
    pytest.skip("cannot run a process that file permissions apply to here")


def as_other_user(preexec, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    env["HOME"] = str(directory)
    return subprocess.run([sys.executable, "-m", "relaypoint", "--db", str(directory / DB), *args], cwd=directory,
                          env=env, capture_output=True, text=True, preexec_fn=preexec, timeout=120)


def read_only_copy(store: Path, directory: Path, dir_mode: int, keep_open: bool = False) -> sqlite3.Connection | None:
    """``store`` copied into ``directory``: the file 0444, the directory ``dir_mode``. With
    ``keep_open``, a connection that keeps the -wal/-shm files present is returned."""
    shutil.copy(store, directory / DB)
    conn = None
    if keep_open:
        conn = sqlite3.connect(directory / DB)
        conn.execute("SELECT count(*) FROM runs").fetchone()
        assert Path(f"{directory / DB}-shm").exists()
    for p in directory.iterdir():
        os.chmod(p, 0o444)
    os.chmod(directory, dir_mode)
    return conn


def read_only_cli_works(preexec, directory: Path) -> None:
    before = snapshot(directory / DB)
    for args in (["list"], ["list", "--json"], ["show", "paused00"], ["events", "paused00"]):
        result = as_other_user(preexec, directory, *args)
        assert result.returncode == 0, (args, result.stderr)
        no_traceback(result)
    assert "paused00" in as_other_user(preexec, directory, "list").stdout
    for args in (["approve", "paused00", "--by", "ana"], ["cancel", "paused00"], ["delete", "done0000"],
                 ["respond", "asked000", "--value", '"x"']):
        line = one_line_error(as_other_user(preexec, directory, *args))
        assert "read-only" in line and "not writable by this user" in line
    code = ("from relaypoint import Runtime\n"
            f"rt = Runtime({str(directory / DB)!r}, create=False)\n"
            "print(rt.store.readonly, rt.store.readonly_reason)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    said = subprocess.run([sys.executable, "-c", code], cwd=directory, env=env, capture_output=True, text=True,
                          preexec_fn=preexec, timeout=60)
    assert said.returncode == 0, said.stderr
    assert said.stdout.startswith("True ") and "not writable by this user" in said.stdout
    assert snapshot(directory / DB) == before


def test_store_not_writable_in_a_writable_directory(store: Path, shared_dir: Path, unprivileged) -> None:
    read_only_copy(store, shared_dir, 0o777)
    read_only_cli_works(unprivileged, shared_dir)


def test_store_not_writable_in_a_read_only_directory_while_a_writer_has_it_open(store: Path, shared_dir: Path,
                                                                              unprivileged) -> None:
    writer = read_only_copy(store, shared_dir, 0o555, keep_open=True)
    try:
        read_only_cli_works(unprivileged, shared_dir)
    finally:
        writer.close()


def test_the_demo_refuses_a_store_not_writable_in_one_line_before_saying_anything(store: Path, shared_dir: Path,
                                                                                 unprivileged) -> None:
    # It said "completed: audit, approve, resume to the end" first, which read as success.
    read_only_copy(store, shared_dir, 0o777)
    before = snapshot(shared_dir / DB)
    result = as_other_user(unprivileged, shared_dir, "demo", "--no-console")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"Error: {shared_dir / DB} is read-only ({shared_dir / DB} (or its directory) is not writable by this user); "
        "the demo records the runs it makes, so it needs a store it can write"]
    assert snapshot(shared_dir / DB) == before


def test_store_not_writable_in_a_read_only_directory(store: Path, shared_dir: Path, unprivileged) -> None:
    read_only_copy(store, shared_dir, 0o555)
    assert sorted(p.name for p in shared_dir.iterdir()) == [DB]
    read_only_cli_works(unprivileged, shared_dir)


# ---- a full disk ----------------------------------------------------------------------------------


def fill_up(rt: Runtime) -> None:
    """Let the store grow by two pages at most (as a full disk would)."""
    pages = rt.store.conn.execute("PRAGMA page_count").fetchone()[0]
    assert rt.store.conn.execute(f"PRAGMA max_page_count = {pages + 2}").fetchone()[0] == pages + 2


def big_output_flow() -> Workflow:
    wf = Workflow("big")
    wf.step(name="small")(lambda ctx: {"n": ctx.input["n"]})
    wf.step(name="large")(lambda ctx: "x" * ctx.results["small"]["n"])
    return wf


@pytest.mark.parametrize("when", ["start", "step-boundary", "approve", "respond", "fork"])
def test_full_disk_is_a_clear_error_and_loses_nothing(store: Path, when: str) -> None:
    big = "x" * 1_000_000
    with Runtime(str(store), [big_output_flow(), *app_workflows()], create=False) as rt:
        with Runtime(str(store), app_workflows(), create=False, id_factory=ids("waiting0")) as other:
            other.start("ask")
        committed = {r.run_id: rt.get(r.run_id) for r in rt.list()}
        before = snapshot(store)
        fill_up(rt)
        with pytest.raises(StoreError) as full:
            if when == "start":
                rt.start("simple", {"big": big})
            elif when == "step-boundary":
                rt.start("big", {"n": 1_000_000})
            elif when == "approve":
                rt.approve("paused00", by="ana", output={"big": big})
            elif when == "respond":
                rt.respond("waiting0", big, by="ana")
            else:
                rt.fork("done0000", "only", input={"big": big})
        message = str(full.value)
        assert "full" in message and "\n" not in message
        for rid, run in committed.items():
            assert rt.get(rid) == run
        if when == "step-boundary":  # the run and its first step were committed before the output
            (new,) = {r.run_id for r in rt.list()} - set(committed)
            assert rt.get(new).tasks[0].output == {"n": 1_000_000}
            assert not rt.get(new).tasks[1].has_output
        else:
            assert snapshot(store) == before
        assert rt.get("paused00").pending.decision is None
        assert rt.get("waiting0").pending.decision is None
    with Runtime(str(store), app_workflows(), create=False) as rt:  # reopens cleanly, without the limit
        assert rt.store.conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for rid, run in committed.items():
            assert rt.get(rid) == run
        rid = rt.start("simple", {"big": big})
        assert rt.get(rid).status == RunStatus.COMPLETED
        assert rt.step_output(rid, "only") == {"big": big}
