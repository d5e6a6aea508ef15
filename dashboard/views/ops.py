"""Operations endpoints: ``/metrics`` (Prometheus text format) and ``/healthz``.

``/metrics`` reports, per stream and group, the same figures as the overview, for every
stream of the process's stream index (``dashboard.insight.stream_index``: no SCAN on a scrape),
including each group's health from Redis alone (``queue_core.health``), rendered by
prometheus-client. Up to ``ACKBOARD_METRICS_FRESH_MAX`` streams the figures are read
fresh on each collection (two pipelined round trips, O(streams + groups + consumers):
about 150 ms at 500 streams, in process); above it they are the index's figures,
refreshed in the background in bounded steps, and ``ackboard_metrics_figures_age_seconds``
says how old they may be (a fresh collection took about 15 s at 10,000 streams on the
2-core test machine under load, far too long to run per scrape). A collection is served
to every scraper for ``METRICS_TTL_S``, or ``METRICS_COST_FACTOR`` times as long as it
took when that is longer (about 13 s at 10,000 streams), so scrapers cost Redis one
collection a second at most and the process a tenth of a core at most.

Each group's fleet (``dashboard.insight.fleet.FleetCollector``: per-worker up, processed and
failed from the heartbeats, the group's pause) costs one more pipelined round trip, a GET
and an HGETALL per group, for at most ``ACKBOARD_METRICS_FRESH_MAX`` groups; the others
are counted in ``ackboard_fleet_groups_unread``.

It is readable by a logged-in user with ``dashboard.view_queues``, or by a scraper
sending ``Authorization: Bearer <ACKBOARD_METRICS_TOKEN>`` when that setting is set.
``/healthz`` is public and says only whether the process is alive and Redis answers a
PING within the dashboard's timeout.

Neither endpoint writes to Redis or to the database.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import redis
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dashboard.access.permissions import VIEW_QUEUES
from dashboard.access.scopes import access_of, reach_names
from dashboard.insight import stream_index
from dashboard.insight.fleet import metrics_fleets
from dashboard.insight.rates.metrics import RatesCollector
from dashboard.runtime.connection import get_redis
from queue_core import clock, selectors
from queue_core.connection import Client
from queue_core.health import summary_health
from queue_core.types import StreamOverview, StreamSummary
from queue_core.validation import entry_id_ms

#: How long one collection is served to every scraper.
METRICS_TTL_S = 1.0
#: A collection is also served for this many times as long as it took, so /metrics costs
#: at most a tenth of one core however many streams there are (at 10,000 streams one
#: collection takes 1-1.5 s, mostly prometheus-client writing 90,000 samples, 6 MB).
METRICS_COST_FACTOR = 10.0
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


#: The per-stream gauges: name and help, in the order they are exposed.
_STREAM_GAUGES = (
    ("ackboard_stream_length", "Entries in the stream"),
    ("ackboard_stream_dead_letter_length", "Entries in the dead-letter stream"),
    ("ackboard_stream_failure_log_length", "Entries in the capped failure log ({S}:failures)"),
)
#: The per-group gauges: name and help, in the order they are exposed.
_GROUP_GAUGES = (
    ("ackboard_group_pending", "Delivered but unacknowledged entries"),
    (
        "ackboard_group_lag",
        "Entries not yet delivered to the group (absent when the server cannot tell)",
    ),
    (
        "ackboard_group_oldest_pending_age_seconds",
        "Age of the oldest pending entry (from its id), 0 when nothing is pending",
    ),
    ("ackboard_group_consumers", "Consumers in the group"),
    (
        "ackboard_group_live_consumers",
        "Consumers seen within ACKBOARD_STUCK_AFTER_MS (XINFO CONSUMERS idle)",
    ),
    (
        "ackboard_group_stuck",
        "1 when consumers not seen within ACKBOARD_STUCK_AFTER_MS hold pending entries",
    ),
    (
        "ackboard_group_stuck_entries",
        "Pending entries held by consumers not seen within ACKBOARD_STUCK_AFTER_MS",
    ),
    (
        "ackboard_group_no_live_consumer",
        "1 when entries wait and no consumer was seen within ACKBOARD_STUCK_AFTER_MS",
    ),
)


class _OverviewCollector(Collector):
    """Turns one ``StreamOverview`` into gauge families (a fresh registry per collection)."""

    def __init__(
        self,
        overview: StreamOverview,
        now_ms: int,
        took_s: float,
        stuck_after_ms: int,
        index_age_s: float = 0.0,
        figures_age_s: float = 0.0,
    ) -> None:
        self.overview = overview
        self.now_ms = now_ms
        self.took_s = took_s
        self.stuck_after_ms = stuck_after_ms
        self.index_age_s = index_age_s
        self.figures_age_s = figures_age_s

    def collect(self) -> Iterator[GaugeMetricFamily]:
        streams = {
            name: GaugeMetricFamily(name, doc, labels=["stream"]) for name, doc in _STREAM_GAUGES
        }
        groups = {
            name: GaugeMetricFamily(name, doc, labels=["stream", "group"])
            for name, doc in _GROUP_GAUGES
        }
        for s in self.overview.streams:
            self._add_health(s, groups)
            self._add_figures(s, streams, groups)
        yield from streams.values()
        yield from groups.values()
        yield from self._process_gauges()

    def _add_health(self, s: StreamSummary, groups: dict[str, GaugeMetricFamily]) -> None:
        """Each group's liveness (``queue_core.health``, from Redis alone)."""
        health = summary_health(summary=s, stuck_after_ms=self.stuck_after_ms, now_ms=self.now_ms)
        for h in health.groups:
            labels = [s.name, h.group]
            groups["ackboard_group_live_consumers"].add_metric(labels, h.live_consumers)
            groups["ackboard_group_stuck"].add_metric(labels, int(h.stuck))
            groups["ackboard_group_stuck_entries"].add_metric(labels, h.stuck_entries)
            groups["ackboard_group_no_live_consumer"].add_metric(labels, int(h.no_live_consumer))

    def _add_figures(
        self,
        s: StreamSummary,
        streams: dict[str, GaugeMetricFamily],
        groups: dict[str, GaugeMetricFamily],
    ) -> None:
        """The stream's lengths and each group's figures, as the overview shows them."""
        streams["ackboard_stream_length"].add_metric([s.name], s.length)
        streams["ackboard_stream_dead_letter_length"].add_metric([s.name], s.dlq_length)
        streams["ackboard_stream_failure_log_length"].add_metric([s.name], s.failures_length)
        for g in s.group_stats:
            labels = [s.name, g.name]
            groups["ackboard_group_pending"].add_metric(labels, g.pending)
            groups["ackboard_group_consumers"].add_metric(labels, g.consumers)
            if g.lag is not None:
                groups["ackboard_group_lag"].add_metric(labels, g.lag)
            age = 0.0
            if g.oldest_pending_id:
                created = entry_id_ms(g.oldest_pending_id)
                age = max(0.0, (self.now_ms - created) / 1000)
            groups["ackboard_group_oldest_pending_age_seconds"].add_metric(labels, age)

    def _process_gauges(self) -> Iterator[GaugeMetricFamily]:
        """The collection's own figures: the threshold, the stream count, the ages."""
        yield GaugeMetricFamily(
            "ackboard_stuck_after_seconds",
            "ACKBOARD_STUCK_AFTER_MS, the health threshold, in seconds",
            value=self.stuck_after_ms / 1000,
        )
        yield GaugeMetricFamily(
            "ackboard_streams", "Streams reported", value=len(self.overview.streams)
        )
        yield GaugeMetricFamily(
            "ackboard_streams_truncated",
            "1 when the stream index is full (ACKBOARD_MAX_STREAMS)",
            value=int(self.overview.truncated),
        )
        yield GaugeMetricFamily(
            "ackboard_stream_index_age_seconds",
            "Age of the stream list (the last complete discovery pass)",
            value=self.index_age_s,
        )
        yield GaugeMetricFamily(
            "ackboard_metrics_figures_age_seconds",
            "How old the reported figures may be (0 when read for this collection)",
            value=self.figures_age_s,
        )
        yield GaugeMetricFamily(
            "ackboard_collect_seconds", "Time the last collection took", value=self.took_s
        )


@dataclass
class _Cached:
    key: tuple[object, ...]
    at: float
    body: bytes
    ttl: float = METRICS_TTL_S


_lock = threading.Lock()
_cache: _Cached | None = None


def _collect(client: Client) -> tuple[StreamOverview, float]:
    """Every indexed stream's figures and how old they may be (see the module docstring):
    fresh (two pipelined round trips) up to ACKBOARD_METRICS_FRESH_MAX streams, else the
    index's own, which cost no Redis call here."""
    fresh_max = settings.ACKBOARD_METRICS_FRESH_MAX
    index = stream_index.overview_index(client=client)
    if len(index.snapshot().names) > fresh_max:
        index = stream_index.overview_index(client=client, figures=True)
    snap = index.snapshot()
    if len(snap.names) <= fresh_max:
        streams = selectors.stream_summaries(client=client, streams=snap.names)
        index.remember(streams)
        age = 0.0
    else:
        figures = index.summaries()
        streams = tuple(figures[n] for n in snap.names if n in figures)
        figures_age = index.summaries_age()
        age = float("inf") if figures_age is None else figures_age
    overview = StreamOverview(
        streams=streams, truncated=snap.truncated, cap=snap.cap, companions=snap.companions
    )
    return overview, age


def gauge_families(*, client: Client, now_ms: int) -> list[Metric]:
    """The stream and group families /metrics exports (not the fleet's; never cached),
    read now: the alert sender (``dashboard.alerts``) judges its rules on these very
    figures, so an alert and the gauge it names never disagree. Costs one collection."""
    overview, figures_age_s = _collect(client)
    collectors: tuple[Collector, ...] = (
        _OverviewCollector(
            overview,
            now_ms,
            0.0,
            settings.ACKBOARD_STUCK_AFTER_MS,
            figures_age_s=figures_age_s,
        ),
        RatesCollector(overview, now_ms),
    )
    return [family for collector in collectors for family in collector.collect()]


def metrics_text(*, client: Client, reach: tuple[str, ...] | None = None) -> bytes:
    """The Prometheus exposition of every visible stream (of those ``reach`` lets the
    scraper read, ``dashboard.access.scopes``); one collection per TTL and reach."""
    global _cache
    key = (
        reach,
        settings.ACKBOARD_REDIS_URL,
        tuple(settings.ACKBOARD_STREAMS),
        settings.ACKBOARD_MAX_STREAMS,
        settings.ACKBOARD_STUCK_AFTER_MS,
        settings.ACKBOARD_METRICS_FRESH_MAX,
    )
    now = time.monotonic()
    cached = _cache
    if cached is not None and cached.key == key and now - cached.at < cached.ttl:
        return cached.body
    # One collector at a time: concurrent scrapes wait for it and share its result.
    with _lock:
        cached = _cache
        now = time.monotonic()
        if cached is not None and cached.key == key and now - cached.at < cached.ttl:
            return cached.body
        started = time.perf_counter()
        overview, figures_age_s = _collect(client)
        if reach is not None:
            keep = set(reach_names(reach, (s.name for s in overview.streams)))
            overview = replace(
                overview, streams=tuple(s for s in overview.streams if s.name in keep)
            )
        index = stream_index.index_current(create=False)
        refreshed = index.snapshot().refreshed_at if index is not None else None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(
            _OverviewCollector(
                overview,
                clock.now_ms(),
                time.perf_counter() - started,
                settings.ACKBOARD_STUCK_AFTER_MS,
                index_age_s=0.0 if refreshed is None else max(0.0, clock.now_s() - refreshed),
                figures_age_s=figures_age_s,
            )
        )
        registry.register(RatesCollector(overview))  # dashboard/insight/rates/metrics.py
        # Fleet control: a GET and an HGETALL per group, capped.
        registry.register(
            metrics_fleets(
                client=client,
                groups=[(s.name, g.name) for s in overview.streams for g in s.group_stats],
                cap=settings.ACKBOARD_METRICS_FRESH_MAX,
            )
        )
        body = generate_latest(registry)
        took = time.perf_counter() - started
        ttl = max(METRICS_TTL_S, METRICS_COST_FACTOR * took)
        _cache = _Cached(key=key, at=time.monotonic(), body=body, ttl=ttl)
        return body


def _scraper_allowed(request: HttpRequest) -> bool:
    if request.user.is_authenticated and request.user.has_perm(VIEW_QUEUES):
        return True
    token: str = getattr(settings, "ACKBOARD_METRICS_TOKEN", "") or ""
    sent = request.headers.get("Authorization", "")
    return bool(token) and hmac.compare_digest(sent.encode(), f"Bearer {token}".encode())


@require_GET
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    if not _scraper_allowed(request):
        return HttpResponse(
            "Log in with the view_queues permission, or send Authorization: Bearer "
            "<ACKBOARD_METRICS_TOKEN>.\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    # The shared scrape token reads every stream; a logged-in user, the streams they may.
    reach = access_of(request.user).reach() if request.user.is_authenticated else None
    return HttpResponse(metrics_text(client=get_redis(), reach=reach), content_type=CONTENT_TYPE)


@require_GET
@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    """200 ``ok`` when Redis answers PING within the dashboard timeout, else 503."""
    started = time.perf_counter()
    try:
        get_redis().ping()
    except redis.RedisError as exc:
        return HttpResponse(
            f"redis unavailable: {type(exc).__name__}\n",
            status=503,
            content_type="text/plain; charset=utf-8",
        )
    took = (time.perf_counter() - started) * 1000
    return HttpResponse(f"ok redis {took:.1f} ms\n", content_type="text/plain; charset=utf-8")
