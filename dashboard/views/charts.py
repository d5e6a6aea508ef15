"""Charts and rates on the stream and group pages: the chart-data endpoint and
the small view rows the pages' rate partials read.

Owns ``RANGES`` (1 h, 6 h, 24 h, 7 d), the JSON a chart draws (``chart_payload``: one
column per figure, uPlot's own layout, so the browser copies nothing), the live point a
pushed partial carries (``point_attr``) and the rates context the group and stream pages
add to theirs (``group_rates_context``, ``stream_rates_context``), so a page and its live
push never differ.

It never reads Redis and never writes anything: figures come from the sampler's stored,
downsampled series and the audit trail (``dashboard.insight.rates.series``, SQL only), so a chart
costs the same whatever the queue's size. A 7-day range reads the 10-minute tier (about
1,000 rows) once, then only the rows written since and the finer tiers' tail
(``dashboard.insight.rates.series.chart_columns`` keeps the main tier's columns per process); the
JSON is cached per process until the series' next sample or the stream's next audit row
(``chart_json``); ``benchmarks/charts.py`` times both.

Honesty: a figure the sampler could not know (Redis older than 7 keeps no entries-added /
entries-read counters) is ``null`` in the JSON and the chart says "rates need Redis 7+";
with fewer than ``MIN_POINTS`` points in range nothing is drawn.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.conf import settings
from django.db import connections, router
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import URLPattern, URLResolver, path, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from dashboard.access.permissions import queues_view_required
from dashboard.display.converters import name_problem
from dashboard.insight.rates.estimate import Estimate, estimate_from
from dashboard.insight.rates.models import RateSample
from dashboard.insight.rates.series import (
    FIGURES,
    Point,
    chart_columns,
    latest_point,
    point_and_estimate,
)
from dashboard.models import AuditEvent
from queue_core import clock
from queue_core.keys import stream_visible
from queue_core.types import StreamSummary

#: The ranges a chart offers: query value -> seconds. The first is the default.
RANGES: dict[str, int] = {"1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "7d": 7 * 24 * 3600}
DEFAULT_RANGE = "1h"
#: Fewer points than this in a range draw nothing: one point is not a trend.
MIN_POINTS = 2
#: What the chart says instead of a figure it cannot know.
NEEDS_REDIS_7 = (
    "Rates need Redis 7+: this server keeps no entries-added / entries-read counters, "
    "so no produce or consume rate is shown."
)
TOO_LITTLE = "Not enough history yet: the sampler has {n} point{s} in this range."


def _number(value: float | int | None) -> float | int | None:
    """A JSON-safe figure: None stays None (never 0), NaN and infinities become None."""
    if value is None:
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, 3)
    return value


def point_dict(point: Point) -> dict[str, Any]:
    """One point as the chart reads it: ``{"t": …, "produce_per_s": …, …}``."""
    out: dict[str, Any] = {"t": int(point.t)}
    for name in FIGURES:
        out[name] = _number(getattr(point, name))
    return out


def point_attr(point: Point | None) -> str:
    """The live point as a data attribute's JSON (escaped by the template), '' for none."""
    return "" if point is None else json.dumps(point_dict(point), separators=(",", ":"))


def chart_payload(*, stream: str, group: str, range_name: str) -> dict[str, Any]:
    """The chart of ``stream`` (``group`` "" for the stream's own row) over a range.

    Columns: ``t`` (epoch s) and one list per figure, ``null`` where unknown; ``markers``
    are the operator actions in range from the audit trail. ``note`` says why nothing or
    less is drawn (too little data, Redis older than 7), else "". Cost: what
    ``dashboard.insight.rates.series.chart_columns`` reads (after the first call, the main tier's
    rows written since and the finer tiers' tail: O(tail), SQL), then O(points) copies.
    """
    range_s = RANGES[range_name]
    s = chart_columns(stream, group, range_s, ndigits=3)
    counters = s.counters
    n = len(s.t)
    enough = n >= MIN_POINTS
    note = ""
    if not enough:
        note = TOO_LITTLE.format(n=n, s="" if n == 1 else "s")
    elif not counters:
        note = NEEDS_REDIS_7
    # Columns as the series keeps them (rounded, JSON-safe; the main tier's kept between
    # ticks): no object per point and no pass here.
    columns = {name: s.figures[name] if enough else [] for name in FIGURES}
    times = s.t if enough else []
    return {
        "stream": stream,
        "group": group,
        "range": range_name,
        "range_s": range_s,
        "step_s": s.step_s,
        "enough": enough,
        "counters": counters,
        "note": note,
        "t": times,
        "series": columns,
        "markers": [
            {
                "t": int(m.t),
                "action": m.action,
                "username": m.username,
                "summary": m.summary,
            }
            for m in s.markers
        ],
    }


# --- what the pages add to their context ----------------------------------------------


@dataclass(frozen=True, slots=True)
class RatesView:
    """A page's rates: the drain estimate (group pages), the live point, the chart's URL."""

    chart_url: str
    ranges: tuple[str, ...]
    default_range: str
    point: str
    estimate: Estimate | None


def _chart_url(stream: str, group: str) -> str:
    if group:
        return reverse("dashboard:group-chart-data", args=[stream, group])
    return reverse("dashboard:stream-chart-data", args=[stream])


def group_rates_context(*, stream: str, group: str) -> dict[str, Any]:
    """The group page's rates (and its live push's): one small SQL read, no Redis."""
    point, estimate = point_and_estimate(stream, group, window_s=WINDOW_S)
    return {
        "rates": RatesView(
            chart_url=_chart_url(stream, group),
            ranges=tuple(RANGES),
            default_range=DEFAULT_RANGE,
            point=point_attr(point),
            estimate=estimate,
        )
    }


def stream_rates_context(*, stream: str) -> dict[str, Any]:
    """The stream page's rates: its own row (produce rate, failures), no estimate."""
    return {
        "rates": RatesView(
            chart_url=_chart_url(stream, ""),
            ranges=tuple(RANGES),
            default_range=DEFAULT_RANGE,
            point=point_attr(latest_point(stream, "")),
            estimate=None,
        )
    }


#: Which group's estimate an overview row shows: the worst state first, then the largest lag.
_WORST = {"stalled": 0, "growing": 1, "steady": 2, "drains": 3, "idle": 4}
#: The window of every drain estimate the pages show (``drain_estimate``'s default).
WINDOW_S = 300


@dataclass(frozen=True, slots=True)
class StreamDrain:
    """An overview row's drain estimate: its worst group's, and the lag in time (the
    oldest entry not yet delivered to any of its groups, ms since the epoch)."""

    group: str
    estimate: Estimate | None
    oldest_undelivered_ms: int | None


def overview_drains(
    *, summaries: tuple[StreamSummary, ...] | list[StreamSummary], now: float | None = None
) -> dict[str, StreamDrain]:
    """Each overview row's drain estimate and lag in time: ONE SQL query for the page
    (the tier-0 samples of its streams' groups over the last ``WINDOW_S``, about 30 rows
    a group), then ``estimate_from`` per group in memory; no Redis (the lag in time comes
    with the summaries). Rows with neither an estimate nor a lag in time are left out."""
    now = clock.now_s() if now is None else now
    names = [s.name for s in summaries]
    by_group: dict[tuple[str, str], list[tuple[float, int | None, int | None, int | None]]] = {}
    if names:
        rows = (
            RateSample.objects.filter(tier=0, stream__in=names, at__gte=now - WINDOW_S, at__lte=now)
            .exclude(group="")
            .order_by("at")
            .values_list("stream", "group", "at", "entries_added", "entries_read", "lag")
        )
        for stream, group, at, added, read, lag in rows:
            by_group.setdefault((stream, group), []).append((at, added, read, lag))
    interval = float(settings.ACKBOARD_SAMPLER_INTERVAL_S)
    out: dict[str, StreamDrain] = {}
    for s in summaries:
        waiting = [g.oldest_undelivered_ms for g in s.group_stats if g.oldest_undelivered_ms]
        oldest = min(waiting) if waiting else None
        groups = [g.name for g in s.group_stats] or [g for (n, g) in by_group if n == s.name]
        best: tuple[tuple[int, int], str, Estimate] | None = None
        for group in groups:
            samples = by_group.get((s.name, group))
            if not samples:
                continue
            e = estimate_from(samples, window_s=WINDOW_S, now=now, interval_s=interval)
            if e.kind not in _WORST:
                continue  # unknown: too little data, no counters
            rank = (_WORST[e.kind], -(e.lag or 0))
            if best is None or rank < best[0]:
                best = (rank, group, e)
        if best is not None or oldest is not None:
            out[s.name] = StreamDrain(
                group=best[1] if best else "",
                estimate=best[2] if best else None,
                oldest_undelivered_ms=oldest,
            )
    return out


# --- the cached JSON -------------------------------------------------------------------

#: Chart JSON per (stream, group, range), kept while the series' newest sample and the
#: stream's newest audit row are the same: a chart is recomputed at most once per sampler
#: tick (10 s) per process, however many people look or switch ranges meanwhile.
_CACHE: OrderedDict[tuple[str, str, str], tuple[tuple[object, object], str]] = OrderedDict()
_CACHE_SIZE = 256
_cache_lock = threading.Lock()


def _freshness(stream: str, group: str) -> tuple[object, object]:
    """What invalidates a chart: its newest tier-0 sample and the stream's newest audit
    row (one statement of two indexed single-row reads, well under a millisecond)."""
    db = connections[router.db_for_read(RateSample)]
    sql = _FRESHNESS_SQL.get(db.vendor)
    if sql is None:
        q = db.ops.quote_name
        sql = (
            f"SELECT (SELECT {q('at')} FROM {q(RateSample._meta.db_table)} "
            f"WHERE {q('tier')} = 0 AND {q('stream')} = %s AND {q('group')} = %s "
            f"ORDER BY {q('at')} DESC LIMIT 1), "
            f"(SELECT MAX({q('id')}) FROM {q(AuditEvent._meta.db_table)} "
            f"WHERE {q('stream')} = %s)"
        )
        _FRESHNESS_SQL[db.vendor] = sql
    with db.cursor() as cursor:
        cursor.execute(sql, (stream, group, stream))
        newest, audit = cursor.fetchone()
    return (newest, audit)


_FRESHNESS_SQL: dict[str, str] = {}


def chart_json(*, stream: str, group: str, range_name: str) -> str:
    """``chart_payload`` as compact JSON (the C encoder, no Django encoder class), from
    the per-process cache while nothing it shows has changed."""
    key = (stream, group, range_name)
    fresh = _freshness(stream, group)
    with _cache_lock:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] == fresh:
            _CACHE.move_to_end(key)
            return hit[1]
    payload = chart_payload(stream=stream, group=group, range_name=range_name)
    body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    with _cache_lock:
        _CACHE[key] = (fresh, body)
        _CACHE.move_to_end(key)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return body


# --- the endpoint -----------------------------------------------------------------------


def _json_error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _checked(
    view: Callable[[HttpRequest, str, str], HttpResponse],
) -> Callable[..., HttpResponse]:
    """Names and range checked before the view runs: 400 with the reason for a malformed
    one, 404 for a stream outside the allowlist (or a companion), never a 500."""

    @wraps(view)
    def wrapper(request: HttpRequest, stream: str, group: str = "") -> HttpResponse:
        for value, what in ((stream, "stream"), (group, "group")):
            if what == "group" and not group:
                continue
            problem = name_problem(value)
            if problem is not None:
                return _json_error(400, f"That {what} name cannot be opened here ({problem}).")
        if not stream_visible(stream, tuple(settings.ACKBOARD_STREAMS)):
            return _json_error(404, "No such stream here.")
        return view(request, stream, group)

    return wrapper


@require_GET
@never_cache
@queues_view_required
@_checked
def chart_data(request: HttpRequest, stream: str, group: str = "") -> HttpResponse:
    """``GET …/chart/?range=1h|6h|24h|7d``: the chart's JSON (``chart_payload``)."""
    range_name = request.GET.get("range", DEFAULT_RANGE)
    if range_name not in RANGES:
        return _json_error(400, "Range must be one of " + ", ".join(RANGES) + ".")
    body = chart_json(stream=stream, group=group, range_name=range_name)
    return HttpResponse(body, content_type="application/json")


def patterns() -> list[URLPattern | URLResolver]:
    """The routes, built when ``dashboard.urls`` asks (after it registers ``<name:…>``)."""
    return [
        path("streams/<name:stream>/chart/", chart_data, name="stream-chart-data"),
        path(
            "streams/<name:stream>/groups/<name:group>/chart/",
            chart_data,
            name="group-chart-data",
        ),
    ]
