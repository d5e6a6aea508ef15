"""Shared fixtures: a private redis-server for the session and a unique key prefix per test.

If no Redis can be had the whole run fails with instructions; it never skips, because
the workshop worker's suite passed with 0 tests when Redis was absent.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from tests.redis_cluster import RedisCluster
from tests.redis_server import RedisServer, RedisUnavailable


def _external_url() -> str | None:
    return os.environ.get("REDIS_TEST_URL") or os.environ.get("VALKEY_URL")


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of the Redis the tests use: a private server unless REDIS_TEST_URL/VALKEY_URL is set."""
    external = _external_url()
    if external:
        try:
            redis.Redis.from_url(external, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            pytest.fail(f"REDIS_TEST_URL/VALKEY_URL={external} is not reachable: {exc}")
        yield external
        return
    server = RedisServer()
    try:
        server.start()
    except RedisUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server.url
    finally:
        server.cleanup()


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    """A bytes client on the test Redis."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def prefix(r: redis.Redis) -> Iterator[str]:
    """A unique key prefix for this test. Its keys are deleted afterwards; nothing is flushed."""
    value = f"t{uuid.uuid4().hex[:10]}:"
    yield value
    # Companions of "{t…:orders}" start with "{t…", so both patterns are needed.
    for pattern in (value + "*", "{" + value + "*"):
        for key in r.scan_iter(match=pattern, count=1000):
            r.delete(key)


@pytest.fixture
def stream(prefix: str) -> str:
    """A fresh stream name for this test."""
    return prefix + "orders"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run browser tests last: Playwright's sync API runs its own event loop, which breaks
    pytest-asyncio tests that come after it (STYLE.md, Tests)."""
    # Among them, test_browser.py first: it takes the README screenshots of a fresh dataset.
    items.sort(
        key=lambda item: (
            item.get_closest_marker("browser") is not None,
            "test_browser.py" not in item.nodeid,
        )
    )


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A private 3-primary, 3-replica Redis Cluster on loopback for the session.

    Shared by every cluster test: use unique key prefixes, and never kill its nodes (a
    fault test starts its own ``RedisCluster``). Fails the run, never skips, if it
    cannot start."""
    cluster = RedisCluster()
    try:
        cluster.start()
    except RedisUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.cleanup()


@pytest.fixture(scope="session")
def cluster_url(redis_cluster: RedisCluster) -> str:
    """The URL of one node of the session cluster: what a user would put in REDIS_URL."""
    return redis_cluster.url
