"""Production tier: the production ASGI server as a process, DEBUG off, channels-redis, Chromium.

What only the real configuration shows: sockets held open on a quiet page (the layer's
blocking pop against redis-py's read timeout), a Redis restart under open sockets, and
sessions that end while a tab is watching. Each test reads the server log (access lines
included) for the part it covers, and fails on any traceback or 500.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from playwright.sync_api import expect

from dashboard.runtime.serve import DEFAULT_SERVER, WS_PING_INTERVAL
from tests.browser.server import (
    LiveServer,
    log_problems,
    login,
    serving,
    socket_connects,
)
from tests.redis_server import RedisServer

pytestmark = [pytest.mark.browser, pytest.mark.production]

#: Past the server's first keep-alive ping (every WS_PING_INTERVAL s) and its pong.
QUIET_SECONDS = WS_PING_INTERVAL + 3.0
#: A handshake opened from the page's own JS: resolves with how it went.
HANDSHAKE = """(path) => new Promise((resolve) => {
  const socket = new WebSocket(`ws://${location.host}${path}?probe`);
  const done = (outcome) => { resolve(outcome); };
  socket.onopen = () => { done("open"); socket.close(); };
  socket.onclose = (event) => done(`closed ${event.code}`);
  setTimeout(() => done("pending"), 5000);
})"""


def _stream_url(server: LiveServer, stream: str) -> str:
    return f"{server.url}/streams/{stream}/"


def _socket_path(stream: str) -> str:
    return f"/ws/streams/{stream}/"


def _sockets_of(page: Any, path: str) -> list[Any]:
    """The WebSockets ``page`` opens to ``path`` from now on (each reconnect adds one).

    Only the page's own: not one of an earlier page still closing, nor a test's probe
    (``HANDSHAKE`` adds a query string).
    """
    sockets: list[Any] = []

    def opened(socket: Any) -> None:
        if urlsplit(socket.url).path == path and not urlsplit(socket.url).query:
            sockets.append(socket)

    page.on("websocket", opened)
    return sockets


def _entry_link(page: Any, entry_id: str) -> Any:
    return page.locator("#entry-table").get_by_role("link", name=entry_id, exact=True)


class QuietSocketTests:
    def test_socket_stays_open_on_a_quiet_page(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = f"{names}quiet-{uuid.uuid4().hex[:6]}"
        browser_redis.xadd(stream, {"payload": '{"n": 1}'})
        mark = web_server.log_mark()
        sockets = _sockets_of(page, _socket_path(stream))
        page.goto(_stream_url(web_server, stream))
        indicator = page.locator("#live-indicator")
        expect(indicator).to_have_attribute("data-state", "live")

        states: list[str] = []
        deadline = time.monotonic() + QUIET_SECONDS
        while time.monotonic() < deadline:
            states.append(indicator.get_attribute("data-state") or "")
            page.wait_for_timeout(500)
        assert set(states) == {"live"}, f"the badge left 'live': {sorted(set(states))}"
        assert len(sockets) == 1, f"{len(sockets)} sockets were opened: it reconnected"
        assert not sockets[0].is_closed()
        log = web_server.log_since(mark)
        assert socket_connects(log, _socket_path(stream)) == 1
        assert log_problems(log) == []
        # The production layer is the one in use: the socket subscribed to its session
        # group on channels-redis's pub/sub layer (no keys: PUBSUB CHANNELS lists it).
        assert browser_redis.pubsub_channels("ackboard:channels:*")

        (new_id,) = [browser_redis.xadd(stream, {"payload": '{"n": 2}'}).decode()]
        expect(_entry_link(page, new_id)).to_be_visible()
        assert len(sockets) == 1


@pytest.fixture
def own_server(own_redis: RedisServer) -> Iterator[LiveServer]:
    server = LiveServer(redis_url=own_redis.url, tick=0.5)
    with serving(server):
        yield server


class RedisRestartTests:
    def test_open_sockets_and_new_ones_survive_a_redis_restart(
        self, chromium: Any, own_redis: RedisServer, own_server: LiveServer
    ) -> None:
        client = redis.Redis.from_url(own_redis.url, socket_timeout=5)
        stream = "jobs"
        client.xadd(stream, {"payload": '{"n": 1}'})
        context = chromium.new_context()
        context.set_default_timeout(15_000)
        try:
            watcher = context.new_page()
            login(watcher, own_server)
            sockets = _sockets_of(watcher, _socket_path(stream))
            watcher.goto(_stream_url(own_server, stream))
            expect(watcher.locator("#live-indicator")).to_have_attribute("data-state", "live")

            own_redis.kill()
            # While Redis is down: pages say so (503, the Redis banner), and a new socket's
            # handshake is still answered, never with a 500.
            other = context.new_page()
            during = other.goto(_stream_url(own_server, stream))
            assert during is not None and during.status == 503
            assert watcher.evaluate(HANDSHAKE, _socket_path(stream)) == "open"

            own_redis.start()  # same port, and empty: nothing survived the restart
            new_id = client.xadd(stream, {"payload": '{"n": 2}'}).decode()
            # The open socket's feed recovers: the broadcaster polls the new server.
            expect(_entry_link(watcher, new_id)).to_be_visible()
            assert len(sockets) == 1, "the open socket survived the restart"
            assert not sockets[0].is_closed()

            after = other.goto(_stream_url(own_server, stream))
            assert after is not None and after.status == 200
            expect(other.locator("#live-indicator")).to_have_attribute("data-state", "live")
            assert watcher.evaluate(HANDSHAKE, _socket_path(stream)) == "open"
            newer_id = client.xadd(stream, {"payload": '{"n": 3}'}).decode()
            expect(_entry_link(other, newer_id)).to_be_visible()
            expect(_entry_link(watcher, newer_id)).to_be_visible()

            log = own_server.log_since(0)
            assert log_problems(log) == []
        finally:
            context.close()
            client.close()


class SessionEndTests:
    def test_logout_in_one_tab_ends_the_feed_in_another(
        self, chromium: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        stream = f"{names}logout-{uuid.uuid4().hex[:6]}"
        browser_redis.xadd(stream, {"payload": '{"n": 1}'})
        # Its own login: logging out ends that session only, not the one other tests share.
        context = chromium.new_context()
        context.set_default_timeout(10_000)
        try:
            tab = context.new_page()
            login(tab, web_server)
            watcher = context.new_page()
            sockets = _sockets_of(watcher, _socket_path(stream))
            watcher.goto(_stream_url(web_server, stream))
            indicator = watcher.locator("#live-indicator")
            expect(indicator).to_have_attribute("data-state", "live")
            mark = web_server.log_mark()

            tab.get_by_role("button", name="Log out").click()
            tab.wait_for_url(f"{web_server.url}/login/")
            started = time.monotonic()
            expect(indicator).to_have_attribute("data-state", "offline", timeout=5_000)
            took = time.monotonic() - started
            expect(indicator).to_contain_text("log in again")
            assert took < 3.0, f"the feed ended {took:.1f}s after the logout"

            later_id = browser_redis.xadd(stream, {"payload": '{"n": 2}'}).decode()
            watcher.wait_for_timeout(2500)
            expect(_entry_link(watcher, later_id)).to_have_count(0)
            assert len(sockets) == 1, "a socket closed for logout does not reconnect"
            assert log_problems(web_server.log_since(mark)) == []
        finally:
            context.close()


class ServerClosedSocketTests:
    def test_page_reconnects_when_the_server_ends_a_healthy_socket(
        self, page: Any, web_server: LiveServer, browser_redis: redis.Redis, names: str
    ) -> None:
        # daphne ends every socket after --websocket_timeout (a day by default) with a
        # plain 1000, which the ws extension does not retry; here it is 3 s. The same
        # server (database, secret key, so the login holds) restarted with that option.
        stream = f"{names}long-{uuid.uuid4().hex[:6]}"
        browser_redis.xadd(stream, {"payload": '{"n": 1}'})
        web_server.stop_web()
        # The only server with a socket lifetime: this checks the page, not the server.
        web_server.server, web_server.server_args = "daphne", ("--websocket_timeout", "3")
        try:
            web_server.start_web()
            mark = web_server.log_mark()
            sockets = _sockets_of(page, _socket_path(stream))
            page.goto(_stream_url(web_server, stream))
            indicator = page.locator("#live-indicator")
            expect(indicator).to_have_attribute("data-state", "live")
            deadline = time.monotonic() + 15
            while len(sockets) < 3 and time.monotonic() < deadline:
                page.wait_for_timeout(200)
            assert len(sockets) >= 3, "ended twice by the server, reconnected each time"
            expect(indicator).to_have_attribute("data-state", "live")
            new_id = browser_redis.xadd(stream, {"payload": '{"n": 2}'}).decode()
            expect(_entry_link(page, new_id)).to_be_visible()
            assert log_problems(web_server.log_since(mark)) == []
        finally:
            web_server.stop_web()
            web_server.server, web_server.server_args = DEFAULT_SERVER, ()
            web_server.start_web()
