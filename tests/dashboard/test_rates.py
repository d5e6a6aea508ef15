"""Rates: lag in time, the sampler, downsampling, the series and the drain
estimate, the lease, Redis 6.2, /metrics and the shipped alert rules and dashboard.

Stored samples are made by the real sampler against the private Redis where the test is
about sampling; the rules of the estimate and of downsampling are tested on rows with
known numbers (``estimate_from``, ``downsample``, stored ``RateSample`` rows).
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from dashboard.insight.rates import metrics as rates_metrics
from dashboard.insight.rates import sampler as rates_sampler
from dashboard.insight.rates.estimate import Estimate, estimate_from
from dashboard.insight.rates.metrics import RatesCollector
from dashboard.insight.rates.models import RateSample
from dashboard.insight.rates.sampler import Sampler, downsample, prune, rollup
from dashboard.insight.rates.series import (
    _json_column,
    chart_columns,
    drain_estimate,
    latest_point,
    point_and_estimate,
    series,
    series_columns,
    tier_for,
)
from dashboard.models import AuditEvent, IndexedFailure
from dashboard.views import ops
from queue_core import selectors
from queue_core.connection import Client as RedisClient
from queue_core.keys import EVENTS_CHANNEL, RATES_SAMPLER_LEASE_KEY
from tests.factories import make_group, make_pending, make_user
from tests.queue_core.test_cluster import names_on_primaries
from tests.redis_cluster import RedisCluster
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0  # a fixed "now" for stored rows (2027-01-15)


@pytest.fixture
def rates_settings(settings: Any, redis_url: str, prefix: str) -> Any:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_SAMPLER_INTERVAL_S = 10.0
    settings.ACKBOARD_RATES_RETENTION_DAYS = 90
    ops._cache = None
    return settings


def _sampler(r: redis.Redis, prefix: str, **kwargs: Any) -> Sampler:
    return Sampler(client=r, lease_key=prefix + "lease", **kwargs)


def _timed(r: redis.Redis, stream: str, ms: list[int]) -> list[str]:
    return [r.xadd(stream, {"n": str(i)}, id=f"{t}-0").decode() for i, t in enumerate(ms)]


# --- lag in time (queue_core.selectors) -------------------------------------------------


class LagInTimeTests:
    def test_every_selector_reads_the_first_undelivered_entry(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "g")
        make_group(r, stream, "caught-up")
        now_ms = int(time.time() * 1000)
        times = [now_ms - 90_000, now_ms - 60_000, now_ms - 30_000, now_ms - 10_000]
        _timed(r, stream, times)
        # g: two delivered (pending), two waiting: the oldest undelivered is the third.
        r.xreadgroup("g", "c", {stream: ">"}, count=2)
        r.xreadgroup("caught-up", "c", {stream: ">"})
        r.xack(stream, "caught-up", *[f"{t}-0" for t in times])

        (summary,) = selectors.stream_summaries(client=r, streams=[stream])
        stats = {g.name: g for g in summary.group_stats}
        assert stats["g"].oldest_undelivered_ms == times[2]
        assert stats["caught-up"].oldest_undelivered_ms is None
        assert stats["g"].undelivered_age_s(now_ms) == pytest.approx(30.0)
        assert stats["caught-up"].undelivered_age_s(now_ms) is None

        detail = selectors.group_detail(client=r, stream=stream, group="g")
        assert detail is not None
        assert detail.oldest_undelivered_ms == times[2] == detail.group.oldest_undelivered_ms
        assert detail.waiting_id is None  # health reads it only when nothing is pending
        assert selectors.group_detail(client=r, stream=stream, group="caught-up") is not None

        page = selectors.stream_detail(client=r, stream=stream)
        assert page is not None
        by_name = {g.name: g.oldest_undelivered_ms for g in page.groups}
        assert by_name == {"g": times[2], "caught-up": None}

        (counters,) = selectors.stream_counters(client=r, streams=[stream])
        got = {g.info.name: g for g in counters.groups}
        assert got["g"].info.oldest_undelivered_ms == times[2]
        assert got["g"].oldest_pending_ms == times[0]
        assert got["caught-up"].info.oldest_undelivered_ms is None
        assert counters.entries_added == 4 and got["g"].info.entries_read == 2

    def test_nothing_pending_the_waiting_entry_is_both(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        now_ms = int(time.time() * 1000)
        _timed(r, stream, [now_ms - 5_000, now_ms - 1_000])
        detail = selectors.group_detail(client=r, stream=stream, group="g")
        assert detail is not None
        assert detail.waiting_id == f"{now_ms - 5_000}-0"
        assert detail.oldest_undelivered_ms == now_ms - 5_000


class CountingConnection(redis.Connection):
    """Counts packets sent: one per command, one per pipeline (a round trip each)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class SamplerCostTests:
    @pytest.mark.parametrize("n", [1, 20])
    def test_two_round_trips_and_five_commands_a_stream(
        self, redis_url: str, r: redis.Redis, prefix: str, n: int
    ) -> None:
        names = [f"{prefix}s{i}" for i in range(n)]
        for name in names:
            make_group(r, name, "g")
            r.xadd(name, {"n": "1"})
            r.xadd(name, {"n": "2"})
            r.xreadgroup("g", "c", {name: ">"}, count=1)  # 1 pending, 1 behind
        pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
        counting = redis.Redis(connection_pool=pool)
        counting.ping()  # connected (the handshake's packets are not the selector's)
        before = r.info("commandstats")
        sent = CountingConnection.sent
        got = selectors.stream_counters(client=counting, streams=names)
        after = r.info("commandstats")
        calls = sum(
            v["calls"] - before.get(k, {"calls": 0})["calls"]
            for k, v in after.items()
            if k.startswith("cmdstat_") and k != "cmdstat_info"
        )
        assert len(got) == n
        assert CountingConnection.sent - sent == 2
        assert calls == 5 * n  # XINFO STREAM, XINFO GROUPS, XLEN; XPENDING, XRANGE
        counting.close()


# --- downsampling, tiers, retention ---------------------------------------------------------


def _row(at: float, **values: Any) -> RateSample:
    base: dict[str, Any] = {
        "tier": 0,
        "stream": "s",
        "group": "g",
        "at": at,
        "entries_added": None,
        "entries_read": None,
        "lag": None,
        "pending": 0,
        "oldest_pending_age_s": None,
        "oldest_undelivered_age_s": None,
        "dead_letters": 0,
        "failures": 0,
    }
    base.update(values)
    return RateSample(**base)


def _store(rows: list[RateSample]) -> None:
    RateSample.objects.bulk_create(rows)


class DownsamplingTests:
    def test_a_bucket_keeps_the_last_counters_the_max_ages_and_the_failure_sum(self) -> None:
        rows = [
            ("s", "g", 600.0, 10, 5, 5, 2, 1.0, 9.0, 0, 1),
            ("s", "g", 610.0, 20, 12, 8, 3, 7.0, 2.0, 1, 0),
            ("s", "g", 650.0, 30, 30, 0, 0, None, None, 1, 2),
            ("s", "g", 660.0, 40, 31, 9, 1, 0.5, 0.5, 2, 0),  # the next minute
        ]
        made = {int(m.at): m for m in downsample(1, rows)}
        assert sorted(made) == [650, 660]
        first = made[650]
        assert (first.entries_added, first.entries_read, first.lag) == (30, 30, 0)
        assert (first.pending, first.dead_letters, first.failures) == (0, 1, 3)
        assert first.oldest_pending_age_s == 7.0 and first.oldest_undelivered_age_s == 9.0
        assert first.tier == 1

    def test_tier_by_range(self, rates_settings: Any) -> None:
        assert [tier_for(s) for s in (3600, 6 * 3600, 86_400, 7 * 86_400, 90 * 86_400)] == [
            0,
            0,
            1,
            2,
            2,
        ]

    def test_rollup_is_idempotent_and_series_reads_the_tier_then_the_tail(
        self, rates_settings: Any
    ) -> None:
        start = (NOW - 3 * 3600) // 600 * 600
        rows = []
        for i in range(int((NOW - start) // 10) + 1):  # 3 h of 10 s ticks: 10/s in, 8/s out
            at = start + 10 * i
            rows.append(_row(at, entries_added=100 * i, entries_read=80 * i, lag=20 * i))
        _store(rows)
        assert rollup(1, since=start, until=NOW) == 180  # closed minutes only
        assert rollup(1, since=start, until=NOW) == 180  # again: replaced, not doubled
        assert RateSample.objects.filter(tier=1).count() == 180
        assert rollup(2, since=start, until=NOW) == 18
        day = series("s", "g", 86_400, now=NOW, markers=False)
        assert day.tier == 1
        minutes = [p for p in day.points if p.t < start + 3 * 3600 - 60]
        assert len(minutes) >= 170
        assert all(p.produce_per_s == pytest.approx(10.0) for p in minutes[1:])
        assert all(p.consume_per_s == pytest.approx(8.0) for p in minutes[1:])
        assert day.points[-1].t == int(rows[-1].at)  # the tail comes from tier 0
        week = series("s", "g", 7 * 86_400, now=NOW, markers=False)
        assert week.tier == 2 and week.points[-1].t == int(rows[-1].at)
        hour = series("s", "g", 3600, now=NOW, markers=False)
        assert hour.tier == 0 and len(hour.points) == 360

    def test_retention_per_tier_and_setting(self, rates_settings: Any) -> None:
        rates_settings.ACKBOARD_RATES_RETENTION_DAYS = 30
        day = 86_400
        _store(
            [
                _row(NOW - day - 5, tier=0),
                _row(NOW - day + 5, tier=0),
                _row(NOW - 7 * day - 5, tier=1),
                _row(NOW - 6 * day, tier=1),
                _row(NOW - 31 * day, tier=2),
                _row(NOW - 29 * day, tier=2),
            ]
        )
        assert prune(NOW) == 3
        kept = sorted((s.tier, round((NOW - s.at) / day)) for s in RateSample.objects.all())
        assert kept == [(0, 1), (1, 6), (2, 29)]


# --- rates and the drain estimate ---------------------------------------------------------


_Sample = tuple[float, int | None, int | None, int | None]


def _estimate(rows: list[_Sample], window: int = 300) -> Estimate:
    return estimate_from(rows, window_s=window, now=rows[-1][0] if rows else NOW, interval_s=10)


def _ticks(n: int, added: float, read: float, lag0: int, step: float = 10.0) -> list[_Sample]:
    """n ticks ending at NOW with counters moving at ``added``/``read`` per second."""
    out: list[_Sample] = []
    for i in range(n):
        t = NOW - (n - 1 - i) * step
        a = int(10_000 + added * i * step)
        d = int(5_000 + read * i * step)
        out.append((t, a, d, max(0, lag0 + (a - 10_000) - (d - 5_000))))
    return out


class DrainEstimateTests:
    def test_drains(self) -> None:
        rows = _ticks(31, added=10, read=48, lag0=23_400)  # 38/s net for 300 s: 12,000 left
        est = _estimate(rows)
        assert est.kind == "drains" and est.lag == 12_000
        assert est.net_per_s == pytest.approx(38.0)
        assert est.eta_s == pytest.approx(12_000 / 38.0)
        assert est.text == "lag 12,000 · +38/s net · drains in ~5 min"

    def test_keeping_up_is_draining(self) -> None:
        rows = [(NOW - 300 + 10 * i, 1000 + 200 * i, 1000 + 200 * i, 0) for i in range(31)]
        est = _estimate(rows)
        assert est.kind == "drains" and est.text == "lag 0 · keeping up at 20/s"

    def test_growing(self) -> None:
        est = _estimate(_ticks(31, added=40, read=0, lag0=100))
        assert est.kind == "growing" and est.net_per_s == pytest.approx(-40.0)
        assert est.text == f"lag {est.lag:,} · growing by 40/s"

    def test_stalled_says_for_how_long(self) -> None:
        rows = [(NOW - 300 + 10 * i, 500, 400, 100) for i in range(31)]
        est = _estimate(rows)
        assert est.kind == "stalled" and est.text == "stalled: nothing read for 5 min"

    def test_idle(self) -> None:
        rows = [(NOW - 300 + 10 * i, 500, 500, 0) for i in range(31)]
        assert _estimate(rows).kind == "idle"

    def test_too_little_data_gives_no_estimate(self) -> None:
        cases: tuple[list[_Sample], ...] = (
            [],
            _ticks(2, added=10, read=20, lag0=50),  # two samples
            _ticks(10, added=10, read=20, lag0=50),  # 90 s of a 300 s window
        )
        for rows in cases:
            est = _estimate(rows)
            assert (est.kind, est.text, est.net_per_s) == ("unknown", "", None)
            assert est.reason == "too little data"

    def test_no_counters_no_figure(self) -> None:
        rows = [(NOW - 300 + 10 * i, None, None, None) for i in range(31)]
        est = _estimate(rows)
        assert (est.kind, est.text, est.net_per_s) == ("unknown", "", None)
        assert est.reason == "rates need Redis 7+"

    def test_stale_samples_give_no_estimate(self) -> None:
        rows = _ticks(31, added=10, read=48, lag0=12_400)
        est = estimate_from(rows, window_s=600, now=NOW + 200, interval_s=10)
        assert est.kind == "unknown" and "sampler" in est.reason

    def test_from_stored_rows(self, rates_settings: Any) -> None:
        _store(
            [
                _row(t, entries_added=a, entries_read=d, lag=lag)
                for t, a, d, lag in _ticks(31, added=10, read=48, lag0=12_400)
            ]
        )
        est = drain_estimate("s", "g", now=NOW)
        assert est.kind == "drains" and est.window_s == 300
        point = latest_point("s", "g")
        assert point is not None and point.t == int(NOW)
        assert point.produce_per_s == pytest.approx(10.0)
        assert point.consume_per_s == pytest.approx(48.0, abs=0.2)


class PointAndEstimateTests:
    """``point_and_estimate``: the group page's one read gives what ``latest_point`` and
    ``drain_estimate`` give, whatever the rows' times are relative to the window."""

    def _store_ticks(self, times: list[float], **values: Any) -> None:
        _store(
            [
                _row(
                    t,
                    entries_added=10_000 + 10 * i * 10,
                    entries_read=5_000 + 48 * i * 10,
                    lag=max(0, 12_400 - 38 * i * 10),
                    oldest_pending_age_s=float(i),
                    oldest_undelivered_age_s=float(2 * i),
                    failures=i % 3,
                    **values,
                )
                for i, t in enumerate(times)
            ]
        )

    def _same(self, now: float) -> tuple[Any, Estimate]:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            point, est = point_and_estimate("s", "g", now=now)
        assert len(queries.captured_queries) == 1
        assert point == latest_point("s", "g")
        assert est == drain_estimate("s", "g", now=now)
        return point, est

    @pytest.mark.parametrize(
        "times",
        [
            [NOW - 300 + 10 * i for i in range(31)],  # a running sampler: the window's edges
            [NOW - 3000 + 10 * i for i in range(20)],  # the newest far older than the window
            [NOW - 3000, NOW - 2000, NOW - 100],  # one row in the window, two before it
            [NOW - 3000, NOW - 250, NOW - 120, NOW],  # three rows in the window, one before
            [NOW - 100, NOW - 50, NOW],  # spans less than half the window
            [NOW - 300 + 10 * i for i in range(31)] + [NOW + 5, NOW + 15],  # newer than now
            [NOW - 301, NOW - 300.0],  # at the window's start exactly
            [NOW + 20],  # only a row newer than now
        ],
    )
    def test_same_as_the_two_reads(self, rates_settings: Any, times: list[float]) -> None:
        self._store_ticks(times)
        # Rows of other series never count: another group, the stream's own, another tier.
        self._store_ticks([NOW + 100, NOW - 5], group="other")
        self._store_ticks([NOW + 100, NOW - 5], group="")
        self._store_ticks([NOW + 100, NOW - 5], tier=1)
        point, est = self._same(NOW)
        newest = max(times)
        assert point is not None and point.t == int(newest)
        in_window = [t for t in times if NOW - 300 <= t <= NOW]
        if len(in_window) >= 3 and max(in_window) - min(in_window) >= 150:
            assert est.kind != "unknown"
        else:
            assert est.kind == "unknown" and est.reason == "too little data"

    def test_no_rows(self, rates_settings: Any) -> None:
        point, est = self._same(NOW)
        assert point is None and est.reason == "too little data"

    def test_the_group_page_reads_the_rates_once(
        self, rates_settings: Any, django_assert_num_queries: Any
    ) -> None:
        from dashboard.views.charts import group_rates_context, point_attr

        now = time.time()
        self._store_ticks([now - 290 + 10 * i for i in range(30)])
        with django_assert_num_queries(1):
            rates = group_rates_context(stream="s", group="g")["rates"]
        assert rates.estimate.kind == "drains"
        assert rates.estimate == drain_estimate("s", "g", now=now)
        assert rates.point == point_attr(latest_point("s", "g"))


class ChartColumnsTests:
    """``chart_columns`` (what the chart JSON draws, its main tier kept between calls)
    gives exactly ``series_columns``' values, rounded, whatever was written between."""

    @staticmethod
    def _week(stream: str, until: float, *, start: float) -> list[RateSample]:
        rows = []
        for tier, step, span in ((2, 600, 8 * 86_400), (1, 60, 3 * 3600), (0, 10, 900)):
            at = start - span
            while at <= until:
                n = int(at)
                reset = 0 if start - 5 * 86_400 < at < start - 5 * 86_400 + 3600 else 10**6
                gap = (
                    start - 3 * 86_400 < at < start - 3 * 86_400 + 7200
                    # where the 7-day range's start slides to in the test below
                    or start - 7 * 86_400 + 1800 < at < start - 7 * 86_400 + 5400
                )
                if not gap:
                    rows.append(
                        _row(at, tier=tier, stream=stream, entries_added=n * 3 + reset,
                             entries_read=n * 2 + reset, lag=n % 997,
                             oldest_pending_age_s=(n % 89) / 7, failures=n % 3)
                    )  # fmt: skip
                at += step
        return rows

    def _same(self, stream: str, range_s: int, now: float) -> Any:
        kept = chart_columns(stream, "g", range_s, now=now)
        fresh = series_columns(stream, "g", range_s, now=now)
        assert kept.t == fresh.t
        assert kept.figures == {k: _json_column(v, 3) for k, v in fresh.figures.items()}
        assert (kept.tier, kept.step_s, kept.counters, kept.markers) == (
            fresh.tier, fresh.step_s, fresh.counters, fresh.markers,
        )  # fmt: skip
        return kept

    def test_the_week_reads_the_10_minute_tier_and_matches_the_series_tick_after_tick(
        self, rates_settings: Any, prefix: str
    ) -> None:
        stream = prefix + "week"
        _store(self._week(stream, NOW, start=NOW))
        first = self._same(stream, 7 * 86_400, NOW)
        assert first.tier == 2 and first.step_s == 600
        main = [t for t in first.t if t <= NOW - 3 * 3600]  # before the tier-1 tail
        assert 1_008 - 18 - 12 - 6 - 1 <= len(main) <= 1_008 - 18 + 1  # 3 h tail, gaps
        assert len(first.t) <= 7 * 86_400 / 600 + 3 * 60 + 90  # plus the finer tail
        assert first.t[-1] == int(NOW)
        # Ticks: new tier-0 rows, a new tier-1 row, a new tier-2 row; the range slides.
        now = NOW
        for step in (10, 10, 60, 600, 3600):
            later = now + step
            _store(
                [
                    _row(at, tier=0, stream=stream, entries_added=int(at) * 3 + 10**6,
                         entries_read=int(at) * 2 + 10**6, lag=5)
                    for at in range(int(now) + 10, int(later) + 1, 10)
                ]
                + [_row(at, tier=1, stream=stream, entries_added=int(at) * 3 + 10**6)
                   for at in range(int(now) + 60, int(later) + 1, 60)]
                + [_row(at, tier=2, stream=stream, entries_added=int(at) * 3 + 10**6)
                   for at in range(int(now) + 600, int(later) + 1, 600)]
            )  # fmt: skip
            now = later
            for range_s in (3600, 86_400, 7 * 86_400):
                assert self._same(stream, range_s, now).t[-1] == int(now)

    def test_a_rewritten_or_vanished_row_is_read_afresh(
        self, rates_settings: Any, prefix: str
    ) -> None:
        stream = prefix + "rewrite"
        _store(self._week(stream, NOW, start=NOW))
        self._same(stream, 7 * 86_400, NOW)
        last = RateSample.objects.filter(tier=2, stream=stream).order_by("-at").first()
        assert last is not None
        RateSample.objects.filter(pk=last.pk).update(entries_added=1, lag=123_456)
        assert 123_456 in self._same(stream, 7 * 86_400, NOW + 1).figures["lag"]
        RateSample.objects.filter(pk=last.pk).delete()
        assert 123_456 not in self._same(stream, 7 * 86_400, NOW + 2).figures["lag"]


class MarkerTests:
    def test_audit_events_of_the_group_and_stream_in_range(
        self, rates_settings: Any, django_user_model: Any
    ) -> None:
        user = make_user(django_user_model, "olga", "view_queues")
        for action, group in (("retry", "g"), ("pause", "g"), ("retry", "other"), ("trim", "")):
            AuditEvent.objects.create(
                user=user,
                username="olga",
                action=action,
                stream="s",
                group=group,
                entry_ids=["1-0", "2-0"] if action == "retry" else [],
                result="ok",
            )
        AuditEvent.objects.create(username="olga", action="retry", stream="t", result="ok")
        got = series("s", "g", 3600).markers
        assert [(m.action, m.username) for m in got] == [
            ("retry", "olga"),
            ("pause", "olga"),
            ("trim", "olga"),
        ]
        assert got[0].summary == "retry 2 entries"
        assert len(series("s", "", 3600).markers) == 4
        assert series("s", "g", 3600, now=time.time() - 7200).markers == []


# --- the sampler, the lease, Redis 6.2 ------------------------------------------------------


class SamplerTests:
    def test_a_tick_stores_a_row_per_stream_and_group(
        self, rates_settings: Any, r: redis.Redis, stream: str, prefix: str
    ) -> None:
        make_group(r, stream, "g")
        now_ms = int(time.time() * 1000)
        _timed(r, stream, [now_ms - 40_000, now_ms - 20_000, now_ms - 5_000])
        r.xreadgroup("g", "c", {stream: ">"}, count=1)
        failed = IndexedFailure.objects.create(
            failures_key="k",
            source_id="1-0",
            stream=stream,
            group="g",
            entry_id="1-0",
            consumer="c",
            attempt=1,
            error_type="E",
            message="m",
            failed_at=datetime.now(UTC),
        )
        sampler = _sampler(r, prefix)
        report = sampler.tick()
        assert report is not None and (report.streams, report.groups, report.rows) == (1, 1, 2)
        rows = {s.group: s for s in RateSample.objects.filter(tier=0, stream=stream)}
        g, whole = rows["g"], rows[""]
        assert (g.entries_added, g.entries_read, g.lag, g.pending) == (3, 1, 2, 1)
        assert g.oldest_pending_age_s == pytest.approx(40.0, abs=2)
        assert g.oldest_undelivered_age_s == pytest.approx(20.0, abs=2)
        assert (g.failures, whole.failures) == (1, 1)
        assert (whole.entries_added, whole.entries_read, whole.lag) == (3, None, 2)
        assert failed.pk

    def test_a_tick_publishes_one_rates_event_with_its_time(
        self, rates_settings: Any, r: redis.Redis, stream: str, prefix: str
    ) -> None:
        make_group(r, stream, "g")
        events = r.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        events.subscribe(EVENTS_CHANNEL)
        assert events.get_message(timeout=5) is None  # the subscription is in place
        report = _sampler(r, prefix).tick()
        assert report is not None
        heard: list[dict[str, Any]] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not heard:
            message = events.get_message(timeout=0.5)
            if message is not None:
                event = json.loads(message["data"])
                if event.get("type") == rates_sampler.RATES_EVENT:
                    heard.append(event)
        events.close()
        assert heard and heard[0]["at"] == pytest.approx(report.at) and heard[0]["stream"] == ""

    def test_two_samplers_one_samples(
        self, rates_settings: Any, r: redis.Redis, stream: str, prefix: str
    ) -> None:
        make_group(r, stream, "g")
        r.xadd(stream, {"n": "1"})
        a = _sampler(r, prefix, interval_s=1.0)
        b = _sampler(r, prefix, interval_s=1.0)
        reports = []
        for _ in range(3):
            reports += [("a", a.tick()), ("b", b.tick())]
        assert [who for who, rep in reports if rep is not None] == ["a", "a", "a"]
        assert RateSample.objects.filter(tier=0, stream=stream, group="").count() == 3
        assert a.lease.holder() == a.lease.token
        a.stop()  # a process that stops hands over at once
        assert b.tick() is not None and a.tick() is None
        # A holder that dies is replaced once its lease expires (3 intervals).
        r.pexpire(prefix + "lease", 1)
        wait_until(lambda: not r.exists(prefix + "lease"), what="the lease to expire")
        assert a.tick() is not None and b.tick() is None

    def test_the_lease_key_setting_lets_two_deployments_share_a_redis(
        self, rates_settings: Any, r: redis.Redis, stream: str, prefix: str
    ) -> None:
        make_group(r, stream, "g")
        assert rates_settings.ACKBOARD_SAMPLER_LEASE_KEY == RATES_SAMPLER_LEASE_KEY  # default
        rates_settings.ACKBOARD_SAMPLER_LEASE_KEY = prefix + "lease:team-a"
        a = Sampler(client=r, interval_s=1.0)
        rates_settings.ACKBOARD_SAMPLER_LEASE_KEY = prefix + "lease:team-b"
        b = Sampler(client=r, interval_s=1.0)
        same = Sampler(client=r, interval_s=1.0)  # b's deployment's second process
        assert a.tick() is not None and b.tick() is not None and same.tick() is None
        assert r.get(prefix + "lease:team-a") == a.lease.token.encode()
        assert r.get(prefix + "lease:team-b") == b.lease.token.encode()
        assert r.get(RATES_SAMPLER_LEASE_KEY) is None
        a.stop()
        b.stop()

    # the thread writes on its own connection
    @pytest.mark.django_db(transaction=True)
    def test_web_thread_starts_with_a_request_and_samples(
        self, rates_settings: Any, r: redis.Redis, stream: str, client: Client
    ) -> None:
        make_group(r, stream, "g")
        r.xadd(stream, {"n": "1"})
        rates_settings.ACKBOARD_SAMPLER = True
        rates_settings.ACKBOARD_SAMPLER_INTERVAL_S = 0.2
        r.delete(RATES_SAMPLER_LEASE_KEY)
        try:
            client.get(reverse("dashboard:healthz"))
            wait_until(lambda: RateSample.objects.filter(stream=stream).count() >= 4, 10,
                       "4 samples", interval=0.1)  # fmt: skip
            assert RateSample.objects.filter(stream=stream, group="g").count() >= 2
        finally:
            rates_sampler.stop()
        assert r.get(RATES_SAMPLER_LEASE_KEY) is None  # released on stop

    def test_no_thread_when_off(self, rates_settings: Any, client: Client) -> None:
        rates_settings.ACKBOARD_SAMPLER = False
        client.get(reverse("dashboard:healthz"))
        assert rates_sampler._thread is None


class CommandTests:
    def test_sample_rates_once(self, rates_settings: Any, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        r.xadd(stream, {"n": "1"})
        r.delete(RATES_SAMPLER_LEASE_KEY)
        out = StringIO()
        call_command("sample_rates", "--once", stdout=out)
        assert out.getvalue().startswith("Sampled 1 streams and 1 groups (2 rows)")
        assert RateSample.objects.filter(stream=stream).count() == 2
        assert r.get(RATES_SAMPLER_LEASE_KEY) is None
        # Another sampler holds the lease: nothing sampled, and it says so.
        r.set(RATES_SAMPLER_LEASE_KEY, "someone-else", px=5000)
        out = StringIO()
        call_command("sample_rates", "--once", stdout=out)
        assert out.getvalue().strip() == "Another sampler holds the lease; nothing sampled."
        assert RateSample.objects.filter(stream=stream).count() == 2
        r.delete(RATES_SAMPLER_LEASE_KEY)

    def test_bad_interval_is_a_clear_error(self, rates_settings: Any) -> None:
        with pytest.raises(CommandError, match="--interval must be at least 0.1 seconds"):
            call_command("sample_rates", "--interval", "0")


class ClusterTests:
    def test_a_tick_over_three_primaries(
        self, rates_settings: Any, redis_cluster: RedisCluster, rc: RedisClient, cprefix: str
    ) -> None:
        rates_settings.ACKBOARD_STREAMS = (cprefix + "*",)
        names = names_on_primaries(redis_cluster, cprefix)
        for i, name in enumerate(names):
            make_pending(rc, name, "g", "c", i + 1)
            rc.xadd(name, {"waiting": "1"})
        a = Sampler(client=rc, lease_key=cprefix + "lease")
        b = Sampler(client=rc, lease_key=cprefix + "lease")
        report = a.tick()
        assert b.tick() is None
        assert report is not None and (report.streams, report.groups) == (3, 3)
        for i, name in enumerate(names):
            row = RateSample.objects.get(tier=0, stream=name, group="g")
            assert (row.entries_added, row.entries_read, row.pending, row.lag) == (
                i + 2,
                i + 1,
                i + 1,
                1,
            )
            assert row.oldest_undelivered_age_s is not None


class Redis62Tests:
    def test_no_counters_no_rates_no_estimate(self, rates_settings: Any, r62: redis.Redis) -> None:
        rates_settings.ACKBOARD_STREAMS = ("s62*",)
        make_group(r62, "s62", "g")
        sampler = Sampler(client=r62, interval_s=10)
        for i in range(31):
            r62.xadd("s62", {"n": str(i)})
            assert sampler.tick(now=NOW - 300 + 10 * i) is not None
        row = RateSample.objects.filter(stream="s62", group="g").latest("at")
        assert (row.entries_added, row.entries_read, row.lag) == (None, None, None)
        assert row.oldest_undelivered_age_s is not None  # lag in time needs no counter
        got = series("s62", "g", 3600, now=NOW, markers=False)
        assert got.counters is False and len(got.points) == 31
        assert all(p.produce_per_s is None and p.consume_per_s is None for p in got.points)
        est = drain_estimate("s62", "g", now=NOW)
        assert (est.kind, est.text, est.net_per_s) == ("unknown", "", None)
        assert est.reason == "rates need Redis 7+"
        # /metrics: no counter samples at all (never a 0 that looks like a stalled queue).
        overview = selectors.stream_overview(client=r62, patterns=("s62*",), cap=10)
        families = {f.name: f for f in RatesCollector(overview, int(NOW * 1000)).collect()}
        assert families["ackboard_stream_entries_added"].samples == []
        assert families["ackboard_group_entries_read"].samples == []
        assert len(families["ackboard_group_oldest_undelivered_age_seconds"].samples) == 1


# --- /metrics and the shipped rules ----------------------------------------------------------


def _exported(body: bytes) -> set[str]:
    names: set[str] = set()
    for family in text_string_to_metric_families(body.decode()):
        names.update(s.name for s in family.samples)
    return names


def _metrics_body(
    rates_settings: Any,
    r: redis.Redis,
    stream: str,
    prefix: str,
    client: Client,
    django_user_model: Any,
) -> bytes:
    make_group(r, stream, "g")
    for i in range(3):
        r.xadd(stream, {"n": str(i)})
    r.xreadgroup("g", "c", {stream: ">"}, count=1)
    assert _sampler(r, prefix).tick() is not None
    client.force_login(make_user(django_user_model, "viewer", "view_queues"))
    response = client.get(reverse("dashboard:metrics"))
    assert response.status_code == 200
    return response.content


def _referenced(text: str) -> set[str]:
    return set(re.findall(r"\b(ackboard_[a-z_]+)\b", text))


class MetricsTests:
    def test_counters_and_gauge(
        self,
        rates_settings: Any,
        r: redis.Redis,
        stream: str,
        prefix: str,
        client: Client,
        django_user_model: Any,
    ) -> None:
        body = _metrics_body(rates_settings, r, stream, prefix, client, django_user_model)
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        assert families["ackboard_stream_entries_added"].type == "counter"
        assert families["ackboard_group_entries_read"].type == "counter"
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in families.values()
            for s in f.samples
        }
        g = (("group", "g"), ("stream", stream))
        assert samples[("ackboard_stream_entries_added_total", (("stream", stream),))] == 3
        assert samples[("ackboard_group_entries_read_total", g)] == 1
        assert samples[("ackboard_group_oldest_undelivered_age_seconds", g)] >= 0
        assert set(rates_metrics.METRIC_NAMES) <= _exported(body)

    def test_every_metric_the_rules_and_dashboard_name_is_exported(
        self,
        rates_settings: Any,
        r: redis.Redis,
        stream: str,
        prefix: str,
        client: Client,
        django_user_model: Any,
    ) -> None:
        # A stream with a dead letter, pending, lag and a stuck consumer exports every family.
        body = _metrics_body(rates_settings, r, stream, prefix, client, django_user_model)
        exported = _exported(body)
        rules_text = (ROOT / "deploy/prometheus/ackboard-alerts.yml").read_text()
        rules = yaml.safe_load(rules_text)
        exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
        alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
        assert {
            "AckboardGroupStalled",
            "AckboardLagGrowing",
            "AckboardOldestUndeliveredTooOld",
            "AckboardDeadLettersGrowing",
            "AckboardNoLiveConsumer",
        } <= alerts
        in_rules = set().union(*(_referenced(e) for e in exprs))
        dashboard = json.loads((ROOT / "deploy/grafana/ackboard-dashboard.json").read_text())
        grafana_exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        grafana_exprs += [v["query"] for v in dashboard["templating"]["list"]]
        in_grafana = set().union(*(_referenced(e) for e in grafana_exprs))
        assert len(in_rules) >= 6 and len(in_grafana) >= 10
        assert in_rules - exported == set()
        assert in_grafana - exported == set()
