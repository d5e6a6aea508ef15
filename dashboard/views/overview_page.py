"""The Overview page's context: one page of the visible streams with their health.

``overview_context`` feeds both the view (``dashboard.views.pages.overview``) and the live
broadcaster (``dashboard.live.registry``), so a pushed table and a reloaded page never
differ. The stream names come from this process's stream index
(``dashboard.insight.stream_index``), whose orders by figures rank streams with
``overview_sort_keys``; rows are read fresh per page, so the cost is O(page), never
O(streams). Rows hold dataclasses only, never raw Redis replies.

This module never writes to Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest

from dashboard.insight import failure_index, stream_index
from dashboard.insight import health as verdicts
from dashboard.insight.health import StreamVerdict
from dashboard.views import charts
from queue_core import clock, selectors
from queue_core import health as queue_health
from queue_core.connection import Client
from queue_core.health import StreamHealth
from queue_core.stream_index import StreamIndex
from queue_core.types import StreamSummary
from queue_core.validation import entry_id_ms


@dataclass(frozen=True, slots=True)
class OverviewRow:
    summary: StreamSummary
    failures_last_hour: int
    #: The badge (``dashboard.insight.health``): the worst group's verdict, as its page shows it.
    health: StreamVerdict
    liveness: StreamHealth

    @property
    def name(self) -> str:
        return self.summary.name


def _summary_verdict(
    s: StreamSummary, failures: dict[str, int], stuck_after_ms: int, now_ms: int
) -> tuple[StreamHealth, StreamVerdict]:
    """An overview row's liveness and badge (``dashboard.insight.health``, the one rule)."""
    liveness = queue_health.summary_health(summary=s, stuck_after_ms=stuck_after_ms, now_ms=now_ms)
    verdict = verdicts.summary_verdict(
        liveness=liveness,
        summary_groups=[
            (
                g.name,
                g.consumers,
                g.lag,
                entry_id_ms(g.oldest_pending_id) if g.oldest_pending_id else None,
            )
            for g in s.group_stats
        ],
        failures=failures,
        dlq_length=s.dlq_length,
        now_ms=now_ms,
    )
    return liveness, verdict


#: Each stream's health rank for the "health" order, with the figures it was computed
#: from: recomputed only when the index holds new figures for the stream.
_health_ranks: dict[str, tuple[StreamSummary, int]] = {}


def overview_sort_keys() -> dict[str, stream_index.SortKey]:
    """How each order by figures ranks a stream from its cached figures (the refresher
    sorts with these, ``stream_index.orders_refresh``). Streams whose figures are not
    gathered yet come last; ties go by name. The health order uses the badge's Redis side
    (liveness, dead letters, old pending, idle groups), computed once per new figure;
    failures in the last hour come from the failure index and are shown, not ranked."""
    stuck_after_ms = settings.ACKBOARD_STUCK_AFTER_MS
    now_ms = clock.now_ms()

    def health(name: str, s: StreamSummary | None) -> tuple[object, ...]:
        if s is None:
            return (1, 0, name)
        cached = _health_ranks.get(name)
        if cached is not None and cached[0] is s:
            return (0, cached[1], name)
        _, badge = _summary_verdict(s, {}, stuck_after_ms, now_ms)
        rank = verdicts.LEVEL_RANK[badge.level]
        _health_ranks[name] = (s, rank)
        return (0, rank, name)

    def figure(value: Callable[[StreamSummary], int | None]) -> stream_index.SortKey:
        def key(name: str, s: StreamSummary | None) -> tuple[object, ...]:
            got = value(s) if s is not None else None
            return (got is None, got if got is not None else 0, name)

        return key

    return {
        "health": health,
        "lag": figure(lambda s: -s.max_lag if s.max_lag is not None else None),
        "pending": figure(lambda s: -s.pending),
        "oldest": figure(lambda s: s.oldest_pending_ms),
    }


def _age_s(at: float | None) -> int | None:
    return None if at is None else max(0, int(clock.now_s() - at))


def overview_page_names(*, view: str = "", reach: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The streams on a view's page, from this process's index alone (no Redis, no
    build): what the live broadcaster polls for an open overview. () when malformed or
    not built yet."""
    index = stream_index.index_current(create=False)
    try:
        query = stream_index.OverviewQuery.from_view(view)
    except ValueError:
        return ()
    if index is None or not index.ready:
        return ()
    size = settings.ACKBOARD_OVERVIEW_PAGE_SIZE
    return stream_index.overview_page(index=index, query=query, size=size, reach=reach).names


def _overview_rows(summaries: tuple[StreamSummary, ...], now_ms: int) -> list[OverviewRow]:
    """The page's rows with their health and failures in the last hour: one grouped query
    on the failure index (per group, as health is per group; summed for the failures
    column), no Redis reads, whatever the stream count."""
    by_group = failure_index.failures_count_by_group(
        streams=[s.name for s in summaries],
        since=datetime.fromtimestamp(now_ms / 1000, UTC) - timedelta(hours=1),
    )
    per_stream: dict[str, dict[str, int]] = {}
    for (stream, group), n in by_group.items():
        per_stream.setdefault(stream, {})[group] = n
    rows = []
    for s in summaries:
        failures = per_stream.get(s.name, {})
        count = sum(failures.values())
        liveness, badge = _summary_verdict(s, failures, settings.ACKBOARD_STUCK_AFTER_MS, now_ms)
        rows.append(
            OverviewRow(summary=s, failures_last_hour=count, health=badge, liveness=liveness)
        )
    return rows


def _unmeasured(
    index: StreamIndex,
    query: stream_index.OverviewQuery,
    reach: tuple[str, ...] | None,
) -> int:
    """Streams the user reads that an order by figures lists last (not yet measured):
    O(1) for a user who reads every stream, O(streams reached) for a scoped one, and
    only when the view is ordered by figures."""
    if query.sort == "name":
        return 0
    if reach is None:
        return max(0, len(index.snapshot().names) - index.summarized())
    return sum(1 for n in stream_index.reached_names(index, reach) if index.summary(n) is None)


def overview_context(
    *, client: Client, view: str = "", reach: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """One page of the visible streams with their health, for the view ``view`` (a
    canonical query string, ``stream_index.OverviewQuery``: name filter, sort, page), of
    the streams ``reach`` lets the user read (None: every stream, ``access.scopes``).

    Costs O(page), not O(streams): the names come from this process's stream index
    (``dashboard.insight.stream_index``; no SCAN on a request once it is built, filtering and
    ordering in memory and cached), then the page's rows are read fresh: two pipelined
    round trips (``selectors.stream_summaries``) and one SQL query for failures. Health is
    O(page + its groups + consumers) (``queue_core.health``), never O(pending). The first
    request of a process builds the index (bounded, ``stream_index.FIRST_BUILD_S``).
    """
    try:
        query = stream_index.OverviewQuery.from_view(view)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    index = stream_index.overview_index(client=client, figures=query.sort != "name")
    now_ms = clock.now_ms()
    page = stream_index.overview_page(
        index=index, query=query, size=settings.ACKBOARD_OVERVIEW_PAGE_SIZE, reach=reach
    )
    summaries = selectors.stream_summaries(client=client, streams=page.names)
    index.remember(summaries)
    rows = _overview_rows(summaries, now_ms)
    snap = index.snapshot()
    figures_age = index.summaries_age()
    return {
        "rows": rows,
        # Rates: each row's lag in time and drain estimate (one SQL query).
        "drains": charts.overview_drains(summaries=summaries),
        "now_ms": now_ms,
        "query": query,
        "view": query.encode(),
        "page": page,
        "sorts": stream_index.SORTS,
        "index": snap,
        "index_age_s": _age_s(snap.refreshed_at),
        "figures_age_s": None if figures_age is None else int(figures_age),
        # Counts of the user's streams only: a scoped user learns nothing of the others.
        "figures_missing": _unmeasured(index, query, reach),
        "companions": snap.companions if reach is None else 0,
        "prev_query": query.encode(page=page.page - 1) if page.page > 1 else None,
        "next_query": query.encode(page=page.page + 1) if page.page < page.pages else None,
    }
