"""The sampler's tick reaches open pages: a queue where nothing changes still gets the
chart's newest point pushed, with no extra Redis read in the broadcaster.

The sampler publishes one ``rates`` event a tick (``dashboard.insight.rates.sampler``); the
stream and group signatures carry its time (``dashboard.live.registry``), so the
broadcaster re-renders those pages and pushes the partial holding ``#chart-point``.
"""

from __future__ import annotations

import asyncio
import json
import time
from html.parser import HTMLParser
from typing import Any

import pytest
import redis
from asgiref.sync import sync_to_async

from dashboard.insight.rates.models import RateSample
from dashboard.insight.rates.sampler import RATES_EVENT
from dashboard.live.broadcaster import Broadcaster
from dashboard.routing import live_path
from queue_core.events import event_publish
from tests.dashboard.live.sockets import CookieFor, live_socket, receive_until
from tests.factories import make_pending

pytestmark = pytest.mark.django_db(transaction=True)


def _samples(stream: str, group: str, at: float) -> None:
    """Two tier-0 samples ten seconds apart, 5 entries/s produced, as the sampler writes."""
    RateSample.objects.bulk_create(
        RateSample(tier=0, stream=stream, group=g, at=at - 10 * i, entries_added=500 - 50 * i,
                   entries_read=(400 - 40 * i) if g else None, lag=100, pending=2)
        for i in range(2)
        for g in dict.fromkeys((group, ""))  # the group's series and the stream's
    )  # fmt: skip


class _Attr(HTMLParser):
    def __init__(self, element_id: str, name: str) -> None:
        super().__init__()
        self.element_id, self.name = element_id, name
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id") == self.element_id:
            self.found.append(values.get(self.name) or "")


def _point(message: str) -> dict[str, Any] | None:
    """The JSON of ``#chart-point``'s ``data-point`` in a pushed message (None if empty)."""
    parser = _Attr("chart-point", "data-point")
    parser.feed(message)
    assert len(parser.found) == 1, parser.found
    return json.loads(parser.found[0]) if parser.found[0] else None


def _newest(message: str) -> int | None:
    """The pushed point's time, None when the message has no point."""
    point = _point(message) if 'id="chart-point"' in message else None
    return None if point is None else int(point["t"])


class RatesTickTests:
    @pytest.mark.parametrize("kind", ["group", "stream"])
    async def test_a_tick_pushes_the_newest_point_to_a_quiet_queue(
        self,
        broadcaster: Broadcaster,
        headers_for: CookieFor,
        r: redis.Redis,
        stream: str,
        kind: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        # No forced refresh of every page during the test: only a tick may push the point,
        # so a busy machine gets a long wait without the test passing for the wrong reason.
        monkeypatch.setattr("dashboard.live.broadcaster.REFRESH_S", 3600.0)
        make_pending(r, stream, "billing", "w1", 2)
        group = "billing" if kind == "group" else ""
        names = {"stream": stream, "group": group} if group else {"stream": stream}
        ws = live_socket(live_path(kind, **names), await headers_for("view_queues"))
        connected, _ = await ws.connect()
        assert connected
        first = await receive_until(ws, lambda m: 'id="chart-point"' in m, timeout=10)
        assert _point(first) is None  # no samples yet
        at = float(int(time.time()))
        await sync_to_async(_samples)(stream, group, at)

        # Nothing changed in Redis: only the sampler's event can bring the point (the
        # forced refresh of every page is off, above).
        # A tick's event each second until the push (each a new tick time, as the sampler's
        # are: the broadcaster ignores a repeated one): its subscription may still be
        # starting on a busy machine, and pub/sub keeps nothing for later.
        async def announce() -> None:
            tick = 0
            while True:
                event_publish(client=r, type=RATES_EVENT, stream="", at=at + tick / 1000)
                tick += 1
                await asyncio.sleep(1)  # the sampler's pace: one tick event a second

        announcing = asyncio.create_task(announce())
        try:
            pushed = await receive_until(ws, lambda m: _newest(m) == int(at), timeout=30)
        finally:
            announcing.cancel()
        point = _point(pushed)
        assert point is not None
        assert point["produce_per_s"] == pytest.approx(5.0)
        await ws.disconnect()

    async def test_a_malformed_rates_event_is_ignored(
        self, broadcaster: Broadcaster, live_settings: Any
    ) -> None:
        broadcaster.on_event(json.dumps({"type": RATES_EVENT, "stream": "", "at": 100.0}))
        seen = broadcaster._rates_at
        for bad in (
            '{"type": "rates", "at": "x"}',
            '{"type": "rates"}',
            '{"type": "rates", "at": NaN}',
            '{"type": "rates", "at": true}',
        ):
            broadcaster.on_event(bad)
        assert (seen, broadcaster._rates_at) == (100.0, 100.0)
