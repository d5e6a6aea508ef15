"""The Group page's context: the group's header, health, pending table and fleet.

``group_context`` feeds both the view (``dashboard.views.pages.group_detail``) and the
live broadcaster (``dashboard.live.registry``), so a pushed partial and a reloaded page
never differ. The pending table's rows (``PendingRowView``, built by
``pending_rows_view``) and its filters (``PendingFilters``) are also what an action's
answer re-renders a row with (``dashboard.views.actions``). Rows hold dataclasses only,
never raw Redis replies.

This module never writes to Redis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.http import Http404

from dashboard.display.durations import since_ms
from dashboard.insight import failure_index
from dashboard.insight import health as verdicts
from dashboard.insight.fleet import fleet_context, fleet_queue
from dashboard.insight.health import Verdict
from dashboard.views import charts, payloads
from dashboard.views.page_input import check_visible
from queue_core import clock, later, selectors
from queue_core import health as queue_health
from queue_core.connection import Client
from queue_core.health import GroupHealth
from queue_core.types import GroupDetail, PendingPage, PendingRow

#: Idle presets offered by the group page's filter, in seconds.
IDLE_PRESETS = (0, 10, 60, 300, 1800, 3600, 86400)


@dataclass(frozen=True, slots=True)
class PendingRowView:
    """A pending-table row: the pending entry, its payload preview and last failure.
    ``delivered_ms`` is when it was last delivered, rounded up to the second
    (``ackboard.since_ms``): the table shows its idle time from that instant."""

    id: str
    consumer: str
    idle_ms: int
    deliveries: int
    preview: str
    payload_missing: bool
    last_failure: str
    delivered_ms: int = 0
    #: When Retry later makes it due (epoch ms), while it is parked; else None.
    due_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PendingFilters:
    consumer: str
    min_idle_s: int
    start: str

    @property
    def active(self) -> bool:
        return bool(self.consumer or self.min_idle_s)

    def query(self, start: str | None) -> str:
        """The query string of this filter from ``start`` (for pager links)."""
        params = {
            k: v
            for k, v in (
                ("consumer", self.consumer),
                ("min_idle", str(self.min_idle_s) if self.min_idle_s else ""),
                ("start", start or ""),
            )
            if v
        }
        return urlencode(params)


def group_page_verdict(*, detail: GroupDetail, liveness: GroupHealth, now_ms: int) -> Verdict:
    """The group page's badge (``dashboard.insight.health``, the one rule), with its failures in
    the last hour counted up to the "failing" mark (one indexed SQL query, at most
    ``FAILING_PER_HOUR`` index entries read)."""
    failures = failure_index.failures_count_capped(
        stream=detail.stream.name,
        group=detail.group.name,
        since=datetime.fromtimestamp(now_ms / 1000, UTC) - timedelta(hours=1),
        cap=verdicts.FAILING_PER_HOUR,
    )
    return verdicts.group_verdict(
        liveness=liveness,
        failures_last_hour=failures,
        oldest_pending_ms=detail.oldest_pending_ms,
        consumers=detail.group.consumers,
        lag=detail.group.lag,
        dlq_length=detail.stream.dlq_length,
        now_ms=now_ms,
    )


def pending_rows_view(
    rows: tuple[PendingRow, ...],
    failures: dict[str, str],
    *,
    now_ms: int | None = None,
    stream: str | None = None,
    due: Mapping[str, int] | None = None,
) -> list[PendingRowView]:
    """``now_ms``: when ``rows`` were read (their idle times are relative to it);
    ``stream``: whose decoders the previews use; ``due``: the parked rows' due times
    (``later_due_of``)."""
    now = clock.now_ms() if now_ms is None else now_ms
    due = due or {}
    return [
        PendingRowView(
            id=r.id,
            consumer=r.consumer,
            idle_ms=r.idle_ms,
            deliveries=r.deliveries,
            preview=payloads.preview(r.entry.fields, stream=stream) if r.entry is not None else "",
            payload_missing=r.entry is None,
            last_failure=failures.get(r.id, ""),
            delivered_ms=since_ms(r.idle_ms, now),
            due_ms=due.get(r.id) if r.consumer == later.LATER_CONSUMER else None,
        )
        for r in rows
    ]


def later_due_of(
    client: Client, stream: str, group: str, rows: Sequence[PendingRow]
) -> dict[str, int]:
    """The due times of the rows parked by Retry later (owned by its parking consumer):
    one ZMSCORE, none when no row is parked."""
    parked = [r.id for r in rows if r.consumer == later.LATER_CONSUMER]
    return later.later_due(client=client, stream=stream, group=group, ids=parked)


def _pending_context(
    page: PendingPage,
    failures: dict[str, str],
    filters: PendingFilters,
    stream: str,
    due: Mapping[str, int],
) -> dict[str, Any]:
    """The pending table: its rows with their last failures and due times, the filters
    and the pager's links."""
    return {
        "rows": pending_rows_view(page.rows, failures, stream=stream, due=due),
        "page": page,
        "filters": filters,
        "next_query": filters.query(page.next_start) if page.next_start else "",
        "first_query": filters.query(None),
        "idle_presets": IDLE_PRESETS,
        "scan_budget": selectors.IDLE_SCAN_BUDGET,
    }


def group_context(
    *,
    client: Client,
    stream: str,
    group: str,
    start: str | None = None,
    consumer: str = "",
    min_idle_s: int = 0,
) -> dict[str, Any]:
    """The group page: one round trip for the header, a pending page (XPENDING with the
    payloads beside it) and the fleet's pause and heartbeats (``selectors.group_page``);
    a second only for what that did not cover (sparse payloads, the idle filter's
    windows, the first undelivered entry of a lagging group); last failures (SQL).
    Its health (``queue_core.health``) comes from the header's XINFO CONSUMERS."""
    check_visible(stream)
    read = selectors.group_page(
        client=client,
        stream=stream,
        group=group,
        start=start,
        consumer=consumer or None,
        min_idle_ms=min_idle_s * 1000,
        also=lambda pipe: fleet_queue(pipe, stream, group),
    )
    detail, page = read.detail, read.page
    if detail is None:
        raise Http404("No such stream or consumer group.")
    if page is None:
        raise Http404("No such consumer group.")
    failures = failure_index.last_failures(
        stream=stream, group=group, entry_ids=[r.id for r in page.rows]
    )
    filters = PendingFilters(consumer=consumer, min_idle_s=min_idle_s, start=start or "")
    now = clock.now_ms()
    liveness = queue_health.detail_health(
        detail=detail, stuck_after_ms=settings.ACKBOARD_STUCK_AFTER_MS, now_ms=now
    )
    return {
        "stream": stream,
        "group": group,
        "detail": detail,
        "health": liveness,
        # The consumer table's idle times start from it (``since_span``).
        "now_ms": now,
        # The badge: the same rule, reason and markup as the overview's.
        "verdict": group_page_verdict(detail=detail, liveness=liveness, now_ms=now),
        "snapshot_id": detail.stream.last_generated_id,
        **_pending_context(
            page, failures, filters, stream, later_due_of(client, stream, group, page.rows)
        ),
        # Fleet control: the pause and the workers' heartbeats (one round trip).
        **fleet_context(
            client=client, stream=stream, group=group, consumers=detail.consumers, replies=read.also
        ),
        # Rates: the drain estimate and the chart's live point (SQL only).
        **charts.group_rates_context(stream=stream, group=group),
    }
