"""``relaypoint serve``: the console in a web browser. A real server process on a real store, driven
from headless Chromium (tests/browser_console.py): the page asks for a name, the runs table
appears, key presses approve a paused run, the store records the decision under that name; the
store's URL reaches each browser session's console by environment, never on a command line. And
the refusals: a host that is not loopback, a port in use. Who may use the server (the token, the
name, Host and Origin): tests/test_serve_access.py."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from browser_console import INSTALL, BrowserTerminal, browser_problem, chromium_page, free_port, served
from fixtures import build_fixture_store, build_research_store
from helpers import one_line_error, relaypoint

from relaypoint import Runtime, RunStatus
from relaypoint.store import Lookup

PASSWORD = "s3cret-in-url"
COMMENT = "approved in a browser"
NAME = "<i>Ada</i> [bold]L[/bold] '$(touch pwned)'"
"""Who decides, as typed into the page: HTML, Rich markup and shell syntax, all kept literally."""


def need_browser() -> None:
    """Skip (fail under CI) when Playwright or Chromium is missing."""
    problem = browser_problem()
    if problem is not None:
        why = f"{problem}: the browser test needs {INSTALL}"
        if os.environ.get("CI"):
            pytest.fail(why + " [CI is set: the browser test is required]", pytrace=False)
        pytest.skip(why)


def with_password(url: str) -> str:
    """The PostgreSQL ``url`` with :data:`PASSWORD` as its password (the test server trusts, so it
    is not checked: it only has to stay off every command line)."""
    parts = urlsplit(url)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0] or 'postgres'}:{PASSWORD}@{host}"))


def test_a_run_is_approved_from_a_browser_and_the_store_records_it(db: str, tmp_path: Path):
    need_browser()
    postgres = db.startswith("postgresql://")
    url = with_password(db) if postgres else db
    runs = build_fixture_store(url)
    paused = runs["awaiting_approval"]
    with Runtime(url, create=False) as rt:
        order = [r.run_id for r in rt.list(limit=100)]  # the runs table's order: newest first
    elsewhere = tmp_path / "elsewhere"  # the console does not find the store by its directory
    elsewhere.mkdir()
    port = str(free_port())
    # SQLite: --db on the command line; PostgreSQL: the URL with its password in RELAYPOINT_DB.
    args, env = (["serve", "--port", port], {"RELAYPOINT_DB": url}) if postgres else \
        (["--db", url, "serve", "--port", port], {})

    with served(elsewhere, *args, env=env) as server, chromium_page() as page:
        terminal = BrowserTerminal(page, server, name=NAME)
        terminal.wait_for_text(paused[:8])
        assert "awaiting_approval" in terminal.text()
        assert f"as {NAME}" in terminal.lines()[-2]  # the status line says under which name you decide
        terminal.press(*["j"] * order.index(paused))  # the cursor starts on the newest run
        terminal.wait_for_text(f"Run {paused[:8]}")  # its detail, beside the table
        terminal.press("a")
        terminal.wait_for_text("Comment (optional)")
        terminal.type(COMMENT)
        terminal.press("Control+s")
        terminal.wait_for(lambda lines: any(paused[:8] in line and "queued" in line for line in lines),
                          "the approved run shown queued in the runs table")

        commands = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    for pid in server.session_pids()]
        consoles = [c for c in commands if " console" in c]
        assert consoles, commands  # the browser session's console runs in the server's session
        assert not [c for c in consoles if url in c]
        assert not [c for c in commands if PASSWORD in c]

        server.process.send_signal(signal.SIGTERM)  # stops the server, the session and its console
        assert server.process.wait(30) == 0, server.output()
        deadline = time.monotonic() + 10
        while server.session_pids():
            assert time.monotonic() < deadline, f"left running: {server.session_pids()}"
            time.sleep(0.1)

    with Runtime(url, create=False) as rt:
        assert rt.get(paused).status == RunStatus.QUEUED
        approved = [e for e in rt.events(paused) if e.kind == "approved"]
        decided = rt.store.checkpoint(paused, Lookup.LAST_PAUSE)
    assert len(approved) == 1
    assert approved[0].detail["comment"] == COMMENT
    assert approved[0].actor == NAME
    assert decided.decided_by == NAME
    assert not list(elsewhere.glob("pwned"))


def test_the_review_screen_in_a_browser_shows_the_gated_steps_calls_and_usage(tmp_path: Path):
    """``serve`` is the same console: the research example at its gate, from the review queue."""
    need_browser()
    pytest.importorskip("pydantic_ai")
    build_research_store(str(tmp_path / "store.db"))
    with served(tmp_path, "--db", "store.db", "serve", "--port", str(free_port())) as server, \
            chromium_page() as page:
        terminal = BrowserTerminal(page, server)
        terminal.wait_for_text("research")
        terminal.press("n")  # the review queue, its one pending decision
        terminal.wait_for_text("8 requests, 1,217 in / 306 out tokens, $0.0067 (the run so far)")
        for _ in range(10):  # down the review's body to the writer's calls under the output
            if "tool call web_search" in terminal.text():
                break
            terminal.press("PageDown")
            time.sleep(0.3)
        terminal.wait_for_text("usage  2 requests, 359 in / 138 out tokens, $0.0031")
        terminal.wait_for_text("1 model request · canned-writer")
        terminal.wait_for_text("tool call web_search")


@pytest.mark.parametrize("listen, name", [([], "localhost"), (["--host", "0.0.0.0", "--public"], "127.0.0.1")],
                         ids=["loopback-opened-as-localhost", "public-opened-by-address"])
def test_the_page_works_under_the_name_the_browser_used_and_asks_nothing_of_other_sites(
        tmp_path: Path, listen: list[str], name: str):
    need_browser()
    build_fixture_store(str(tmp_path / "store.db"))
    port = free_port()
    with served(tmp_path, "--db", "store.db", "serve", *listen, "--port", str(port)) as server, \
            chromium_page() as page:
        requests: list[str] = []
        page.on("request", lambda request: requests.append(request.url))
        page.on("websocket", lambda websocket: requests.append(websocket.url))
        terminal = BrowserTerminal(page, server, f"http://{name}:{port}/?token={server.token}")
        # the key bar is drawn on load, before any key or click
        terminal.wait_for(lambda lines: "Quit" in lines[-1] and "Help" in lines[-1], "the key bar on the last row")
        assert "awaiting_approval" in terminal.text()
    assert f"ws://{name}:{port}/ws?" in " ".join(requests)
    assert f"http://{name}:{port}/static/fonts/RobotoMono-VariableFont_wght.ttf" in requests
    assert [url for url in requests if urlsplit(url).netloc != f"{name}:{port}"] == []


def test_the_address_opened_from_a_link_on_another_site_opens_the_console(tmp_path: Path):
    # A teammate clicks the printed address in a chat or a mail: a navigation from another site,
    # whose redirect (dropping the token from the address) must still carry the token's cookie.
    need_browser()
    build_fixture_store(str(tmp_path / "store.db"))
    port = str(free_port())
    with served(tmp_path, "--db", "store.db", "serve", "--port", port) as server, chromium_page() as page:
        page.route("http://chat.example/", lambda route: route.fulfill(
            content_type="text/html", body=f'<a id="link" href="{server.url}">the console</a>'))
        page.goto("http://chat.example/")
        page.click("#link")
        page.wait_for_selector("#name-form", timeout=30_000)
        assert page.url == f"http://127.0.0.1:{port}/"
        page.fill("#name", "Ada")
        page.press("#name", "Enter")
        page.wait_for_selector("body.-first-byte", state="attached", timeout=60_000)


def test_a_host_that_is_not_loopback_needs_public(tmp_path: Path):
    build_fixture_store(str(tmp_path / "store.db"))
    error = one_line_error(relaypoint(tmp_path, "serve", "--host", "192.0.2.1", "--port", str(free_port())))
    assert "not a loopback address" in error and "plain HTTP" in error and "--public" in error
    # with --public, it is the address that is refused: this machine has none of TEST-NET-1's
    error = one_line_error(relaypoint(tmp_path, "serve", "--host", "192.0.2.1", "--port", str(free_port()), "--public"))
    assert "cannot listen on 192.0.2.1" in error and "no such address" in error
    error = one_line_error(relaypoint(tmp_path, "serve", "--host", "no-such-host.invalid"))
    assert "cannot serve on host 'no-such-host.invalid'" in error


def test_a_port_in_use_is_one_line(tmp_path: Path):
    build_fixture_store(str(tmp_path / "store.db"))
    port = str(free_port())
    with served(tmp_path, "--db", "store.db", "serve", "--port", port) as server:
        assert "serving the console at http://127.0.0.1:" in server.err.read_text()
        error = one_line_error(relaypoint(tmp_path, "serve", "--port", port))
        assert f"cannot listen on 127.0.0.1 port {port}: the port is in use" in error
    done = relaypoint(tmp_path, "serve", "--port", "0")
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
