"""The store file: creation, permissions, WAL, schema version, and refusing files that are not
relaypoint stores without changing a byte of them."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import stat
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest

from helpers import DB, Flow, digest, runtime, sidecars, sql
from test_store_contract import paused_runs, stage
from relaypoint import RunStatus, Runtime, StepStatus, StoreError
from relaypoint.store import (Change, Lookup, NewCheckpoint, NewEvent, NewRun, NewStep, RunUpdate, StepEnd, StepStart, StoreMissing,
                              open_store)
from relaypoint.store.migrations.sqlite import MIGRATIONS, SCHEMA_VERSION
from relaypoint.store.migrations import APP_ID
from relaypoint.store.sqlite import SqliteStore


def test_a_new_store_is_owner_only_in_wal_mode_with_its_schema_version(tmp_path):
    path = tmp_path / DB
    with runtime(tmp_path, Flow("a")) as rt:
        rt.start("flow")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / f"{DB}-wal").stat().st_mode) == 0o600
    assert sql(path, "PRAGMA journal_mode") == [("wal",)]
    assert dict(sql(path, "SELECT key, value FROM meta")) == {"app": APP_ID, "schema_version": str(SCHEMA_VERSION)}
    tables = {name for (name,) in sql(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"meta", "runs", "steps", "checkpoints", "events"} <= tables


def test_a_store_reopens_with_its_runs(tmp_path):
    flow = Flow("a", ("b", {"approval": True}))
    with runtime(tmp_path, flow) as rt:
        rid = rt.start("flow", {"k": 1})
        before = rt.get(rid)
    meta = sql(tmp_path / DB, "SELECT * FROM meta")
    with Runtime(str(tmp_path / DB), create=False) as again:
        assert again.get(rid) == before
        again.approve(rid)
    with runtime(tmp_path, flow) as third:
        assert third.resume(rid) == RunStatus.COMPLETED
    assert sql(tmp_path / DB, "SELECT * FROM meta") == meta


def foreign_sqlite(path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for s in statements:
            conn.execute(s)
    conn.close()


def refused_untouched(path, match: str, **options) -> StoreError:
    """Assert opening ``path`` as a store fails with ``match`` and leaves its bytes (and
    directory) exactly as they were."""
    before, names = digest(path), sorted(p.name for p in path.parent.iterdir())
    with pytest.raises(StoreError, match=match) as refused:
        Runtime(str(path), **options)
    assert digest(path) == before
    assert sorted(p.name for p in path.parent.iterdir()) == names
    assert sidecars(path) == []
    assert "\n" not in str(refused.value)
    return refused.value


@pytest.mark.parametrize("create", [True, False])
def test_a_foreign_sqlite_file_is_refused_and_left_unchanged(tmp_path, create):
    path = tmp_path / "notes.db"
    foreign_sqlite(path, "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('keep me')")
    refused_untouched(path, "not a relaypoint store", create=create)
    assert sql(path, "SELECT body FROM notes") == [("keep me",)]


def test_a_sqlite_file_with_a_meta_table_of_another_app_is_refused(tmp_path):
    path = tmp_path / "other.db"
    foreign_sqlite(path, "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)",
                   "INSERT INTO meta VALUES ('app', 'something-else')")
    refused_untouched(path, "not a relaypoint store")


@pytest.mark.parametrize("content", [
    pytest.param(random.Random(7).randbytes(8192), id="random-bytes"),
    pytest.param(b"hello, these are my notes\n" * 40, id="text"),
    pytest.param(b"SQLite format 3\x00" + random.Random(8).randbytes(4080), id="sqlite-header-then-garbage"),
])
def test_a_file_that_is_not_sqlite_is_refused_and_left_unchanged(tmp_path, content):
    path = tmp_path / "data.bin"
    path.write_bytes(content)
    refused_untouched(path, "not a readable SQLite database|not a relaypoint store")


@pytest.mark.parametrize("content", [b"\n", b"x"])
def test_a_one_byte_file_is_refused_and_left_unchanged(tmp_path, content):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    refused_untouched(path, "not a readable SQLite database|not a relaypoint store", create=False)


def _store_with_meta(tmp_path, **meta: str):
    path = tmp_path / DB
    SqliteStore(path, create=True).close()
    for key, value in meta.items():
        sql(path, "UPDATE meta SET value = ? WHERE key = ?", value, key)
    assert sidecars(path) == []  # the last close checkpointed and removed the WAL
    return path


def test_a_store_from_a_newer_version_is_refused_and_left_unchanged(tmp_path):
    path = _store_with_meta(tmp_path, schema_version="99")
    error = refused_untouched(path, "newer")
    assert "schema version 99" in str(error) and "upgrade relaypoint" in str(error)


@pytest.mark.parametrize("version", ["one", "-1", "0", "", "1.5"])
def test_a_store_with_a_damaged_schema_version_is_refused(tmp_path, version):
    path = _store_with_meta(tmp_path, schema_version=version)
    refused_untouched(path, "unreadable schema version")


def test_a_store_without_its_schema_version_is_refused(tmp_path):
    path = _store_with_meta(tmp_path)
    sql(path, "DELETE FROM meta WHERE key = 'schema_version'")
    refused_untouched(path, "unreadable schema version None")


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_store_whose_tables_do_not_match_its_version_is_refused_and_left_unchanged(tmp_path, version):
    path = _store_with_meta(tmp_path, schema_version=version)  # its tables are already the current version's
    refused_untouched(path, f"says schema version {version} but its tables do not match")


def test_a_missing_file_without_create_is_refused_and_not_created(tmp_path):
    path = tmp_path / "absent.db"
    with pytest.raises(StoreError, match=f"no relaypoint store at {path}"):
        Runtime(str(path), create=False)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError, match="is a directory"):
        Runtime(str(tmp_path / "dir.db"))


def test_a_store_in_a_missing_directory_cannot_be_created_and_is_not_offered_to_migrate(tmp_path):
    # Opening it said to make it with `relaypoint migrate`, which then failed: "No such file or directory".
    where = tmp_path / "no" / "such"
    for create in (True, False):
        with pytest.raises(StoreMissing, match=f"^no relaypoint store at {where / DB}: its directory {where} does "
                                               "not exist; make the directory first"):
            Runtime(str(where / DB), create=create)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_store_reads_but_records_nothing(tmp_path):
    with runtime(tmp_path, Flow(("a", {"approval": True}))) as rt:
        rid = rt.start("flow")
    before = digest(tmp_path / DB)
    with Runtime(str(tmp_path / DB), readonly=True) as ro:
        assert [r.run_id for r in ro.list()] == [rid]
        assert ro.get(rid).status == RunStatus.AWAITING_APPROVAL
        with pytest.raises(StoreError, match="read-only"):
            ro.approve(rid)
    assert digest(tmp_path / DB) == before
    with Runtime(str(tmp_path / DB)) as rw:
        assert rw.get(rid).status == RunStatus.AWAITING_APPROVAL


@pytest.mark.parametrize("name", ["what?.db", "a#b.db", "100%.db", "what?mode=rwc.db", "sp ace%3F.db"])
def test_a_store_whose_name_holds_uri_characters_opens_read_only_as_itself(tmp_path, name):
    path = tmp_path / name
    with Runtime(str(path), [Flow(("a", {"approval": True})).wf]) as rt:
        rid = rt.start("flow")
    before, files = digest(path), sorted(tmp_path.iterdir())
    for given in (str(path), f"sqlite:///{quote(str(path), safe='/')}"):
        with Runtime(given, readonly=True, create=False) as ro:
            assert [r.run_id for r in ro.list()] == [rid]
            assert ro.store.readonly_reason == "opened read-only"
    assert digest(path) == before
    assert [f for f in sorted(tmp_path.iterdir()) if f.name not in (f"{name}-wal", f"{name}-shm")] == files


def _version_1_store(path) -> None:
    """A store as relaypoint's schema version 1 left it, with runs in several statuses."""
    import sqlite_utils

    db = sqlite_utils.Database(str(path))
    db["meta"].insert_all([{"key": "app", "value": APP_ID}, {"key": "schema_version", "value": "1"}], pk="key")
    for statement in MIGRATIONS[0]:
        db.conn.execute(statement)
    for i, status in enumerate(["completed", "completed", "failed", "awaiting_approval"]):
        db["runs"].insert({"run_id": f"{i:016x}", "workflow": "flow", "status": status, "input": "{}",
                           "created_at": f"2031-01-01T12:00:0{i}.000Z", "updated_at": "2031-01-01T12:00:09.000Z",
                           "steps_done": 0, "steps_total": 0})
    db.conn.close()


def test_a_version_1_store_is_migrated_in_place_with_its_counts(tmp_path):
    path = tmp_path / DB
    _version_1_store(path)
    with Runtime(str(path), create=False) as rt:
        assert rt.counts() == {"completed": 2, "failed": 1, "awaiting_approval": 1}
        assert len(rt.list()) == 4
    assert dict(sql(path, "SELECT key, value FROM meta"))["schema_version"] == str(SCHEMA_VERSION)
    assert "lease_pid_start" in {c for (_, c, *_) in sql(path, "PRAGMA table_info(runs)")}


def test_counts_by_status_follow_every_change_without_counting_the_runs_table(tmp_path):
    path = tmp_path / DB
    flow = Flow("a", ("b", {"approval": True}), "c")
    with runtime(tmp_path, flow) as rt:
        rids = [rt.start("flow") for _ in range(4)]
        rt.approve(rids[0])
        rt.resume(rids[0])
        rt.reject(rids[1], "no")
        rt.cancel(rids[2])
        rt.fork(rids[0], "c")
        rt.delete(rids[2])
        expected = dict(sql(path, "SELECT status, count(*) FROM runs GROUP BY status"))
        trace: list[str] = []
        rt.store.trace(trace.append)
        assert rt.counts() == expected == {"completed": 1, "rejected": 1, "awaiting_approval": 1, "queued": 1}
    assert not [s for s in trace if "FROM runs" in s]


# ---- durability and the cost of a boundary ----------------------------------------------------------

T0 = datetime(2031, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("durability", "level"), [("full", 2), ("normal", 1)])
def test_durability_sets_sqlite_synchronous(tmp_path, durability, level):
    with open_store(str(tmp_path / DB), create=True, durability=durability) as store:
        assert store.conn.execute("PRAGMA synchronous").fetchone() == (level,)
        assert store.conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    with open_store(str(tmp_path / DB)) as default:
        assert default.conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL unless asked otherwise


def _long_run(store, run_id: str, steps: int) -> None:
    stage(store, run_id, new=NewRun(run_id=run_id, workflow="flow", status=RunStatus.RUNNING, input="{}",
                                    definition="[]", fingerprint="", created_at=T0, steps_total=steps),
          inserted=[NewStep(seq=i, name=f"s{i}", idempotency_key=f"{run_id}/s{i}") for i in range(steps)])
    for i in range(steps - 1):  # every step but the last completed, each with a 1 KB output
        store.commit(_boundary(run_id, i))


def _boundary(run_id: str, seq: int) -> Change:
    return Change(run_id=run_id, at=T0, ended=[StepEnd(seq=seq, status=StepStatus.COMPLETED)],
                  outputs={seq: '"' + "x" * 1000 + '"'}, started=StepStart(seq + 1),
                  checkpoints=[NewCheckpoint(run_id=run_id, kind="boundary", seq=seq + 1, step=f"s{seq + 1}", at=T0,
                                             state="{}")],
                  run=RunUpdate(steps_done=seq + 1), events=[NewEvent("step_completed"), NewEvent("step_started")])


def test_a_boundary_costs_the_same_statements_and_rows_at_step_10_and_at_step_5000(tmp_path):
    with open_store(str(tmp_path / DB), create=True) as store:
        _long_run(store, "short", 10)
        _long_run(store, "long", 5000)
        costs = []
        for run_id, seq in (("short", 8), ("long", 4998)):
            stage(store, run_id, marked={seq + 1: StepStatus.PENDING, seq: StepStatus.RUNNING})
            trace: list[str] = []
            rows = store.rows_read
            store.trace(trace.append)
            store.commit(_boundary(run_id, seq))
            store.trace(None)
            costs.append(([re.sub(r"\d+", "N", t.replace(run_id, "RUN")) for t in trace], store.rows_read - rows))
        assert costs[0] == costs[1]
        assert costs[0][1] == 0 and 6 <= len(costs[0][0]) <= 12
        assert sum(t.startswith(("BEGIN", "COMMIT")) for t in costs[0][0]) == 2  # one transaction


def test_listing_and_the_chain_never_read_an_output(tmp_path):
    with open_store(str(tmp_path / DB), create=True) as store:
        _long_run(store, "r", 20)
        trace: list[str] = []
        store.trace(trace.append)
        store.list_runs(search="r")
        store.list_runs(status="running")
        assert not [t for t in trace if re.search(r"\b(outputs|steps)\b", t)]
        store.steps("r")
        store.step("r", name="s3")
        assert not [t for t in trace if "value" in t]  # has_output looks at the outputs' key, not the value


def test_outputs_take_little_more_room_than_their_bytes(tmp_path):
    path = tmp_path / DB
    with open_store(str(path), create=True) as store:
        _long_run(store, "big", 1000)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    outputs = 999 * 1002
    room = sum(size for (size,) in sql(path, "SELECT pgsize FROM dbstat WHERE name IN ('outputs', "
                                              "'sqlite_autoindex_outputs_1')"))
    assert room <= 1.3 * outputs


def test_the_runs_row_stays_small_whatever_the_definition_and_the_input(tmp_path):
    # Every boundary rewrites the runs row: a 10,000-step definition or a 10 KB input kept in it
    # would be rewritten (and read) at every step.
    path = tmp_path / DB
    definition = json.dumps([{"name": f"s{i}", "approval": False, "retries": 0} for i in range(10_000)])
    with open_store(str(path), create=True) as store:
        with store.transaction():
            for run_id in ("one", "two"):
                stage(store, run_id, new=NewRun(run_id=run_id, workflow="flow", status=RunStatus.RUNNING,
                                                input=json.dumps({"big": "x" * 10_000}), definition=definition,
                                                fingerprint="f" * 16, created_at=T0, steps_total=10_000))
        assert store.run_document("two", "definition") == json.loads(definition)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert sql(path, "SELECT sum(pgsize) FROM dbstat WHERE name = 'runs'") == [(4096,)]  # one page, no overflow
    assert sql(path, "SELECT count(*) FROM definitions") == [(1,)]  # shared by the runs of one definition


def test_a_boundary_writes_a_few_pages_whatever_the_length_of_the_run(tmp_path):
    # Each page a commit changes is written to the WAL (and synced at durability full): a boundary
    # touches the runs row, two step rows, the outputs, a checkpoint and two events, each table
    # with at most one index to update (pauses and deadlines live in partial indexes).
    path = tmp_path / DB
    with open_store(str(path), create=True, durability="normal") as store:
        store.conn.execute("PRAGMA wal_autocheckpoint=0")
        _long_run(store, "warm", 500)
        frames = []
        measured = 40  # boundaries: a page split every few boundaries, averaged over several
        for run_id, steps in (("short", measured + 2), ("long", 5000)):
            _long_run(store, run_id, steps - measured)
            stage(store, run_id, inserted=[NewStep(seq=i, name=f"s{i}", idempotency_key=f"{run_id}/s{i}")
                                           for i in range(steps - measured, steps)])
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            for seq in range(steps - measured - 1, steps - 1):
                store.commit(_boundary(run_id, seq))
            frames.append(((tmp_path / f"{DB}-wal").stat().st_size - 32) / (4096 + 24) / measured)
    assert max(frames) <= 10, frames  # 9 pages, and a page split of the 1 KB outputs every few boundaries


def test_the_announcement_poll_is_one_read_of_the_unannounced_pauses_index(tmp_path):
    with open_store(str(tmp_path / DB), create=True) as store:
        paused_runs(store, 300)
        trace: list[str] = []
        store.trace(trace.append)
        assert store.claim_announcements(10, T0, T0 + timedelta(seconds=30)) == []
        store.trace(None)
        [read] = trace  # no BEGIN, no write
        plan = " | ".join(r[3] for r in store.conn.execute(f"EXPLAIN QUERY PLAN {read}"))
        # the index's rows in order (none here: nothing else is read), each one's run by its key
        assert plan.startswith("SCAN c USING INDEX checkpoints_unannounced | SEARCH r USING INDEX "
                               "sqlite_autoindex_runs_1 (run_id=?)"), plan
        assert "runs_by_status" not in plan and "TEMP B-TREE" not in plan, plan


def test_pause_and_deadline_reads_use_their_partial_indexes(tmp_path):
    with open_store(str(tmp_path / DB), create=True) as store:
        trace: list[str] = []
        store.trace(trace.append)
        for lookup in (Lookup.PENDING, Lookup.LAST_PAUSE, Lookup.LATEST):
            store.checkpoint("r", lookup)
        store.checkpoint("r", Lookup.APPROVAL, "a")
        store.responses("r", 0)
        store.checkpoints(due=T0)
        store.trace(None)
        plans = [" | ".join(r[3] for r in store.conn.execute(f"EXPLAIN QUERY PLAN {s}")) for s in trace]
    assert [p.split(" USING ")[1].split()[1] for p in plans] == [
        "checkpoints_paused", "checkpoints_paused", "checkpoints_by_run", "checkpoints_paused", "checkpoints_paused",
        "checkpoints_due"], plans
