"""The broadcaster: pushed partials, a Redis load per open stream (never per socket), and
surfaces that fail alone.

Sockets go through the real ASGI application with the in-memory channel layer; the
broadcaster polls the private test Redis. A failure is injected in the page context of
one stream (what a payload that broke decoding used to do), never in Redis.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.utils import timezone

from dashboard.live import broadcaster as broadcaster_module
from dashboard.live import registry
from dashboard.live.broadcaster import Broadcaster
from dashboard.live.registry import Surface
from dashboard.models import IndexedFailure
from dashboard.routing import live_path
from dashboard.runtime import logs
from queue_core.events import event_publish
from queue_core.keys import stream_keys
from tests.dashboard.live.sockets import (
    CookieFor,
    events_subscribed,
    live_socket,
    receive_until,
    xread_blocked,
)
from tests.factories import add_entries, make_group, make_pending
from tests.waiting import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)


class LivePushTests:
    async def test_group_socket_receives_partials_and_pending_changes(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "billing", "w1", 2)
        path = live_path("group", stream=stream, group="billing")
        ws = live_socket(path, await headers_for("view_queues"))
        connected, _ = await ws.connect()
        assert connected
        first = await receive_until(ws, lambda m: 'id="pending-table"' in m)
        assert 'id="group-summary"' in first and 'id="consumer-table"' in first
        (new_id,) = make_pending(r, stream, "billing", "w2", 1, create=False)
        update = await receive_until(ws, lambda m: new_id in m)
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
        ws = live_socket(live_path("stream", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="stream-facts"' in m)
        await xread_blocked(r)  # the watcher blocks on the new last id
        started = time.monotonic()
        (new_id,) = add_entries(r, stream, 1)
        await receive_until(ws, lambda m: new_id in m, timeout=broadcaster_tick - 1)
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
        ws = live_socket(path, await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="pending-table"' in m)
        await events_subscribed(r)  # the subscription is in place before we publish
        # The worker publishes its event at once; the ingestor stores the failure row a
        # moment later (it polls), and the page shows failures from that row.
        event_publish(client=r, type="failure", stream=stream, group="billing", entry_id=entry_id)
        await asyncio.sleep(0.25)  # the ingestor's delay: the row is stored after the event
        await _failure_row(stream=stream, group="billing", entry_id=entry_id, message="boom 42")
        stored = time.monotonic()
        update = await receive_until(ws, lambda m: "boom 42" in m, timeout=4.0)
        assert time.monotonic() - stored < 2.5, "pushed long before the 5 s tick"
        assert 'id="pending-table"' in update
        await ws.disconnect()

    async def test_buttons_follow_each_permission_set(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "billing", "w1", 1)
        path = live_path("group", stream=stream, group="billing")
        reader = live_socket(path, await headers_for("view_queues"))
        operator = live_socket(path, await headers_for("view_queues", "dead_letter_entry"))
        assert (await reader.connect())[0] and (await operator.connect())[0]
        seen_by_reader = await receive_until(reader, lambda m: 'id="pending-table"' in m)
        seen_by_operator = await receive_until(operator, lambda m: 'id="pending-table"' in m)
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
        ws = live_socket(live_path("overview"), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        first = await receive_until(ws, lambda m: 'id="stream-table"' in m)
        assert prefix + "emails" in first
        await xread_blocked(r)  # the watcher blocks on the stream's last id
        add_entries(r, prefix + "emails", 1)
        await receive_until(ws, lambda m: '<td class="num">3</td>' in m)
        assert broadcaster.polled == (prefix + "emails",)
        await ws.disconnect()

    async def test_one_render_serves_every_socket(
        self,
        broadcaster: Broadcaster,
        headers_for: CookieFor,
        r: redis.Redis,
        stream: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # No forced refresh of every open page during the test (a loaded machine can
        # cross its boundary); what is counted is the renders of one change.
        monkeypatch.setattr(broadcaster_module, "REFRESH_S", 3600.0)
        add_entries(r, stream, 1)
        path = live_path("stream", stream=stream)
        headers = await headers_for("view_queues")
        sockets = [live_socket(path, headers) for _ in range(8)]
        for ws in sockets:
            assert (await ws.connect())[0]
        for ws in sockets:
            await receive_until(ws, lambda m: 'id="stream-facts"' in m)
        renders = broadcaster.counters.renders
        (new_id,) = add_entries(r, stream, 1)
        pushed = {await receive_until(ws, lambda m: new_id in m) for ws in sockets}
        assert len(pushed) == 1, "every socket gets the same rendering"
        # One render for the change, and at most one more from a cycle that was already
        # under way when the entry landed; a render per socket would be 8.
        rendered = broadcaster.counters.renders - renders
        assert rendered >= 1, "the change was rendered"
        assert rendered <= 2, f"{rendered} renders for one change and 8 sockets"
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
        ws = live_socket(live_path("stream", stream=opened), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="stream-facts"' in m)
        with _monitor(redis_url) as commands:
            cycles = broadcaster.counters.cycles
            await wait_until_async(lambda: broadcaster.counters.cycles >= cycles + 3,
                                   what="three poll cycles", interval=0.05)  # fmt: skip
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
            # The watcher's idle XREADs are left out: they come once per block (a time),
            # not once per cycle, so on a loaded machine they would skew the ratio.
            await asyncio.sleep(0.3)  # settle: first render done
            calls, cycles = _poll_calls(r, but="xread"), broadcaster.counters.cycles
            await asyncio.sleep(1.0)  # the cycles over this time are the figure
            done = broadcaster.counters.cycles - cycles
            return (_poll_calls(r, but="xread") - calls) / done

        first = live_socket(path, headers)
        assert (await first.connect())[0]
        one = await commands_per_cycle()
        many = [live_socket(path, headers) for _ in range(30)]
        for ws in many:
            assert (await ws.connect())[0]
        thirty_one = await commands_per_cycle()
        assert broadcaster.sockets() == 31
        # 4 stream stats + 1 XPENDING summary per cycle.
        assert one >= 5
        assert thirty_one <= one * 1.15, "31 sockets cost what 1 does"
        for ws in [first, *many]:
            await ws.disconnect()

    async def test_idle_without_sockets(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        ws = live_socket(live_path("stream", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="stream-facts"' in m)
        await ws.disconnect()
        await wait_until_async(lambda: broadcaster.open_surfaces() == set(),
                               what="the broadcaster to let the surface go")  # fmt: skip
        cycles = broadcaster.counters.cycles
        await asyncio.sleep(0.5)  # a window in which an idle broadcaster must not cycle
        assert broadcaster.open_surfaces() == set()
        assert broadcaster.counters.cycles == cycles


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
        headers_for: CookieFor,
        r: redis.Redis,
        prefix: str,
        broken: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        caplog.set_level(logging.INFO, logger="ackboard.live")
        good = prefix + "good"
        add_entries(r, good, 1)
        add_entries(r, broken, 1)
        headers = await headers_for("view_queues")
        bad_ws = live_socket(live_path("stream", stream=broken), headers)
        good_ws = live_socket(live_path("stream", stream=good), headers)
        assert (await bad_ws.connect())[0] and (await good_ws.connect())[0]
        await receive_until(good_ws, lambda m: 'id="stream-facts"' in m)
        # Both streams change, many cycles run: the broken one fails every time.
        for _ in range(5):
            add_entries(r, broken, 1)
            (new_id,) = add_entries(r, good, 1)
            await receive_until(good_ws, lambda m, i=new_id: i in m)
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
        headers_for: CookieFor,
        r: redis.Redis,
        broken: str,
        caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setattr(logs, "LOG_EVERY_S", 0.5)
        caplog.set_level(logging.INFO, logger="ackboard.live")
        add_entries(r, broken, 1)
        ws = live_socket(live_path("stream", stream=broken), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        started = time.monotonic()
        cycles = broadcaster.counters.cycles
        while time.monotonic() - started < 1.6:  # about three intervals of failures
            add_entries(r, broken, 1)
            await asyncio.sleep(0.1)  # a change every 0.1 s over the time measured
        assert broadcaster.counters.cycles - cycles >= 6, "cycles went on"
        records = _failure_records(caplog, broken)
        assert 2 <= len(records) <= 4, [r.getMessage()[:120] for r in records]
        assert sum(r.exc_info is not None for r in records) == 1, "one traceback only"
        assert "more time" in records[-1].getMessage(), "later lines count what was skipped"
        await ws.disconnect()


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


def _poll_calls(r: redis.Redis, but: str = "") -> int:
    """Commands the server has run (every kind but the INFO calls that measure it, and
    ``but``)."""
    stats = r.info("commandstats")
    left_out = {"cmdstat_info", f"cmdstat_{but}"}
    return sum(int(v["calls"]) for k, v in stats.items() if k not in left_out)


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
