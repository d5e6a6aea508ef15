"""The production web process on PostgreSQL serves its pages from a connection pool.

Under ASGI each request runs in a thread of its own, so Django's persistent connections
were never reused: every page opened a PostgreSQL connection (TCP and authentication)
and left it open until garbage collection. With the pool (dashboard.settings, PostgreSQL
only) the pages are served by the few connections the pool keeps. This test runs the
production server over a private PostgreSQL and watches the server's backends while it
serves pages: a connection per request would show as a new backend per page.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import redis

from benchmarks.fanout_scale import _Socket, login_cookie
from dashboard.routing import live_path
from tests.browser.server import LiveServer, serving
from tests.factories import make_pending
from tests.integration.test_existing_deployment import Browser
from tests.postgres_server import PostgresServer, client_backends, running_postgres
from tests.waiting import wait_until

pytestmark = [pytest.mark.production, pytest.mark.one_engine]

PAGES = 40
#: The pool's smallest size: the sampler and the live broadcaster take connections from it
#: too, and must give them back between their rounds or pages would wait for one.
POOL = "4"


def test_pages_are_served_by_pooled_connections(
    postgres: PostgresServer, redis_url: str, r: redis.Redis, prefix: str
) -> None:
    stream = prefix + "orders"
    make_pending(r, stream, "g", "c", 60)
    web = LiveServer(
        redis_url=redis_url,
        streams=stream,
        role="operator",
        tick=0.2,
        extra_env={
            "DATABASE_URL": postgres.url,
            "ACKBOARD_DB_POOL_SIZE": POOL,
            "ACKBOARD_SAMPLER_INTERVAL_S": "0.2",
        },
    )
    with serving(web), client_backends(postgres.url) as backends:
        # A live socket on the page, so the broadcaster's rounds run (and read SQL) too.
        socket = _Socket(
            "127.0.0.1",
            web.port,
            live_path("group", stream=stream, group="g"),
            {"Cookie": login_cookie(web), "Origin": web.url},
        )
        socket.finish_handshake()
        browser = Browser(web.url + "/")
        assert browser.login(web.username, web.password)
        path = "streams/{}/groups/g/".format(urllib.parse.quote(stream, safe=""))
        seen: set[int] = set()
        slowest = 0.0
        for n in range(PAGES):
            r.xadd(stream, {"n": str(n)})  # the live page changes: the broadcaster renders
            began = time.monotonic()
            status, _, html = browser.get(path)
            slowest = max(slowest, time.monotonic() - began)
            assert status == 200, html[:300]
            assert html.count('<tr id="pending-') == 50
            seen |= backends()
        socket.read(time.monotonic())
        assert not socket.closed
        # A connection per page would be PAGES backends (each left open until collected).
        assert seen, "no connection to the database was seen while pages were served"
        assert len(seen) <= int(POOL), f"{len(seen)} connections served {PAGES} pages"
        # A page waiting for a connection the background threads hold would wait the
        # pool's 3 s timeout, then answer 503.
        assert slowest < 2.5, f"a page took {slowest:.1f} s"


def test_a_database_outage_is_a_prompt_503_and_the_pool_recovers(
    redis_url: str, r: redis.Redis, prefix: str
) -> None:
    """With the database down a page waits at most the pool's 3 s for a connection, then
    says so (503, the user and nav left out: they need the database); htmx gets the
    banner; /healthz (Redis only) still answers. Once PostgreSQL is back, pages are."""
    stream = prefix + "orders"
    make_pending(r, stream, "g", "c", 3)
    with running_postgres() as server:
        _outage(server, redis_url, stream)


def _outage(server: PostgresServer, redis_url: str, stream: str) -> None:
    web = LiveServer(
        redis_url=redis_url,
        streams=stream,
        role="operator",
        extra_env={"DATABASE_URL": server.url, "ACKBOARD_DB_POOL_SIZE": POOL},
    )
    with serving(web):
        browser = Browser(web.url + "/")
        assert browser.login(web.username, web.password)
        path = "streams/{}/groups/g/".format(urllib.parse.quote(stream, safe=""))
        assert browser.get(path)[0] == 200
        server.stop()
        began = time.monotonic()
        status, _, html = browser.get(path)
        took = time.monotonic() - began
        assert status == 503, html[:300]
        assert "The database is unavailable." in html and "Nothing was changed." in html
        assert "Traceback" not in html and 'class="nav"' not in html
        assert took < 6, f"the 503 took {took:.1f} s"
        request = urllib.request.Request(
            web.url + "/" + path, headers={"HX-Request": "true", "HX-Target": "pending-table"}
        )
        try:
            browser.opener.open(request, timeout=10)
            raise AssertionError("an htmx request got a 2xx with the database down")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503
            assert exc.headers["HX-Retarget"] == "#messages"
            assert 'id="error-banner"' in exc.read().decode()
        with urllib.request.urlopen(web.url + "/healthz", timeout=10) as health:
            assert health.status == 200
        server.resume()

        def back() -> bool:
            status = browser.get(path)[0]
            assert status in (200, 503), status
            return status == 200

        wait_until(back, timeout=20, interval=0.2, what="pages to come back with the database")
