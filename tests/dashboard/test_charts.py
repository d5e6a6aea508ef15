"""Rate charts, the drain estimate and the lag in time on the pages.

The samples are ``RateSample`` rows written here (what the sampler would have stored), so
each figure the endpoint and the pages show can be checked against what was put in:
rates from the counters' steps, the audit markers in range, nothing drawn with too
little data, and on a server without counters (Redis < 7) a "rates need Redis 7+" note
instead of any figure. The lag in time comes from the real test Redis. The browser test
(tests/browser/test_charts_browser.py) draws the charts and appends live points.
"""

from __future__ import annotations

import json
import time
from html.parser import HTMLParser
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.insight import stream_index
from dashboard.insight.rates.models import RateSample
from dashboard.live.registry import Surface, surface_context
from dashboard.live.render import surface_render
from dashboard.models import AuditEvent
from dashboard.views.charts import NEEDS_REDIS_7, RANGES, overview_drains
from queue_core import clock as queue_clock
from queue_core import selectors
from queue_core.keys import stream_keys
from tests.clock import FrozenClock
from tests.dashboard.test_csp import inline_problems
from tests.factories import add_entries, make_group, make_pending, make_user
from tests.html import element_text, table_rows

pytestmark = pytest.mark.django_db


@pytest.fixture
def chart_settings(settings: SettingsWrapper, redis_url: str, prefix: str) -> None:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_SAMPLER_INTERVAL_S = 10.0


@pytest.fixture
def reader(chart_settings: None, django_user_model: type[User]) -> Client:
    client = Client()
    client.force_login(make_user(django_user_model, "rhea", "view_queues"))
    return client


def samples(
    stream: str,
    group: str,
    n: int,
    *,
    step: float = 10.0,
    tier: int = 0,
    end: float | None = None,
    added: tuple[int, int] | None = (1000, 50),
    read: tuple[int, int] | None = (900, 40),
    lag: tuple[int, int] | None = (100, 10),
    failures: int | None = 2,
) -> list[float]:
    """``n`` rows ``step`` s apart ending at ``end`` (now): counters start at a[0] and
    grow by a[1] per row (None: the server keeps no such counter). Returns their times."""
    end = queue_clock.now_s() if end is None else end
    times = [end - (n - 1 - i) * step for i in range(n)]
    RateSample.objects.bulk_create(
        RateSample(
            tier=tier,
            stream=stream,
            group=group,
            at=at,
            entries_added=None if added is None else added[0] + i * added[1],
            entries_read=None if read is None else read[0] + i * read[1],
            lag=None if lag is None else lag[0] + i * lag[1],
            pending=3,
            oldest_pending_age_s=12.0,
            oldest_undelivered_age_s=float(i),
            dead_letters=0,
            failures=failures,
        )
        for i, at in enumerate(times)
    )
    return times


def chart(client: Client, stream: str, group: str = "", **query: str) -> Any:
    if group:
        url = reverse("dashboard:group-chart-data", args=[stream, group])
    else:
        url = reverse("dashboard:stream-chart-data", args=[stream])
    return client.get(url, query)


class _Attr(HTMLParser):
    def __init__(self, element_id: str, attr: str) -> None:
        super().__init__(convert_charrefs=True)
        self.element_id, self.attr = element_id, attr
        self.value: str | None = None
        self.found = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if not self.found and found.get("id") == self.element_id:
            self.found = True
            self.value = found.get(self.attr)


def attr(page: str, element_id: str, name: str) -> str | None:
    """The value of attribute ``name`` of the element with ``id=element_id``."""
    parser = _Attr(element_id, name)
    parser.feed(page)
    assert parser.found, f"no element with id={element_id!r}"
    return parser.value


class ChartDataTests:
    def test_rates_lag_ages_and_failures_are_what_the_samples_say(
        self, reader: Client, stream: str
    ) -> None:
        times = samples(stream, "g", 30)
        response = chart(reader, stream, "g", range="1h")
        assert response.status_code == 200
        data = response.json()
        assert data["t"] == [int(t) for t in times]
        assert (data["range"], data["range_s"], data["step_s"]) == ("1h", 3600, 10)
        assert data["enough"] is True and data["counters"] is True and data["note"] == ""
        s = data["series"]
        # The first point has no previous sample: no rate, never a made-up 0.
        assert s["produce_per_s"][0] is None and s["consume_per_s"][0] is None
        assert s["produce_per_s"][1:] == pytest.approx([5.0] * 29, abs=0.01)  # 50 per 10 s
        assert s["consume_per_s"][1:] == pytest.approx([4.0] * 29, abs=0.01)
        assert s["lag"] == [100 + 10 * i for i in range(30)]
        assert s["oldest_pending_s"] == [12.0] * 30
        assert s["undelivered_s"] == [float(i) for i in range(30)]
        assert s["failures_per_min"][1:] == pytest.approx([12.0] * 29, abs=0.01)  # 2 per 10 s

    def test_each_range_reads_its_span(self, reader: Client, stream: str) -> None:
        now = time.time()
        samples(stream, "g", 10, end=now)  # the last 90 s, tier 0
        samples(stream, "g", 10, end=now - 3 * 3600)  # 3 h ago, tier 0
        samples(stream, "g", 30, tier=2, step=600, end=now - 600)  # 10-minute tier
        seen = {}
        for name, seconds in RANGES.items():
            data = chart(reader, stream, "g", range=name).json()
            assert data["range_s"] == seconds
            assert all(t >= now - seconds - 1 for t in data["t"]), name
            seen[name] = data
        assert len(seen["1h"]["t"]) == 10
        assert len(seen["6h"]["t"]) == 20  # both tier-0 runs
        assert seen["7d"]["step_s"] == 600
        assert len(seen["7d"]["t"]) >= 30  # the 10-minute rows, then the newer tail

    def test_the_stream_chart_is_the_stream_row(self, reader: Client, stream: str) -> None:
        samples(stream, "", 5, read=None, lag=(0, 0))
        samples(stream, "g", 5, added=(0, 500))
        data = chart(reader, stream).json()
        assert data["group"] == ""
        assert data["series"]["produce_per_s"][1:] == pytest.approx([5.0] * 4, abs=0.01)
        assert data["series"]["consume_per_s"] == [None] * 5

    def test_a_new_sample_or_audit_row_refreshes_the_cached_chart(
        self, reader: Client, stream: str
    ) -> None:
        samples(stream, "g", 5)
        first = chart(reader, stream, "g").json()
        assert chart(reader, stream, "g").json() == first  # from the cache
        RateSample.objects.create(
            tier=0, stream=stream, group="g", at=time.time(), entries_added=1250,
            entries_read=1100, lag=777,
        )  # fmt: skip
        second = chart(reader, stream, "g").json()
        assert len(second["t"]) == 6 and second["series"]["lag"][-1] == 777
        AuditEvent.objects.create(
            username="olga", action="pause", stream=stream, group="g", result="ok"
        )
        assert [m["action"] for m in chart(reader, stream, "g").json()["markers"]] == ["pause"]

    def test_default_range_is_one_hour(self, reader: Client, stream: str) -> None:
        assert chart(reader, stream, "g").json()["range"] == "1h"


class HonestyTests:
    @pytest.mark.parametrize("rows", [0, 1])
    def test_too_little_data_draws_nothing(self, reader: Client, stream: str, rows: int) -> None:
        samples(stream, "g", rows)
        data = chart(reader, stream, "g").json()
        assert data["enough"] is False
        assert data["t"] == [] and all(v == [] for v in data["series"].values())
        assert data["note"].startswith("Not enough history yet")

    def test_redis_62_says_rates_need_redis_7_and_shows_no_rate(
        self, reader: Client, stream: str
    ) -> None:
        samples(stream, "g", 40, added=None, read=None, lag=None)
        data = chart(reader, stream, "g").json()
        assert data["counters"] is False
        assert data["note"] == NEEDS_REDIS_7
        assert data["series"]["produce_per_s"] == [None] * 40
        assert data["series"]["consume_per_s"] == [None] * 40
        assert data["series"]["lag"] == [None] * 40
        assert data["series"]["oldest_pending_s"] == [12.0] * 40  # ages are still known

    def test_the_group_page_says_rates_need_redis_7_instead_of_an_estimate(
        self, reader: Client, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        samples(stream, "g", 40, added=None, read=None, lag=None)
        page = reader.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        assert element_text(page, "group-drain") == "Drain rates need Redis 7+"

    def test_no_estimate_with_too_little_data(
        self, reader: Client, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "c1", 2)
        samples(stream, "g", 2)
        page = reader.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        assert 'id="group-drain"' not in page


class MarkerTests:
    def test_operator_actions_in_range_are_markers(self, reader: Client, stream: str) -> None:
        samples(stream, "g", 10)
        AuditEvent.objects.create(
            username="olga", action="bulk-retry", stream=stream, group="g",
            entry_ids=["1-0", "2-0"], result="ok",
        )  # fmt: skip
        AuditEvent.objects.create(
            username="olga", action="retry", stream=stream, group="other", result="ok"
        )
        AuditEvent.objects.create(
            username="olga", action="retry", stream=stream + "x", group="g", result="ok"
        )
        AuditEvent.objects.create(
            username="max", action="dlq-purge", stream=stream, group="", result="ok"
        )  # a stream-wide action shows on every group's chart
        old = AuditEvent.objects.create(
            username="olga", action="pause", stream=stream, group="g", result="ok"
        )
        AuditEvent.objects.filter(pk=old.pk).update(created_at=old.created_at.replace(year=2020))
        data = chart(reader, stream, "g").json()
        got = [(m["action"], m["username"]) for m in data["markers"]]
        assert sorted(got) == [("bulk-retry", "olga"), ("dlq-purge", "max")]
        bulk = next(m for m in data["markers"] if m["action"] == "bulk-retry")
        assert "2 entries" in bulk["summary"]
        assert abs(bulk["t"] - time.time()) < 60


class InputTests:
    @pytest.mark.parametrize("value", ["", "1d", "7D", "3600", "%00", "<b>", "x" * 5000])
    def test_a_bad_range_is_400_with_the_reason(
        self, reader: Client, stream: str, value: str
    ) -> None:
        response = chart(reader, stream, "g", range=value)
        assert response.status_code == 400
        assert response.json() == {"error": "Range must be one of 1h, 6h, 24h, 7d."}

    def test_a_stream_outside_the_allowlist_is_404(self, reader: Client) -> None:
        response = chart(reader, "elsewhere:orders", "g")
        assert response.status_code == 404
        assert response.json() == {"error": "No such stream here."}

    def test_a_companion_key_is_404(self, reader: Client, stream: str) -> None:
        assert chart(reader, stream_keys(stream).dlq).status_code == 404

    @pytest.mark.parametrize(
        ("name", "status"), [("nul\x00x", 400), ("x" * 5000, 400), ("\u202eevil", 200)]
    )
    def test_hostile_names_are_refused_or_answered_never_500(
        self, reader: Client, prefix: str, name: str, status: int
    ) -> None:
        client = Client(raise_request_exception=False)
        client.cookies = reader.cookies
        for stream, group in ((prefix + name, ""), (prefix + "orders", name)):
            response = chart(client, stream, group)
            assert response.status_code == status, (name, group, response.status_code)
            if status == 200:  # a legal name with no history: nothing drawn, no error
                data = response.json()
                assert (data["stream"], data["group"], data["enough"]) == (stream, group, False)
            else:
                assert "cannot be opened here" in response.json()["error"]

    def test_post_is_refused(self, reader: Client, stream: str) -> None:
        url = reverse("dashboard:group-chart-data", args=[stream, "g"])
        assert reader.post(url).status_code == 405


class PermissionTests:
    def test_anonymous_is_sent_to_log_in(self, chart_settings: None, stream: str) -> None:
        response = chart(Client(), stream, "g")
        assert response.status_code == 302
        assert "/login/" in response["Location"]

    def test_without_view_queues_is_403(
        self, chart_settings: None, stream: str, django_user_model: type[User]
    ) -> None:
        client = Client(raise_request_exception=False)
        client.force_login(make_user(django_user_model, "nobody"))
        assert chart(client, stream, "g").status_code == 403
        assert chart(client, stream).status_code == 403


class PageTests:
    def test_group_page_has_the_chart_the_estimate_and_the_lag_in_time(
        self, reader: Client, r: redis.Redis, stream: str, clock: FrozenClock
    ) -> None:
        # Five entries added a second apart, 95 s to 91 s ago; two delivered: lag 3, the
        # oldest undelivered added 93 s ago.
        make_group(r, stream, "g")
        for i in range(5):
            r.xadd(stream, {"n": str(i)}, id=clock.entry_id_at(ago_ms=95_000 - i * 1000))
        r.xreadgroup("g", "c1", {stream: ">"}, count=2)
        # Draining: consumers read 50/s more than producers add, the lag falls.
        samples(stream, "g", 31, added=(0, 100), read=(0, 600), lag=(100_000, -3000))
        page = reader.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        drain = element_text(page, "group-drain")
        assert drain.startswith("Drain lag 10,000 · +50/s net · drains in ~3 min")
        assert attr(page, "group-drain", "data-kind") == "drains"
        assert _lag_ms(page) == 93_000
        assert "1 min 33 s behind" in element_text(page, "group-summary")
        assert attr(page, "rate-charts", "data-chart-url") == reverse(
            "dashboard:group-chart-data", args=[stream, "g"]
        )
        point = json.loads(attr(page, "chart-point", "data-point") or "")
        assert point["lag"] == 10_000
        assert point["consume_per_s"] == pytest.approx(60.0)
        assert inline_problems(page) == []

    def test_stream_page_has_its_chart_and_each_groups_lag_in_time(
        self, reader: Client, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        add_entries(r, stream, 2)
        samples(stream, "", 3, read=None)
        page = reader.get(reverse("dashboard:stream-detail", args=[stream])).content.decode()
        assert attr(page, "rate-charts", "data-chart-url") == reverse(
            "dashboard:stream-chart-data", args=[stream]
        )
        assert json.loads(attr(page, "chart-point", "data-point") or "")["produce_per_s"] == 5.0
        assert "behind" in element_text(page, "group-table")
        assert inline_problems(page) == []

    def test_no_samples_no_point(self, reader: Client, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "c1", 1)
        page = reader.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        assert attr(page, "chart-point", "data-point") == ""

    def test_the_live_push_carries_the_latest_point(
        self, chart_settings: None, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        times = samples(stream, "g", 4)
        surface = Surface("group", stream=stream, group="g")
        pushed = surface_render(
            surface=surface,
            context=surface_context(surface=surface, client=r),
            perms=frozenset({"dashboard.view_queues"}),
        )
        point = json.loads(attr(pushed["group-summary"], "chart-point", "data-point") or "")
        assert point["t"] == int(times[-1])
        assert point["lag"] == 130
        # The chart itself is outside every pushed partial: a push never redraws it.
        assert all('id="rate-charts"' not in html for html in pushed.values())

    def test_uplot_is_served_from_this_site_with_its_license(self) -> None:
        for name in ("uPlot.iife.min.js", "uPlot.min.css", "LICENSE"):
            assert finders.find(f"dashboard/vendor/uplot/{name}"), name
        license_path = finders.find("dashboard/vendor/uplot/LICENSE")
        assert isinstance(license_path, str)
        with open(license_path) as f:
            assert "MIT" in f.read()


def _lag_ms(page: str) -> int:
    """The lag-age span's exact ms (data-ms) inside the group summary."""
    start = page.index('id="group-summary"')
    at = page.index('class="lag-age', start)
    tag = page[at : page.index(">", at)]
    return int(tag.split('data-ms="')[1].split('"')[0])


class OverviewTests:
    def test_each_row_shows_its_lag_in_time_and_its_worst_groups_estimate(
        self,
        reader: Client,
        r: redis.Redis,
        prefix: str,
        settings: SettingsWrapper,
    ) -> None:
        settings.ACKBOARD_INDEX_BACKGROUND = False
        settings.ACKBOARD_OVERVIEW_PAGE_SIZE = 100
        a, b, quiet = prefix + "a", prefix + "b", prefix + "quiet"
        for name in (a, b):
            make_pending(r, name, "fast", "c1", 1)
            make_pending(r, name, "slow", "c1", 1)
            add_entries(r, name, 2)  # waiting for both groups: a lag in time
        add_entries(r, quiet, 1)
        samples(a, "fast", 31, added=(0, 100), read=(0, 600), lag=(100_000, -3000))
        samples(a, "slow", 31, added=(0, 100), read=(0, 50), lag=(1000, 50))  # growing
        samples(b, "fast", 31, added=(0, 100), read=(0, 600), lag=(100_000, -3000))
        try:
            page = reader.get(reverse("dashboard:overview")).content.decode()
        finally:
            stream_index.refresher_stop()
        rows = {cells[0]: cells for cells in table_rows(page, "stream-row-").values()}
        lag_a, lag_b, lag_quiet = rows[a][5], rows[b][5], rows[quiet][5]
        assert "behind" in lag_a and lag_a.endswith("lag 2,500 · growing by 5/s")
        assert lag_b.endswith("lag 10,000 · +50/s net · drains in ~3 min")
        assert lag_quiet == "?"  # no group, no samples: nothing added to the cell

    def test_one_query_for_the_whole_page(
        self,
        chart_settings: None,
        r: redis.Redis,
        prefix: str,
        django_assert_num_queries: Any,
    ) -> None:
        names = [f"{prefix}s{i}" for i in range(5)]
        for name in names:
            make_pending(r, name, "g", "c1", 1)
            samples(name, "g", 31, added=(0, 100), read=(0, 600), lag=(100_000, -3000))
        summaries = selectors.stream_summaries(client=r, streams=names)
        with django_assert_num_queries(1):
            drains = overview_drains(summaries=summaries)
        assert {n: d.estimate.kind for n, d in drains.items() if d.estimate} == dict.fromkeys(
            names, "drains"
        )
