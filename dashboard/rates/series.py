"""The rates API the pages and charts read: series, the drain estimate, the latest point.

Owns turning stored samples (``dashboard.rates.models.RateSample``) into chart points and
into the drain estimate's words. It reads the database only (one indexed range query per
tier used, plus one for the audit markers); it never touches Redis and never writes.

- ``series(stream, group, range_s)``: points of the finest tier that covers the range in
  at most ``MAX_POINTS`` points (1 h and 6 h: tier 0, every tick; 24 h: 1 minute; 7 d and
  longer: 10 minutes), followed by finer-tier points newer than the tier's last row, so a
  chart always ends at the last tick. Rates are Δcounter / Δt between consecutive points;
  None on the first point, across a counter reset (a stream recreated, a group reset) and
  whenever the server keeps no counter (Redis < 7): never a made-up figure. ``group=""``
  is the stream's own series (produce rate, worst lag and ages; no consume rate).
- ``drain_estimate(stream, group, window_s=300)``: from the tier-0 samples of the last
  ``window_s``: "lag 12,400 · +38/s net · drains in ~5 min", "lag 900 · growing by 40/s",
  "stalled: nothing read for 3 min", "idle", or kind ``unknown`` with no text when there
  is too little data (fewer than ``MIN_SAMPLES`` samples, spanning less than half the
  window, or none in the last three ticks), or no counters (``reason`` says which).
- ``latest_point(stream, group)``: the newest point (for live appends).

Costs: a 7-day series is one query of ~1,000 tier-2 rows plus the tail (at most ~60
tier-1 rows and ~6 tier-0 rows); the estimate reads at most window / interval rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings

from dashboard.rates.models import TIERS, RateSample

#: Most points one series returns from its main tier (6 h at 10 s is 2,160).
MAX_POINTS = 2_200
#: Fewest samples an estimate is made from.
MIN_SAMPLES = 3
#: Audit markers per series at most (newest kept).
MAX_MARKERS = 500
#: Net rates within this many entries/s (or this fraction of the produce rate) are "level".
NET_TOLERANCE = 0.2
NET_TOLERANCE_FRACTION = 0.05

KINDS = ("drains", "growing", "stalled", "steady", "idle", "unknown")


@dataclass(frozen=True, slots=True)
class Point:
    t: int  # epoch seconds
    produce_per_s: float | None
    consume_per_s: float | None
    lag: int | None
    oldest_pending_s: float | None
    undelivered_s: float | None
    failures_per_min: float | None


@dataclass(frozen=True, slots=True)
class Marker:
    t: int
    action: str
    username: str
    summary: str


@dataclass(frozen=True, slots=True)
class Series:
    stream: str
    group: str
    range_s: int
    tier: int
    step_s: int  # the main tier's nominal step
    points: list[Point] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    #: False when the samples carry no counters (Redis < 7): rates are all None.
    counters: bool = True


@dataclass(frozen=True, slots=True)
class Estimate:
    kind: str  # one of KINDS
    text: str  # "" when kind is "unknown"
    net_per_s: float | None  # consume - produce over the window (positive: draining)
    window_s: int
    lag: int | None = None
    produce_per_s: float | None = None
    consume_per_s: float | None = None
    eta_s: float | None = None  # "drains in" seconds, when draining
    reason: str = ""  # why there is no estimate ("too little data", "rates need Redis 7+")


# --- tiers ----------------------------------------------------------------------------


def tier_keep_s(level: int) -> int:
    """How long a tier's rows are kept (the retention setting caps every tier)."""
    cap = int(settings.ACKBOARD_RATES_RETENTION_DAYS) * 86_400
    return min(TIERS[level].keep_s, cap) if level < 2 else cap


def tier_step_s(level: int) -> float:
    """A tier's step: tier 0 is the sampler's interval."""
    return float(settings.ACKBOARD_SAMPLER_INTERVAL_S) if level == 0 else TIERS[level].step_s


def tier_for(range_s: int) -> int:
    """The finest tier that keeps ``range_s`` and covers it in at most MAX_POINTS points."""
    for tier in TIERS:
        if tier_keep_s(tier.level) >= range_s and range_s / tier.step_s <= MAX_POINTS:
            return tier.level
    return TIERS[-1].level


# --- points ---------------------------------------------------------------------------


_FIELDS = (
    "at",
    "entries_added",
    "entries_read",
    "lag",
    "oldest_pending_age_s",
    "oldest_undelivered_age_s",
    "failures",
)
_Row = tuple[float, int | None, int | None, int | None, float | None, float | None, int | None]


def _rate(now: int | None, before: int | None, dt: float) -> float | None:
    if now is None or before is None or dt <= 0 or now < before:
        return None
    return (now - before) / dt


def _points(rows: Sequence[_Row], previous: _Row | None = None) -> list[Point]:
    points = []
    for row in rows:
        at, added, read, lag, oldest, undelivered, failures = row
        produce = consume = per_min = None
        if previous is not None:
            dt = at - previous[0]
            produce = _rate(added, previous[1], dt)
            consume = _rate(read, previous[2], dt)
            if failures is not None and dt > 0:
                per_min = failures * 60 / dt
        points.append(Point(int(at), produce, consume, lag, oldest, undelivered, per_min))
        previous = row
    return points


def _rows(tier: int, stream: str, group: str, since: float, until: float) -> list[_Row]:
    return list(
        RateSample.objects.filter(
            tier=tier, stream=stream, group=group, at__gt=since, at__lte=until
        )
        .order_by("at")
        .values_list(*_FIELDS)
    )


def _markers(stream: str, group: str, since: float, until: float) -> list[Marker]:
    from dashboard.models import AuditEvent

    events = (
        AuditEvent.objects.filter(
            stream=stream,
            created_at__gt=datetime.fromtimestamp(since, UTC),
            created_at__lte=datetime.fromtimestamp(until, UTC),
        )
        .order_by("-created_at")
        .values_list("created_at", "action", "username", "group", "entry_ids", "result")
    )
    if group:
        events = events.filter(group__in=(group, ""))
    found = []
    for created, action, username, event_group, ids, result in events[:MAX_MARKERS]:
        where = f" on {event_group}" if event_group and not group else ""
        count = f" {len(ids)} {'entry' if len(ids) == 1 else 'entries'}" if ids else ""
        summary = f"{action}{count}{where}" + ("" if result == "ok" else f" ({result})")
        found.append(Marker(int(created.timestamp()), action, username, summary))
    found.reverse()
    return found


def series(
    stream: str, group: str, range_s: int, *, now: float | None = None, markers: bool = True
) -> Series:
    """The chart of ``stream``/``group`` (``group=""``: the stream) over the last ``range_s``."""
    until = time.time() if now is None else now
    since = until - range_s
    level = tier_for(range_s)
    rows = _rows(level, stream, group, since, until)
    # The tail: finer tiers' rows newer than this tier's last row (its open bucket).
    for finer in range(level - 1, -1, -1):
        rows += _rows(finer, stream, group, rows[-1][0] if rows else since, until)
    # The row before the range gives the first point its rates.
    before = (
        RateSample.objects.filter(tier=level, stream=stream, group=group, at__lte=since)
        .order_by("-at")
        .values_list(*_FIELDS)
        .first()
    )
    if before is not None and since - before[0] > 2 * tier_step_s(level):
        before = None  # a gap before the range: the first point has no rates
    points = _points(rows, before)
    counters = any(r[1] is not None for r in rows) or not rows
    return Series(
        stream=stream,
        group=group,
        range_s=range_s,
        tier=level,
        step_s=int(tier_step_s(level)),
        points=points,
        markers=_markers(stream, group, since, until) if markers else [],
        counters=counters,
    )


def latest_point(stream: str, group: str) -> Point | None:
    """The newest tier-0 point (rates from the two newest samples), None before any."""
    rows = list(
        RateSample.objects.filter(tier=0, stream=stream, group=group)
        .order_by("-at")
        .values_list(*_FIELDS)[:2]
    )
    if not rows:
        return None
    return _points([rows[0]], rows[1] if len(rows) > 1 else None)[0]


# --- the drain estimate ---------------------------------------------------------------


def _count(n: int) -> str:
    return f"{n:,}"


def _per_s(rate: float) -> str:
    rate = abs(rate)
    if rate >= 10:
        return f"{rate:,.0f}/s"
    return f"{rate:.1f}/s".replace(".0/s", "/s")


def duration(seconds: float) -> str:
    """A rough duration: "45 s", "5 min", "3 h", "2 d"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)} h"
    return f"{round(seconds / 86_400)} d"


def _unknown(window_s: int, reason: str, lag: int | None = None) -> Estimate:
    return Estimate("unknown", "", None, window_s, lag=lag, reason=reason)


def estimate_from(
    rows: Sequence[tuple[float, int | None, int | None, int | None]],
    *,
    window_s: int,
    now: float,
    interval_s: float,
) -> Estimate:
    """The estimate from (at, entries_added, entries_read, lag) samples, oldest first.

    Rules, in order: too little data (fewer than MIN_SAMPLES samples, spanning less than
    half the window, or the newest older than three intervals) -> unknown; no counters
    (Redis < 7) -> unknown; the lag rose and production outran consumption by more than
    the tolerance -> growing; nothing read while entries wait -> stalled; nothing waits
    and nothing moved -> idle; consumption outruns production with entries waiting ->
    drains (with the time to drain); nothing waits (or only a tick's worth) -> drains
    ("keeping up"); otherwise the lag holds -> steady.
    """
    rows = [r for r in rows if now - window_s <= r[0] <= now]
    if len(rows) < MIN_SAMPLES or rows[-1][0] - rows[0][0] < window_s / 2:
        return _unknown(window_s, "too little data")
    if now - rows[-1][0] > 3 * interval_s + 1:
        return _unknown(window_s, "no recent samples (is the sampler running?)")
    first, last = rows[0], rows[-1]
    if None in (first[1], first[2], last[1], last[2], last[3]):
        return _unknown(window_s, "rates need Redis 7+")
    span = last[0] - first[0]
    lag = int(last[3])  # type: ignore[arg-type]
    produce = (last[1] - first[1]) / span  # type: ignore[operator]
    consume = (last[2] - first[2]) / span  # type: ignore[operator]
    if produce < 0 or consume < 0:
        return _unknown(window_s, "a counter was reset in the window", lag)
    net = consume - produce
    tolerance = max(NET_TOLERANCE, NET_TOLERANCE_FRACTION * produce)
    base = Estimate("unknown", "", net, window_s, lag, produce, consume)
    lag_rose = first[3] is not None and lag > first[3]
    if lag_rose and -net > tolerance:
        text = f"lag {_count(lag)} · growing by {_per_s(net)}"
        return _with(base, "growing", text)
    if consume == 0 and lag > 0:
        moved = [r[0] for r in rows if r[2] != last[2]]
        since = rows[0][0] if not moved else next(r[0] for r in rows if r[0] > moved[-1])
        return _with(base, "stalled", f"stalled: nothing read for {duration(now - since)}")
    if lag == 0 and produce == 0 and consume == 0:
        return _with(base, "idle", "idle: nothing produced, nothing waiting")
    if lag <= max(1.0, produce * interval_s):
        return _with(base, "drains", f"lag {_count(lag)} · keeping up at {_per_s(consume)}")
    if net > tolerance:
        eta = lag / net
        text = f"lag {_count(lag)} · +{_per_s(net)} net · drains in ~{duration(eta)}"
        return Estimate("drains", text, net, window_s, lag, produce, consume, eta)
    return _with(base, "steady", f"lag {_count(lag)} · holding (consuming {_per_s(consume)})")


def _with(base: Estimate, kind: str, text: str) -> Estimate:
    return Estimate(
        kind, text, base.net_per_s, base.window_s, base.lag, base.produce_per_s, base.consume_per_s
    )


def drain_estimate(
    stream: str, group: str, *, window_s: int = 300, now: float | None = None
) -> Estimate:
    """Is ``group`` catching up? From the tier-0 samples of the last ``window_s``."""
    now = time.time() if now is None else now
    rows = list(
        RateSample.objects.filter(
            tier=0, stream=stream, group=group, at__gte=now - window_s, at__lte=now
        )
        .order_by("at")
        .values_list("at", "entries_added", "entries_read", "lag")
    )
    return estimate_from(
        rows, window_s=window_s, now=now, interval_s=float(settings.ACKBOARD_SAMPLER_INTERVAL_S)
    )
