"""The registry of live surfaces: socket paths and routes come from it, and a new live page
is one entry (the dead-letter page is the proof).
"""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import unquote

import pytest
import redis
from django.contrib.auth.models import Permission
from django.template.loader import get_template
from django.test import Client
from django.urls import reverse

from dashboard import routing
from dashboard.insight.stream_index import OverviewQuery
from dashboard.live.broadcaster import Broadcaster
from dashboard.live.registry import (
    KINDS,
    Surface,
    socket_path,
    socket_pattern,
    surface_from_route,
    surface_path,
)
from dashboard.routing import live_path
from queue_core.events import event_publish
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.dashboard.live.sockets import (
    CookieFor,
    events_subscribed,
    live_socket,
    receive_until,
)
from tests.factories import add_entries, make_pending

pytestmark = pytest.mark.django_db(transaction=True)


class KindTests:
    def test_routes_are_the_kinds(self) -> None:
        assert len(routing.websocket_urlpatterns) == len(KINDS)

    def test_each_partial_is_the_root_element_with_its_id(self) -> None:
        """The browser swaps a pushed partial by its root element's id: the name."""
        for kind in KINDS.values():
            source = get_template(kind.template).template.source  # type: ignore[attr-defined]
            for name in kind.partials:
                # Tags that write no markup may come first ({% cache %} around a table).
                tags = r"(\{%[^%]*%\})*"
                root = rf"{{% partialdef {name}( inline)? %}}{tags}\s*<\w+ id=\"{name}\""
                assert re.search(root, source), (kind.template, name)

    def test_socket_paths_route_back_to_their_surface(
        self, live_settings: Any, prefix: str
    ) -> None:
        view = OverviewQuery(q="a/b %c.", sort="lag", page=2).encode()
        names = {"stream": prefix + "a/b %c.", "group": "g/1 %", "entry_id": "5-1", "view": view}
        for kind in KINDS:
            params = {p: names[p] for p in KINDS[kind].params}
            surface = Surface(kind, **params)
            # The server decodes the path once before routing.
            path = unquote(socket_path(surface))
            match = re.match(socket_pattern(kind), path.removeprefix("/"))
            assert match is not None, (kind, path)
            assert surface_from_route(kind, match.groupdict()) == surface
            args = [v for p, v in params.items() if p != "view"]
            query = "?" + params["view"] if "view" in params else ""
            assert surface_path(surface) == unquote(reverse(KINDS[kind].page, args=args)) + query


class LivePathTests:
    def test_names_are_escaped_like_page_urls(self) -> None:
        path = live_path("group", stream="a/b%c d", group="g/1")
        assert path == "/ws/streams/a%252Fb%2525c%20d/groups/g%252F1/"

    async def test_odd_stream_name_routes_to_its_surface(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, prefix: str
    ) -> None:
        name = prefix + "odd/name %{x}"
        add_entries(r, name, 1)
        ws = live_socket(live_path("stream", stream=name), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="stream-facts"' in m)
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
        ws = live_socket(live_path("dlq", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="dlq-table"' in m and first in m)
        await events_subscribed(r)  # the subscription is in place before the action
        started = time.monotonic()
        moved = entry_dead_letter(
            client=r, stream=stream, group="billing", entry_id=second, reason="b", operator="ops"
        )
        assert moved is not None
        update = await receive_until(ws, lambda m: f'id="dlq-{moved.dlq_id}"' in m, 4.0)
        assert time.monotonic() - started < 2.5, "woken by the action's event, not the tick"
        assert 'id="dlq-table"' in update
        await ws.disconnect()

    async def test_worker_dead_letter_event_is_pushed_before_the_tick(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        from django.conf import settings

        settings.ACKBOARD_LIVE_TICK = 5.0
        add_entries(r, stream, 1)
        ws = live_socket(live_path("dlq", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="dlq-table"' in m)
        await events_subscribed(r)  # the subscription is in place before the event
        started = time.monotonic()
        # What a worker does: its script adds to {S}:dlq, then it publishes the event.
        dlq_id = r.xadd(stream_keys(stream).dlq, {"payload": "x"}).decode()
        event_publish(client=r, type="dead_letter", stream=stream, group="billing")
        await receive_until(ws, lambda m: f'id="dlq-{dlq_id}"' in m, timeout=4.0)
        assert time.monotonic() - started < 2.5, "woken by the worker's event, not the tick"
        await ws.disconnect()

    async def test_dead_letter_without_an_event_is_pushed_at_the_tick(
        self, broadcaster: Broadcaster, headers_for: CookieFor, r: redis.Redis, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        ws = live_socket(live_path("dlq", stream=stream), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="dlq-table"' in m)
        # No event and no new entry on the stream itself: only the DLQ's length moved.
        dlq_id = r.xadd(stream_keys(stream).dlq, {"payload": "x"}).decode()
        await receive_until(ws, lambda m: f'id="dlq-{dlq_id}"' in m, timeout=3.0)
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
