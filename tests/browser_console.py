"""Driving ``relaypoint serve`` from headless Chromium through Playwright: start the server as a real
process, open its page, read the text of the browser's terminal, press keys into it.

textual-serve draws the console with xterm.js on a canvas, so the page holds no text to read.
:class:`BrowserTerminal` finds the page's xterm.js ``Terminal`` object on the JavaScript heap
(Chrome DevTools Protocol ``Runtime.queryObjects``: every object, kept where xterm's public API
answers) and reads the lines of its buffer: what the terminal shows, as xterm.js holds it.
Nothing in the served page is changed, and nothing is focused for it: keys go where a person's
would, into what the page focused (the terminal's text area), through xterm.js's keyboard handling
and the WebSocket.

Chromium is Debian's (``/usr/bin/chromium``), never one ``playwright install`` would download.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

CHROMIUM = "/usr/bin/chromium"
START_SECONDS = 60.0
"""How long the server may take to listen, and the console to draw its first screen."""

REVIEWER = "Test Reviewer"
"""The name :class:`BrowserTerminal` gives when the page asks who decides."""

INSTALL = ("pip install -e '.[test]' (Playwright) and Debian's chromium at /usr/bin/chromium "
           "(apt-get install -y --no-install-recommends chromium)")

_FIND_TERMINAL = """function () {
  const found = this.filter(o => {
    try { return typeof o.onData === 'function' && typeof o.buffer.active.getLine === 'function'; }
    catch (e) { return false; }
  });
  if (found.length === 1) { window.__relaypointTerminal = found[0]; }
  return found.length;
}"""

_READ_LINES = """() => {
  const term = window.__relaypointTerminal, buffer = term.buffer.active, lines = [];
  for (let y = 0; y < term.rows; y++) { lines.push(buffer.getLine(buffer.viewportY + y).translateToString(true)); }
  return lines;
}"""


def browser_problem() -> str | None:
    """Why the browser tests cannot run here (None: Playwright and Chromium are installed)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    """A running ``relaypoint serve``: its process (the leader of its own session), the page's
    URL on 127.0.0.1 with the token the server printed, that token, and the files its stdout and
    stderr go to."""

    process: subprocess.Popen
    url: str
    token: str
    out: Path
    err: Path

    def output(self) -> str:
        """What the server printed so far (stdout, then stderr)."""
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def session_pids(self) -> list[int]:
        """The pids of the server's session: the server and every console it started."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:  # gone meanwhile
                    continue
                if int(stat.rpartition(")")[2].split()[3]) == self.process.pid:  # field 6: session id
                    pids.append(int(entry.name))
        return pids


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, then (after 10 s at most) SIGKILL to what is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _printed_token(err: Path) -> str | None:
    """The token in the address ``relaypoint serve`` printed (``serving the console at URL``), once printed."""
    found = re.search(r"serving the console at (\S+)", err.read_text(errors="replace"))
    return None if found is None else parse_qs(urlsplit(found[1]).query).get("token", [""])[0]


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextmanager
def served(cwd: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """Run ``python -m relaypoint ARGS`` (a ``serve`` command, with ``--port``) in ``cwd`` in a
    session of its own, with the RELAYPOINT_* variables of this process cleared (``env`` adds
    variables), and wait until it has printed its address and listens. The process group is
    stopped on exit."""
    port = int(args[args.index("--port") + 1])
    base = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    out, err = cwd / "serve.out", cwd / "serve.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "relaypoint", *args], cwd=cwd, env={**base, **(env or {})},
                                   stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise AssertionError(f"relaypoint serve exited ({process.returncode}): "
                                     f"{out.read_text(errors='replace')}{err.read_text(errors='replace')}")
            token = _printed_token(err)
            if token is not None and _listens(port):
                break
            assert time.monotonic() < deadline, f"relaypoint serve did not listen: {err.read_text(errors='replace')}"
            time.sleep(0.1)
        yield Served(process, f"http://127.0.0.1:{port}/?token={quote(token, safe='')}" if token else
                     f"http://127.0.0.1:{port}/", token, out, err)
    finally:
        _stop(process)


class BrowserTerminal:
    """The served console in a Playwright page: open it (at ``url``, by default the server's at
    127.0.0.1 with its token), give ``name`` when the page asks who decides, read its lines, press
    keys."""

    def __init__(self, page: Any, server: Served, url: str | None = None, name: str = REVIEWER) -> None:
        self.page = page
        self.server = server
        page.goto(url or server.url)
        from playwright.sync_api import TimeoutError

        drawn = "body.-first-byte, body.-closed"  # the console sent its first screen, or its session ended
        try:
            if page.wait_for_selector(f"{drawn}, #name-form", state="attached",
                                      timeout=START_SECONDS * 1000).get_attribute("id") == "name-form":
                page.fill("#name", name)
                page.press("#name", "Enter")
                page.wait_for_selector(drawn, state="attached", timeout=START_SECONDS * 1000)
        except TimeoutError:
            raise AssertionError(f"the console drew nothing; the page: {page.content()[:2000]}\n"
                                 f"the server printed: {server.output()}") from None
        assert not self._closed(), f"the console's session ended at once; the server printed: {server.output()}"
        cdp = page.context.new_cdp_session(page)
        prototype = cdp.send("Runtime.evaluate", {"expression": "Object.prototype"})["result"]["objectId"]
        heap = cdp.send("Runtime.queryObjects", {"prototypeObjectId": prototype})["objects"]["objectId"]
        found = cdp.send("Runtime.callFunctionOn", {"functionDeclaration": _FIND_TERMINAL, "objectId": heap,
                                                    "returnByValue": True})["result"]["value"]
        cdp.detach()
        assert found == 1, f"expected the page's one xterm.js terminal, found {found}"

    def lines(self) -> list[str]:
        """The terminal's rows, as shown."""
        return self.page.evaluate(_READ_LINES)

    def text(self) -> str:
        """The terminal's rows as one text."""
        return "\n".join(self.lines())

    def wait_for(self, condition: Callable[[list[str]], bool], what: str, timeout: float = START_SECONDS) -> None:
        """Wait until ``condition(lines)`` holds; fail naming ``what``, with the screen, after
        ``timeout`` seconds, or at once when the console's session ended."""
        deadline = time.monotonic() + timeout
        while not condition(self.lines()):
            closed = self._closed()
            assert not closed and time.monotonic() < deadline, \
                (f"{'the session ended' if closed else 'timed out'} waiting for {what}; the screen:\n{self.text()}\n"
                 f"the server printed: {self.server.output()}")
            time.sleep(0.1)

    def _closed(self) -> bool:
        return "-closed" in self.page.evaluate("document.body.className")

    def wait_for_text(self, text: str, timeout: float = START_SECONDS) -> None:
        """Wait until ``text`` is on the screen."""
        self.wait_for(lambda lines: any(text in line for line in lines), repr(text), timeout)

    def press(self, *keys: str) -> None:
        """Press each key (Playwright's names: ``j``, ``Control+s``)."""
        for key in keys:
            self.page.keyboard.press(key)

    def type(self, text: str) -> None:
        """Type ``text``, a key per character."""
        self.page.keyboard.type(text)


@contextmanager
def chromium_page(width: int = 1600, height: int = 900) -> Iterator[Any]:
    """A page of headless Debian Chromium, ``width`` x ``height`` CSS pixels."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()
