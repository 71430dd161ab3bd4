"""What only the PostgreSQL backend has: its URL, connection failures in one line, its schema
namespace and version, the durability setting, a lost connection, and the plans of the console's
listing queries. The backend-neutral contract is in test_store_contract.py (``store_url``)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relaypoint import Runtime, Workflow
from relaypoint.status import AnnouncementOutcome, RunStatus
from relaypoint.store import (BackendUnavailable, InvalidStoreURL, NewCheckpoint, NewRun, RunUpdate, StoreDenied, StoreMissing,
                              StoreNewer, StoreUnreachable, open_store)
from relaypoint.background import spawn_resume
from relaypoint.store.url import log_stem, parse, shown, store_name

from conftest import POSTGRES_URL, drop_schema, postgres_server
from helpers import one_line_error, relaypoint
from test_store_contract import add_run, at, lease, paused_runs, stage

psycopg = pytest.importorskip("psycopg")


@pytest.fixture
def url(postgres_schema: str) -> str:
    return f"{postgres_server()}?schema={postgres_schema}"


def server(sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


# ---- the URL ---------------------------------------------------------------------------------------


def test_a_postgresql_url_names_a_schema_relaypoint_by_default():
    assert parse("postgresql://app@db:5433/team") == parse("postgresql://app@db:5433/team?schema=relaypoint")
    got = parse("postgres://app:secret@db/team?schema=relay_dev")
    assert (got.backend, got.conninfo, got.schema) == ("postgres", "postgres://app:secret@db/team", "relay_dev")


@pytest.mark.parametrize("url, message", [
    ("postgresql://h/db?sslmode=require", "has query parameters sslmode, which relaypoint does not take "
                                          r"\(only schema=NAME\)"),
    ("postgresql://h/db?schema=a&schema=b", "names the schema more than once"),
    ("postgresql://h/db?schema=Relay-1", "names schema 'Relay-1'; a relaypoint schema name is lower-case"),
    ("postgresql://h/db#frag", "has a fragment"),
    ("postgresql://app:p@ss@h/db", r"^store URL 'postgresql://app:\*\*\*@h/db' has more than one '@' before its host; "
                                   "write an '@' in the user name or password as %40"),
])
def test_a_postgresql_url_with_anything_else_is_refused_in_one_line(url, message):
    with pytest.raises(InvalidStoreURL, match=message) as e:
        parse(url)
    assert "\n" not in str(e.value) and "ss@" not in str(e.value)


def test_a_url_without_a_host_reaches_the_server_named_by_pghost(postgres_schema, monkeypatch):
    # postgresql:///dbname leaves host, port and user to libpq (PG* variables, the local socket)
    server_url = psycopg.conninfo.conninfo_to_dict(POSTGRES_URL)
    monkeypatch.setenv("PGHOST", server_url.get("host") or "localhost")
    monkeypatch.setenv("PGPORT", str(server_url.get("port") or 5432))
    monkeypatch.setenv("PGUSER", server_url.get("user") or "postgres")
    url = f"postgresql:///{server_url['dbname']}?schema={postgres_schema}"
    assert parse(url).conninfo == f"postgresql:///{server_url['dbname']}"
    with open_store(url, create=True) as store:
        assert store.list_runs() == []
        assert store.where == store_name(url) == \
            f"{server_url.get('host') or 'localhost'}/{server_url['dbname']}/{postgres_schema}"
    assert server("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'runs'",
                  (postgres_schema,)) == [(1,)]


def test_a_password_in_the_url_is_never_shown_and_files_beside_the_store_have_a_place():
    url = "postgresql://bob:s3cret@db.example:5432/team?schema=relay_dev"
    assert shown(url) == "postgresql://bob:***@db.example:5432/team?schema=relay_dev"
    assert store_name(url) == "bob@db.example:5432/team/relay_dev"  # as messages name it
    assert log_stem(url) == "relaypoint-relay_dev"
    assert (shown("sqlite:////tmp/r.db"), store_name("sqlite:////tmp/r.db"), log_stem("sqlite:////tmp/r.db")) == (
        "sqlite:////tmp/r.db", "r.db", "/tmp/r.db")
    with pytest.raises(InvalidStoreURL) as e:
        parse("postgresql://bob:s3cret@db/team?sslmode=require")
    assert "s3cret" not in str(e.value) and "bob:***@db" in str(e.value)


def test_a_resume_started_in_the_background_keeps_the_url_off_its_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = "postgresql://bob:s3cret@127.0.0.1:1/team?schema=relay_dev"  # nothing listens: the child fails
    child = spawn_resume(url, "relaypoint.demo:workflows", "0123456789abcdef")
    assert child.wait(timeout=60) != 0
    assert not any("s3cret" in str(arg) for arg in child.args)
    logged = (tmp_path / "relaypoint-relay_dev.resume.log").read_text()
    assert "refused" in logged and "s3cret" not in logged


def test_the_worker_names_its_store_without_the_password(postgres_schema):
    # the test server trusts its users and ignores the password, so the worker starts and says where
    server_url = psycopg.conninfo.conninfo_to_dict(POSTGRES_URL)
    url = (f"postgresql://{server_url.get('user') or 'postgres'}:s3cret@{server_url.get('host') or 'localhost'}:"
           f"{server_url.get('port') or 5432}/{server_url['dbname']}?schema={postgres_schema}")
    open_store(url, create=True).close()
    worker = subprocess.Popen([sys.executable, "-m", "relaypoint", "--db", url, "worker", "--app",
                               "relaypoint.demo:workflows"], stderr=subprocess.PIPE, text=True)
    try:
        first = worker.stderr.readline()
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert first.startswith("worker on ") and postgres_schema in first
    assert "s3cret" not in first


def test_a_connection_lost_mid_step_leaves_the_run_interrupted_and_says_how_to_go_on(postgres_schema):
    url = f"{POSTGRES_URL}?schema={postgres_schema}"
    wf = Workflow("blip")
    rt = Runtime(url, [wf], id_factory=lambda: "blip-run")

    @wf.step
    def cut(ctx):  # an administrator (or a failover) ends the executor's session while the step runs
        if ctx.attempt == 1:
            server("SELECT pg_terminate_backend(%s)", (rt.store.conn.info.backend_pid,))
        return {"attempt": ctx.attempt}

    @wf.step
    def after(ctx):
        return ctx.results["cut"]

    with rt, pytest.raises(StoreUnreachable) as e:
        rt.start("blip")
    assert str(e.value).endswith("; run blip-run is interrupted: `relaypoint resume blip-run` continues it")
    assert "try again" not in str(e.value) and "\n" not in str(e.value)
    with Runtime(url, [wf]) as again:
        assert again.get("blip-run").status == RunStatus.INTERRUPTED  # released at once, not at lease expiry
        assert again.resume("blip-run") == RunStatus.COMPLETED
        assert again.get("blip-run").tasks[-1].output == {"attempt": 2}


def test_without_psycopg_the_url_says_what_to_install():
    code = ("import sys; sys.modules['psycopg'] = None\n"
            "from relaypoint.store import BackendUnavailable, open_store\n"
            "try:\n    open_store('postgresql://u@localhost/x')\n"
            "except BackendUnavailable as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == ("the PostgreSQL backend needs psycopg, which is not installed; "
                   "pip install 'relaypoint[postgres]'\n")
    assert issubclass(BackendUnavailable, Exception)


# ---- connection failures -----------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "relaypoint", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("db, line", [
    ("postgresql://nobody@127.0.0.1:1/x",
     "the PostgreSQL server at 127.0.0.1:1 refused the connection (is PostgreSQL running and listening there?)"),
    ("postgresql://nobody_at_all@127.0.0.1:{port}/test",
     "the PostgreSQL server at 127.0.0.1:{port} has no user 'nobody_at_all'; name an existing user in the URL "
     "(postgresql://USER@host/dbname)"),
    ("postgresql://postgres@127.0.0.1:{port}/no_such_db",
     "the PostgreSQL server at 127.0.0.1:{port} has no database 'no_such_db'; create it (createdb no_such_db) "
     "or point --db at another database"),
    ("postgresql://postgres@127.0.0.1:{port}/test?schema=relaypoint_none_here",
     "no relaypoint store at postgres@127.0.0.1:{port}/test/relaypoint_none_here; make one with"),
    ("postgresql://postgres@127.0.0.1:99999/test",
     'cannot connect to the PostgreSQL server at 127.0.0.1:99999: connection is bad: invalid port number: "99999"'),
    ("postgresql://postgres@127.0.0.1:54x/test",
     'cannot connect to the PostgreSQL server at 127.0.0.1:54x: connection is bad: invalid integer value "54x" for '
     'connection option "port"'),
    ("postgresql://postgres@127.0.0.1:{port},127.0.0.1:{port}/test?schema=relaypoint_none_here",
     "no relaypoint store at postgres@127.0.0.1:{port},127.0.0.1:{port}/test/relaypoint_none_here; make one with"),
])
def test_connection_failures_are_one_line_through_the_cli(db, line):
    postgres_server()
    port = str(psycopg.conninfo.conninfo_to_dict(POSTGRES_URL).get("port") or 5432)
    result = cli("--db", db.format(port=port), "list")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert line.format(port=port) in result.stderr


def test_connection_failures_are_store_errors():
    with pytest.raises(StoreUnreachable):
        open_store("postgresql://nobody@127.0.0.1:1/x")
    postgres_server()
    with pytest.raises(StoreDenied):
        open_store(POSTGRES_URL.replace("postgres@", "nobody_at_all@", 1))
    with pytest.raises(StoreMissing, match="has no database 'no_such_db'"):
        open_store(POSTGRES_URL.rsplit("/", 1)[0] + "/no_such_db", create=True)


def test_a_lost_connection_is_one_line_and_the_next_call_reconnects(url):
    with open_store(url, create=True) as store:
        add_run(store, "r1")
        pid = store.conn.info.backend_pid
        server("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreUnreachable, match=r"^the connection to .* was lost") as e:
            store.run("r1")
        assert "\n" not in str(e.value)
        assert store.run("r1").run_id == "r1"  # a new connection
        assert store.conn.info.backend_pid != pid


# ---- the schema --------------------------------------------------------------------------------------


def test_the_store_lives_in_its_schema_with_the_sqlite_stores_tables(url, postgres_schema):
    with open_store(url, create=True):
        pass
    tables = {r[0] for r in server("SELECT tablename FROM pg_tables WHERE schemaname = %s", (postgres_schema,))}
    assert tables == {"meta", "runs", "run_inputs", "definitions", "steps", "outputs", "checkpoints", "events", "calls",
                      "run_counts", "listeners"}  # listeners: the consoles listening (version 8)
    indexes = {r[0] for r in server("SELECT indexname FROM pg_indexes WHERE schemaname = %s", (postgres_schema,))}
    assert {"runs_by_created", "runs_by_status", "runs_by_workflow", "runs_by_parent", "runs_by_fingerprint",
            "steps_by_name", "checkpoints_by_run", "checkpoints_due", "checkpoints_paused",
            "events_by_run"} <= indexes
    types = dict(server("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                        "AND table_name = 'runs'", (postgres_schema,)))
    assert types["created_at"] == types["lease_expires_at"] == "timestamp with time zone"
    assert server(f"SELECT value FROM {postgres_schema}.meta WHERE key = 'schema_version'") == [("11",)]
    assert server("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'runs'") == [(0,)]


def test_a_newer_schema_is_refused(url, postgres_schema):
    with open_store(url, create=True) as store:
        add_run(store, "r1")
    server(f"UPDATE {postgres_schema}.meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreNewer, match=r"has store schema version 99, newer than this relaypoint understands "
                                         r"\(11\); upgrade relaypoint to open it$"):
        open_store(url)
    assert server(f"SELECT run_id FROM {postgres_schema}.runs") == [("r1",)]  # untouched


def store_at_version(schema: str, version: int) -> psycopg.Connection:
    """A new store in ``schema`` as relaypoint's schema ``version`` left it, made in one committed
    transaction; returns an autocommit connection to it (for rows of that version's shape)."""
    from relaypoint.store.migrations.postgres import MIGRATIONS

    server(f"CREATE SCHEMA {schema}")
    conn = psycopg.connect(POSTGRES_URL, autocommit=True, options=f"-c search_path={schema}")
    with conn.transaction():
        for migrate in MIGRATIONS[:version]:
            for statement in migrate(schema):
                conn.execute(statement)
        conn.execute("INSERT INTO meta (key, value) VALUES ('app', 'relaypoint'), (%s, %s)",
                     ("schema_version", str(version)))
    return conn


def test_a_version_2_store_is_upgraded_to_plan_its_boundaries_once_per_connection(url, postgres_schema):
    store_at_version(postgres_schema, 2).close()
    config = ("SELECT proname, proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
              "WHERE nspname = %s AND proname IN ('commit_boundary', 'commit_change', 'start_run') ORDER BY proname")
    assert server(config, (postgres_schema,)) == [("commit_boundary", None)]
    wf = Workflow("three")
    for name in ("a", "b", "c"):
        wf.step(name=name)(lambda ctx, name=name: {"step": name})
    with Runtime(url, [wf], create=False) as rt:  # upgraded here
        assert server(f"SELECT value FROM {postgres_schema}.meta WHERE key = 'schema_version'") == [("11",)]
        assert server(config, (postgres_schema,)) == [("commit_change", ["plan_cache_mode=force_generic_plan"])]
        # Version 10: a change is one json document and its long values (one call, five arguments: a
        # statement the client converts once); the status counts in one function.
        assert server("SELECT proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc p JOIN pg_namespace n "
                      "ON n.oid = p.pronamespace WHERE nspname = %s ORDER BY proname", (postgres_schema,)) == [
            ("commit_change", "doc json, p_input text, p_definition text, p_outputs text[], p_states text[], "
                              "OUT o_checkpoint bigint, OUT o_refused text"),
            ("run_counts_trigger", "")]
        run = rt.get(rt.start("three"))
    assert run.status == RunStatus.COMPLETED
    assert [(s.name, s.output) for s in run.tasks] == [("a", {"step": "a"}), ("b", {"step": "b"}), ("c", {"step": "c"})]
def test_runs_per_status_kept_across_the_upgrade_to_slots_are_then_counted_per_connection(url, postgres_schema):
    with store_at_version(postgres_schema, 3) as conn:  # the schema before slots (version 4), with runs counted in it
        conn.execute("INSERT INTO runs (run_id, workflow, status, created_at, updated_at) "
                     "SELECT 'q' || i, 'w', 'queued', now(), now() FROM generate_series(0, 2) AS i")
    with open_store(url) as store:  # upgraded here
        assert store.count_by_status() == {"queued": 3}
    code = ("import sys\nfrom relaypoint.store import open_store\n"
            "from relaypoint.store import Change, RunUpdate\n"
            "from datetime import UTC, datetime\n"
            "with open_store(sys.argv[1]) as s:\n"
            "    s.commit(Change(sys.argv[2], datetime.now(UTC), run=RunUpdate(status='failed')))\n")
    for i in range(3):  # each from a connection of its own, so counted in its own slot
        subprocess.run([sys.executable, "-c", code, url, f"q{i}"], check=True)
    with open_store(url) as store:
        assert store.count_by_status() == {"failed": 3}
        with store.transaction():
            store.delete_runs(["q0"])
        assert store.count_by_status() == {"failed": 2}
    slots = server(f"SELECT status, slot, runs FROM {postgres_schema}.run_counts WHERE runs <> 0")
    assert len({slot for _, slot, _ in slots}) > 1, slots  # the changes went to several rows
    assert server(f"SELECT status, sum(runs)::int FROM {postgres_schema}.run_counts GROUP BY status "
                  "HAVING sum(runs) <> 0") == [("failed", 2)]


def test_pauses_open_at_the_upgrade_to_announcements_count_as_announced(url, postgres_schema):
    with store_at_version(postgres_schema, 5) as conn:  # version 5, with a run paused and one whose pause was decided
        conn.execute("INSERT INTO runs (run_id, workflow, status, created_at, updated_at) VALUES "
                     "('open', 'w', 'awaiting_approval', now(), now()), ('done', 'w', 'queued', now(), now())")
        conn.execute("INSERT INTO checkpoints (run_id, seq, step, kind, created_at, decision) VALUES "
                     "('open', 1, 'a', 'approval', now(), NULL), ('done', 1, 'a', 'approval', now(), 'approved'), "
                     "('done', 0, 'a', 'start', now(), NULL)")
    with open_store(url) as store:  # upgraded here
        assert [p.run_id for p in store.pending_decisions(10)] == ["open"]
        assert store.claim_announcements(10, at(0), at(30)) == []  # announced by the relaypoint before, maybe: never twice
        new = stage(store, "done", 1, run=RunUpdate(status=RunStatus.AWAITING_INPUT, touch=False), checkpoints=[
            NewCheckpoint(run_id="done", kind="input", seq=1, step="a", at=at(1))]).checkpoint_id
        assert [(p.run_id, p.checkpoint_id) for p in store.claim_announcements(10, at(2), at(32))] == [("done", new)]
        assert store.settle_announcement(new, at(32), AnnouncementOutcome.ANNOUNCED, at(3))
    assert server(f"SELECT run_id, kind, decision, announced_at IS NOT NULL FROM {postgres_schema}.checkpoints "
                  "ORDER BY checkpoint_id") == [("open", "approval", None, True), ("done", "approval", "approved", False),
                                                ("done", "start", None, False), ("done", "input", None, True)]


def test_a_schema_holding_other_tables_is_not_a_store(url, postgres_schema):
    server(f"CREATE SCHEMA {postgres_schema}")
    server(f"CREATE TABLE {postgres_schema}.invoices (id int)")
    with pytest.raises(Exception, match="holds tables but is not a relaypoint store"):
        open_store(url, create=True)
    assert server(f"SELECT tablename FROM pg_tables WHERE schemaname = %s", (postgres_schema,)) == [("invoices",)]


@pytest.mark.parametrize("schema, kind", [
    ("user", "reserved"), ("select", "reserved"), ("left", "reserved (can be function or type name)"),
    ("int", "unreserved (cannot be function or type name)"),
])
def test_a_schema_named_by_an_sql_keyword_is_refused_in_one_line_and_nothing_is_made(tmp_path, schema, kind):
    """PostgreSQL takes these words as names only when quoted, and relaypoint writes its schema's name
    unquoted: instead of the server's "syntax error at or near", one line saying to name another."""
    url = f"{postgres_server()}?schema={schema}"
    with pytest.raises(InvalidStoreURL, match=f"^store URL .* names schema '{schema}', an SQL keyword PostgreSQL "
                                              f"takes as a name only quoted {re.escape(f'({kind})')}; name another"):
        open_store(url, create=True)
    (tmp_path / "app.py").write_text("from relaypoint import Workflow\nwf = Workflow('w')\n"
                                     "@wf.step\ndef s(ctx):\n    return 1\nworkflows = [wf]\n")
    result = subprocess.run([sys.executable, "-m", "relaypoint", "--db", url, "start", "w", "--app", "app:workflows"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: store URL ") and len(result.stderr.splitlines()) == 1
    assert server("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)) == []


@pytest.mark.parametrize("schema, kind", [("user", "reserved"),
                                          ("int", "unreserved (cannot be function or type name)")])
def test_a_schema_named_by_an_sql_keyword_is_refused_when_the_url_is_read_by_every_command(tmp_path, schema, kind):
    """The URL alone refuses the name, before any connection (port 1 has no server): ``list`` said to
    make the store with ``migrate``, and ``migrate`` then refused the name."""
    url = f"postgresql://postgres@127.0.0.1:1/test?schema={schema}"
    line = (f"store URL {url!r} names schema {schema!r}, an SQL keyword PostgreSQL takes as a name only quoted "
            f"({kind}); name another schema with ?schema=NAME (e.g. relaypoint)")
    with pytest.raises(InvalidStoreURL) as e:
        parse(url)
    assert str(e.value) == line
    for args in (["list"], ["migrate"], ["show", "0000"], ["events", "0000"]):
        assert one_line_error(relaypoint(tmp_path, *args, db=url)) == f"Error: {line}", args
    source = str(tmp_path / "source.db")
    assert relaypoint(tmp_path, "migrate", db=source).returncode == 0
    assert one_line_error(relaypoint(tmp_path, "copy", "--from", source, "--to", url, db=None)) == \
        f"Error: destination {url}: {line}"


def test_every_keyword_the_server_takes_as_a_name_only_quoted_is_refused_as_a_schema_name():
    keywords = server("SELECT word, catdesc FROM pg_get_keywords() WHERE catcode <> 'U'")
    assert len(keywords) > 100
    for word, catdesc in keywords:
        with pytest.raises(InvalidStoreURL, match=re.escape(f"names schema {word!r}, an SQL keyword PostgreSQL takes "
                                                            f"as a name only quoted ({catdesc})")):
            parse(f"postgresql://h/db?schema={word}")
    for word in server("SELECT word FROM pg_get_keywords() WHERE catcode = 'U' AND word ~ '^[a-z_]+$'"):
        assert parse(f"postgresql://h/db?schema={word[0]}").schema == word[0]  # unreserved: written unquoted


@pytest.mark.parametrize("damage", ["DROP TYPE {}.change CASCADE", "DROP FUNCTION {}.commit_change",
                                    "DROP TABLE {}.events CASCADE", "ALTER TABLE {}.steps DROP COLUMN traceback"])
def test_a_store_missing_an_object_of_its_schema_is_damaged_in_one_line(url, postgres_schema, tmp_path, damage):
    open_store(url, create=True).close()
    server(damage.format(postgres_schema))
    (tmp_path / "app.py").write_text("from relaypoint import Workflow\nwf = Workflow('w')\n"
                                     "@wf.step\ndef s(ctx):\n    return 1\nworkflows = [wf]\n")
    result = subprocess.run([sys.executable, "-m", "relaypoint", "--db", url, "start", "w", "--app", "app:workflows"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert re.search(r"does not match its schema version \(.* does not exist\); edited by hand\?", result.stderr)


def test_two_schemas_in_one_database_are_kept_apart(url, postgres_schema):
    other_schema = postgres_schema + "_b"
    other_url = url.replace(postgres_schema, other_schema)
    try:
        with open_store(url, create=True) as one, open_store(other_url, create=True) as two:
            add_run(one, "a1", status=RunStatus.QUEUED)
            add_run(one, "shared", status=RunStatus.QUEUED)
            add_run(two, "shared", status=RunStatus.COMPLETED, input={"in": "two"})
            assert [r.run_id for r in one.list_runs()] == ["shared", "a1"] or \
                   sorted(r.run_id for r in one.list_runs()) == ["a1", "shared"]
            assert [r.run_id for r in two.list_runs()] == ["shared"]
            assert one.count_by_status() == {"queued": 2} and two.count_by_status() == {"completed": 1}
            assert two.run_document("shared", "input") == {"in": "two"} and one.run_document("shared", "input") == {"k": 1}
            with two.transaction():
                two.delete_runs(["shared"])
            assert one.exists("shared") and not two.exists("shared")
    finally:
        drop_schema(other_schema)


def test_concurrent_creators_of_one_schema_make_it_once(url):
    code = ("import sys\nfrom relaypoint.store import open_store\n"
            "open_store(sys.argv[1], create=True).close()\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    assert [(p.wait(), p.stderr.read()) for p in procs] == [(0, "")] * 4
    with open_store(url) as store:
        assert store.list_runs() == []


# ---- settings --------------------------------------------------------------------------------------


@pytest.mark.parametrize("durability, setting", [("full", "on"), ("normal", "off")])
def test_durability_is_synchronous_commit(url, durability, setting):
    with open_store(url, create=True, durability=durability) as store:
        assert store.conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == setting


def test_a_read_only_store_is_read_only_on_the_server_too(url):
    with open_store(url, create=True) as store:
        add_run(store, "r1")
    with open_store(url, readonly=True) as ro:
        assert ro.conn.execute("SHOW default_transaction_read_only").fetchone()["default_transaction_read_only"] == "on"
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            ro.conn.execute("DELETE FROM runs")
        assert ro.exists("r1")


def test_times_are_kept_to_the_millisecond_like_the_sqlite_store(url):
    with open_store(url, create=True) as store:
        stage(store, "r1", new=NewRun(run_id="r1", workflow="w", status=RunStatus.QUEUED, input="{}", definition="[]",
                                      fingerprint="fp", created_at=at(0.0123456), steps_total=0))
        assert store.run("r1").created_at == at(0.012)
        # a listing position written as store text names the row exactly
        assert [r.run_id for r in store.list_runs(within=(("2031-05-01T12:00:00.012Z", "r1"),) * 2)] == ["r1"]


def test_the_data_version_ignores_reads_and_follows_commits(url):
    with open_store(url, create=True) as store, open_store(url) as other:
        add_run(store, "r1")
        version = store.data_version()
        other.list_runs(), other.run("r1")
        assert store.data_version() == version
        stage(other, "r1", run=RunUpdate(steps_done=1))
        assert store.data_version() != version


# ---- the console's queries use the indexes -----------------------------------------------------------


def plans(store, call, explain: str = "EXPLAIN") -> list[str]:
    """The plans of the statements ``call`` reads with on ``store`` (``explain`` of each as sent, with
    its parameters: ``EXPLAIN (ANALYZE)`` runs it)."""
    from relaypoint.store.postgres import _dialect  # shared queries are written with ? placeholders

    seen: list[tuple[str, object]] = []
    rows = store._rows

    def traced(sql, params=()):
        seen.append((sql, params))
        return rows(sql, params)

    store._rows = traced
    try:
        call()
    finally:
        store._rows = rows
    return ["\n".join(r["QUERY PLAN"] for r in store.conn.execute(f"{explain} " + _dialect(sql), params))
            for sql, params in seen]


def test_the_listing_reads_the_runs_indexes_without_sorting(url, postgres_schema):
    with open_store(url, create=True) as store:
        with store.transaction():
            for i in range(3000):
                stage(store, f"{i:016x}", new=NewRun(run_id=f"{i:016x}", workflow=f"wf{i % 4}", status=RunStatus(
                    ["queued", "completed", "failed"][i % 3]), input="{}", definition="[]", fingerprint="fp",
                    created_at=at(i), steps_total=3, lease=lease() if i % 3 == 0 else None))
        server(f"ANALYZE {postgres_schema}.runs")
        newest = store.list_runs(limit=50)
        key = (newest[-1].created_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"), newest[-1].run_id)
        cases = {
            "runs_by_created": lambda: store.list_runs(limit=50, before=key),
            "runs_by_status": lambda: store.list_runs(status="failed", limit=50, before=key),
            "runs_by_workflow": lambda: store.list_runs(workflow="wf3", limit=50),
        }
        for index, call in cases.items():
            (plan,) = plans(store, call)
            assert index in plan and "Sort" not in plan and "Seq Scan" not in plan, plan
        search = plans(store, lambda: store.list_runs(search="wf1", limit=50))
        # the names by a loose index scan, each name's runs in index order, the id prefix by the primary key
        names, by_name, by_id = search
        assert all("Seq Scan" not in p for p in search), search
        assert "Index Only Scan using runs_by_workflow" in names
        assert "runs_by_workflow" in by_name and "Sort" not in by_name
        assert "runs_pkey" in by_id
        assert len(store.list_runs(search="wf1", limit=500)) == 500
        (counts,) = plans(store, store.count_by_status)
        assert "on run_counts" in counts and "on runs" not in counts
        assert store.count_by_status() == {"queued": 1000, "completed": 1000, "failed": 1000}
        assert json.dumps(store.count_by_status())  # plain ints


def test_the_announcement_poll_reads_no_run_and_no_checkpoint_when_every_pause_is_announced(url, postgres_schema):
    with open_store(url, create=True) as store:
        paused_runs(store, 300)
        server(f"ANALYZE {postgres_schema}.runs")
        server(f"ANALYZE {postgres_schema}.checkpoints")
        version = store.data_version()
        [plan] = plans(store, lambda: store.claim_announcements(10, at(5000), at(5030)))  # one read: nothing claimed
        assert "checkpoints_unannounced" in plan and "Seq Scan" not in plan, plan
        [ran] = plans(store, lambda: store.claim_announcements(10, at(5000), at(5030)), "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF)")
        # the index of unannounced pauses is empty: no row of runs or checkpoints is read
        touched = [line for line in ran.splitlines() if " on runs " in line or " on checkpoints " in line]
        assert touched and all("never executed" in line or "rows=0 " in line for line in touched), ran
        assert store.data_version() == version  # no transaction, no write
        # new pauses: claimed through the same index, each run read by its key
        for rid in ("p00007", "p00234"):
            stage(store, rid, checkpoints=[NewCheckpoint(run_id=rid, kind="input", seq=4, step="b", at=at(5001))])
        [plan] = plans(store, lambda: store._unannounced(10, at(5001)))
        assert "checkpoints_unannounced" in plan and "Seq Scan" not in plan, plan
        assert [p.run_id for p in store.claim_announcements(10, at(5002), at(5032))] == ["p00007", "p00234"]


def test_the_review_queue_reads_the_paused_runs_not_every_checkpoint(url, postgres_schema):
    with open_store(url, create=True) as store:
        paused_runs(store, 300)
        server(f"ANALYZE {postgres_schema}.runs")
        server(f"ANALYZE {postgres_schema}.checkpoints")
        [plan] = plans(store, lambda: store.pending_decisions(50))
        # each paused run's pause by the run's key (the runs themselves: by status, or a scan of a small table)
        assert "Index Scan Backward using checkpoints_paused" in plan and "Seq Scan on checkpoints" not in plan, plan
        assert [p.run_id for p in store.pending_decisions(3)] == ["p00000", "p00001", "p00002"]


def test_a_transaction_excludes_other_writers_as_on_sqlite_and_waits_the_busy_timeout(url):
    from relaypoint.store import Change, StepStart, StoreBusy
    from relaypoint.store.postgres import PostgresStore

    where = parse(url)
    with open_store(url, create=True) as one, PostgresStore(where.conninfo, where.schema, busy_timeout=0.5) as two:
        add_run(one, "r1", owner=lease())
        with one.transaction():
            stage(one, "r1", run=RunUpdate(steps_done=1))
            with pytest.raises(StoreBusy, match=r"stayed busy for 0.5 s \(another process is writing\); try again$"):
                with two.transaction():
                    pass
            with pytest.raises(StoreBusy):  # a boundary waits for a transaction, as on SQLite
                two.commit(Change(run_id="r1", at=at(1), fence="tok", started=StepStart(0)))
        two.commit(Change(run_id="r1", at=at(1), fence="tok", started=StepStart(0)))
        assert one.step("r1", 0).status == "running" and one.run("r1").steps_done == 1


def test_transactions_of_different_runs_commit_side_by_side_and_those_of_one_run_one_at_a_time(url):
    from relaypoint.store import Change, RunLocked, StepStart, StoreBusy
    from relaypoint.store.postgres import PostgresStore

    where = parse(url)
    with open_store(url, create=True) as one, PostgresStore(where.conninfo, where.schema, busy_timeout=0.5) as two:
        add_run(one, "r1", owner=lease())
        add_run(one, "r2", owner=lease())
        with one.transaction("r1"):
            stage(one, "r1", run=RunUpdate(steps_done=1))
            with two.transaction("r2"):  # another run's transaction, and boundary, do not wait
                stage(two, "r2", run=RunUpdate(steps_done=1))
            two.commit(Change(run_id="r2", at=at(1), fence="tok", started=StepStart(0)))
            with two.transaction("new"):  # nor does the start of a new run
                stage(two, "new", new=NewRun(run_id="new", workflow="w", status=RunStatus.RUNNING, input="{}",
                                             definition="[]", fingerprint="fp", created_at=at(2), steps_total=0))
            started = time.monotonic()
            with pytest.raises(RunLocked, match=r"^run r1 is held by another process's transaction"):
                with two.transaction("r1", skip_locked=True):
                    stage(two, "r1", run=RunUpdate(steps_done=9))
            assert time.monotonic() - started < 0.4  # refused at once, not after the busy timeout
            with pytest.raises(StoreBusy):  # waiting for the run: one at a time
                with two.transaction("r1"):
                    pass
            with pytest.raises(StoreBusy):  # its boundary too, as the fenced update locks the row first
                two.commit(Change(run_id="r1", at=at(1), fence="tok", started=StepStart(0)))
            with pytest.raises(StoreBusy):  # and a transaction of the whole store
                with two.transaction():
                    pass
        with two.transaction("r1", skip_locked=True):  # free again: it sees the committed write
            assert two.run("r1").steps_done == 1
            stage(two, "r1", run=RunUpdate(steps_done=2))
        assert one.run("r1").steps_done == 2 and one.run("r2").steps_done == 1 and one.exists("new")
        with one.transaction():  # the whole store's transaction holds back every run's
            with pytest.raises(StoreBusy):
                with two.transaction("r2"):
                    pass


def test_a_worker_claim_skips_a_run_another_process_holds(url):
    from relaypoint.store import RunLocked

    wf = Workflow("w")
    wf.step(name="a")(lambda ctx: 1)
    with Runtime(url, [wf]) as rt, open_store(url) as other:
        parent = rt.start("w")
        queued = [rt.fork(parent, "a") for _ in range(2)]
        with other.transaction(queued[0]):
            with pytest.raises(RunLocked):
                rt.resume(queued[0], skip_locked=True)
            assert rt.resume(queued[1], skip_locked=True) == RunStatus.COMPLETED
        assert rt.resume(queued[0], skip_locked=True) == RunStatus.COMPLETED


def test_a_user_with_create_on_a_schema_an_administrator_made_can_make_the_store_there(postgres_schema):
    role = f"{postgres_schema}_user"
    server(f"CREATE ROLE {role} LOGIN")
    try:
        server(f"CREATE SCHEMA {postgres_schema}")
        server(f"GRANT USAGE, CREATE ON SCHEMA {postgres_schema} TO {role}")
        url = f"{POSTGRES_URL.replace('postgres@', role + '@', 1)}?schema={postgres_schema}"
        with open_store(url, create=True) as store:
            add_run(store, "r1")
            assert store.exists("r1")
        other = url.replace(f"schema={postgres_schema}", f"schema={postgres_schema}_x")
        with pytest.raises(StoreDenied, match=f"^no relaypoint store at .*/{postgres_schema}_x, and {role} may not make "
                                              "one \\(permission denied for database test\\); make it once as a user "
                                              "with CREATE on the database"):
            open_store(other, create=True)  # no CREATE on the database: one line saying what is needed
        server(f"REVOKE USAGE ON SCHEMA {postgres_schema} FROM {role}")
        with pytest.raises(StoreDenied, match=f"{role} may not use schema {postgres_schema}; the schema's owner can "
                                              f"grant what relaypoint needs: `relaypoint --db URL migrate --grant {role}`"):
            open_store(url)
    finally:
        server(f"DROP SCHEMA IF EXISTS {postgres_schema} CASCADE")
        server(f"DROP OWNED BY {role}")
        server(f"DROP ROLE {role}")


def test_the_docs_two_roles_work_as_written(postgres_schema, tmp_path):
    """The permissions recipe of docs/how-to/postgres.md, run as written (its role and schema names made unique): the
    administrator's SQL, the owner's ``migrate --grant``, then every command that records, ``copy``
    into the store included, as the everyday role; and a reader granted with ``--grant-read``."""
    teams = (Path(__file__).resolve().parent.parent / "docs" / "how-to" / "postgres.md").read_text()
    recipe = re.search(r"```sql\n(.*?)```", teams, flags=re.S).group(1)
    make = re.search(r"```sh\n\s*(relaypoint --db \S+ migrate --grant relay)\n\s*```", teams).group(1)
    owner, user, reader = (f"{postgres_schema}_{r}" for r in ("owner", "relay", "reader"))
    recipe = re.sub(r"\brelay_owner\b", owner, re.sub(r"\brelay\b", user, recipe))
    server(re.sub(r"SCHEMA relaypoint\b", f"SCHEMA {postgres_schema}", recipe))
    server(f"CREATE ROLE {reader} LOGIN")
    as_owner, as_user, as_reader = (f"{POSTGRES_URL.replace('postgres@', role + '@', 1)}?schema={postgres_schema}"
                                    for role in (owner, user, reader))
    try:
        (tmp_path / "app.py").write_text("from relaypoint import Workflow\nwf = Workflow('w')\n"
                                         "@wf.step(approval=True)\ndef a(ctx):\n    return 1\n"
                                         "@wf.step\ndef b(ctx):\n    return 2\nworkflows = [wf]\n")

        def relaypoint(db: str, *args: str) -> str:
            result = subprocess.run([sys.executable, "-m", "relaypoint", "--db", db, *args], capture_output=True,
                                    text=True, timeout=60, cwd=tmp_path)
            assert result.returncode == 0, result.stderr
            return result.stdout.strip()

        command = shlex.split(make)
        assert command == ["relaypoint", "--db", "postgresql://relay_owner@db.internal/team", "migrate", "--grant", "relay"]
        assert relaypoint(as_owner, "migrate", "--grant", user, "--grant-read", reader).splitlines() == [
            f"made a store at {owner}@{as_owner.split('@', 1)[1].split('?')[0]}/{postgres_schema} (schema version 11)",
            f"granted {user} what it needs to use the store", f"granted {reader} what it needs to browse the store"]
        refused = subprocess.run([sys.executable, "-m", "relaypoint", "--db", as_user, "migrate", "--grant-read",
                                  reader], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert refused.returncode == 1 and refused.stderr.endswith(  # a GRANT of anyone else grants nothing
            f"only the owner of its tables ({owner}) may grant a role what relaypoint needs; run `relaypoint --db URL "
            f"migrate --grant ...` as {owner}\n")
        run = relaypoint(as_user, "start", "w", "--app", "app:workflows")
        relaypoint(as_user, "approve", run)
        relaypoint(as_user, "resume", run, "--app", "app:workflows")
        relaypoint(as_user, "cancel", relaypoint(as_user, "fork", run, "--from", "b"))
        relaypoint(as_user, "prune", "--days", "0")
        local = str(tmp_path / "local.db")
        moved = relaypoint(local, "start", "w", "--app", "app:workflows")
        assert relaypoint(as_user, "copy", "--from", local, "--to", as_user).startswith("copied 1 run ")
        assert relaypoint(as_user, "approve", moved).startswith("approved checkpoint ")
        assert {r["run_id"] for r in json.loads(relaypoint(as_reader, "list", "--json"))} == {moved}
        with open_store(as_reader) as store:
            assert store.readonly_reason.startswith(f"{reader} may only read schema {postgres_schema}")
    finally:
        server(f"DROP SCHEMA IF EXISTS {postgres_schema} CASCADE")
        for role in (owner, user, reader):
            server(f"DROP OWNED BY {role}")
            server(f"DROP ROLE {role}")


def test_copying_in_without_the_sequences_says_how_to_grant_them_and_copies_nothing(postgres_schema, tmp_path):
    url = f"{POSTGRES_URL}?schema={postgres_schema}"
    open_store(url, create=True).close()
    role = f"{postgres_schema}_rw"
    server(f"CREATE ROLE {role} LOGIN")
    try:
        server(f"GRANT USAGE ON SCHEMA {postgres_schema} TO {role}")
        server(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {postgres_schema} TO {role}")
        local = str(tmp_path / "local.db")
        with open_store(local, create=True) as store:
            add_run(store, "r1")
        result = cli("copy", "--from", local, "--to", url.replace("postgres@", f"{role}@", 1))
        assert result.returncode == 1 and len(result.stderr.splitlines()) == 1
        assert (f"permission denied for sequence checkpoints_checkpoint_id_seq; the schema's owner can grant what "
                f"relaypoint needs: `relaypoint --db URL migrate --grant {role}`") in result.stderr
        with open_store(url) as store:
            assert not store.exists("r1")
    finally:
        server(f"DROP OWNED BY {role}")
        server(f"DROP ROLE {role}")


def test_a_user_who_may_only_read_the_tables_browses_a_read_only_store(postgres_schema, tmp_path):
    url = f"{POSTGRES_URL}?schema={postgres_schema}"
    with open_store(url, create=True) as store:
        add_run(store, "r1")
    role = f"{postgres_schema}_ro"
    server(f"CREATE ROLE {role} LOGIN")
    try:
        server(f"GRANT USAGE ON SCHEMA {postgres_schema} TO {role}")
        server(f"GRANT SELECT ON ALL TABLES IN SCHEMA {postgres_schema} TO {role}")
        reader = url.replace("postgres@", role + "@", 1)
        with open_store(reader) as store:  # what the console shows, and why actions are unavailable
            assert store.readonly_reason == (f"{role} may only read schema {postgres_schema}; the schema's owner can "
                                             f"grant what relaypoint needs: `relaypoint --db URL migrate --grant {role}`")
            assert [r.run_id for r in store.list_runs()] == ["r1"]
        worker = subprocess.run([sys.executable, "-m", "relaypoint", "--db", reader, "worker", "--app",
                                 "relaypoint.demo:workflows"], capture_output=True, text=True, timeout=60,
                                cwd=tmp_path)
        assert worker.returncode == 1 and worker.stdout == ""
        assert worker.stderr.splitlines() == [
            f"Error: {role}@{reader.split('@', 1)[1].split('?')[0]}/{postgres_schema} is read-only "
            f"({role} may only read schema {postgres_schema}; the schema's owner can grant what relaypoint needs: "
            f"`relaypoint --db URL migrate --grant {role}`); a worker records what it executes, so it needs a store "
            "it can write"]
        demo = subprocess.run([sys.executable, "-m", "relaypoint", "--db", reader, "demo", "--no-console"],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert demo.returncode == 1 and demo.stdout == ""  # no progress line first, which read as success
        assert demo.stderr.splitlines() == [
            f"Error: {role}@{reader.split('@', 1)[1].split('?')[0]}/{postgres_schema} is read-only "
            f"({role} may only read schema {postgres_schema}; the schema's owner can grant what relaypoint needs: "
            f"`relaypoint --db URL migrate --grant {role}`); the demo records the runs it makes, so it needs a "
            "store it can write"]
        with open_store(url) as store:
            assert [r.run_id for r in store.list_runs()] == ["r1"]
        server(f"GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {postgres_schema} TO {role}")
        with open_store(reader) as store:
            assert store.readonly_reason is None
    finally:
        server(f"DROP OWNED BY {role}")
        server(f"DROP ROLE {role}")


# ---- shared connections --------------------------------------------------------------------------------


def test_the_heartbeats_of_a_process_share_a_few_connections(postgres_schema):
    from relaypoint.clock import utcnow
    from relaypoint.lease import LeaseHolder
    from relaypoint.store.pg_connect import POOL_MAX_SIZE

    role = f"{postgres_schema}_hb"  # counts this test's connections apart from everything else on the server
    server(f"CREATE ROLE {role} LOGIN")
    server(f"GRANT CREATE ON DATABASE {POSTGRES_URL.rsplit('/', 1)[1]} TO {role}")
    url = f"{POSTGRES_URL.replace('postgres@', role + '@', 1)}?schema={postgres_schema}"
    try:
        with open_store(url, create=True) as store:
            holders = []
            for i in range(8):
                holder = LeaseHolder(url, f"r{i}", utcnow, seconds=0.6)
                add_run(store, f"r{i}", owner=holder.lease())
                holders.append(holder)
            before = {h.run_id: store.run(h.run_id).lease.heartbeat_at for h in holders}
            for h in holders:
                h.start_heartbeat()
            try:
                deadline = time.monotonic() + 20
                while any(store.run(h.run_id).lease.heartbeat_at == before[h.run_id] for h in holders):
                    assert time.monotonic() < deadline, "every heartbeat to renew its lease"
                    time.sleep(0.1)
                held = server("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,))[0][0]
            finally:
                for h in holders:
                    h.stop_heartbeat()
            assert not any(h.lost.is_set() for h in holders)
            assert 2 <= held <= 1 + POOL_MAX_SIZE < 1 + len(holders)  # the store's own, and the shared ones
        # all closed (a server process ends a moment after its client closed the connection)
        deadline = time.monotonic() + 10
        while server("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)) != [(0,)]:
            assert time.monotonic() < deadline, "every connection of the store and its heartbeats closed"
            time.sleep(0.05)
    finally:
        drop_schema(postgres_schema)
        server(f"DROP OWNED BY {role}")
        server(f"DROP ROLE {role}")


def test_a_stores_connections_name_its_schema_in_pg_stat_activity(url, postgres_schema):
    with open_store(url, create=True) as store, open_store(url, pooled=True) as pooled:
        with pooled.transaction():  # a connection borrowed from the process's pool
            pids = [store.conn.info.backend_pid, pooled.conn.info.backend_pid]
            shown = server("SELECT application_name FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,))
    assert shown == [(f"relaypoint-{postgres_schema}",)] * 2


def test_a_pooled_store_reads_writes_and_reconnects_after_a_lost_connection(url):
    with open_store(url, create=True), open_store(url, pooled=True) as pooled:
        add_run(pooled, "r1")
        assert pooled.conn is None  # nothing held between operations
        with pooled.transaction():
            pid = pooled.conn.info.backend_pid  # the pool's one connection (its first user opened it)
        server("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StoreUnreachable, match=r"^the connection to .* was lost") as e:
            pooled.run("r1")
        assert "\n" not in str(e.value)
        assert pooled.run("r1").run_id == "r1"  # the broken one was dropped, a new one made
        with pooled.transaction():
            assert pooled.conn.info.backend_pid != pid


def test_an_upgrade_a_user_may_not_make_names_the_owner_who_may_and_changes_nothing(url, postgres_schema):
    """After relaypoint is upgraded, the everyday role of the two roles of docs/how-to/postgres.md opens the store first:
    the migration needs the tables' owner, and says so (not "needs CREATE on the database")."""
    store_at_version(postgres_schema, 6).close()
    ((owner,),) = server("SELECT current_user")
    role = f"{postgres_schema}_rw"
    server(f"CREATE ROLE {role} LOGIN")
    try:
        server(f"GRANT USAGE ON SCHEMA {postgres_schema} TO {role}")
        server(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {postgres_schema} TO {role}")
        as_role = url.replace("postgres@", f"{role}@", 1)
        result = cli("--db", as_role, "list")
        assert result.returncode == 1 and len(result.stderr.splitlines()) == 1
        assert (f"has store schema version 6 and needs an upgrade to version 11, which only the owner of its tables "
                f"may make (permission denied for schema {postgres_schema}): run `relaypoint --db URL migrate` once "
                f"as {owner}") in result.stderr
        assert server(f"SELECT value FROM {postgres_schema}.meta WHERE key = 'schema_version'") == [("6",)]
        assert cli("--db", url, "migrate").stdout == (f"upgraded {url.split('@', 1)[0].split('//')[1]}@"
                                                      f"{url.split('@', 1)[1].split('?')[0]}/{postgres_schema} from "
                                                      "store schema version 6 to 11\n")  # by the owner
        with open_store(as_role) as store:
            assert store.list_runs() == []
    finally:
        server(f"DROP OWNED BY {role}")
        server(f"DROP ROLE {role}")
