"""Who may use ``relaypoint serve``, over real HTTP to a real server process: every path needs the
token (in the address once, then in the cookie it sets), the page asks for a name (bounded, kept
literally) that the WebSocket needs, a fixed token comes from ``--token-file``, and requests another
site could make through the user's browser (a rebound Host, another Origin) are refused on every path."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from email.message import Message
from http.client import HTTPConnection
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit

import pytest
from browser_console import free_port, served
from fixtures import build_fixture_store
from helpers import one_line_error, relaypoint

HANDSHAKE = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
             "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
PATHS = ["/", "/?fontsize=20", "/static/js/textual.js", "/static/", "/static/css/xterm.css",
         "/download/0123456789abcdef", "/name", "/no-such-page"]
"""Every kind of address the server answers (the WebSocket is tried apart, with its handshake)."""


@dataclass
class Answer:
    status: int
    headers: Message
    text: str


@dataclass
class Client:
    """Requests to the server at 127.0.0.1:``port`` with the headers exactly as given (http.client
    adds none it is given), keeping the cookies the server sets, as a browser would."""

    port: int
    cookies: SimpleCookie = field(default_factory=SimpleCookie)

    def request(self, method: str, path: str, body: str | None = None, **headers: str) -> Answer:
        jar = "; ".join(f"{k}={m.coded_value}" for k, m in self.cookies.items())
        sent = {**({"Cookie": jar} if jar else {}), **headers}
        connection = HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            answer = Answer(response.status, response.headers, "" if response.status == 101 else
                            response.read().decode(errors="replace"))
        finally:
            connection.close()
        for line in answer.headers.get_all("Set-Cookie") or []:
            self.cookies.load(line)
        return answer

    def get(self, path: str, **headers: str) -> Answer:
        return self.request("GET", path, **headers)

    def websocket(self, **headers: str) -> int:
        return self.get("/ws?width=80&height=24", **HANDSHAKE, **headers).status

    def give_name(self, name: str, **headers: str) -> Answer:
        return self.request("POST", "/name", urlencode({"name": name}),
                            **{"Content-Type": "application/x-www-form-urlencoded", **headers})


@pytest.fixture
def store(tmp_path: Path) -> Path:
    build_fixture_store(str(tmp_path / "store.db"))
    return tmp_path


def serve(cwd: Path, *args: str):
    port = str(free_port())
    return served(cwd, "--db", "store.db", "serve", *args, "--port", port)


def port_of(server) -> int:
    return int(urlsplit(server.url).port)


def signed_in(server, name: str = "Ada") -> Client:
    """A client holding the token's cookie and the name's."""
    client = Client(port_of(server))
    assert client.get(f"/?token={quote(server.token)}").status == 303
    assert client.give_name(name).status == 303
    return client


def test_the_printed_address_carries_a_fresh_token(store: Path):
    tokens = []
    for _ in range(2):
        with serve(store) as server:
            line = server.err.read_text()
            assert f"serving the console at {server.url} " in line
            assert server.token and len(server.token) >= 32
            tokens.append(server.token)
    assert tokens[0] != tokens[1]


def test_without_the_token_every_path_is_refused(store: Path):
    with serve(store) as server:
        client = Client(port_of(server))
        for path in PATHS:
            answer = client.get(path)
            assert answer.status == 401, (path, answer.status, answer.text)
            assert "token" in answer.text and "printed" in answer.text, answer.text
        assert client.websocket() == 401
        assert client.give_name("Ada").status == 401
        wrong = f"{server.token[:-1]}{'A' if server.token[-1] != 'A' else 'B'}"
        for path in ("/?token=" + quote(wrong), "/static/js/textual.js?token=" + quote(wrong), "/?token="):
            answer = client.get(path)
            assert answer.status == 401 and "wrong token" in answer.text, (path, answer.status, answer.text)
        client.cookies[f"relaypoint-token-{client.port}"] = wrong  # a cookie with another token
        assert client.get("/").status == 401
        assert client.websocket() == 401
        assert not client.cookies.get(f"relaypoint-name-{client.port}")


def test_the_token_sets_a_cookie_that_lets_later_requests_in_once_a_name_is_given(store: Path):
    with serve(store) as server:
        client = Client(port_of(server))
        answer = client.get(f"/?fontsize=20&token={quote(server.token)}")
        assert answer.status == 303
        assert answer.headers["Location"] == "/?fontsize=20"  # the token leaves the address bar
        cookie = client.cookies[f"relaypoint-token-{client.port}"]  # one per port: two servers do not mix
        assert cookie.value == server.token
        assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"

        page = client.get("/")
        assert page.status == 200 and 'id="name-form"' in page.text  # who decides, asked first
        assert client.get("/static/js/textual.js").status == 200
        assert client.get("/download/0123456789abcdef").status == 404  # past the guard: no such download
        assert client.websocket() == 403  # no console before a name

        given = client.give_name("  Ada Lovelace  ")
        assert given.status == 303 and given.headers["Location"] == "/"
        name = client.cookies[f"relaypoint-name-{client.port}"]
        assert name["httponly"] and name["samesite"] == "Lax"
        page = client.get("/")
        assert page.status == 200 and "/static/js/textual.js" in page.text and 'id="name-form"' not in page.text
        assert "Ada Lovelace" in page.text  # the page says under which name you decide
        assert client.websocket() == 101
        form = client.get("/name")  # to change the name
        assert form.status == 200 and 'value="Ada Lovelace"' in form.text
        deadline = time.monotonic() + 10  # the access log names the request, without its token
        while "GET /?fontsize=20&token=(hidden) " not in server.err.read_text():
            assert time.monotonic() < deadline, server.err.read_text()
            time.sleep(0.1)
        assert server.err.read_text().count(server.token) == 1  # in the address printed, only


def test_a_request_the_server_cannot_parse_is_logged_without_the_token(store: Path):
    # aiohttp logs such a request with its raw header lines: a cookie's token among them
    with serve(store) as server:
        port = port_of(server)
        raw = (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: relaypoint-token-{port}={server.token}\n"
               f"{server.token}\r\n\r\n").encode()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(raw)
            assert b" 400 " in sock.recv(4096).split(b"\r\n", 1)[0]
        deadline = time.monotonic() + 10
        while "(hidden)" not in server.err.read_text():
            assert time.monotonic() < deadline, server.err.read_text()
            time.sleep(0.1)
        assert server.err.read_text().count(server.token) == 1  # in the address printed, only


@pytest.mark.parametrize("name, why", [("", "a name"), (" \t ", "a name"), ("x" * 65, "64 characters"),
                                       ("Ada\x1b[31m", "control"), ("Ada\u202eevil", "control"),
                                       ("Ada\nLovelace", "control")],
                         ids=["empty", "blank", "too-long", "escape", "bidi-override", "newline"])
def test_a_name_that_cannot_be_shown_literally_in_one_line_is_refused(store: Path, name: str, why: str):
    with serve(store) as server:
        client = Client(port_of(server))
        client.get(f"/?token={quote(server.token)}")
        answer = client.give_name(name)
        assert answer.status == 400 and why in answer.text, answer.text
        assert 'id="name-form"' in answer.text  # asked again
        assert not client.cookies.get(f"relaypoint-name-{client.port}")
        client.cookies[f"relaypoint-name-{client.port}"] = quote(name, safe="")  # a cookie made by hand
        assert client.websocket() == 403


def test_a_name_with_markup_is_kept_and_shown_literally(store: Path):
    name = "<b>Ada</b> [bold]L[/bold] ' $(id) \u674e"
    with serve(store) as server:
        client = signed_in(server, name)
        assert client.websocket() == 101
        form = client.get("/name").text
        page = client.get("/").text
        assert "&lt;b&gt;Ada&lt;/b&gt; [bold]L[/bold] &#39; $(id) \u674e" in page  # HTML escaped, not markup
        assert "<b>Ada</b>" not in page + form


def test_a_token_file_gives_a_fixed_token(store: Path):
    (store / "token").write_text("  fixed-token-for-tests_0123456789\n")
    with serve(store, "--token-file", "token") as server:
        assert server.token == "fixed-token-for-tests_0123456789"
        client = signed_in(server)
        assert client.websocket() == 101


@pytest.mark.parametrize("content, said", [("", "is empty"), ("\n  \n", "is empty"), (None, "cannot read"),
                                           ("two words", "one word"), ("two\nlines", "one word"),
                                           ("caf\u00e9", "one word")],
                         ids=["empty", "blank", "missing", "space", "two-lines", "not-ascii"])
def test_a_token_file_that_gives_no_usable_token_is_one_line(store: Path, content: str | None, said: str):
    if content is not None:
        (store / "token").write_text(content)
    error = one_line_error(relaypoint(store, "serve", "--token-file", "token", "--port", str(free_port()),
                                      db="store.db"))
    assert "token file 'token'" in error and said in error, error


def test_a_directory_as_token_file_is_one_line(store: Path):
    error = one_line_error(relaypoint(store, "serve", "--token-file", ".", "--port", str(free_port()), db="store.db"))
    assert "cannot read token file '.'" in error, error


def test_requests_another_site_could_make_are_refused_on_every_path(store: Path):
    with serve(store) as server:
        port = port_of(server)
        client = signed_in(server)  # even with the token and a name
        for host in ("evil.example", f"evil.example:{port}", f"rebound.example:{port}"):  # DNS rebinding
            for path in [*PATHS, f"/?token={quote(server.token)}"]:
                answer = client.get(path, Host=host)
                assert answer.status == 403 and "answers only to" in answer.text, (host, path, answer.status)
            assert client.websocket(Host=host, Origin=f"http://{host}") == 403
            assert client.give_name("Mallory", Host=host, Origin=f"http://{host}").status == 403
        for name in (f"localhost:{port}", f"[::1]:{port}", f"127.0.0.1:{port}"):
            assert client.get("/", Host=name).status == 200
        # cross-site WebSocket and form posts: a page of another origin, through the user's browser
        assert client.websocket(Origin="http://evil.example") == 403
        assert client.websocket(Origin=f"http://localhost:{port}") == 403  # another origin than the Host's
        assert client.give_name("Mallory", Origin="http://evil.example").status == 403
        assert client.get("/static/js/textual.js", Origin="http://evil.example").status == 403
        assert client.websocket(Origin=f"http://127.0.0.1:{port}") == 101
        # a page served under another loopback name opens its WebSocket under that name
        assert client.websocket(Host=f"localhost:{port}", Origin=f"http://localhost:{port}") == 101
