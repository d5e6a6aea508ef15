"""The rate charts in a browser: drawn from the chart-data endpoint, appended to live from
the socket's pushes (no reload, no redraw), range switching, and the docs/rates.md screenshot of
the group page with its chart.

Its own production web process, on its own private Redis, whose sampler ticks every
second (``ACKBOARD_SAMPLER_INTERVAL_S=1``), so live points arrive within seconds. The
screenshot's hour of history is written into that server's database as sampler rows
(``seed_history``: a backlog that grows while the group is paused and drains after it is
resumed, with those actions and a bulk retry in the audit trail); what follows it is
sampled for real from a producer and a consumer this test runs.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from playwright.sync_api import expect

from tests.browser.server import LiveServer, log_problems, login, screenshot, serving
from tests.factories import add_entries, make_pending
from tests.redis_server import RedisServer, RedisUnavailable
from tests.servers import started
from tests.waiting import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.production]


@pytest.fixture(scope="module")
def chart_server() -> Iterator[tuple[LiveServer, redis.Redis]]:
    """A web process and its own private Redis: the sampler's lease is one per Redis
    (one per deployment), and the session's web server would hold it on the shared one."""
    with started(RedisServer(), RedisUnavailable) as own:
        yield from _chart_server(own)


def _chart_server(own: RedisServer) -> Iterator[tuple[LiveServer, redis.Redis]]:
    server = LiveServer(
        redis_url=own.url,
        streams="*",
        extra_env={
            "ACKBOARD_SAMPLER": "1",
            "ACKBOARD_SAMPLER_INTERVAL_S": "1",
            "ACKBOARD_INDEX_REFRESH_S": "1",  # a stream a test adds is sampled at once
        },
    )
    client = redis.Redis.from_url(own.url, socket_timeout=10)
    try:
        with serving(server):
            yield server, client
    finally:
        client.close()


def _group_page(page: Any, server: LiveServer, stream: str, group: str) -> None:
    from dashboard.display.converters import name_segment

    page.goto(f"{server.url}/streams/{name_segment(stream)}/groups/{name_segment(group)}/")


def _samples(server: LiveServer, stream: str, group: str, after: float = 0.0) -> int:
    """How many samples of ``group`` the server's sampler has stored after ``after``
    (epoch seconds), read from its SQLite file."""
    db = sqlite3.connect(f"file:{server.workdir / 'db.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        (count,) = db.execute(
            "SELECT count(*) FROM dashboard_ratesample"
            ' WHERE tier = 0 AND stream = ? AND "group" = ? AND at > ?',
            (stream, group, after),
        ).fetchone()
    finally:
        db.close()
    return int(count)


def _points(page: Any) -> int:
    return int(page.locator("#rate-charts").get_attribute("data-points") or 0)


class LiveChartTests:
    def test_the_chart_receives_live_points_over_the_socket(
        self, chromium: Any, chart_server: tuple[LiveServer, redis.Redis]
    ) -> None:
        server, browser_redis = chart_server
        stream = "live"
        make_pending(browser_redis, stream, "g", "c1", 3)
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(20_000)
        mark = server.log_mark()
        try:
            page = context.new_page()
            login(page, server)  # the first request starts the server's sampler
            wait_until(lambda: _samples(server, stream, "g") >= 2, 20, "samples for a chart",
                       interval=0.2)  # fmt: skip
            _group_page(page, server, stream, "g")
            expect(page.locator("#live-indicator")).to_have_attribute("data-state", "live")
            charts = page.locator("#rate-charts")
            expect(charts).to_have_attribute("data-state", "drawn")
            assert page.locator("#rate-charts .chart-panel canvas").count() >= 2
            before = _points(page)
            assert before >= 2
            # Marks that a reload or a redraw would lose.
            page.evaluate(
                """() => {
                  window.__samePage = true;
                  document.querySelector('#rate-charts canvas').__sameChart = true;
                }"""
            )
            # New entries change the stream: the group surface is pushed, with the newest
            # sample in #chart-point, which charts.js appends.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and _points(page) < before + 3:
                add_entries(browser_redis, stream, 2)
                page.wait_for_timeout(500)
            assert _points(page) >= before + 3, (before, _points(page))
            last_t = int(charts.get_attribute("data-last-t") or 0)
            assert abs(last_t - time.time()) < 10
            assert page.evaluate("() => window.__samePage === true")
            assert page.evaluate(
                "() => document.querySelector('#rate-charts canvas').__sameChart === true"
            )
            # The pushed point is a real sample: the lag grows with the entries added.
            point = json.loads(page.locator("#chart-point").get_attribute("data-point") or "{}")
            assert point["t"] >= last_t
            assert isinstance(point["lag"], int) and point["lag"] > 0

            # Ranges: each answers and redraws from the endpoint.
            for name in ("6h", "24h", "7d", "1h"):
                page.get_by_role("button", name=name, exact=True).click()
                expect(charts).to_have_attribute("data-range", name)
                expect(page.get_by_role("button", name=name, exact=True)).to_have_attribute(
                    "aria-pressed", "true"
                )
                expect(charts).not_to_have_attribute("data-state", "loading")
                assert charts.get_attribute("data-state") in ("drawn", "empty"), name
            # The stream page charts the stream's own series: its produce rate.
            page.goto(f"{server.url}/streams/{stream}/")
            expect(page.locator("#rate-charts")).to_have_attribute("data-state", "drawn")
            expect(
                page.locator('#rate-charts .chart-panel[data-panel="produce_per_s"]')
            ).to_have_count(1)
            assert log_problems(server.log_since(mark)) == []
        finally:
            context.close()

    def test_legends_show_the_latest_values_without_hovering(
        self, chromium: Any, chart_server: tuple[LiveServer, redis.Redis]
    ) -> None:
        server, browser_redis = chart_server
        stream = "legend"
        make_pending(browser_redis, stream, "g", "c1", 3)
        context = chromium.new_context(viewport={"width": 1440, "height": 900})
        context.set_default_timeout(20_000)
        try:
            page = context.new_page()
            login(page, server)  # the first request starts the server's sampler
            charts = page.locator("#rate-charts")
            deadline = time.monotonic() + 20
            while True:  # until the sampler has points enough for a chart
                _group_page(page, server, stream, "g")
                expect(charts).not_to_have_attribute("data-state", "loading")
                if charts.get_attribute("data-state") == "drawn":
                    break
                assert time.monotonic() < deadline, "the charts were never drawn"
                page.wait_for_timeout(500)
            legend_values = """root => [...root.querySelectorAll('.chart-panel')].map(
                panel => [...panel.querySelectorAll('.u-legend .u-series .u-value')]
                    .map(v => v.textContent))"""
            number = re.compile(r"^-?[\d.,]+\s*[a-zA-Z/%]*$")

            def check() -> None:
                panels = charts.evaluate(legend_values)
                assert panels, panels
                for values in panels:
                    # The time of the latest point, then the series' values: not uPlot's "--".
                    assert values[0] != "--", panels
                    assert number.match(values[1]), panels

            check()  # the pointer was never over a chart
            canvas = page.locator("#rate-charts .chart-panel .u-over").first
            canvas.hover()
            page.mouse.move(5, 5)  # and away again
            check()
        finally:
            context.close()


# --- the docs screenshot ----------------------------------------------------------------

_SEED = """
import json
from datetime import UTC, datetime
from dashboard.models import AuditEvent
from dashboard.insight.rates.models import RateSample
data = json.load(open({path!r}))
# The rows sampled before the stream's counters were set to the history's do not belong.
RateSample.objects.filter(stream=data["stream"], at__lte=data["end"]).delete()
RateSample.objects.bulk_create(RateSample(**row) for row in data["samples"])
for event in data["events"]:
    at = datetime.fromtimestamp(event.pop("at"), UTC)
    e = AuditEvent.objects.create(**event)
    AuditEvent.objects.filter(pk=e.pk).update(created_at=at)
"""


def seed_history(
    server: LiveServer, *, stream: str, group: str, end: float, added: int, read: int
) -> None:
    """An hour of 10-second samples ending at ``end`` with the counters ``added`` and
    ``read``: production ~40/s throughout; the group is paused 40 min ago (nothing read,
    the lag grows), resumed 30 min ago (read ~75/s, the lag drains down to what it is now)."""
    n = 360
    produce = [40 + 6 * math.sin(i / 7) for i in range(n)]
    consume = []
    for i in range(n):
        minutes_ago = (n - i) / 6
        if 30 < minutes_ago <= 40:
            consume.append(0.0)
        elif minutes_ago <= 30:
            consume.append(75 + 5 * math.sin(i / 5))
        else:
            consume.append(produce[i] + 0.3 * math.sin(i / 3))
    rows = []
    a, r = float(added), float(read)
    ages_pending = 0.0
    for i in range(n - 1, -1, -1):  # backwards from the real counters
        at = end - (n - 1 - i) * 10
        lag = max(0, round(a - r))
        undelivered = lag / max(1.0, produce[i])
        ages_pending = 4 + (undelivered if consume[i] == 0 else 0.3 * undelivered)
        failures = 1 if i % 9 == 0 else 0
        if 300 < i < 306:
            failures = 6  # a burst of gateway timeouts after the resume
        rows.append(
            {
                "tier": 0,
                "stream": stream,
                "group": group,
                "at": at,
                "entries_added": round(a),
                "entries_read": round(r),
                "lag": lag,
                "pending": 8,
                "oldest_pending_age_s": round(ages_pending, 1),
                "oldest_undelivered_age_s": round(undelivered, 1),
                "dead_letters": 2,
                "failures": failures,
            }
        )
        a -= produce[i] * 10
        r -= consume[i] * 10
    events = [
        {"at": end - 40 * 60, "username": "olga", "action": "pause", "stream": stream,
         "group": group, "result": "ok", "reason": "deploy of billing v2.3"},
        {"at": end - 30 * 60, "username": "olga", "action": "resume", "stream": stream,
         "group": group, "result": "ok"},
        {"at": end - 12 * 60, "username": "max", "action": "bulk-retry", "stream": stream,
         "group": group, "result": "ok", "entry_ids": ["1-0", "2-0", "3-0"]},
    ]  # fmt: skip
    path = server.workdir / "history.json"
    path.write_text(json.dumps({"stream": stream, "end": end, "samples": rows, "events": events}))
    server._manage("shell", "-c", _SEED.format(path=str(path)))


class _Traffic(threading.Thread):
    """A producer at ~40/s and a consumer at ~75/s on the group, so the samples that
    follow the seeded hour continue it for real."""

    def __init__(self, client: redis.Redis, stream: str, group: str) -> None:
        super().__init__(daemon=True)
        self.client, self.stream, self.group = client, stream, group
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pipe = self.client.pipeline(transaction=False)
            for i in range(4):
                pipe.xadd(self.stream, {"invoice": str(i), "amount": "12.50"})
            pipe.execute()
            got: Any = self.client.xreadgroup(self.group, "billing-1", {self.stream: ">"}, count=8)
            ids = [entry_id for _, entries in got for entry_id, _ in entries]
            if ids:
                self.client.xack(self.stream, self.group, *ids)
            self.stop.wait(0.1)


class ScreenshotTests:
    def test_group_page_with_its_chart(
        self, chromium: Any, chart_server: tuple[LiveServer, redis.Redis]
    ) -> None:
        server, browser_redis = chart_server
        stream, group = "invoices", "billing"
        # The real stream: 15,000 entries, 2,600 read; its counters set to the history's.
        make_pending(browser_redis, stream, group, "billing-1", 8)
        add_entries(browser_redis, stream, 14_992)
        last_id = browser_redis.xinfo_stream(stream)["last-generated-id"].decode()
        ids = [e[0].decode() for e in browser_redis.xrange(stream, count=2600)]
        end = time.time()
        added, lag = 912_400, 12_400
        # Redis 7's counter options (redis-py has no helper for them; execute_command is untyped).
        browser_redis.execute_command(  # type: ignore[no-untyped-call]
            "XSETID", stream, last_id, "ENTRIESADDED", added, "MAXDELETEDID", "0-0"
        )
        browser_redis.execute_command(  # type: ignore[no-untyped-call]
            "XGROUP", "SETID", stream, group, ids[-1], "ENTRIESREAD", added - lag
        )
        seed_history(server, stream=stream, group=group, end=end, added=added, read=added - lag)
        traffic = _Traffic(redis.Redis.from_url(server.redis_url), stream, group)
        traffic.start()
        context = chromium.new_context(viewport={"width": 1280, "height": 1150})
        context.set_default_timeout(20_000)
        try:
            page = context.new_page()
            login(page, server)
            wait_until(lambda: _samples(server, stream, group, after=end) >= 3, 20,
                       "real samples after the seeded hour", interval=0.2)  # fmt: skip
            _group_page(page, server, stream, group)
            expect(page.locator("#rate-charts")).to_have_attribute("data-state", "drawn")
            expect(page.locator("#rate-charts .chart-markers li")).to_have_count(3)
            expect(page.locator("#group-drain")).to_be_visible()
            assert page.locator("#rate-charts .chart-panel").count() == 4
            # The rates come after the pending entries and the consumers: the README's
            # shot (the first screen) starts at them.
            page.evaluate("document.getElementById('rate-charts').scrollIntoView()")
            page.wait_for_timeout(300)
            screenshot(page, "group-rates")
        finally:
            traffic.stop.set()
            traffic.join(timeout=5)
            context.close()
