"""The rates API the pages and charts read: series, the drain estimate, the latest point.

Owns turning stored samples (``dashboard.insight.rates.models.RateSample``) into chart points,
and reading the samples the drain estimate's words are made from (the rules are in
``dashboard.insight.rates.estimate``, the audit markers' read in ``...rates.markers``). It
reads the database only (one indexed range query per tier used, plus one for the audit
markers); it never touches Redis and never writes.

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
- ``point_and_estimate(stream, group)``: both of the last two from one read (the group page).

Costs: a 7-day series is one query of ~1,000 tier-2 rows plus the tail (at most ~60
tier-1 rows and ~6 tier-0 rows); the estimate reads at most window / interval rows.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper

from dashboard.insight.rates.estimate import Estimate, estimate_from
from dashboard.insight.rates.markers import Marker, markers_read
from dashboard.insight.rates.models import TIERS, RateSample
from queue_core import clock

#: Most points one series returns from its main tier (6 h at 10 s is 2,160).
MAX_POINTS = 2_200


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

#: The figures of a point after its time, in ``Point``'s order (the chart's columns).
FIGURES = (
    "produce_per_s",
    "consume_per_s",
    "lag",
    "oldest_pending_s",
    "undelivered_s",
    "failures_per_min",
)


@dataclass(frozen=True, slots=True)
class Columns:
    """A series as columns (what a chart draws): ``t`` and one list per name of
    ``FIGURES``, the same values as ``Series.points`` without a ``Point`` per row."""

    stream: str
    group: str
    range_s: int
    tier: int
    step_s: int
    t: list[int]
    figures: dict[str, list[Any]]
    markers: list[Marker]
    counters: bool


def _columns(rows: Sequence[_Row], previous: _Row | None = None) -> tuple[list[int], list[Any]]:
    """The times and the six figure columns (``FIGURES`` order) of ``rows``: one pass,
    no object per row. Rates are Δcounter / Δt from the row before (``previous`` for the
    first row): None on the first row without one, across a reset, without counters."""
    times: list[int] = []
    produce: list[float | None] = []
    consume: list[float | None] = []
    lags: list[int | None] = []
    pending_ages: list[float | None] = []
    undelivered: list[float | None] = []
    per_min: list[float | None] = []
    p_at = p_added = p_read = None
    if previous is not None:
        p_at, p_added, p_read = previous[0], previous[1], previous[2]
    for at, added, read, lag, oldest, waiting, failures in rows:
        times.append(int(at))
        lags.append(lag)
        pending_ages.append(oldest)
        undelivered.append(waiting)
        if p_at is None:
            produce.append(None)
            consume.append(None)
            per_min.append(None)
        else:
            dt = at - p_at
            if dt > 0:
                produce.append(
                    None if added is None or p_added is None or added < p_added
                    else (added - p_added) / dt
                )  # fmt: skip
                consume.append(
                    None if read is None or p_read is None or read < p_read
                    else (read - p_read) / dt
                )  # fmt: skip
                per_min.append(None if failures is None else failures * 60 / dt)
            else:
                produce.append(None)
                consume.append(None)
                per_min.append(None)
        p_at, p_added, p_read = at, added, read
    return times, [produce, consume, lags, pending_ages, undelivered, per_min]


def _points(rows: Sequence[_Row], previous: _Row | None = None) -> list[Point]:
    times, figures = _columns(rows, previous)
    return [Point(*values) for values in zip(times, *figures, strict=True)]


def _db() -> BaseDatabaseWrapper:
    return connections[router.db_for_read(RateSample)]


@dataclass(frozen=True, slots=True)
class _Statements:
    """The reads of one series, as SQL built once per connection vendor: all on the
    ``rate_series`` index's (tier, stream, group, at) order, only the needed columns, no
    model instances and no ORM compile per call. Parameters: tier, stream, group, then
    the times."""

    ranged: str  # (since, until], oldest first
    starting: str  # [since, until], oldest first
    before: str  # the newest row at or before a time
    newest: str  # the two newest rows
    window: str  # [since, until] of (at, entries_added, entries_read, lag), oldest first
    #: Every row at or after a time (since, however new) and the two newest before it,
    #: oldest first: both ``newest`` and ``window`` (since .. now) in one read.
    recent: str  # parameters: the key and since, twice


def _sql(db: BaseDatabaseWrapper) -> _Statements:
    cached = _SQL.get(db.vendor)
    if cached is None:
        q = db.ops.quote_name
        columns = ", ".join(q(f) for f in _FIELDS)
        table = q(RateSample._meta.db_table)
        where = f"FROM {table} WHERE {q('tier')} = %s AND {q('stream')} = %s AND {q('group')} = %s"
        at = q("at")
        cached = _Statements(
            ranged=f"SELECT {columns} {where} AND {at} > %s AND {at} <= %s ORDER BY {at}",
            starting=f"SELECT {columns} {where} AND {at} >= %s AND {at} <= %s ORDER BY {at}",
            before=f"SELECT {columns} {where} AND {at} <= %s ORDER BY {at} DESC LIMIT 1",
            newest=f"SELECT {columns} {where} ORDER BY {at} DESC LIMIT 2",
            window=(
                f"SELECT {', '.join(q(f) for f in _FIELDS[:4])} {where} "
                f"AND {at} >= %s AND {at} <= %s ORDER BY {at}"
            ),
            recent=(
                f"SELECT {columns} {where} AND {at} >= %s UNION ALL "
                f"SELECT {columns} FROM (SELECT {columns} {where} AND {at} < %s "
                f"ORDER BY {at} DESC LIMIT 2) older ORDER BY {at}"
            ),
        )
        _SQL[db.vendor] = cached
    return cached


def _fetch(sql: str, params: tuple[Any, ...]) -> list[Any]:
    db = _db()
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[Any] = cursor.fetchall()
        return rows


_SQL: dict[str, _Statements] = {}


def series_columns(
    stream: str, group: str, range_s: int, *, now: float | None = None, markers: bool = True
) -> Columns:
    """``series`` as columns (the chart's JSON layout), without a ``Point`` per row.

    Reads the main tier's range, then the tail from each finer tier (its rows newer than
    the last row so far), then the main tier's row before the range (the first point's
    rates): at most four indexed range reads of ``rate_series``, plus the markers'.
    """
    until = clock.now_s() if now is None else now
    since = until - range_s
    level = tier_for(range_s)
    db = _db()
    sql = _sql(db)
    ranged = sql.ranged
    with db.cursor() as cursor:
        cursor.execute(ranged, (level, stream, group, since, until))
        rows: list[_Row] = cursor.fetchall()
        # The tail: finer tiers' rows newer than this tier's last row (its open bucket).
        for finer in range(level - 1, -1, -1):
            cursor.execute(ranged, (finer, stream, group, rows[-1][0] if rows else since, until))
            rows += cursor.fetchall()
        # The row before the range gives the first point its rates.
        cursor.execute(sql.before, (level, stream, group, since))
        before: _Row | None = cursor.fetchone()
    if before is not None and since - before[0] > 2 * tier_step_s(level):
        before = None  # a gap before the range: the first point has no rates
    times, figures = _columns(rows, before)
    return Columns(
        stream=stream,
        group=group,
        range_s=range_s,
        tier=level,
        step_s=int(tier_step_s(level)),
        t=times,
        figures=dict(zip(FIGURES, figures, strict=True)),
        markers=markers_read(stream, group, since, until) if markers else [],
        counters=any(r[1] is not None for r in rows) or not rows,
    )


# --- the chart's columns, kept between ticks ------------------------------------------

_INFINITIES = (float("inf"), float("-inf"))


def _json_column(values: list[Any], ndigits: int) -> list[Any]:
    """A figure column as JSON-safe values: ints and None kept, floats rounded to
    ``ndigits``, NaN and infinities None (never 0)."""
    return [
        v
        if v is None or v.__class__ is int
        else (round(v, ndigits) if v == v and v not in _INFINITIES else None)
        for v in values
    ]


#: The rate columns (index in ``FIGURES``): None on a first point that has no row before.
_RATE_COLUMNS = (0, 1, 5)


@dataclass(slots=True)
class _Segment:
    """The main tier's rows of one chart as last read, with their rounded columns (each
    row's rates against the row before it, the first's against ``before``)."""

    since: float  # the range's start when read
    made: float  # time.monotonic() when read
    ats: list[float]
    rows: list[_Row]
    before: _Row | None  # the newest main-tier row at or before ``since``, unchecked
    times: list[int]
    figures: list[list[Any]]


#: Per process: (database alias, stream, group, tier, ndigits) -> the main tier's segment.
_SEGMENTS: OrderedDict[tuple[str, str, str, int, int], _Segment] = OrderedDict()
_SEGMENTS_SIZE = 64
#: A segment is read afresh at least this often (bounds what a rewritten row could leave).
SEGMENT_MAX_AGE_S = 600.0
_segments_lock = threading.Lock()


def _segment(
    cursor: Any,
    sql: _Statements,
    key: tuple[str, str, str, int, int],
    since: float,
    until: float,
) -> _Segment:
    """The main tier's rows in (since, until] with their columns: the kept segment plus
    the rows written since (the kept last row read again to prove the segment is still
    the table's), else read afresh."""
    _, stream, group, level, ndigits = key
    with _segments_lock:
        kept = _SEGMENTS.get(key)
    if (
        kept is not None
        and kept.rows
        and since >= kept.since
        and time.monotonic() - kept.made < SEGMENT_MAX_AGE_S
    ):
        last = kept.rows[-1]
        cursor.execute(sql.starting, (level, stream, group, last[0], until))
        newer = cursor.fetchall()
        if newer and newer[0] == last:
            times, figures = _columns(newer[1:], last)
            figures = [_json_column(f, ndigits) for f in figures]
            with _segments_lock:
                if kept.rows[-1] == last:  # not extended by another thread meanwhile
                    kept.ats += [r[0] for r in newer[1:]]
                    kept.rows += newer[1:]
                    kept.times += times
                    for column, more in zip(kept.figures, figures, strict=True):
                        column += more
                    return kept
    cursor.execute(sql.ranged, (level, stream, group, since, until))
    rows = cursor.fetchall()
    cursor.execute(sql.before, (level, stream, group, since))
    before = cursor.fetchone()
    times, figures = _columns(rows, before)
    made = _Segment(
        since=since,
        made=time.monotonic(),
        ats=[r[0] for r in rows],
        rows=rows,
        before=before,
        times=times,
        figures=[_json_column(f, ndigits) for f in figures],
    )
    with _segments_lock:
        _SEGMENTS[key] = made
        _SEGMENTS.move_to_end(key)
        while len(_SEGMENTS) > _SEGMENTS_SIZE:
            _SEGMENTS.popitem(last=False)
    return made


def chart_columns(
    stream: str, group: str, range_s: int, *, ndigits: int = 3, now: float | None = None
) -> Columns:
    """``series_columns`` for a chart drawn now, floats rounded to ``ndigits`` and NaN or
    infinities None (JSON-safe), with the same values.

    The main tier's rows and their columns are kept per process between calls (at most
    ``SEGMENT_MAX_AGE_S``): a call reads only the rows written since (usually none: the
    7-day tier gets a row every 10 minutes), re-reading the kept last row to check the
    segment still matches the table, then the finer tiers' tail (at most ~70 rows) as
    ``series`` does; so a tick costs O(tail), not O(range).
    """
    until = clock.now_s() if now is None else now
    since = until - range_s
    level = tier_for(range_s)
    step = tier_step_s(level)
    db = _db()
    sql = _sql(db)
    with db.cursor() as cursor:
        seg = _segment(cursor, sql, (db.alias, stream, group, level, ndigits), since, until)
        with _segments_lock:
            first = bisect_right(seg.ats, since)
            end = len(seg.rows)
            main_rows = seg.rows[first:end]
            times = seg.times[first:end]
            figures = [column[first:end] for column in seg.figures]
            before = seg.rows[first - 1] if first > 0 else seg.before
        tail: list[_Row] = []
        for finer in range(level - 1, -1, -1):
            start = tail[-1][0] if tail else main_rows[-1][0] if main_rows else since
            cursor.execute(sql.ranged, (finer, stream, group, start, until))
            tail += cursor.fetchall()
    if before is not None and since - before[0] > 2 * step:
        before = None  # a gap before the range: the first point has no rates
    if before is None and times:
        for i in _RATE_COLUMNS:
            figures[i][0] = None
    if tail:
        previous = main_rows[-1] if main_rows else before
        tail_times, tail_figures = _columns(tail, previous)
        times += tail_times
        for column, more in zip(figures, tail_figures, strict=True):
            column += _json_column(more, ndigits)
    rows_counters = any(r[1] is not None for r in main_rows) or any(r[1] is not None for r in tail)
    return Columns(
        stream=stream,
        group=group,
        range_s=range_s,
        tier=level,
        step_s=int(step),
        t=times,
        figures=dict(zip(FIGURES, figures, strict=True)),
        markers=markers_read(stream, group, since, until),
        counters=rows_counters or not (main_rows or tail),
    )


def series(
    stream: str, group: str, range_s: int, *, now: float | None = None, markers: bool = True
) -> Series:
    """The chart of ``stream``/``group`` (``group=""``: the stream) over the last ``range_s``."""
    c = series_columns(stream, group, range_s, now=now, markers=markers)
    points = [Point(*values) for values in zip(c.t, *c.figures.values(), strict=True)]
    return Series(
        stream=stream,
        group=group,
        range_s=range_s,
        tier=c.tier,
        step_s=c.step_s,
        points=points,
        markers=c.markers,
        counters=c.counters,
    )


def latest_point(stream: str, group: str) -> Point | None:
    """The newest tier-0 point (rates from the two newest samples), None before any."""
    rows = _fetch(_sql(_db()).newest, (0, stream, group))
    if not rows:
        return None
    return _points([rows[0]], rows[1] if len(rows) > 1 else None)[0]


def point_and_estimate(
    stream: str, group: str, *, window_s: int = 300, now: float | None = None
) -> tuple[Point | None, Estimate]:
    """``latest_point`` and ``drain_estimate`` together from ONE read: the tier-0 rows
    from ``now - window_s`` on (however new) plus the two newest before that, so the
    point is right when the newest sample is older than the window too. The same
    answers as the two calls (the estimate sees only the rows within the window)."""
    now = clock.now_s() if now is None else now
    since = now - window_s
    rows = _fetch(_sql(_db()).recent, (0, stream, group, since, 0, stream, group, since))
    point = _points([rows[-1]], rows[-2] if len(rows) > 1 else None)[0] if rows else None
    estimate = estimate_from(
        rows, window_s=window_s, now=now, interval_s=float(settings.ACKBOARD_SAMPLER_INTERVAL_S)
    )
    return point, estimate


def drain_estimate(
    stream: str, group: str, *, window_s: int = 300, now: float | None = None
) -> Estimate:
    """Is ``group`` catching up? From the tier-0 samples of the last ``window_s``."""
    now = clock.now_s() if now is None else now
    rows = _fetch(_sql(_db()).window, (0, stream, group, now - window_s, now))
    return estimate_from(
        rows, window_s=window_s, now=now, interval_s=float(settings.ACKBOARD_SAMPLER_INTERVAL_S)
    )
