"""The overview's live socket carries its view (filter, sort, page): it is pushed the page
it shows, and the broadcaster polls only that page's streams, whatever the stream count."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis

from dashboard.insight import stream_index
from dashboard.live.broadcaster import Broadcaster
from dashboard.routing import live_path
from tests.dashboard.live.sockets import CookieFor, live_socket, receive_until
from tests.factories import add_entries

pytestmark = pytest.mark.django_db(transaction=True)


def _names(html: str) -> list[str]:
    return re.findall(r'class="name"><a href="[^"]*">([^<]*)</a>', html)


class OverviewLiveTests:
    async def test_a_deeper_page_is_pushed_and_only_its_streams_are_polled(
        self,
        broadcaster: Broadcaster,
        headers_for: CookieFor,
        live_settings: Any,
        r: redis.Redis,
        prefix: str,
    ) -> None:
        live_settings.ACKBOARD_OVERVIEW_PAGE_SIZE = 10
        live_settings.ACKBOARD_INDEX_BACKGROUND = False
        names = [f"{prefix}s{i:02d}" for i in range(30)]
        pipe = r.pipeline(transaction=False)
        for name in names:
            pipe.xadd(name, {"a": "1"})
        pipe.execute()
        view = stream_index.OverviewQuery(q="s", page=2).encode()
        ws = live_socket(live_path("overview", view=view), await headers_for("view_queues"))
        assert (await ws.connect())[0]
        first = await receive_until(ws, lambda m: 'id="stream-table"' in m)
        assert _names(first) == names[10:20]
        # The next cycles poll the page's ten streams, never all thirty.
        add_entries(r, names[12], 2)
        pushed = await receive_until(ws, lambda m: '<td class="num">3</td>' in m)
        assert _names(pushed) == names[10:20]
        assert broadcaster.polled == tuple(names[10:20])
        await ws.disconnect()
        stream_index.refresher_stop()

    async def test_a_malformed_view_is_refused_like_the_page(
        self, broadcaster: Broadcaster, headers_for: CookieFor, live_settings: Any
    ) -> None:
        ws = live_socket("/ws/overview/sort=bogus/", await headers_for("view_queues"))
        connected, _ = await ws.connect()
        assert connected
        closed = await ws.receive_output(5)
        assert closed["type"] == "websocket.close" and closed["code"] == 4404
