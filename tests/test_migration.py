"""Stores made by earlier releases open, migrate in place to the current schema, and their runs
behave: tests/data/store_v2.db was made by relaypoint 0.1.0 (schema version 2; see
tests/data/make_store_v2.py), with the workflows of tests/data/v2_workflows.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import sqlite_utils

from helpers import digest, one_line_error, relaypoint, sql
from relaypoint import encoding
from relaypoint import RefusedTransition, RunStatus, Runtime, StepStatus
from relaypoint.store import StoreReadOnly
from relaypoint.store.migrations.sqlite import MIGRATIONS, SCHEMA_VERSION
from relaypoint.store.migrations import APP_ID

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
from v2_workflows import WORKFLOWS  # noqa: E402

IDS: dict[str, str] = json.loads((DATA / "store_v2.json").read_text())
STATUS = {"completed": "completed", "failed": "failed", "awaiting_approval": "awaiting_approval",
          "approved_completed": "completed", "approved_queued": "queued", "rejected": "rejected",
          "cancelled": "cancelled", "awaiting_input": "awaiting_input", "responded_queued": "queued",
          "fork_queued": "queued", "fork_of_approved": "queued", "interrupted": "interrupted"}


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    """A copy of the version-2 store (the original is never opened by relaypoint)."""
    path = tmp_path / "store.db"
    shutil.copyfile(DATA / "store_v2.db", path)
    return path


def open_v2(path: Path) -> Runtime:
    return Runtime(str(path), WORKFLOWS, create=False)


def outputs(rt: Runtime, rid: str) -> dict[str, object]:
    return {s.name: rt.step_output(rid, s.name) for s in rt.steps(rid) if s.has_output}


def started(rt: Runtime, rid: str) -> list[str]:
    return [e.step for e in rt.events(rid) if e.kind == "step_started"]


def test_the_fixture_is_a_version_2_store_with_every_kind_of_run():
    assert sorted(IDS) == sorted(STATUS)
    assert dict(sql(DATA / "store_v2.db", "SELECT key, value FROM meta"))["schema_version"] == "2"


def test_a_version_2_store_migrates_in_place_in_one_step(v2):
    before = {"outputs": sql(v2, "SELECT run_id, position, output FROM steps WHERE output IS NOT NULL "
                                 "ORDER BY run_id, position"),
              "steps": sql(v2, "SELECT run_id, position, name, status, attempts, idempotency_key FROM steps "
                               "ORDER BY run_id, position"),
              "checkpoints": sql(v2, "SELECT checkpoint_id, position, kind, decision FROM checkpoints ORDER BY 1"),
              "events": sql(v2, "SELECT count(*) FROM events"),
              "inputs": sql(v2, "SELECT run_id, input FROM runs ORDER BY run_id"),
              "definitions": sql(v2, "SELECT run_id, fingerprint, definition FROM runs ORDER BY run_id")}
    with open_v2(v2) as rt:
        assert rt.counts() == {s: list(STATUS.values()).count(s) for s in set(STATUS.values())}
    assert dict(sql(v2, "SELECT key, value FROM meta"))["schema_version"] == str(SCHEMA_VERSION) == "6"
    assert sql(v2, "SELECT run_id, seq, value FROM outputs ORDER BY run_id, seq") == before["outputs"]
    assert sql(v2, "SELECT run_id, seq, name, status, attempts, idempotency_key FROM steps "
                   "ORDER BY run_id, seq") == before["steps"]
    assert sql(v2, "SELECT DISTINCT iteration, agent, parent_seq FROM steps") == [(1, None, None)]
    assert sql(v2, "SELECT checkpoint_id, seq, kind, decision FROM checkpoints ORDER BY 1") == before["checkpoints"]
    assert sql(v2, "SELECT count(*) FROM events") == before["events"]
    assert "output" not in {c for (_, c, *_) in sql(v2, "PRAGMA table_info(steps)")}
    # the input and the definition left the runs row for their own tables (one row per definition)
    assert sql(v2, "SELECT run_id, input FROM run_inputs ORDER BY run_id") == before["inputs"]
    assert sql(v2, "SELECT run_id, fingerprint, definition FROM runs LEFT JOIN definitions USING (fingerprint) "
                   "ORDER BY run_id") == before["definitions"]
    assert sql(v2, "SELECT count(*) FROM definitions") == [(len({f for _, f, _ in before["definitions"]}),)]
    assert not {"input", "definition"} & {c for (_, c, *_) in sql(v2, "PRAGMA table_info(runs)")}
    assert {n for (n,) in sql(v2, "SELECT name FROM sqlite_master WHERE tbl_name = 'runs' AND sql IS NOT NULL")} == {
        "runs", "runs_by_created", "runs_by_status", "runs_by_workflow", "runs_by_parent", "runs_by_fingerprint",
        "run_counts_insert", "run_counts_delete", "run_counts_update"}
    assert dict(sql(v2, "SELECT run_id, suspect_deaths FROM runs WHERE suspect_deaths > 0")) == {
        IDS["interrupted"]: 1}  # its owner died while executing it alone
    assert sql(v2, "PRAGMA integrity_check") == [("ok",)]
    assert sql(v2, "PRAGMA foreign_key_check") == []


def test_migrate_upgrades_a_version_2_store_and_then_finds_it_current(v2):
    def migrate() -> str:
        done = relaypoint(v2.parent, "migrate", db=str(v2))
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout

    assert migrate() == f"upgraded {v2} from store schema version 2 to 6\n"
    assert dict(sql(v2, "SELECT key, value FROM meta"))["schema_version"] == "6"
    assert migrate() == f"{v2} is at store schema version 6; nothing to upgrade\n"


def test_pauses_open_at_the_upgrade_count_as_announced_and_new_ones_are_announced_once(v2):
    open_pauses = "SELECT checkpoint_id FROM checkpoints WHERE kind IN ('approval', 'input') AND decision IS NULL"
    before = sql(v2, open_pauses)
    with open_v2(v2) as rt:
        assert sorted(p.run_id for p in rt.pending_decisions()) == sorted([IDS["awaiting_approval"],
                                                                           IDS["awaiting_input"]])
        # the relaypoint before may have announced them (a worker's --on-pause): never twice
        until = rt.clock() + timedelta(seconds=60)
        assert rt.announce_pauses(10, until) == []
        new = rt.start("gated", {"topic": "after the upgrade"})
        assert [p.run_id for p in rt.announce_pauses(10, until)] == [new]
        assert rt.announce_pauses(10, until) == []
    assert sql(v2, f"{open_pauses} AND announced_at IS NOT NULL AND run_id <> ?", new) == before != []
    assert sql(v2, "SELECT count(*) FROM checkpoints WHERE announced_at IS NOT NULL AND (kind NOT IN "
                   "('approval', 'input', 'orphan') OR decision IS NOT NULL)") == [(0,)]


UPGRADE_REFUSED = ("{path} has store schema version 2 and needs a one-time upgrade to version 6, which writes to it; "
                   "open it once as a user who can write it, or copy it somewhere writable")


def test_a_version_2_store_opened_read_only_asks_for_the_upgrade_and_is_left_unchanged(v2):
    before = digest(v2)
    with pytest.raises(StoreReadOnly) as refused:
        Runtime(str(v2), WORKFLOWS, create=False, readonly=True)
    assert str(refused.value) == UPGRADE_REFUSED.format(path=v2)
    line = one_line_error(relaypoint(v2.parent, "console", "--read-only", db=str(v2)))
    assert line == "Error: " + UPGRADE_REFUSED.format(path=v2)
    assert digest(v2) == before
    assert not Path(f"{v2}-wal").exists() or Path(f"{v2}-wal").stat().st_size == 0  # nothing written beside it


@contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """``path`` as this user cannot write it: mode 0444, or for root (whom modes do not stop) the
    immutable attribute."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o600)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("root, and this file system has no immutable attribute (chattr +i)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_version_2_store_this_user_cannot_write_asks_for_the_upgrade_and_is_left_unchanged(v2):
    before = digest(v2)
    with unwritable(v2):
        assert not os.access(v2, os.W_OK)  # precondition: what the store checks
        line = one_line_error(relaypoint(v2.parent, "list", db=str(v2)))
        assert line == "Error: " + UPGRADE_REFUSED.format(path=v2)
    assert digest(v2) == before
    with open_v2(v2) as rt:  # opened once by a user who can write it, it upgrades
        assert rt.counts()
    assert dict(sql(v2, "SELECT key, value FROM meta"))["schema_version"] == str(SCHEMA_VERSION)


@pytest.mark.parametrize("label", sorted(IDS))
def test_every_run_reads_after_the_migration(v2, label):
    rid = IDS[label]
    with open_v2(v2) as rt:
        run = rt.get(rid)
        assert run.status == STATUS[label]
        assert [s.seq for s in run.tasks] == list(range(len(run.tasks))) and run.tasks
        assert rt.events(rid)[0].kind in ("run_started", "forked")
        assert rid in [r.run_id for r in rt.list(limit=100)]
    for args in (["show", rid], ["show", rid, "--json"], ["events", rid], ["list"]):
        shown = relaypoint(v2.parent, *args, db=str(v2))
        assert shown.returncode == 0 and "Traceback" not in shown.stderr, (args, shown.stderr)
    assert json.loads(relaypoint(v2.parent, "show", rid, "--json", db=str(v2)).stdout)["status"] == STATUS[label]


def test_the_interrupted_run_resumes_from_b_without_re_running_a(v2):
    rid = IDS["interrupted"]
    with open_v2(v2) as rt:
        a_before = rt.steps(rid)[0]
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert outputs(rt, rid) == {"a": {"a": 3}, "b": {"b": 4}, "c": {"c": 40}}
        assert rt.steps(rid)[0] == a_before
        assert started(rt, rid) == ["a", "b", "b", "c"]  # a once, before the kill; b killed, then again
        assert rt.steps(rid)[1].attempts == 2


def test_the_gated_run_is_approved_then_completes(v2):
    rid = IDS["awaiting_approval"]
    with open_v2(v2) as rt:
        rt.approve(rid, by="erin")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert outputs(rt, rid)["publish"] == {"published": "draft of pending"}


def test_the_gated_run_can_be_rejected(v2):
    rid = IDS["awaiting_approval"]
    with open_v2(v2) as rt:
        rt.reject(rid, "not this one", by="erin")
        assert rt.get(rid).status == RunStatus.REJECTED
        assert rt.get(rid).tasks[-1].status == StepStatus.CANCELLED


def test_the_approved_queued_run_continues_with_the_edited_output(v2):
    rid = IDS["approved_queued"]
    with open_v2(v2) as rt:
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert outputs(rt, rid)["publish"] == {"published": "edited"}
        assert started(rt, rid) == ["draft", "review", "publish"]


def test_the_input_run_is_answered_then_completes(v2):
    rid = IDS["awaiting_input"]
    with open_v2(v2) as rt:
        rt.respond(rid, "red", by="erin")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert outputs(rt, rid) == {"question": {"answer": "red"}, "report": {"report": "red"}}


def test_the_answered_run_completes_with_the_recorded_answer(v2):
    rid = IDS["responded_queued"]
    with open_v2(v2) as rt:
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert outputs(rt, rid) == {"question": {"answer": "blue"}, "report": {"report": "blue"}}


def test_the_queued_fork_runs_only_from_its_fork_point(v2):
    rid = IDS["fork_queued"]  # forked from b of the completed run (n=1), with the input n=5
    with open_v2(v2) as rt:
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert outputs(rt, rid) == {"a": {"a": 1}, "b": {"b": 2}, "c": {"c": 20}}  # a copied, never re-run
        assert started(rt, rid) == ["b", "c"]


def test_the_fork_of_an_approved_run_keeps_its_inherited_approval(v2):
    rid = IDS["fork_of_approved"]
    with open_v2(v2) as rt:
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert outputs(rt, rid)["publish"] == {"published": "draft of approved"}
        assert started(rt, rid) == ["publish"]


def test_the_failed_run_retries_its_failed_step(v2):
    rid = IDS["failed"]
    with open_v2(v2) as rt:
        assert rt.resume(rid) == RunStatus.FAILED  # its input still asks b to fail
        b = rt.steps(rid)[1]
        assert (b.status, b.attempts, b.error) == (StepStatus.FAILED, 2, "RuntimeError: b failed on purpose")
        assert started(rt, rid) == ["a", "b", "b"]


@pytest.mark.parametrize("label", ["completed", "approved_completed", "interrupted"])
def test_migrated_runs_fork_and_the_fork_completes(v2, label):
    rid = IDS[label]
    with open_v2(v2) as rt:
        last = rt.steps(rid)[-1].name
        if label == "interrupted":
            rt.resume(rid)
        child = rt.fork(rid, last)
        assert rt.resume(child) == RunStatus.COMPLETED
        assert outputs(rt, child) == outputs(rt, rid)
        assert started(rt, child) == [last]


@pytest.mark.parametrize("label", ["rejected", "cancelled", "completed"])
def test_ended_runs_are_not_resumed(v2, label):
    with open_v2(v2) as rt, pytest.raises(RefusedTransition):
        rt.resume(IDS[label])


# ---- a version-1 store ------------------------------------------------------------------------------


def version_1_store(path: Path) -> None:
    """A store as schema version 1 left it: a completed run with outputs, a run paused at an
    approval gate, and a run whose executor died (its event charging the death)."""
    db = sqlite_utils.Database(str(path))
    with db.conn:
        db["meta"].insert_all([{"key": "app", "value": APP_ID}, {"key": "schema_version", "value": "1"}], pk="key")
        for statement in MIGRATIONS[0]:
            db.conn.execute(statement)
        chain = WORKFLOWS[0]
        for rid, status in (("done", "completed"), ("dead", "interrupted")):
            db["runs"].insert({"run_id": rid, "workflow": "chain", "status": status, "input": '{"n": 7}',
                               "definition": encoding.dumps(chain.definition()), "fingerprint": chain.fingerprint(),
                               "created_at": "2031-01-01T12:00:00.000Z",
                               "updated_at": "2031-01-01T12:00:09.000Z", "steps_done": 3 if rid == "done" else 1,
                               "steps_total": 3, "current_step": None if rid == "done" else "b"})
            for i, name in enumerate("abc"):
                ended = rid == "done" or i == 0
                db["steps"].insert({"run_id": rid, "position": i, "name": name,
                                    "status": "completed" if ended else ("interrupted" if i == 1 else "pending"),
                                    "attempts": 1 if i < 2 or rid == "done" else 0, "options": "{}",
                                    "output": json.dumps({name: i}) if ended else None,
                                    "idempotency_key": f"{rid}/{name}"})
            db["checkpoints"].insert({"run_id": rid, "position": 0, "step": "a", "kind": "start",
                                      "created_at": "2031-01-01T12:00:00.000Z"})
        db["events"].insert_all([
            {"run_id": "dead", "at": "2031-01-01T12:00:05.000Z", "kind": "interruption_detected", "step": "b",
             "detail": json.dumps({"cause": "owner died", "suspect": True})},
            {"run_id": "dead", "at": "2031-01-01T12:00:06.000Z", "kind": "interruption_detected", "step": "b",
             "detail": json.dumps({"cause": "owner died", "suspect": False})},
            {"run_id": "dead", "at": "2031-01-01T12:00:07.000Z", "kind": "interruption_detected", "step": "b",
             "detail": "{damaged"}])
    db.conn.close()


def test_a_version_1_store_migrates_to_the_current_schema_and_its_runs_behave(tmp_path):
    path = tmp_path / "store.db"
    version_1_store(path)
    with open_v2(path) as rt:
        assert rt.counts() == {"completed": 1, "interrupted": 1}
        assert outputs(rt, "done") == {"a": {"a": 0}, "b": {"b": 1}, "c": {"c": 2}}
        assert rt.store.run("dead").suspect_deaths == 1  # the suspect death only; damage is never charged
        assert rt.resume("dead") == RunStatus.COMPLETED
        assert outputs(rt, "dead") == {"a": {"a": 0}, "b": {"b": 1}, "c": {"c": 10}}  # a kept, never re-run
        assert [e.step for e in rt.events("dead") if e.kind == "step_started"] == ["b", "c"]
    assert dict(sql(path, "SELECT key, value FROM meta"))["schema_version"] == str(SCHEMA_VERSION)
    assert "lease_pid_start" in {c for (_, c, *_) in sql(path, "PRAGMA table_info(runs)")}
    assert sql(path, "SELECT run_id, input FROM run_inputs ORDER BY run_id") == [
        ("dead", '{"n": 7}'), ("done", '{"n": 7}')]
    assert sql(path, "SELECT count(*) FROM definitions") == [(1,)]
    assert sql(path, "PRAGMA integrity_check") == [("ok",)]
    assert sql(path, "PRAGMA foreign_key_check") == []
