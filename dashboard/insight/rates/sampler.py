"""The rates sampler: one per deployment, sampling every stream's counters each tick.

Owns the tick (read the counters, write tier-0 rows), the downsampling into the 1-minute
and 10-minute tiers, retention, the Redis lease that elects one sampler per deployment,
and the thread web processes run. It reads Redis (``selectors.stream_counters``) and
writes only the lease key (``ACKBOARD_SAMPLER_LEASE_KEY``, ``ackboard:rates:sampler`` by
default) there, and publishes one event a tick; its history goes to the database
(``dashboard.insight.rates.models``: why there).

**One sampler per deployment.** Every web process (with ``ACKBOARD_SAMPLER=1``, the
default) and any ``manage.py sample_rates`` runs a sampler loop, but a tick samples only
while its loop holds the lease: a script that renews the key if it holds this loop's
token, else sets it if absent (``SET NX PX``), atomically, with a time-to-live of three
intervals. So exactly one loop samples; when its process dies, another takes over within
three intervals. The thread starts with a web process's first request (like the stream
index's refresher), never in other manage.py commands.

**A tick** (every ``ACKBOARD_SAMPLER_INTERVAL_S``, 10 s by default): the lease (one round
trip); discovery steps of the sampler's own stream index while a pass is due (bounded,
``StreamIndex``: SCAN COUNT 2000 a step); the counters of every indexed stream in two
pipelined round trips per ``CHUNK`` streams (XINFO STREAM, XINFO GROUPS, XLEN of the DLQ;
then per group the XPENDING summary when entries are pending and ``XRANGE … COUNT 1``
after last-delivered when it is behind: O(streams + groups), measured at 500 streams by
``benchmarks.rates_sampler``); one grouped query of the failure index for the failures
indexed since the last tick; one bulk insert of one row per stream and per group; one
PUBLISH of a ``rates`` event (the live pages' cue to push the chart's newest point).
Once a minute: the closed buckets of tiers 1 and 2 are rolled up from the tier below
(rows read once, written once; idempotent, so a new lease holder redoes at most a bucket)
and rows past their tier's retention are deleted.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from django.conf import settings
from django.core.signals import request_started
from django.db import close_old_connections, connection, connections, transaction
from django.db.models import Count, Max
from redis.exceptions import RedisClusterException

from dashboard.insight.rates.models import TIERS, RateSample
from dashboard.insight.rates.series import tier_keep_s
from dashboard.runtime.connection import get_redis
from queue_core import clock, selectors
from queue_core.connection import Client
from queue_core.events import event_publish
from queue_core.keys import RATES_SAMPLER_LEASE_KEY
from queue_core.stream_index import StreamIndex
from queue_core.types import StreamCounters

log = logging.getLogger("dashboard.rates")

#: The lease's default key (``ACKBOARD_SAMPLER_LEASE_KEY`` sets another: one per deployment
#: when several deployments, each with its own database, share one Redis).
#: The event each tick publishes on ``queue_core.keys.EVENTS_CHANNEL`` (``{"type":
#: "rates", "stream": "", "at": <tick time>}``; ``dashboard.live.broadcaster`` hears it).
RATES_EVENT = "rates"
#: Streams whose counters one pipeline reads (two round trips each chunk).
CHUNK = 1_000
#: Most seconds of discovery steps one tick spends (the rest waits for the next tick).
DISCOVERY_BUDGET_S = 2.0
#: Seconds between two rollup-and-prune passes.
ROLLUP_EVERY_S = 60.0

#: Renew the key if this token holds it; else take it if nobody does. 1 = held.
_LEASE = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Lease:
    """The one-sampler-per-deployment lease: ``hold()`` takes or renews it (one round trip)."""

    def __init__(self, client: Client, *, ttl_ms: int, key: str = RATES_SAMPLER_LEASE_KEY) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = ttl_ms
        # host:pid:random, so an operator (or a test) can tell which process samples.
        self.token = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(8)}"

    def hold(self) -> bool:
        return bool(self.client.eval(_LEASE, 1, self.key, self.token, self.ttl_ms))

    def release(self) -> None:
        self.client.eval(_RELEASE, 1, self.key, self.token)

    def holder(self) -> str | None:
        value = self.client.get(self.key)
        return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did (None from ``tick`` when another sampler holds the lease)."""

    at: float
    streams: int
    groups: int
    rows: int
    took_s: float


#: A tier-0 row, in ``_COLUMNS`` order.
_Row = tuple[Any, ...]
_COLUMNS = (
    "tier",
    "stream",
    "group",
    "at",
    "entries_added",
    "entries_read",
    "lag",
    "pending",
    "oldest_pending_age_s",
    "oldest_undelivered_age_s",
    "dead_letters",
    "failures",
)


def _rows(
    counters: Sequence[StreamCounters], at: float, failures: dict[tuple[str, str], int]
) -> list[_Row]:
    """Tier-0 rows: one per group, then one for its stream (group "": the worst lag and
    ages over its groups, their pending and failures summed; no entries read)."""
    now_ms = int(at * 1000)
    rows: list[_Row] = []
    for s in counters:
        worst_pending: float | None = None
        worst_waiting: float | None = None
        lags = []
        pending = 0
        stream_failures = 0
        for g in s.groups:
            info = g.info
            oldest = (
                None
                if g.oldest_pending_ms is None
                else max(0.0, (now_ms - g.oldest_pending_ms) / 1000)
            )
            waiting = info.undelivered_age_s(now_ms)
            group_failures = failures.get((s.name, info.name), 0)
            stream_failures += group_failures
            pending += info.pending
            if info.lag is not None:
                lags.append(info.lag)
            if oldest is not None:
                worst_pending = max(worst_pending or 0.0, oldest)
            if waiting is not None:
                worst_waiting = max(worst_waiting or 0.0, waiting)
            rows.append(
                (0, s.name, info.name, at, s.entries_added, info.entries_read, info.lag,
                 info.pending, oldest, waiting, s.dlq_length, group_failures)
            )  # fmt: skip
        known_lag = len(lags) == len(s.groups) and bool(lags)
        rows.append(
            (0, s.name, "", at, s.entries_added, None, max(lags) if known_lag else None,
             pending, worst_pending, worst_waiting, s.dlq_length,
             stream_failures + failures.get((s.name, ""), 0))
        )  # fmt: skip
    return rows


def _insert(rows: list[_Row]) -> None:
    """One ``executemany`` INSERT in one transaction (one commit): the ORM's bulk_create
    spent about as long building statements as the whole Redis read of a tick."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(name) for name in _COLUMNS)  # the fields' own column names
    marks = ", ".join(["%s"] * len(_COLUMNS))
    sql = f"INSERT INTO {quote(RateSample._meta.db_table)} ({columns}) VALUES ({marks})"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def _failures_since(since: float, until: float) -> dict[tuple[str, str], int]:
    """Failures indexed with ``since < failed_at <= until``, per (stream, group): one
    grouped query on the failure index's time index."""
    from dashboard.models import IndexedFailure

    found = (
        IndexedFailure.objects.filter(
            failed_at__gt=datetime.fromtimestamp(since, UTC),
            failed_at__lte=datetime.fromtimestamp(until, UTC),
        )
        .values_list("stream", "group")
        .annotate(n=Count("id"))
    )
    return {(stream, group): n for stream, group, n in found}


# --- downsampling and retention -------------------------------------------------------------

_ROLL_FIELDS = (
    "stream",
    "group",
    "at",
    "entries_added",
    "entries_read",
    "lag",
    "pending",
    "oldest_pending_age_s",
    "oldest_undelivered_age_s",
    "dead_letters",
    "failures",
)


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def downsample(level: int, rows: Sequence[tuple[Any, ...]]) -> list[RateSample]:
    """Tier ``level`` rows from rows of the tier below (``_ROLL_FIELDS`` order, by time):
    per series and bucket, the LAST sample's counters and point-in-time figures (its
    ``at`` too), the MAX of the ages and the SUM of the failures."""
    step = TIERS[level].step_s
    buckets: dict[tuple[str, str, int], RateSample] = {}
    for row in rows:
        stream, group, at, added, read, lag, pending, oldest, waiting, dead, failures = row
        key = (stream, group, int(at // step))
        got = buckets.get(key)
        if got is None:
            got = buckets[key] = RateSample(tier=level, stream=stream, group=group, failures=None)
            got.oldest_pending_age_s = got.oldest_undelivered_age_s = None
        got.at = at
        got.entries_added, got.entries_read, got.lag = added, read, lag
        got.pending, got.dead_letters = pending, dead
        got.oldest_pending_age_s = _max(got.oldest_pending_age_s, oldest)
        got.oldest_undelivered_age_s = _max(got.oldest_undelivered_age_s, waiting)
        if failures is not None:
            got.failures = (got.failures or 0) + failures
    return list(buckets.values())


def rollup(level: int, *, since: float, until: float) -> int:
    """Rebuild tier ``level``'s buckets within [since, until) (whole buckets) from the tier
    below: the old rows of those buckets are replaced, so running it twice is harmless."""
    step = TIERS[level].step_s
    since = since // step * step
    until = until // step * step
    if until <= since:
        return 0
    rows = list(
        RateSample.objects.filter(tier=level - 1, at__gte=since, at__lt=until)
        .order_by("at")
        .values_list(*_ROLL_FIELDS)
    )
    made = downsample(level, rows)
    with transaction.atomic():
        RateSample.objects.filter(tier=level, at__gte=since, at__lt=until).delete()
        RateSample.objects.bulk_create(made, batch_size=500)
    return len(made)


def prune(now: float) -> int:
    """Delete every tier's rows older than its retention."""
    deleted = 0
    for tier in TIERS:
        n, _ = RateSample.objects.filter(
            tier=tier.level, at__lt=now - tier_keep_s(tier.level)
        ).delete()
        deleted += n
    return deleted


# --- the sampler ------------------------------------------------------------------------------


class Sampler:
    """One sampler loop's state: its lease, its stream index and how far it rolled up."""

    def __init__(
        self,
        *,
        client: Client | None = None,
        interval_s: float | None = None,
        lease_key: str | None = None,
    ) -> None:
        self.client = client if client is not None else get_redis()
        self.interval_s = float(interval_s or settings.ACKBOARD_SAMPLER_INTERVAL_S)
        ttl_ms = max(1000, int(3000 * self.interval_s))
        key = lease_key or str(settings.ACKBOARD_SAMPLER_LEASE_KEY)
        self.lease = Lease(self.client, ttl_ms=ttl_ms, key=key)
        self.index = StreamIndex(
            patterns=tuple(settings.ACKBOARD_STREAMS),
            cap=int(settings.ACKBOARD_MAX_STREAMS),
            refresh_s=float(settings.ACKBOARD_INDEX_REFRESH_S),
        )
        self.last_at: float | None = None
        self.rolled_at: float | None = None
        self.ticks = 0

    def names(self) -> tuple[str, ...]:
        if self.index.due(figures=False):
            self.index.build(client=self.client, budget_s=DISCOVERY_BUDGET_S, figures=False)
        return self.index.snapshot().names

    def tick(self, now: float | None = None) -> TickReport | None:
        """One sample of every stream, if this loop holds the lease (else None)."""
        if not self.lease.hold():
            self.last_at = None  # another sampler's rows come between: restart the window
            return None
        began = time.perf_counter()
        names = self.names()
        counters: list[StreamCounters] = []
        for i in range(0, len(names), CHUNK):
            counters += selectors.stream_counters(client=self.client, streams=names[i : i + CHUNK])
        at = clock.now_s() if now is None else now
        since = self.last_at if self.last_at is not None else at - self.interval_s
        rows = _rows(counters, at, _failures_since(since, at))
        _insert(rows)
        # One PUBLISH a tick: every web process's broadcaster re-renders its open stream
        # and group pages, so their charts get this point even where nothing changed.
        event_publish(client=self.client, type=RATES_EVENT, stream="", at=at)
        self.last_at = at
        self.ticks += 1
        if self.rolled_at is None or at - self.rolled_at >= ROLLUP_EVERY_S:
            self.maintain(at)
        return TickReport(
            at=at,
            streams=len(counters),
            groups=sum(len(c.groups) for c in counters),
            rows=len(rows),
            took_s=time.perf_counter() - began,
        )

    def maintain(self, now: float) -> None:
        """Roll up the closed buckets of tiers 1 and 2 not rolled up yet, then prune."""
        for tier in TIERS[1:]:
            done = RateSample.objects.filter(tier=tier.level).aggregate(m=Max("at"))["m"]
            # From the bucket after the newest rolled row, else from the tier below's start.
            if done is not None:
                since = (done // tier.step_s + 1) * tier.step_s
            else:
                first = RateSample.objects.filter(tier=tier.level - 1).order_by("at").first()
                if first is None:
                    continue
                since = first.at
            since = max(since, now - tier_keep_s(tier.level - 1))
            rollup(tier.level, since=since, until=now)
        prune(now)
        self.rolled_at = now

    def stop(self) -> None:
        with contextlib.suppress(redis.RedisError, RedisClusterException):
            self.lease.release()


# --- the thread web processes run ----------------------------------------------------------


class _SamplerThread(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="ackboard-rates-sampler", daemon=True)
        self.wake = threading.Event()
        self.stopping = False
        self.sampler: Sampler | None = None

    def run(self) -> None:
        run_loop(self)


def run_loop(state: _SamplerThread) -> None:
    """Tick every interval until ``state.stopping``; Redis errors back off and retry."""
    failures = 0
    while not state.stopping:
        began = time.monotonic()
        try:
            close_old_connections()
            if state.sampler is None:
                state.sampler = Sampler()
            state.sampler.tick()
            failures = 0
            took = time.monotonic() - began
            # At least as long as the tick took: a tick longer than the interval (tens of
            # thousands of streams) never has the sampler use more than half a core.
            pause = max(state.sampler.interval_s - took, took)
        except (redis.RedisError, RedisClusterException) as exc:
            failures += 1
            pause = min(60.0, float(settings.ACKBOARD_SAMPLER_INTERVAL_S) * 2**failures)
            log.warning("rates sampler tick failed (retrying in %.1fs): %s", pause, exc)
        except Exception:  # a bug or a database error must not end the loop
            log.exception("rates sampler tick failed")
            pause = 10.0
        # On PostgreSQL the connection goes back to the pool for the wait (CONN_MAX_AGE 0);
        # a persistent SQLite connection is kept.
        close_old_connections()
        state.wake.wait(pause)
        state.wake.clear()
    if state.sampler is not None:
        state.sampler.stop()
    connections.close_all()  # this thread's own database connections


_lock = threading.Lock()
_thread: _SamplerThread | None = None


def ensure_started() -> bool:
    """Start this process's sampler thread unless it runs (True when it runs now)."""
    global _thread
    if not settings.ACKBOARD_SAMPLER:
        return False
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = _SamplerThread()
            _thread.start()
            atexit.unregister(_stop_at_exit)
            atexit.register(_stop_at_exit)  # a server that exits hands the lease over at once
    return True


def stop(timeout: float = 10.0) -> None:
    """Stop this process's sampler thread (tests, process exit); its lease is released."""
    global _thread
    with _lock:
        thread, _thread = _thread, None
    if thread is not None:
        thread.stopping = True
        thread.wake.set()
        thread.join(timeout)


def _stop_at_exit() -> None:
    stop(2.0)


def _on_request(**kwargs: object) -> None:
    thread = _thread
    if settings.ACKBOARD_SAMPLER and (thread is None or not thread.is_alive()):
        ensure_started()


def connect_web_start() -> None:
    """Start the sampler with a web process's first request (``DashboardConfig.ready``)."""
    request_started.connect(_on_request, dispatch_uid="ackboard-rates-sampler")
