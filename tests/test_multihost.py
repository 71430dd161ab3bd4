"""Workers on several hosts sharing one PostgreSQL store (issue 9): no run executed twice.

Each "host" is a worker process group in a UTS namespace of its own, so relaypoint sees another
host name (``socket.gethostname()``) and, as for a machine it cannot look into, only the lease's
expiry can free a run it owned, never the liveness of its pid (see tests/netns.py). Twenty queued
runs of five sleeping steps are shared by three hosts, then one host is lost mid-step:

- its process group is SIGKILLed;
- or, each host in a network namespace of its own reaching the server over a veth link (through a
  relay on the root side), its link is set down: the host lives on, cut off. Once its leases were
  revoked the link comes back while its steps still run, and the fence on the lease token refuses
  what they would record (the runs are taken over by another host, or by the lost host itself: the
  runs it lost free its slots); or the link never comes back, the worker gives up on the server
  and still stops on SIGTERM.

And, without namespaces, what a host cut off inside a store transaction leaves on the server (a
session idle in its transaction, holding the store's write lock) does not stop the other writers.

What is asserted is the at-least-once contract of docs/reference/reliability.md: every step of
every run completed (its output recorded, one ``step_completed`` event) exactly once, and executed
more than once only where an executor was cut off before its boundary committed (the lost host's
step under way, or an executor its own log shows losing the run); the lost host's runs taken over by
another host only once their lease expired (``interruption_detected`` naming the lost host, then
``resumed`` on another); no run left running; no traceback from any worker.
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from conftest import POSTGRES_URL, postgres_server
from netns import Host, Relay, namespaces_problem
from procs import read_lines, wait_until

from relaypoint import Runtime
from relaypoint.store import RunStore, open_store

RUNS = 20
STEPS = ("s1", "s2", "s3", "s4", "s5")
STEP_SLEEP = 0.3        # seconds each step sleeps
LEASE = 3.0             # seconds (RELAYPOINT_LEASE_SECONDS): the heartbeat renews it every second
WAIT = 90.0             # generous waits: a loaded two-core machine shared with other test runs

# What a worker prints: its start and stop, a line per run, and store errors met while polling.
WORKER_LINES = ("worker on ", "stopping: ", "run ", "cannot ", "the connection to ", "the PostgreSQL server ")
STATS_LINE = re.compile(r"\d+ runs? in flight, [\d,]+ boundaries/s(, [\d.]+ changes per transaction)? \(last \d+ s\)$")
LEASE_LOST = "no longer owns the run"  # the fence refused the host's write
LOST_SERVER = ("was lost", "cannot use the PostgreSQL server", "cannot connect")  # the store gave up

APP = "hostapp:workflows"
APP_SOURCE = r'''
"""A chain whose steps log each execution (host, run, step, attempt, token, start/end, time) and
return the host and token of the execution whose output is recorded. A step begun while the file
HOLD_DIR/<host name> exists and is empty runs on until that file is gone."""
import os, secrets, socket, time
from relaypoint import Workflow

LOGGING = True
STEPS = ("s1", "s2", "s3", "s4", "s5")
chain = Workflow("chain")


def _log(ctx, token, what):
    path = os.environ.get("EXEC_LOG")
    if LOGGING and path:
        line = f"{socket.gethostname()} {ctx.run_id} {ctx.step} {ctx.attempt} {token} {what} {time.time():.6f}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, line.encode())
        os.close(fd)


def _step(previous):
    def run(ctx):
        token = secrets.token_hex(6)
        _log(ctx, token, "start")
        time.sleep(float(ctx.input.get("sleep", 0)))
        hold = os.path.join(os.environ.get("HOLD_DIR", "/nonexistent"), socket.gethostname())
        if os.path.exists(hold) and not os.path.getsize(hold):
            while os.path.exists(hold):
                time.sleep(0.05)  # the test holds this host's steps
        n = ctx.input.get("n", 0) if previous is None else ctx.results[previous]["n"] + 1
        _log(ctx, token, "end")
        return {"n": n, "host": socket.gethostname(), "execution": token}
    return run


for i, name in enumerate(STEPS):
    chain.step(name=name)(_step(STEPS[i - 1] if i else None))

workflows = [chain]
'''


# ---- set-up -------------------------------------------------------------------------------------------

def need_namespaces(network: bool) -> None:
    """Skip (fail under CI) when this machine cannot make the namespaces."""
    problem = namespaces_problem(network)
    if problem is not None:
        why = f"several hosts on one machine need {'network and ' if network else ''}UTS namespaces: {problem}"
        if os.environ.get("CI"):
            pytest.fail(why + " [CI is set: the multi-host tests are required]", pytrace=False)
        pytest.skip(why)


@dataclass
class Cluster:
    """Hosts sharing the store at ``url`` (the test's own URL; a host in a network namespace reaches
    the server through the relay), the executions log, the queued runs (run id -> input ``n``)."""

    dir: Path
    url: str
    hosts: list[Host]
    runs: dict[str, int]

    @property
    def log(self) -> Path:
        return self.dir / "exec.log"

    def store(self) -> RunStore:
        return open_store(self.url)


def queue_runs(directory: Path, url: str) -> dict[str, int]:
    """``RUNS`` queued runs of the chain (forks of one run executed here, from its first step)."""
    spec = importlib.util.spec_from_file_location(f"hostapp_{secrets.token_hex(4)}", directory / "hostapp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.LOGGING = False
    with Runtime(url, module.workflows, create=True) as rt:
        base = rt.start("chain", {"n": 0})
        return {rt.fork(base, "s1", {"n": i, "sleep": STEP_SLEEP}): i for i in range(1, RUNS + 1)}


def relayed(url: str, address: str, port: int) -> str:
    """``url`` with its server replaced by a relay's ``address`` and ``port``."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{user + '@' if user else ''}{address}:{port}"))


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path, postgres_schema: str) -> Iterator[Cluster]:
    """Three hosts, each a worker (two threads) on the store; ``network`` (indirect param): each in a
    network namespace of its own behind a veth link. Every host and link is removed afterwards."""
    network = getattr(request, "param", False)
    need_namespaces(network)
    url = f"{postgres_server()}?schema={postgres_schema}"
    (tmp_path / "hostapp.py").write_text(APP_SOURCE)
    runs = queue_runs(tmp_path, url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p),
               EXEC_LOG=str(tmp_path / "exec.log"), HOLD_DIR=str(tmp_path), PYTHONUNBUFFERED="1",
               RELAYPOINT_LEASE_SECONDS=str(LEASE))
    target = urlsplit(POSTGRES_URL)
    relay = Relay((target.hostname or "127.0.0.1", target.port or 5432)) if network else None
    tag = secrets.token_hex(2)
    hosts: list[Host] = []
    try:
        for i in range(3):
            hosts.append(h := Host(f"rp-{tag}-host{i}", tmp_path, relay))
            db = relayed(url, h.server_address, h.port) if network else url
            h.start([sys.executable, "-m", "relaypoint", "--db", db, "worker", "--app", APP,
                     "--concurrency", "2", "--poll", "0.1"], env)
        yield Cluster(tmp_path, url, hosts, runs)
    finally:
        for h in hosts:
            h.stop()
        if relay is not None:
            relay.close()


# ---- reading what happened ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Execution:
    """One execution of a step, from the executions log: ``ended`` None if it never returned."""

    host: str
    run: str
    step: str
    attempt: int
    token: str
    started: float
    ended: float | None


def executions(log: Path) -> list[Execution]:
    starts: dict[str, tuple[str, ...]] = {}
    ends: dict[str, float] = {}
    for host, run, step, attempt, token, what, at in read_lines(log):
        if what == "start":
            starts[token] = (host, run, step, attempt, at)
        else:
            ends[token] = float(at)
    return [Execution(h, r, s, int(a), t, float(at), ends.get(t)) for t, (h, r, s, a, at) in starts.items()]


def in_flight(log: Path, host: str) -> list[Execution]:
    """Executions by ``host`` begun and not returned."""
    return [e for e in executions(log) if e.host == host and e.ended is None]


def held(store: RunStore, runs: dict[str, int], host: str) -> dict[str, datetime]:
    """Runs running under a lease of ``host``, with its expiry."""
    out = {}
    for rid in runs:
        head = store.run(rid, documents=False)
        if head.status == "running" and head.lease is not None and head.lease.host == host:
            out[rid] = head.lease.expires_at
    return out


def all_completed(store: RunStore, runs: dict[str, int]) -> bool:
    return all(store.run(rid, documents=False).status == "completed" for rid in runs)


def worker_err(host: Host) -> str:
    return host.err.read_text()


# ---- the contract -------------------------------------------------------------------------------------

def audit(store: RunStore, runs: dict[str, int], execs: list[Execution]) -> list[Execution]:
    """Assert that every run completed with each step's output recorded exactly once, by an execution
    that returned, the last attempt; returns the executions whose output was not recorded."""
    by_token = {e.token: e for e in execs}
    unrecorded: list[Execution] = []
    for rid, n in runs.items():
        head = store.run(rid, documents=False)
        assert head.status == "completed" and head.lease is None, (rid, head.status)
        steps = store.steps(rid)
        assert [(s.name, s.status) for s in steps] == [(name, "completed") for name in STEPS], rid
        events = store.events(rid)
        assert Counter(e.step for e in events if e.kind == "step_completed") == Counter(STEPS), rid
        assert [e.kind for e in events].count("run_completed") == 1, rid
        for s in steps:
            _, out = store.output(rid, s.seq)
            assert out["n"] == n + s.seq, (rid, s.name, out)  # each step read its predecessor's recorded output
            recorded = by_token[out["execution"]]
            assert (recorded.host, recorded.run, recorded.step) == (out["host"], rid, s.name)
            assert recorded.ended is not None
            ran = [e for e in execs if (e.run, e.step) == (rid, s.name)]
            attempts = sorted(e.attempt for e in ran)
            assert len(set(attempts)) == len(attempts) and recorded.attempt == attempts[-1] == s.attempts, \
                (rid, s.name, ran, s.attempts)
            unrecorded += [e for e in ran if e is not recorded]
    return unrecorded


def lost_runs(*hosts: Host) -> dict[str, set[str]]:
    """Runs each host's worker said it lost because the fence refused its write, by host name."""
    return {h.name: {line.split()[1].rstrip(":") for line in worker_err(h).splitlines()
                     if line.startswith("run ") and LEASE_LOST in line} for h in hosts}


def assert_taken_over(store: RunStore, rid: str, lost_host: str, owned: dict[str, datetime],
                      back: float | None) -> str:
    """Run ``rid``, one of ``owned`` (the runs the lost host's process held, with their leases'
    expiry), was marked interrupted, its owner on ``lost_host`` gone, only once a lease of that
    process expired (its runs are taken together: one lease lapsed, its heartbeats stopped), and
    resumed on another host, or on the lost host once it was ``back`` (a ``time.time()``) on the
    network; returns that host."""
    events = store.events(rid)
    (detected,) = [e for e in events if e.kind == "interruption_detected"]
    assert detected.detail["host"] == lost_host and detected.detail["cause"] == "owner died", detected
    assert detected.detail["co_executing"] == len(owned), (detected, owned)
    assert detected.at >= min(owned.values()), (detected.at, owned)  # lease expiry, not pid liveness, freed it
    resumed = [e for e in events if e.kind == "resumed" and e.event_id > detected.event_id]
    assert resumed and resumed[0].detail["previous_status"] == "interrupted", events
    assert resumed[0].detail["host"] != lost_host or (back is not None and resumed[0].at.timestamp() >= back), \
        (resumed[0], back)
    return resumed[0].detail["host"]


def worker_line(line: str) -> bool:
    """Whether ``line`` is one of the worker's own: a message of its, or its throughput line."""
    return (line.startswith(WORKER_LINES) or bool(STATS_LINE.match(line))) and "Traceback" not in line


def assert_clean(*hosts: Host) -> None:
    """Each host's worker printed only its own one-line messages: no traceback, no library's raw line."""
    for h in hosts:
        assert not h.out.read_text(), h.out.read_text()
        for line in worker_err(h).splitlines():
            assert worker_line(line), f"{h.name}: {line}"


def stop_gracefully(*hosts: Host, timeout: float = WAIT) -> list[int | None]:
    """SIGTERM each host's worker; their exit codes (None: still running after ``timeout``)."""
    for h in hosts:
        h.kill(signal.SIGTERM)
    return [h.wait(timeout) for h in hosts]


def wait_mid_step(c: Cluster, host: Host) -> list[Execution]:
    """Wait until ``host`` is in the middle of a step in each of its two threads."""
    return wait_until(lambda: len(in_flight(c.log, host.name)) >= 2 and in_flight(c.log, host.name), WAIT,
                      f"{host.name} to be in the middle of two steps")


# ---- the tests ----------------------------------------------------------------------------------------

def test_a_host_killed_mid_step_is_taken_over_once_its_lease_expires(cluster: Cluster) -> None:
    c = cluster
    lost, others = c.hosts[0], c.hosts[1:]
    wait_mid_step(c, lost)
    lost.kill()  # the whole process group, mid-step
    assert lost.wait(30) == -signal.SIGKILL
    with c.store() as store:
        cut_off = in_flight(c.log, lost.name)
        owned = held(store, c.runs, lost.name)
        assert cut_off and {e.run for e in cut_off} <= set(owned), (cut_off, owned)
        wait_until(lambda: all_completed(store, c.runs), WAIT, "every run to complete on the other hosts")
        assert stop_gracefully(*others) == [0, 0]
        execs, takers = assert_once(c, store, lost, cut_off, owned)
    assert_clean(*others)
    print(f"killed host: {len(owned)} runs taken over by {sorted(takers)}; "
          f"executions {len(execs)} for {RUNS * len(STEPS)} steps")


def cut_mid_step(c: Cluster, lost: Host, store: RunStore) -> tuple[float, list[Execution], dict[str, datetime]]:
    """Set ``lost``'s link down while it is in the middle of a step; returns when (``time.time()``),
    its executions that had not returned then (their boundaries cannot have reached the server) and
    the runs it held, with their leases' expiry."""
    wait_mid_step(c, lost)
    lost.cut()
    down = time.time()
    time.sleep(0.5)  # what the host sent before the cut has reached the server
    owned = held(store, c.runs, lost.name)
    cut_off = [e for e in executions(c.log) if e.host == lost.name and (e.ended is None or e.ended > down)]
    assert cut_off and {e.run for e in cut_off} <= set(owned), (cut_off, owned)
    return down, cut_off, owned


def taken_over(store: RunStore, rid: str) -> bool:
    """Run ``rid`` was claimed again once it had been marked interrupted (by whichever host)."""
    kinds = [e.kind for e in store.events(rid)]
    return "interruption_detected" in kinds and "resumed" in kinds[kinds.index("interruption_detected"):]


def revoked(store: RunStore, rid: str, lost_host: str) -> bool:
    """``lost_host`` no longer holds run ``rid`` (it was marked interrupted, or taken over)."""
    head = store.run(rid, documents=False)
    return head.lease is None or head.lease.host != lost_host


def lost_lines(host: Host, rids: set[str]) -> dict[str, str]:
    """The line ``host``'s worker printed on losing each run of ``rids`` it lost (the fence refused
    its write, or it gave up on the server while executing it)."""
    lines = {}
    for line in worker_err(host).splitlines():
        words = line.split()
        if len(words) > 2 and words[0] == "run" and words[1].rstrip(":") in rids and (
                LEASE_LOST in line or any(w in line for w in LOST_SERVER)):
            lines[words[1].rstrip(":")] = line
    return lines


def assert_once(c: Cluster, store: RunStore, lost: Host, cut_off: list[Execution],
                owned: dict[str, datetime], back: float | None = None) -> tuple[list[Execution], set[str]]:
    """The contract, once every run completed after host ``lost`` was lost with ``cut_off`` under
    way and ``owned`` held (see the module docstring); returns the executions and the hosts that
    took the owned runs over (the lost host among them only by a claim made once it was ``back``,
    a ``time.time()``, on the network)."""
    execs = executions(c.log)
    unrecorded = audit(store, c.runs, execs)
    takers = {assert_taken_over(store, rid, lost.name, owned, back) for rid in owned}
    # every step under way on the lost host was executed again elsewhere, and recorded from there
    assert {e.token for e in unrecorded} >= {e.token for e in cut_off}
    # a step was executed twice only where its executor was cut off before its boundary committed:
    # on the lost host, once at most in each run it held; elsewhere, where a worker lost the run
    per_run = Counter(e.run for e in unrecorded if e.host == lost.name)
    assert per_run.keys() <= owned.keys() and set(per_run.values()) == {1}, (per_run, owned)
    lost_by = lost_runs(*c.hosts)
    for e in unrecorded:
        assert e.host == lost.name or e.run in lost_by.get(e.host, ()), e
    return execs, takers


@pytest.mark.parametrize("cluster", [True], indirect=True, ids=["netns"])
def test_a_host_cut_off_mid_step_is_taken_over_and_refused_when_its_link_is_back(cluster: Cluster) -> None:
    from relaypoint.store.pg_connect import SILENT_PEER_SECONDS  # (psycopg is there: the fixture made a store)

    c = cluster
    lost = c.hosts[0]
    hold = c.dir / lost.name  # the host's steps begun before its link is back run on until this goes
    hold.touch()
    try:
        with c.store() as store:
            down, cut_off, owned = cut_mid_step(c, lost, store)
            wait_until(lambda: all(revoked(store, rid, lost.name) for rid in owned), WAIT,
                       "the cut-off host's leases to be revoked")
            back = time.time()
            hold.write_text("back")  # what the host begins from now on is not held
            lost.restore()
            held_steps = in_flight(c.log, lost.name)
            # the runs are taken over while the lost host's threads are still in their steps: by
            # another host, or by the lost host itself once back (its lost runs free its slots)
            wait_until(lambda: all(taken_over(store, rid) for rid in owned), WAIT, "the runs to be taken over")
            hold.unlink()
            wait_until(lambda: lost_lines(lost, set(owned)).keys() == owned.keys(), WAIT,
                       "the host back on the network to say it lost its runs")
            wait_until(lambda: all_completed(store, c.runs), WAIT, "every run to complete")
            assert stop_gracefully(*c.hosts) == [0, 0, 0]
            execs, takers = assert_once(c, store, lost, cut_off, owned, back)
    finally:
        hold.unlink(missing_ok=True)
    # steps that returned once the link was back: what they would record was refused by the fence
    # (their boundary, or the heartbeat first), and the host said so in one line. (Had the link
    # stayed down longer than the store keeps a silent connection, the host would have given up on
    # the server instead, as in the next test.)
    said = lost_lines(lost, set(owned))
    assert held_steps and {e.run for e in held_steps} <= owned.keys()
    for e in held_steps:
        assert LEASE_LOST in said[e.run] or back - down > SILENT_PEER_SECONDS - 1, (said[e.run], back - down)
    assert_clean(*c.hosts)
    print(f"cut-off host, link back {back - down:.1f} s after the cut: {len(owned)} runs taken over by "
          f"{sorted(takers)}; executions {len(execs)} for {RUNS * len(STEPS)} steps; the host said: "
          f"{sorted(said.values())}")


@pytest.mark.parametrize("cluster", [True], indirect=True, ids=["netns"])
def test_a_host_whose_link_never_comes_back_is_taken_over_and_still_stops(cluster: Cluster) -> None:
    c = cluster
    lost = c.hosts[0]
    with c.store() as store:
        _, cut_off, owned = cut_mid_step(c, lost, store)
        wait_until(lambda: all_completed(store, c.runs), WAIT, "every run to complete on the other hosts")
        # the cut-off worker gives up on the server it cannot reach: SIGTERM stops it
        assert stop_gracefully(*c.hosts) == [0, 0, 0]
        assert_once(c, store, lost, cut_off, owned)
    said = lost_lines(lost, set(owned))
    assert said.keys() == owned.keys(), worker_err(lost)
    assert not [line for line in said.values() if LEASE_LOST in line]  # it never reached the server again
    assert_clean(*c.hosts)


# ---- a client gone silent inside a transaction --------------------------------------------------------

SILENT_CLIENT = r'''
import os, signal, sys
from relaypoint.store import open_store
store = open_store(sys.argv[1])
try:
    with store.transaction():  # the store's write lock, held
        store.count_by_status()
        print("holding", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
except Exception as e:
    print(f"{type(e).__name__}: {e}", flush=True)
'''


def test_a_client_gone_silent_inside_a_transaction_does_not_hold_the_store(tmp_path: Path,
                                                                          postgres_schema: str) -> None:
    """What a host cut off inside a store transaction leaves on the server, without namespaces: a
    process stopped there (its session idle in the transaction, its connection alive). The server
    ends that session, so other writers get the store's write lock (they waited forever, each one
    failing ``StoreBusy`` after the busy timeout); the stopped process, continued, is told its
    transaction was not recorded."""
    url = f"{postgres_server()}?schema={postgres_schema}"
    open_store(url, create=True).close()
    silent = subprocess.Popen([sys.executable, "-c", SILENT_CLIENT, url], stdout=subprocess.PIPE, text=True)
    try:
        assert silent.stdout.readline().strip() == "holding"
        wait_until(lambda: Path(f"/proc/{silent.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T",
                   30, "the client to stop inside its transaction")
        with open_store(url) as other:
            with other.transaction():  # waits for the lock the silent client held, then gets it
                assert other.count_by_status() == {}
    finally:
        os.kill(silent.pid, signal.SIGCONT)
    out, _ = silent.communicate(timeout=30)
    assert out.startswith("StoreUnreachable: ") and "not recorded" in out and len(out.splitlines()) == 1, out


# ---- a server that vanishes -----------------------------------------------------------------------------

def test_a_worker_whose_server_vanishes_says_so_once_a_poll_and_stops(tmp_path: Path, postgres_schema: str) -> None:
    """A worker reaching the server through a relay that goes away mid-step (connections lost, new
    ones refused): one line for the run it was executing, then one line a poll for the store; never
    a line per queued run it could not even claim; SIGTERM stops it."""
    url = f"{postgres_server()}?schema={postgres_schema}"
    (tmp_path / "hostapp.py").write_text(APP_SOURCE)
    runs = queue_runs(tmp_path, url)
    target = urlsplit(POSTGRES_URL)
    relay = Relay((target.hostname or "127.0.0.1", target.port or 5432))
    port = relay.listen("127.0.0.1")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    env.update(PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH", "")) if p),
               EXEC_LOG=str(tmp_path / "exec.log"), PYTHONUNBUFFERED="1")
    err = tmp_path / "worker.err"
    with open(err, "w") as stderr:
        worker = subprocess.Popen([sys.executable, "-m", "relaypoint", "--db", relayed(url, "127.0.0.1", port), "worker",
                                   "--app", APP, "--poll", "0.1"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        (executing,) = wait_until(lambda: [e for e in executions(tmp_path / "exec.log") if e.ended is None], WAIT,
                                  "the worker to be in the middle of a step")
        relay.close()
        wait_until(lambda: f"run {executing.run}: " in err.read_text(), WAIT, "the worker to say it lost the run")
        wait_until(lambda: err.read_text().count("refused the connection") >= 5, WAIT, "five polls")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(WAIT) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    lines = err.read_text().splitlines()
    assert {line.split()[1].rstrip(":") for line in lines if line.startswith("run ")} == {executing.run}, lines
    assert len(runs) > 1 and all(map(worker_line, lines)), lines
