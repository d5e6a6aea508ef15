"""Live updates: a surface that fails to render is skipped, every other one goes on, and
the failure is logged briefly, at most once a minute per surface (the traceback once).

Sockets go through the real ASGI application with the in-memory channel layer; the
broadcaster polls the private test Redis. The failure is injected in the page context of
one stream (what a payload that broke decoding used to do), never in Redis.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
import redis
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Permission
from django.test import Client

from dashboard.asgi import application
from dashboard.live import logs, registry
from dashboard.live.broadcaster import Broadcaster, get_broadcaster
from dashboard.live.registry import Surface
from dashboard.routing import live_path
from tests.factories import add_entries

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def live_settings(settings: Any, redis_url: str, prefix: str) -> Any:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_LIVE_TICK = 0.1
    return settings


@pytest_asyncio.fixture
async def broadcaster(live_settings: Any) -> AsyncIterator[Broadcaster]:
    b = get_broadcaster()
    yield b
    await b.stop()


@pytest.fixture
def viewer_headers(django_user_model: Any) -> Callable[[], Awaitable[list[tuple[bytes, bytes]]]]:
    def make() -> list[tuple[bytes, bytes]]:
        user = django_user_model.objects.create_user("isolation", password="pw")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="dashboard", codename="view_queues")
        )
        client = Client()
        client.force_login(user)
        cookie = f"sessionid={client.cookies['sessionid'].value}"
        return [
            (b"cookie", cookie.encode()),
            (b"host", b"testserver"),
            (b"origin", b"http://testserver"),
        ]

    return sync_to_async(make)


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch, prefix: str) -> str:
    """A stream whose surfaces cannot be rendered: its page context raises, deeply."""
    name = prefix + "broken"
    real = registry.surface_context

    def context(*, surface: Surface, client: redis.Redis) -> dict[str, Any]:
        if surface.stream == name:

            def down(n: int) -> None:
                down(n + 1)

            down(0)  # a RecursionError with a long traceback, like the hostile payload's
        return real(surface=surface, client=client)

    monkeypatch.setattr(registry, "surface_context", context)
    return name


async def _receive_until(
    ws: WebsocketCommunicator, predicate: Callable[[str], bool], timeout: float = 3.0
) -> str:
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            message: str = await ws.receive_from(timeout=left)
        except TimeoutError:
            break
        if predicate(message):
            return message
        seen.append(message[:200])
    raise AssertionError(f"no matching push within {timeout}s; got {seen}")


def _failure_records(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "ackboard.live" and r.levelno >= logging.WARNING and name in r.getMessage()
    ]


class SurfaceIsolationTests:
    async def test_good_surface_is_pushed_beside_a_failing_one(
        self,
        broadcaster: Broadcaster,
        viewer_headers: Callable[[], Awaitable[list[tuple[bytes, bytes]]]],
        r: redis.Redis,
        prefix: str,
        broken: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        caplog.set_level(logging.INFO, logger="ackboard.live")
        good = prefix + "good"
        add_entries(r, good, 1)
        add_entries(r, broken, 1)
        headers = await viewer_headers()
        bad_ws = WebsocketCommunicator(application, live_path("stream", stream=broken), headers)
        good_ws = WebsocketCommunicator(application, live_path("stream", stream=good), headers)
        assert (await bad_ws.connect())[0] and (await good_ws.connect())[0]
        await _receive_until(good_ws, lambda m: 'id="stream-facts"' in m)
        # Both streams change, many cycles run: the broken one fails every time.
        for _ in range(5):
            add_entries(r, broken, 1)
            (new_id,) = add_entries(r, good, 1)
            await _receive_until(good_ws, lambda m, i=new_id: i in m)
        assert bad_ws.output_queue.empty(), "nothing is pushed for the broken surface"
        records = _failure_records(caplog, broken)
        assert len(records) == 1, [r.getMessage()[:120] for r in records]
        (record,) = records
        assert "RecursionError" in record.getMessage()
        assert len(record.getMessage()) < 500, "the message is short"
        assert record.exc_info is not None, "the first one carries the traceback"
        await bad_ws.disconnect()
        await good_ws.disconnect()

    async def test_failure_is_logged_again_after_the_interval_without_traceback(
        self,
        broadcaster: Broadcaster,
        viewer_headers: Callable[[], Awaitable[list[tuple[bytes, bytes]]]],
        r: redis.Redis,
        broken: str,
        caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setattr(logs, "LOG_EVERY_S", 0.5)
        caplog.set_level(logging.INFO, logger="ackboard.live")
        add_entries(r, broken, 1)
        ws = WebsocketCommunicator(
            application, live_path("stream", stream=broken), await viewer_headers()
        )
        assert (await ws.connect())[0]
        started = time.monotonic()
        cycles = broadcaster.counters.cycles
        while time.monotonic() - started < 1.6:  # about three intervals of failures
            add_entries(r, broken, 1)
            await asyncio.sleep(0.1)
        assert broadcaster.counters.cycles - cycles >= 6, "cycles went on"
        records = _failure_records(caplog, broken)
        assert 2 <= len(records) <= 4, [r.getMessage()[:120] for r in records]
        assert sum(r.exc_info is not None for r in records) == 1, "one traceback only"
        assert "more time" in records[-1].getMessage(), "later lines count what was skipped"
        await ws.disconnect()


class OutageLogTests:
    """A Redis outage is logged as a short warning once a minute, not once per tick."""

    def test_outage_warnings_are_rate_limited_and_untraced(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        failures = logs.FailureLog()
        with caplog.at_level(logging.WARNING, logger=logs.log.name):
            for _ in range(50):
                failures.report("poll", "live poll", redis.ConnectionError("refused"), traced=False)
        [record] = [r for r in caplog.records if "live poll" in r.getMessage()]
        assert record.levelno == logging.WARNING and record.exc_info is None
        assert "ConnectionError: refused" in record.getMessage()
