"""Live updates: socket auth, pushed partials, and a broadcaster whose Redis load is per stream.

Sockets go through the real ASGI application (origin check, session auth, routing) with
the in-memory channel layer; the broadcaster polls the private test Redis.
"""

from __future__ import annotations

import asyncio
import re
import threading
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
from django.urls import reverse
from django.utils import timezone

from dashboard.asgi import application
from dashboard.live.broadcaster import Broadcaster, get_broadcaster
from dashboard.models import IndexedFailure
from dashboard.routing import live_path
from queue_core.events import event_publish
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.factories import add_entries, make_group, make_pending

pytestmark = pytest.mark.django_db(transaction=True)

CookieFor = Callable[..., Awaitable[list[tuple[bytes, bytes]]]]
#: What a page of the test site sends on a handshake: its Host and its own Origin.
SITE_HEADERS = [(b"host", b"testserver"), (b"origin", b"http://testserver")]


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
def headers_for(django_user_model: Any) -> CookieFor:
    """Login-session headers (cookie + same-site origin) for a new user with ``perms``.

    Awaitable, because the tests are async and the database is sync.
    """
    counter = iter(range(1000))

    def make(*perms: str) -> list[tuple[bytes, bytes]]:
        user = django_user_model.objects.create_user(f"live{next(counter)}", password="pw")
        for codename in perms:
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label="dashboard", codename=codename)
            )
        client = Client()
        client.force_login(user)
        cookie = f"sessionid={client.cookies['sessionid'].value}"
        return [(b"cookie", cookie.encode()), *SITE_HEADERS]

    return sync_to_async(make)


def _socket(path: str, headers: list[tuple[bytes, bytes]]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=headers)


async def _receive_until(
    ws: WebsocketCommunicator, predicate: Callable[[str], bool], timeout: float = 3.0
) -> str:
    """Messages until one satisfies ``predicate``; fails after ``timeout`` seconds."""
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


async def _close_code(ws: WebsocketCommunicator) -> int | None:
    """The code a refused socket was closed with (None: the handshake itself was refused)."""
    connected, _ = await ws.connect()
    if not connected:
        return None
    message = await ws.receive_output(timeout=1)
    assert message["type"] == "websocket.close", "nothing is sent before the close"
    code: int = message["code"]
    return code


class SocketAuthTests:
    async def test_unauthenticated_socket_is_closed(self, broadcaster: Broadcaster) -> None:
        ws = _socket(live_path("overview"), SITE_HEADERS)
        assert await _close_code(ws) == 4401
        assert broadcaster.sockets() == 0

    async def test_user_without_view_permission_is_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor
    ) -> None:
        ws = _socket(live_path("overview"), await headers_for())
        assert await _close_code(ws) == 4403
        assert broadcaster.sockets() == 0

    async def test_foreign_origin_is_refused(
        self, broadcaster: Broadcaster, headers_for: CookieFor
    ) -> None:
        headers = [h for h in await headers_for("view_queues") if h[0] != b"origin"]
        ws = _socket(live_path("overview"), [*headers, (b"origin", b"http://evil.example")])
        connected, _ = await ws.connect()
        assert connected is False

    async def test_stream_outside_allowlist_is_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis
    ) -> None:
        add_entries(r, "not-allowed-stream", 1)
        try:
            path = live_path("stream", stream="not-allowed-stream")
            ws = _socket(path, await headers_for("view_queues"))
            assert await _close_code(ws) == 4404
        finally:
            r.delete("not-allowed-stream")

    async def test_companion_stream_is_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor, stream: str
    ) -> None:
        path = live_path("stream", stream=stream_keys(stream).dlq)
        ws = _socket(path, await headers_for("view_queues"))
        assert await _close_code(ws) == 4404

    async def test_malformed_entry_id_is_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor, stream: str
    ) -> None:
        path = live_path("entry", stream=stream, entry_id="not-an-id")
        ws = _socket(path, await headers_for("view_queues"))
        assert await _close_code(ws) == 4404
        assert broadcaster.open_surfaces() == set()


class LivePushTests:
    async def test_group_socket_receives_partials_and_pending_changes(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "billing", "w1", 2)
        path = live_path("group", stream=stream, group="billing")
        ws = _socket(path, await headers_for("view_queues"))
        connected, _ = await ws.connect()
        assert connected
        first = await _receive_until(ws, lambda m: 'id="pending-table"' in m)
        assert 'id="group-summary"' in first and 'id="consumer-table"' in first
        (new_id,) = make_pending(r, stream, "billing", "w2", 1, create=False)
        update = await _receive_until(ws, lambda m: new_id in m)
        assert 'id="pending-table"' in update
        await ws.disconnect()
        assert broadcaster.sockets() == 0

    async def test_xadd_is_pushed_before_the_tick(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        broadcaster_tick = 5.0
        from django.conf import settings

        settings.ACKBOARD_LIVE_TICK = broadcaster_tick
        make_group(r, stream, "billing")
        ws = _socket(live_path("stream", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await _receive_until(ws, lambda m: 'id="stream-facts"' in m)
        await asyncio.sleep(0.3)  # let the watcher block on the new last id
        started = time.monotonic()
        (new_id,) = add_entries(r, stream, 1)
        await _receive_until(ws, lambda m: new_id in m, timeout=broadcaster_tick - 1)
        assert time.monotonic() - started < broadcaster_tick / 2, "woken, not ticked"
        assert broadcaster.counters.wakes_by_xread >= 1
        await ws.disconnect()

    async def test_worker_failure_is_pushed_before_the_tick(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        from django.conf import settings

        settings.ACKBOARD_LIVE_TICK = 5.0
        (entry_id,) = make_pending(r, stream, "billing", "w1", 1)
        path = live_path("group", stream=stream, group="billing")
        ws = _socket(path, await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await _receive_until(ws, lambda m: 'id="pending-table"' in m)
        await asyncio.sleep(0.2)  # the subscription is in place before we publish
        # The worker publishes its event at once; the ingestor stores the failure row a
        # moment later (it polls), and the page shows failures from that row.
        event_publish(client=r, type="failure", stream=stream, group="billing", entry_id=entry_id)
        await asyncio.sleep(0.25)
        await _failure_row(stream=stream, group="billing", entry_id=entry_id, message="boom 42")
        stored = time.monotonic()
        update = await _receive_until(ws, lambda m: "boom 42" in m, timeout=4.0)
        assert time.monotonic() - stored < 2.5, "pushed long before the 5 s tick"
        assert 'id="pending-table"' in update
        await ws.disconnect()

    async def test_buttons_follow_each_permission_set(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "billing", "w1", 1)
        path = live_path("group", stream=stream, group="billing")
        reader = _socket(path, await headers_for("view_queues"))
        operator = _socket(path, await headers_for("view_queues", "dead_letter_entry"))
        assert (await reader.connect())[0] and (await operator.connect())[0]
        seen_by_reader = await _receive_until(reader, lambda m: 'id="pending-table"' in m)
        seen_by_operator = await _receive_until(operator, lambda m: 'id="pending-table"' in m)
        assert "Dead-letter" in seen_by_operator
        assert "Dead-letter" not in seen_by_reader
        # A shared push never carries a CSRF token (htmx sends the page's own in a header).
        assert "csrfmiddlewaretoken" not in seen_by_operator
        await reader.disconnect()
        await operator.disconnect()

    async def test_overview_socket_follows_every_visible_stream(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, prefix: str
    ) -> None:
        add_entries(r, prefix + "emails", 2)
        ws = _socket(live_path("overview"), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        first = await _receive_until(ws, lambda m: 'id="stream-table"' in m)
        assert prefix + "emails" in first
        await asyncio.sleep(0.3)
        add_entries(r, prefix + "emails", 1)
        await _receive_until(ws, lambda m: '<td class="num">3</td>' in m)
        assert broadcaster.polled == (prefix + "emails",)
        await ws.disconnect()

    async def test_one_render_serves_every_socket(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        path = live_path("stream", stream=stream)
        headers = await headers_for("view_queues")
        sockets = [_socket(path, headers) for _ in range(5)]
        for ws in sockets:
            assert (await ws.connect())[0]
        for ws in sockets:
            await _receive_until(ws, lambda m: 'id="stream-facts"' in m)
        renders = broadcaster.counters.renders
        (new_id,) = add_entries(r, stream, 1)
        pushed = {await _receive_until(ws, lambda m: new_id in m) for ws in sockets}
        assert len(pushed) == 1, "every socket gets the same rendering"
        assert broadcaster.counters.renders - renders == 1
        for ws in sockets:
            await ws.disconnect()


class BroadcasterLoadTests:
    async def test_polls_only_streams_that_are_open(
        self,
        broadcaster: Broadcaster,
        headers_for: CookieFor,
        r: redis.Redis,
        prefix: str,
        redis_url: str,
    ) -> None:
        opened, closed = prefix + "opened", prefix + "closed"
        add_entries(r, opened, 1)
        add_entries(r, closed, 1)
        ws = _socket(live_path("stream", stream=opened), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await _receive_until(ws, lambda m: 'id="stream-facts"' in m)
        with _monitor(redis_url) as commands:
            cycles = broadcaster.counters.cycles
            while broadcaster.counters.cycles < cycles + 3:
                await asyncio.sleep(0.05)
        assert broadcaster.polled == (opened,)
        touched = " ".join(commands)
        assert opened in touched, "the open stream is polled"
        assert closed not in touched, "a stream nobody has open is never polled"
        await ws.disconnect()

    async def test_redis_commands_do_not_grow_with_sockets(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "billing", "w1", 3)
        path = live_path("group", stream=stream, group="billing")
        headers = await headers_for("view_queues")

        async def commands_per_cycle() -> float:
            await asyncio.sleep(0.3)  # settle: first render done
            calls, cycles = _poll_calls(r), broadcaster.counters.cycles
            await asyncio.sleep(1.0)
            return (_poll_calls(r) - calls) / (broadcaster.counters.cycles - cycles)

        first = _socket(path, headers)
        assert (await first.connect())[0]
        one = await commands_per_cycle()
        many = [_socket(path, headers) for _ in range(30)]
        for ws in many:
            assert (await ws.connect())[0]
        thirty_one = await commands_per_cycle()
        assert broadcaster.sockets() == 31
        # 4 stream stats + 1 XPENDING summary per cycle, plus the watcher's idle XREADs.
        assert one >= 5
        assert thirty_one <= one * 1.15, "31 sockets cost what 1 does"
        for ws in [first, *many]:
            await ws.disconnect()

    async def test_idle_without_sockets(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        ws = _socket(live_path("stream", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await _receive_until(ws, lambda m: 'id="stream-facts"' in m)
        await ws.disconnect()
        await asyncio.sleep(0.2)
        cycles = broadcaster.counters.cycles
        await asyncio.sleep(0.5)
        assert broadcaster.open_surfaces() == set()
        assert broadcaster.counters.cycles == cycles


class LivePathTests:
    def test_names_are_escaped_like_page_urls(self) -> None:
        path = live_path("group", stream="a/b%c d", group="g/1")
        assert path == "/ws/streams/a%252Fb%2525c%20d/groups/g%252F1/"

    async def test_odd_stream_name_routes_to_its_surface(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, prefix: str
    ) -> None:
        name = prefix + "odd/name %{x}"
        add_entries(r, name, 1)
        ws = _socket(live_path("stream", stream=name), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await _receive_until(ws, lambda m: 'id="stream-facts"' in m)
        assert {s.stream for s in broadcaster.open_surfaces()} == {name}
        await ws.disconnect()


class DeadLetterSurfaceTests:
    """The dead-letter page is a live surface (one entry in dashboard.live.registry)."""

    async def test_operator_dead_letter_is_pushed_before_the_tick(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        from django.conf import settings

        settings.ACKBOARD_LIVE_TICK = 5.0
        first, second = make_pending(r, stream, "billing", "w1", 2)
        entry_dead_letter(client=r, stream=stream, group="billing", entry_id=first, reason="a")
        ws = _socket(live_path("dlq", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await _receive_until(ws, lambda m: 'id="dlq-table"' in m and first in m)
        await asyncio.sleep(0.2)  # the subscription is in place before the action
        started = time.monotonic()
        moved = entry_dead_letter(
            client=r, stream=stream, group="billing", entry_id=second, reason="b", operator="ops"
        )
        assert moved is not None
        update = await _receive_until(ws, lambda m: f'id="dlq-{moved.dlq_id}"' in m, 4.0)
        assert time.monotonic() - started < 2.5, "woken by the action's event, not the tick"
        assert 'id="dlq-table"' in update
        await ws.disconnect()

    async def test_worker_dead_letter_event_is_pushed_before_the_tick(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        from django.conf import settings

        settings.ACKBOARD_LIVE_TICK = 5.0
        add_entries(r, stream, 1)
        ws = _socket(live_path("dlq", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await _receive_until(ws, lambda m: 'id="dlq-table"' in m)
        await asyncio.sleep(0.2)
        started = time.monotonic()
        # What a worker does: its script adds to {S}:dlq, then it publishes the event.
        dlq_id = r.xadd(stream_keys(stream).dlq, {"payload": "x"}).decode()
        event_publish(client=r, type="dead_letter", stream=stream, group="billing")
        await _receive_until(ws, lambda m: f'id="dlq-{dlq_id}"' in m, timeout=4.0)
        assert time.monotonic() - started < 2.5, "woken by the worker's event, not the tick"
        await ws.disconnect()

    async def test_dead_letter_without_an_event_is_pushed_at_the_tick(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        ws = _socket(live_path("dlq", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await _receive_until(ws, lambda m: 'id="dlq-table"' in m)
        # No event and no new entry on the stream itself: only the DLQ's length moved.
        dlq_id = r.xadd(stream_keys(stream).dlq, {"payload": "x"}).decode()
        await _receive_until(ws, lambda m: f'id="dlq-{dlq_id}"' in m, timeout=3.0)
        await ws.disconnect()

    def test_page_opens_its_socket_and_a_deeper_page_is_not_live(
        self,
        live_settings: Any,
        client: Client,
        django_user_model: Any,
        r: redis.Redis,
        stream: str,
    ) -> None:
        user = django_user_model.objects.create_user("dlq-reader", password="pw")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="dashboard", codename="view_queues")
        )
        client.force_login(user)
        ids = [r.xadd(stream_keys(stream).dlq, {"n": str(i)}).decode() for i in range(2)]
        url = reverse("dashboard:dlq", args=[stream])
        newest = client.get(url).content.decode()
        main = re.search(r'<main class="page"([^>]*)>', newest)
        assert main is not None
        assert f'ws-connect="{live_path("dlq", stream=stream)}"' in main[1]
        table = re.search(r'<div id="dlq-table"([^>]*)>', newest)
        assert table is not None and "data-live" not in table[1]
        older = client.get(url, {"before": ids[1]}).content.decode()
        table = re.search(r'<div id="dlq-table"([^>]*)>', older)
        assert table is not None and 'data-live="off"' in table[1]


@sync_to_async
def _failure_row(*, stream: str, group: str, entry_id: str, message: str) -> None:
    IndexedFailure.objects.create(
        failures_key=stream_keys(stream).failures,
        source_id=f"{time.time_ns() // 1_000_000}-0",
        stream=stream,
        group=group,
        entry_id=entry_id,
        consumer="w1",
        attempt=1,
        error_type="ValueError",
        message=message,
        failed_at=timezone.now(),
    )


def _poll_calls(r: redis.Redis) -> int:
    """Commands the server has run (every kind but the INFO calls that measure it)."""
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


class _monitor:  # noqa: N801 - used as a context manager, reads like a function
    """Collect every command the server runs while the block is open (MONITOR)."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.commands: list[str] = []

    def __enter__(self) -> list[str]:
        self._monitor = self.client.monitor()  # type: ignore[no-untyped-call]
        self._monitor.__enter__()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()
        return self.commands

    def _collect(self) -> None:
        while True:
            try:
                self.commands.append(self._monitor.next_command()["command"])
            except (redis.RedisError, OSError, ValueError):
                return  # the connection was closed by __exit__

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.1)  # the last commands are on their way
        self._monitor.connection.disconnect()
        self._thread.join(timeout=2)
        self.client.close()
