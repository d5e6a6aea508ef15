"""The live sockets' consumer: who may open a socket on which surface.

Sockets go through the real ASGI application (origin check, session auth, routing) with
the in-memory channel layer; the broadcaster polls the private test Redis.
"""

from __future__ import annotations

import pytest
import redis

from dashboard.live.broadcaster import Broadcaster
from dashboard.routing import live_path
from queue_core.keys import stream_keys
from tests.dashboard.live.sockets import (
    SITE_HEADERS,
    CookieFor,
    close_code,
    live_socket,
)
from tests.factories import add_entries

pytestmark = pytest.mark.django_db(transaction=True)


class SocketAuthTests:
    async def test_unauthenticated_socket_is_closed(self, broadcaster: Broadcaster) -> None:
        ws = live_socket(live_path("overview"), SITE_HEADERS)
        assert await close_code(ws) == 4401
        assert broadcaster.sockets() == 0

    async def test_user_without_view_permission_is_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor
    ) -> None:
        ws = live_socket(live_path("overview"), await headers_for())
        assert await close_code(ws) == 4403
        assert broadcaster.sockets() == 0

    async def test_foreign_origin_is_refused(
        self, broadcaster: Broadcaster, headers_for: CookieFor
    ) -> None:
        headers = [h for h in await headers_for("view_queues") if h[0] != b"origin"]
        ws = live_socket(live_path("overview"), [*headers, (b"origin", b"http://evil.example")])
        connected, _ = await ws.connect()
        assert connected is False

    async def test_stream_outside_allowlist_is_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis
    ) -> None:
        add_entries(r, "not-allowed-stream", 1)
        try:
            path = live_path("stream", stream="not-allowed-stream")
            ws = live_socket(path, await headers_for("view_queues"))
            assert await close_code(ws) == 4404
        finally:
            r.delete("not-allowed-stream")

    async def test_companion_stream_is_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor, stream: str
    ) -> None:
        path = live_path("stream", stream=stream_keys(stream).dlq)
        ws = live_socket(path, await headers_for("view_queues"))
        assert await close_code(ws) == 4404

    async def test_malformed_entry_id_is_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor, stream: str
    ) -> None:
        path = live_path("entry", stream=stream, entry_id="not-an-id")
        ws = live_socket(path, await headers_for("view_queues"))
        assert await close_code(ws) == 4404
        assert broadcaster.open_surfaces() == set()


class ClosedSocketTests:
    """A push racing the browser's close is dropped quietly, as daphne's refusal means."""

    async def test_a_send_refused_by_the_server_ends_the_socket_quietly(self) -> None:
        from dashboard.live.consumers import SurfaceConsumer

        sent: list[str] = []

        async def closed_protocol(message: dict[str, str]) -> None:
            sent.append(message["text"])
            raise RuntimeError("Attempt to send on a closed protocol")  # what daphne raises

        consumer = SurfaceConsumer(kind="overview")
        consumer.base_send = closed_protocol
        await consumer.push("<div id=a></div>")  # raises nothing
        assert consumer.ended
        await consumer.push("<div id=b></div>")
        assert sent == ["<div id=a></div>"]  # nothing is sent after the end
