"""The PostgreSQL store's change check (``data_version``, what the console's live refresh asks each
tick): notifications on the schema's channel, read without a round trip while nothing changes, and
sent only while a console listens; the server's write counters when notifications cannot be had;
and the upgrade of a version-1 store.

Writers are other processes (``python -c``), as a worker or another person's console would be."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from relaypoint.store import NewEvent, RunUpdate, StoreReadOnly, open_store
from relaypoint.store.migrations.postgres import MIGRATIONS, SCHEMA_VERSION, _migrate_1, channel

from conftest import POSTGRES_URL, drop_schema, postgres_server
from test_postgres_store import server, store_at_version
from test_store_contract import add_run, stage

psycopg = pytest.importorskip("psycopg")

WRITE = """\
import sys
from datetime import UTC, datetime
from relaypoint.store import Change, NewEvent, RunUpdate, open_store
with open_store(sys.argv[1], create=True) as store:
    if sys.argv[2] == "boundary":
        store.commit(Change(run_id="r1", at=datetime.now(UTC), run=RunUpdate(steps_done=1)))
    elif sys.argv[2] == "nothing":  # a transaction that only reads
        with store.transaction():
            store.list_runs()
    else:
        with store.transaction():  # several statements on several tables, one transaction
            for i in range(3):
                if store.exists("r1"):
                    store.commit(Change("r1", datetime.now(UTC), run=RunUpdate(steps_done=i),
                                        events=[NewEvent("noted")]))
            store.delete_runs(["no-such-run"])
"""


@pytest.fixture
def url(postgres_schema: str) -> str:
    return f"{postgres_server()}?schema={postgres_schema}"


def write_elsewhere(url: str, what: str = "transaction") -> None:
    """A write to the store at ``url`` by another process: one "transaction" of several statements,
    a "boundary" of run r1, or a transaction that writes "nothing"."""
    subprocess.run([sys.executable, "-c", WRITE, url, what], check=True, timeout=60)


def changed(store, version, seconds: float = 10):
    """The store's version once it differs from ``version`` (notifications arrive a moment after the
    writer's commit returns), or the unchanged one after ``seconds``."""
    deadline = time.monotonic() + seconds
    while (now := store.data_version()) == version and time.monotonic() < deadline:
        time.sleep(0.02)
    return now


def listeners(schema: str) -> list[int]:
    """The server process ids of the consoles listening to the store in ``schema``."""
    return [r[0] for r in server(f"SELECT pid FROM {schema}.listeners ORDER BY pid")]


def backends(pids: list[int]) -> list[tuple]:
    """What the server shows of these backends: state, when it last changed, the last statement."""
    return server("SELECT pid, state, state_change, query FROM pg_stat_activity WHERE pid = ANY(%s) ORDER BY pid",
                  (pids,))


def test_a_commit_by_another_process_changes_the_version_and_an_idle_check_sends_nothing(url):
    with open_store(url, create=True) as writer:
        add_run(writer, "r1")
    with open_store(url, readonly=True) as store:  # a console's store (its test notification is sent read-only)
        version = store.data_version()
        assert store.change_feed == "notifications"
        pids = [store.conn.info.backend_pid, *listeners(store.schema)]
        assert len(pids) == 2  # the store's connection and its listener
        seen = backends(pids)
        for _ in range(200):
            assert store.data_version() == version
        assert backends(pids) == seen  # no statement reached either backend: no round trip per check
        write_elsewhere(url)
        assert changed(store, version) != version


def test_one_notification_per_write_and_none_for_another_schema_or_a_transaction_that_wrote_nothing(
        url, postgres_schema):
    other = url.replace(postgres_schema, postgres_schema + "_b")
    try:
        with open_store(url, create=True) as store:
            add_run(store, "r1")
            kind, here, heard = store.data_version()
            write_elsewhere(other)             # made and written there: not this store's channel
            write_elsewhere(url, "nothing")
            write_elsewhere(url)               # seven statements here, one transaction
            # Notifications come in commit order on one socket: once this write's has come, any from
            # the writes before it would have been counted first.
            assert changed(store, (kind, here, heard)) == (kind, here, heard + 1)
            write_elsewhere(url, "boundary")
            assert changed(store, (kind, here, heard + 1)) == (kind, here, heard + 2)
            time.sleep(0.5)
            assert store.data_version() == (kind, here, heard + 2)
    finally:
        drop_schema(postgres_schema + "_b")


def test_writes_of_this_process_count_at_once(url):
    with open_store(url, create=True) as store, open_store(url) as other:
        add_run(store, "r1")
        version = store.data_version()
        stage(other, "r1", events=[NewEvent("noted")])
        assert store.data_version() != version  # no wait: the commit was made here


def test_a_lost_listener_counts_as_a_change_and_listening_resumes(url):
    with open_store(url, create=True) as store:
        add_run(store, "r1")
        version = store.data_version()
        [listener] = listeners(store.schema)
        server("SELECT pg_terminate_backend(%s)", (listener,))
        version = changed(store, version)  # what was sent meanwhile may be lost: counted as a change
        assert store.change_feed == "notifications"
        write_elsewhere(url)
        assert changed(store, version) != version


def heard(conn, seconds: float = 1.0) -> int:
    """The notifications of writes (not the consoles' test ones) that reach ``conn`` within ``seconds``."""
    return sum(n.payload == "" for n in conn.notifies(timeout=seconds))


def test_writers_notify_only_while_a_console_listens(url, postgres_schema):
    with open_store(url, create=True) as writer:
        add_run(writer, "r1")
    # A connection that listens without being recorded hears what every listener would.
    with psycopg.connect(POSTGRES_URL, autocommit=True) as ear:
        ear.execute(f"LISTEN {channel(postgres_schema)}")
        write_elsewhere(url, "boundary")
        write_elsewhere(url)
        assert heard(ear) == 0 and listeners(postgres_schema) == []  # no console: nothing sent
        with open_store(url, readonly=True) as console:
            version = console.data_version()
            assert console.change_feed == "notifications"
            [pid] = listeners(postgres_schema)
            assert pid != console.conn.info.backend_pid  # its listening connection, not its own
            write_elsewhere(url, "boundary")
            write_elsewhere(url)
            assert heard(ear) == 2
            assert changed(console, version) != version
        assert listeners(postgres_schema) == []  # its record is dropped when it closes
        write_elsewhere(url, "boundary")
        assert heard(ear) == 0


CONSOLE = """\
import sys, time
from relaypoint.store import open_store
store = open_store(sys.argv[1], readonly=True)
store.data_version()
print(store.change_feed, flush=True)
time.sleep(600)
"""


def test_the_record_of_a_killed_console_is_dropped_when_the_next_one_listens(url, postgres_schema):
    with open_store(url, create=True) as writer:
        add_run(writer, "r1")
    console = subprocess.Popen([sys.executable, "-c", CONSOLE, url], stdout=subprocess.PIPE, text=True)
    try:
        assert console.stdout.readline() == "notifications\n"
        [gone] = listeners(postgres_schema)
    finally:
        os.kill(console.pid, signal.SIGKILL)
        console.wait()
    deadline = time.monotonic() + 10
    while server("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (gone,)) != [(0,)]:
        assert time.monotonic() < deadline, "the killed console's connection did not end"
        time.sleep(0.05)
    assert listeners(postgres_schema) == [gone]  # left behind: writers notify for nobody meanwhile
    with open_store(url, readonly=True) as other:
        other.data_version()
        [pid] = listeners(postgres_schema)
        assert pid != gone


def test_a_console_starts_listening_once_the_writes_under_way_have_committed(url):
    with open_store(url, create=True) as writer, open_store(url, readonly=True) as console:
        add_run(writer, "r1")
        listening = threading.Event()
        with writer.transaction("r1"):  # under way: it has not seen a listener, so it will not notify
            stage(writer, "r1", run=RunUpdate(steps_done=5))
            thread = threading.Thread(target=lambda: (console.data_version(), listening.set()))
            thread.start()
            # the console records itself under the schema's lock, which every writer holds (shared)
            assert not listening.wait(1.0)
        thread.join(10)
        assert listening.is_set() and console.change_feed == "notifications"
        assert console.run("r1").steps_done == 5  # so its first read, after that, sees the write


def test_consoles_of_readers_and_of_writers_granted_the_tables_before_version_8_are_notified(url, postgres_schema):
    store_at_version(postgres_schema, 7).close()
    reader, writer = f"{postgres_schema}_r", f"{postgres_schema}_w"
    try:
        for role in (reader, writer):
            server(f"CREATE ROLE {role} LOGIN")
            server(f"GRANT USAGE ON SCHEMA {postgres_schema} TO {role}")
            server(f"GRANT SELECT ON ALL TABLES IN SCHEMA {postgres_schema} TO {role}")
        server(f"GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {postgres_schema} TO {writer}")
        with open_store(url) as owner:  # upgraded here, by the schema's owner
            add_run(owner, "r1")
        for role, readonly in ((reader, True), (writer, False)):
            with open_store(url.replace("postgres@", f"{role}@", 1)) as console:
                assert (console.readonly_reason is not None) is readonly
                version = console.data_version()
                assert console.change_feed == "notifications"
                write_elsewhere(url, "boundary")
                assert changed(console, version) != version
            assert listeners(postgres_schema) == []
    finally:
        for role in (reader, writer):
            server(f"DROP OWNED BY {role}")
            server(f"DROP ROLE {role}")


@pytest.fixture
def limited_role(url: str, postgres_schema: str):
    """A read-only user allowed one connection (CONNECTION LIMIT 1, as hosted servers and poolers
    impose): a console of theirs cannot open its listening connection."""
    with open_store(url, create=True) as store:
        add_run(store, "r1")
    role = f"{postgres_schema}_one"
    server(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    try:
        server(f"GRANT USAGE ON SCHEMA {postgres_schema} TO {role}")
        server(f"GRANT SELECT ON ALL TABLES IN SCHEMA {postgres_schema} TO {role}")
        yield url.replace("postgres@", f"{role}@", 1)
    finally:
        server(f"DROP OWNED BY {role}")
        server(f"DROP ROLE {role}")


def test_without_notifications_the_schemas_write_counters_are_checked(limited_role, url, postgres_schema):
    other = url.replace(postgres_schema, postgres_schema + "_b")
    try:
        with open_store(limited_role, readonly=True) as console:
            version = console.data_version()
            assert console.change_feed == "statistics"  # the listener could not connect
            console.list_runs(), console.run("r1")
            assert console.data_version() == version  # reads are not changes
            write_elsewhere(other)
            time.sleep(1.5)  # the server's counters are flushed within a second (and when a backend ends)
            assert console.data_version() == version  # another schema's writes are not counted
            write_elsewhere(url)
            assert changed(console, version) != version
            assert console.change_feed == "statistics"
    finally:
        drop_schema(postgres_schema + "_b")


def test_a_version_1_store_is_upgraded_on_open_and_then_notifies(url, postgres_schema):
    server(f"CREATE SCHEMA {postgres_schema}")
    with psycopg.connect(POSTGRES_URL, autocommit=True, options=f"-c search_path={postgres_schema}") as conn:
        with conn.transaction():
            for statement in _migrate_1(postgres_schema):
                conn.execute(statement)
            conn.execute("INSERT INTO meta (key, value) VALUES ('app', 'relaypoint'), ('schema_version', '1')")
    assert MIGRATIONS[0] is _migrate_1 and SCHEMA_VERSION == 11
    with pytest.raises(StoreReadOnly, match="needs an upgrade to version 11"):
        open_store(url, readonly=True)
    with open_store(url) as store:  # upgraded here
        assert server(f"SELECT value FROM {postgres_schema}.meta WHERE key = 'schema_version'") == [("11",)]
        [(source,)] = server("SELECT prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                             "WHERE nspname = %s AND proname = 'commit_change'", (postgres_schema,))
        assert f"pg_notify('{channel(postgres_schema)}', '')" in source
        add_run(store, "r1")
        version = store.data_version()
        write_elsewhere(url, "boundary")
        assert changed(store, version) != version


def test_a_channel_name_fits_postgresqls_limit():
    assert channel("relaypoint") == "relaypoint_relaypoint"
    long = "s" * 63
    assert len(channel(long)) == 63 and channel(long) != channel("s" * 62 + "t")


class NotificationDroppingProxy:
    """A TCP proxy to the test server that passes everything but notifications (messages of type
    'A' from the server), as a pooler in transaction mode loses them: LISTEN succeeds, nothing comes.
    Clients must not ask for TLS or GSS encryption (PGSSLMODE/PGGSSENCMODE=disable), so every message
    from the server after the start is a typed one."""

    def __init__(self, host: str, port: int) -> None:
        import socket
        import threading

        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._filter, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pipe(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def _filter(self, src, dst) -> None:
        buffer = b""
        try:
            while data := src.recv(65536):
                buffer += data
                out = b""
                while len(buffer) >= 5:
                    size = 1 + int.from_bytes(buffer[1:5], "big")
                    if len(buffer) < size:
                        break
                    message, buffer = buffer[:size], buffer[size:]
                    if message[:1] == b"A":
                        self.dropped += 1
                    else:
                        out += message
                dst.sendall(out)
        except OSError:
            pass
        finally:
            dst.close()

    def close(self) -> None:
        self.listener.close()


def test_notifications_that_never_arrive_are_detected_and_the_counters_used(url, postgres_schema, monkeypatch):
    with open_store(url, create=True) as writer:
        add_run(writer, "r1")
    monkeypatch.setenv("PGSSLMODE", "disable")
    monkeypatch.setenv("PGGSSENCMODE", "disable")
    server_at = psycopg.conninfo.conninfo_to_dict(POSTGRES_URL)
    proxy = NotificationDroppingProxy(server_at.get("host") or "127.0.0.1", int(server_at.get("port") or 5432))
    try:
        proxied = url.replace(f"@{server_at.get('host')}:{server_at.get('port') or 5432}/", f"@127.0.0.1:{proxy.port}/")
        assert proxied != url
        with open_store(proxied, readonly=True) as console:
            version = console.data_version()
            assert console.change_feed == "statistics" and proxy.dropped >= 1  # its test notification was lost
            assert console.data_version() == version
            write_elsewhere(url)
            assert changed(console, version) != version
    finally:
        proxy.close()
