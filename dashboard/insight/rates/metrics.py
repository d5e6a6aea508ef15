"""The rates' /metrics families: counters Prometheus turns into rates, and lag in time.

Owns three families, registered by ``dashboard.views.ops.metrics_text`` next to its own
(one line there), over the same collection's overview:

- ``ackboard_stream_entries_added_total{stream}`` and
  ``ackboard_group_entries_read_total{stream,group}``: counters, as of the sampler's newest
  tick (``dashboard.insight.rates.sampler``; so at most one interval old, from one instant for
  every stream, and read from the database: no Redis call here). Absent on Redis < 7,
  which keeps no such counters, and before the first tick.
- ``ackboard_group_oldest_undelivered_age_seconds{stream,group}``: gauge, the age of the
  oldest entry not yet delivered to the group (0 when none waits), from this collection's
  overview (``GroupStats.oldest_undelivered_ms``, read fresh with the other figures).
- ``ackboard_rates_sample_age_seconds``: how old the newest tick is (absent before any),
  so an alert can tell a stopped sampler.

Cost: one aggregate on the (tier, at) index and one indexed read of the newest tick's
rows (one per stream and per group). Never writes.
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Max
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dashboard.insight.rates.models import RateSample
from queue_core import clock
from queue_core.types import StreamOverview

#: Every family this module exports (tests check the shipped rules name only exported ones).
METRIC_NAMES = (
    "ackboard_stream_entries_added_total",
    "ackboard_group_entries_read_total",
    "ackboard_group_oldest_undelivered_age_seconds",
    "ackboard_rates_sample_age_seconds",
)


class RatesCollector(Collector):
    """See the module docstring. A fresh one per collection."""

    def __init__(self, overview: StreamOverview, now_ms: int | None = None) -> None:
        self.overview = overview
        self.now_ms = clock.now_ms() if now_ms is None else now_ms

    def collect(self) -> Iterator[Metric]:
        g_labels = ["stream", "group"]
        waiting = GaugeMetricFamily(
            "ackboard_group_oldest_undelivered_age_seconds",
            "Age of the oldest entry not yet delivered to the group (lag in time, from its "
            "id), 0 when none waits",
            labels=g_labels,
        )
        names = set()
        for s in self.overview.streams:
            names.add(s.name)
            for g in s.group_stats:
                waiting.add_metric([s.name, g.name], g.undelivered_age_s(self.now_ms) or 0.0)
        added = CounterMetricFamily(
            "ackboard_stream_entries_added",
            "Entries ever added to the stream (XINFO STREAM entries-added, Redis 7+), as of "
            "the rates sampler's last tick",
            labels=["stream"],
        )
        read = CounterMetricFamily(
            "ackboard_group_entries_read",
            "Entries the group has read (XINFO GROUPS entries-read, Redis 7+), as of the "
            "rates sampler's last tick",
            labels=g_labels,
        )
        newest = RateSample.objects.filter(tier=0).aggregate(m=Max("at"))["m"]
        if newest is not None:
            rows = RateSample.objects.filter(tier=0, at=newest).values_list(
                "stream", "group", "entries_added", "entries_read"
            )
            for stream, group, entries_added, entries_read in rows:
                if stream not in names:
                    continue
                if not group and entries_added is not None:
                    added.add_metric([stream], entries_added)
                elif group and entries_read is not None:
                    read.add_metric([stream, group], entries_read)
        yield from (added, read, waiting)
        if newest is not None:
            yield GaugeMetricFamily(
                "ackboard_rates_sample_age_seconds",
                "Age of the rates sampler's newest tick",
                value=max(0.0, self.now_ms / 1000 - newest),
            )
