"""Safety of the live sockets: every route checks auth in connect, and one hostile socket
cannot stop the broadcaster's pushes to everyone else."""

from __future__ import annotations

import logging

import pytest
import redis

from dashboard import routing
from dashboard.live.broadcaster import Broadcaster
from dashboard.live.registry import KINDS
from dashboard.routing import live_path
from tests.dashboard.live.sockets import (
    SITE_HEADERS,
    CookieFor,
    close_code,
    live_socket,
    receive_until,
)
from tests.factories import make_pending

pytestmark = pytest.mark.django_db(transaction=True)


def _paths(stream: str, entry_id: str) -> dict[str, str]:
    return {
        "overview": live_path("overview"),
        "stream": live_path("stream", stream=stream),
        "group": live_path("group", stream=stream, group="g"),
        "entry": live_path("entry", stream=stream, entry_id=entry_id),
        "dlq": live_path("dlq", stream=stream),
    }


class SocketAuthEveryRouteTests:
    def test_routes_are_the_registered_surfaces(self) -> None:
        assert len(routing.websocket_urlpatterns) == len(KINDS) == 5

    async def test_anonymous_and_unprivileged_are_closed(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c", 1)
        nobody = await headers_for()
        for kind, path in _paths(stream, ids[0]).items():
            anon = live_socket(path, SITE_HEADERS)
            assert await close_code(anon) == 4401, kind
            assert await close_code(live_socket(path, nobody)) == 4403, kind
        assert broadcaster.sockets() == 0


class UnroutedSocketTests:
    @pytest.mark.parametrize(
        "path", ["/ws/", "/ws/nope/", "/ws/streams/", "/ws/streams/a/b/c/d/e/", "/", "/nope"]
    )
    async def test_a_path_no_surface_serves_is_closed_quietly(
        self, broadcaster: Broadcaster, caplog: pytest.LogCaptureFixture, path: str
    ) -> None:
        """Anonymous, same-site Origin: closed with 4404 (Channels' router would raise "No
        route found", a 500 and a traceback per handshake), and nothing is logged."""
        with caplog.at_level(logging.DEBUG):
            assert await close_code(live_socket(path, SITE_HEADERS)) == 4404
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert broadcaster.sockets() == 0


class HostileSocketTests:
    @pytest.mark.parametrize(
        "entry_id", ["99999999999999999999-0", "18446744073709551616-0", "1-99999999999999999999"]
    )
    async def test_out_of_range_entry_id_does_not_stop_other_pushes(
        self,
        broadcaster: Broadcaster,
        headers_for: CookieFor,
        r: redis.Redis,
        stream: str,
        entry_id: str,
    ) -> None:
        make_pending(r, stream, "g", "c", 1)
        headers = await headers_for("view_queues")
        hostile = live_socket(live_path("entry", stream=stream, entry_id=entry_id), headers)
        # The entry page answers 400 for this id; its socket is closed as unknown.
        assert await close_code(hostile) == 4404
        assert broadcaster.open_surfaces() == set()
        good = live_socket(live_path("group", stream=stream, group="g"), headers)
        assert (await good.connect())[0]
        await receive_until(good, lambda m: 'id="pending-table"' in m)
        (new_id,) = make_pending(r, stream, "g", "c2", 1, create=False)
        await receive_until(good, lambda m: new_id in m)
        await good.disconnect()


class PushedHtmlEscapingTests:
    async def test_payload_and_names_are_escaped_in_pushes(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        group = "<img src=x onerror=alert(1)>"
        r.xgroup_create(stream, group, id="0", mkstream=True)
        entry_id = r.xadd(stream, {"<b>f</b>": "<script>alert('x')</script>"}).decode()
        r.xreadgroup(group, "<script>c</script>", {stream: ">"})
        headers = await headers_for("view_queues", "retry_entry", "dead_letter_entry")
        paths = [
            live_path("group", stream=stream, group=group),
            live_path("stream", stream=stream),
            live_path("entry", stream=stream, entry_id=entry_id),
        ]
        for path in paths:
            ws = live_socket(path, headers)
            assert (await ws.connect())[0], path
            html = await receive_until(ws, lambda m: "&lt;" in m)
            assert "<script>" not in html and "<img src=x" not in html, path
            assert "<b>f</b>" not in html, path
            await ws.disconnect()
