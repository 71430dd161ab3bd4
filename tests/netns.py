"""Several "hosts" on this machine, for tests/test_multihost.py.

A :class:`Host` is a process group started by ``unshare`` in a UTS namespace of its own, with its
own host name (``socket.gethostname()``, relaypoint's host identity: the engine itself sees another
machine, with no knob in the product), and, given a :class:`Relay`, a network namespace of its own
whose only link is a veth pair to this namespace: the host reaches PostgreSQL through the relay
listening on the root side of its link, and :meth:`Host.cut` sets the link down.

The namespaces are anonymous: they live as long as the host's processes, so nothing is left behind
when the group dies (a veth pair goes with its namespace), and the group's first process dies with
the test process; :meth:`Host.stop` kills the group and deletes the root side of the link all the
same, for a test that fails half-way.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import ipaddress
import os
import random
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1  # prctl(2)
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: a forked child only calls it

# The host's first process: names the host, waits until its link is set up, then becomes the command.
_HOST_INIT = 'hostname "$1" && while [ ! -e "$2" ]; do sleep 0.02; done && shift 2 && exec "$@"'


def _die_with_parent() -> None:
    """In a host's first process, before it runs anything: SIGKILL it when the test process dies
    (even SIGKILLed itself), so that no host, and so no namespace, outlives the test."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()}")


_ROUTE_TYPES = {"unicast", "local", "broadcast", "multicast", "anycast", "blackhole", "unreachable", "prohibit",
                "throw", "nat"}


def _free_subnet() -> ipaddress.IPv4Network:
    """A /30 of 10.0.0.0/8 chosen at random among those no route of this namespace covers (tests
    running at once, and the machine's own networks, are left alone)."""
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True,
                            timeout=30).stdout.splitlines()
    taken = []
    for words in (line.split() for line in routes):
        try:  # "10.1.2.0/24 dev ...", "local 10.1.2.3 dev ...", "broadcast ...", or "default ..."
            taken.append(ipaddress.ip_network(words[1] if words[0] in _ROUTE_TYPES else words[0], strict=False))
        except (IndexError, ValueError):
            continue
    while True:
        subnet = ipaddress.ip_network(f"10.{random.randrange(256)}.{random.randrange(256)}.{random.randrange(64) * 4}/30")
        if not any(subnet.overlaps(t) for t in taken):
            return subnet


@functools.cache
def namespaces_problem(network: bool) -> str | None:
    """Why this machine cannot give a process its own UTS (and, with ``network``, network)
    namespace with a veth link (None: it can)."""
    if os.geteuid() != 0:
        return "making UTS and network namespaces needs root"
    tools = ["unshare", "hostname"] + (["ip", "nsenter"] if network else [])
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    try:
        _run("unshare", "--uts", *(["--net"] if network else []), "--", "hostname", "rp-probe")
        if network:  # a veth pair (the kernel module may be missing)
            name = f"rpp{secrets.token_hex(3)}"
            _run("ip", "link", "add", name, "type", "veth", "peer", "name", name + "n")
            _run("ip", "link", "del", name)
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    return None


class Relay:
    """TCP relays in this process (an asyncio loop on a thread): each :meth:`listen` forwards the
    connections made to an address of this namespace to ``target`` (host, port)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.loop = asyncio.new_event_loop()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task] = set()
        self._thread = threading.Thread(target=self.loop.run_forever, name="relay", daemon=True)
        self._thread.start()

    def listen(self, address: str, port: int = 0) -> int:
        """Start relaying connections made to ``address``:``port`` (0: a free port); returns the port."""
        async def start() -> asyncio.Server:
            return await asyncio.start_server(self._relay, address, port)

        server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        up_writer = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            for w in (writer, up_writer):
                if w is not None:
                    w.close()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:  # one side gone: the other one goes too, as a dropped connection would
            writer.close()

    def close(self) -> None:
        """Stop listening and drop every relayed connection (the server is gone: connections are
        lost, new ones refused)."""
        async def stop() -> None:
            for server in self._servers:
                server.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.loop.close()


class Host:
    """One host: ``argv`` run as a process group of its own named ``name`` (a UTS namespace), its
    output in ``log_dir``/``name``.out and .err; with ``relay``, in a network namespace of its
    own too, linked to this one by a veth pair: it reaches the relay's target at
    ``self.server_address``, port ``port`` (the root side of its link)."""

    def __init__(self, name: str, log_dir: Path, relay: Relay | None = None, port: int = 5432) -> None:
        self.name = name
        self.relay = relay
        self.log_dir = Path(log_dir)
        self.proc: subprocess.Popen | None = None
        tag = secrets.token_hex(3)
        self.veth = f"rp{tag}h"  # the root side (at most 15 characters)
        self.peer = f"rp{tag}n"
        subnet = _free_subnet()
        self.server_address, self.address = (str(a) for a in subnet.hosts())
        self.port = port

    @property
    def out(self) -> Path:
        return self.log_dir / f"{self.name}.out"

    @property
    def err(self) -> Path:
        return self.log_dir / f"{self.name}.err"

    def start(self, argv: Sequence[str], env: dict[str, str], timeout: float = 30.0) -> None:
        """Start the host's process group running ``argv`` with ``env`` in ``log_dir``; returns once
        its link is up (the command runs from then on)."""
        go = self.log_dir / f".go-{self.name}"
        go.unlink(missing_ok=True)
        unshare = ["unshare", "--uts"] + (["--net"] if self.relay is not None else [])
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [*unshare, "--", "sh", "-c", _HOST_INIT, "host", self.name, str(go), *argv],
                env=env, cwd=self.log_dir, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True, preexec_fn=_die_with_parent)
        if self.relay is not None:
            self._link(timeout)
        go.touch()

    def _link(self, timeout: float) -> None:
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + timeout
        pid = str(self.proc.pid)
        while True:  # until unshare made the namespace (before it runs sh)
            try:
                if os.readlink(f"/proc/{pid}/ns/net") != mine:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise OSError(f"host {self.name} did not get a network namespace: {self.err.read_text()}")
            time.sleep(0.01)
        _run("ip", "link", "add", self.veth, "type", "veth", "peer", "name", self.peer, "netns", pid)
        _run("ip", "addr", "add", f"{self.server_address}/30", "dev", self.veth)
        _run("ip", "link", "set", self.veth, "up")
        for cmd in (["ip", "addr", "add", f"{self.address}/30", "dev", self.peer],
                    ["ip", "link", "set", self.peer, "up"], ["ip", "link", "set", "lo", "up"]):
            _run("nsenter", "-t", pid, "-n", *cmd)
        self.relay.listen(self.server_address, self.port)

    def cut(self) -> None:
        """Set the host's link down: nothing reaches it, nothing it sends gets through."""
        _run("ip", "link", "set", self.veth, "down")

    def restore(self) -> None:
        """Set the host's link up again."""
        _run("ip", "link", "set", self.veth, "up")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the host's whole process group."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> int | None:
        """The exit code once the host's first process ended (None if it outlives ``timeout``)."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """Kill the process group and delete the root side of the link (if still there)."""
        if self.proc is not None:
            self.kill()
            self.proc.wait(30)
        if self.relay is not None:
            subprocess.run(["ip", "link", "del", self.veth], capture_output=True, timeout=30)

