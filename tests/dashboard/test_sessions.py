"""Sessions from the shared Redis cache (dashboard/sessions.py), on the private server.

A page request reads its session's data from Redis and checks its row with one small SQL
statement; a logout through one client ends the session for every other holder of the
cookie (another web process reads the same cache); a logout while that Redis is down or
hung still ends the session, and the copy cached before it is refused when Redis is back;
and a Redis Cluster node is never used as the cache (database sessions instead).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.cache import caches
from django.db import connection
from django.test import AsyncClient, Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard import sessions
from tests.factories import make_user
from tests.html import element_text
from tests.redis_server import RedisServer, free_port

pytestmark = pytest.mark.django_db


def _caches(location: str, prefix: str) -> dict[str, dict[str, Any]]:
    return {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "sessions": {
            "BACKEND": "dashboard.sessions.SessionCache",
            "LOCATION": location,
            "KEY_PREFIX": prefix + "sessions",
            "OPTIONS": {
                "socket_timeout": 0.5,
                "socket_connect_timeout": 0.5,
                "pool_class": "dashboard.sessions.SharedConnectionPool",
            },
        },
    }


def _forget_probes() -> None:
    sessions._known.clear()
    sessions._retry_at.clear()


@pytest.fixture
def cached_sessions(
    settings: SettingsWrapper, redis_url: str, prefix: str, stream: str
) -> Iterator[None]:
    _forget_probes()
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.CACHES = _caches(redis_url, prefix)
    settings.SESSION_ENGINE = "dashboard.sessions"
    settings.SESSION_CACHE_ALIAS = "sessions"
    yield
    _forget_probes()


def _session_keys(r: redis.Redis, prefix: str) -> list[bytes]:
    return list(r.scan_iter(match=f"{prefix}sessions:*cached_db*"))


def _logged_in(django_user_model: type[User]) -> Client:
    make_user(django_user_model, "olga", "view_queues")
    client = Client()
    assert client.login(username="olga", password="pw")
    return client


@pytest.mark.usefixtures("cached_sessions")
class CachedSessionTests:
    def test_a_page_reads_its_session_from_redis_and_checks_its_row(
        self, django_user_model: type[User], r: redis.Redis, prefix: str
    ) -> None:
        client = _logged_in(django_user_model)
        assert len(_session_keys(r, prefix)) == 1  # login wrote the cached copy
        with CaptureQueriesContext(connection) as queries:
            response = client.get(reverse("dashboard:overview"))
        assert response.status_code == 200
        sql = [q["sql"] for q in queries.captured_queries if "django_session" in q["sql"]]
        # The data comes from the cache; the database only says the row is still there.
        assert len(sql) == 1 and sql[0].startswith("SELECT 1 FROM"), sql
        assert "session_data" not in sql[0]

    def test_logout_in_one_client_ends_the_session_in_another(
        self, django_user_model: type[User], r: redis.Redis, prefix: str
    ) -> None:
        first = _logged_in(django_user_model)
        second = Client()  # another browser tab, or a request served by another process
        second.cookies = first.cookies
        assert second.get(reverse("dashboard:overview")).status_code == 200
        assert first.post(reverse("logout")).status_code == 302
        assert _session_keys(r, prefix) == []
        after = second.get(reverse("dashboard:overview"))
        assert after.status_code == 302 and after["Location"].startswith(reverse("login"))

    def test_a_session_missing_from_the_cache_is_read_from_the_database(
        self, django_user_model: type[User], r: redis.Redis, prefix: str
    ) -> None:
        client = _logged_in(django_user_model)
        r.delete(*_session_keys(r, prefix))  # a restarted or flushed cache
        assert client.get(reverse("dashboard:overview")).status_code == 200
        assert len(_session_keys(r, prefix)) == 1  # cached again

    def test_pages_are_read_from_the_database_while_the_cache_is_away(
        self, django_user_model: type[User], settings: SettingsWrapper, prefix: str
    ) -> None:
        client = _logged_in(django_user_model)
        # The probe said "usable" before the outage: every cache call now fails.
        dead = f"redis://127.0.0.1:{free_port()}/0"
        settings.CACHES = _caches(dead, prefix)
        sessions._known[dead] = True
        assert client.get(reverse("dashboard:overview")).status_code == 200
        # A new login works too (its new key is checked against the cache, then the rows).
        assert Client().login(username="olga", password="pw")

    def test_logout_ends_the_session_while_the_cache_cannot_be_reached(
        self, django_user_model: type[User], settings: SettingsWrapper, prefix: str
    ) -> None:
        client = _logged_in(django_user_model)
        # The probe said "usable"; now the server is gone.
        settings.CACHES = _caches(f"redis://127.0.0.1:{free_port()}/0", prefix)
        _forget_probes()
        key = client.cookies["sessionid"].value
        response = client.post(reverse("logout"))
        assert response.status_code == 302 and response["Location"] == reverse("login")
        assert not sessions.SessionStore().exists(key)
        assert client.cookies["sessionid"].value == ""  # the cookie is deleted too


def _own_server_caches(settings: SettingsWrapper, server: RedisServer, prefix: str) -> None:
    _forget_probes()
    settings.CACHES = _caches(server.url, prefix)
    settings.SESSION_ENGINE = "dashboard.sessions"
    settings.SESSION_CACHE_ALIAS = "sessions"


def _cached_copies(server: RedisServer, prefix: str) -> list[bytes]:
    with redis.Redis.from_url(server.url) as own:
        return _session_keys(own, prefix)


def _logout_page(client: Client) -> str:
    """The logout's answer followed to the login page; the flash it shows."""
    response = client.post(reverse("logout"))
    assert response.status_code == 302 and response["Location"] == reverse("login")
    login = client.get(response["Location"])
    assert login.status_code == 200
    return element_text(login.content.decode(), "messages")


class LogoutDuringOutageTests:
    """Logout while the sessions' Redis is down or hung ends the session, and the copy it
    could not delete is refused when Redis is back (its row is gone)."""

    def test_logout_while_redis_is_down_ends_the_session_after_it_returns(
        self, django_user_model: type[User], settings: SettingsWrapper, prefix: str
    ) -> None:
        # Data that survives a SIGKILL: the cached copy is back when the server restarts.
        server = RedisServer(extra_args=("--appendonly", "yes", "--appendfsync", "always"))
        server.start()
        try:
            _own_server_caches(settings, server, prefix)
            client = _logged_in(django_user_model)
            old_cookie = client.cookies["sessionid"].value
            assert client.get(reverse("dashboard:overview")).status_code == 200
            assert len(_cached_copies(server, prefix)) == 1
            server.kill()
            assert _logout_page(client) == "You are logged out."
            server.start()
            assert len(_cached_copies(server, prefix)) == 1  # the copy outlived the outage
            other = Client()  # the same cookie, kept by someone else
            other.cookies["sessionid"] = old_cookie
            after = other.get(reverse("dashboard:overview"))
            assert after.status_code == 302 and after["Location"].startswith(reverse("login"))
            assert _cached_copies(server, prefix) == []  # refused, then deleted
        finally:
            server.cleanup()
            _forget_probes()

    def test_logout_while_redis_is_hung_ends_the_session_after_it_answers(
        self, django_user_model: type[User], settings: SettingsWrapper, prefix: str
    ) -> None:
        server = RedisServer().start()
        assert server.proc is not None
        stopped = False
        try:
            _own_server_caches(settings, server, prefix)
            client = _logged_in(django_user_model)
            old_cookie = client.cookies["sessionid"].value
            os.kill(server.proc.pid, signal.SIGSTOP)  # accepts connections, never answers
            stopped = True
            assert _logout_page(client) == "You are logged out."
            os.kill(server.proc.pid, signal.SIGCONT)
            stopped = False
            other = Client()
            other.cookies["sessionid"] = old_cookie
            after = other.get(reverse("dashboard:overview"))
            assert after.status_code == 302 and after["Location"].startswith(reverse("login"))
        finally:
            if stopped:
                os.kill(server.proc.pid, signal.SIGCONT)
            server.cleanup()
            _forget_probes()


class ClusterFallbackTests:
    def test_a_cluster_node_is_not_used_as_the_session_cache(
        self,
        settings: SettingsWrapper,
        cluster_url: str,
        prefix: str,
        django_user_model: type[User],
    ) -> None:
        _forget_probes()
        settings.CACHES = _caches(cluster_url, prefix)
        settings.SESSION_ENGINE = "dashboard.sessions"
        settings.SESSION_CACHE_ALIAS = "sessions"
        try:
            assert sessions.session_cache_state() is False
            make_user(django_user_model, "olga", "view_queues")
            client = Client()
            assert client.login(username="olga", password="pw")  # database sessions work
            key = client.cookies["sessionid"].value
            assert sessions.SessionStore(key).load()["_auth_user_id"]
            assert client.post(reverse("logout")).status_code == 302
            assert not sessions.SessionStore().exists(key)
        finally:
            _forget_probes()


@pytest.mark.usefixtures("cached_sessions")
class SharedPoolTests:
    # Transactional: the user is made in sync_to_async's thread, whose database connection
    # is not the test's (a plain django_db test would leave "olga" committed for the next
    # test file in this process).
    @pytest.mark.django_db(transaction=True)
    async def test_asgi_requests_reuse_one_redis_connection(
        self, django_user_model: type[User], r: redis.Redis
    ) -> None:
        """Under ASGI each request has its own cache object; they must share one pool,
        or every page opens a Redis connection (TCP connect + HELLO)."""
        client = await sync_to_async(_logged_in)(django_user_model)
        aclient = AsyncClient()
        aclient.cookies = client.cookies
        url = reverse("dashboard:failure-search")

        async def request() -> int:
            # A new task in an empty context, as a server runs each request.
            task = asyncio.create_task(aclient.get(url), context=contextvars.Context())
            return (await task).status_code

        assert await request() == 200  # warms the pool
        before = r.info("stats")["total_connections_received"]
        for _ in range(8):
            assert await request() == 200
        assert r.info("stats")["total_connections_received"] - before <= 1

    def test_request_contexts_share_one_client_and_one_redis(self) -> None:
        """Django makes a cache object per request context and its client a ``redis.Redis``
        per call (~60 us each); SessionCache makes both once per process."""
        first, second = (contextvars.Context().run(lambda: caches["sessions"]) for _ in "ab")
        assert isinstance(first, sessions.SessionCache)
        assert isinstance(second, sessions.SessionCache)
        assert first is not second  # one per context, as Django makes them
        assert first._cache is second._cache
        client = first._cache.get_client("k")
        assert client is second._cache.get_client("k", write=True) is first._cache.get_client()
        assert isinstance(client, redis.Redis)
        first.set("shared", {"a": 1})
        assert second.get("shared") == {"a": 1}
