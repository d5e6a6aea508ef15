"""The read pages: Overview, Stream, Group, Entry and Dead-letter.

Each page has a ``<page>_context(*, client, …) -> dict`` that the view and the live
broadcaster both call, so a pushed partial and a reloaded page never differ. Contexts
hold dataclasses only (selector results and the small view rows below), never raw Redis
replies. Views are thin: parse and validate the URL and query (400 for malformed input,
404 for names outside the allowlist or that do not exist), call one context function,
render the page or, for htmx, the partial the request targets.

This module never writes to Redis. Payload text goes through ``dashboard.views.payloads`` and
is escaped by the templates.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import wraps
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from dashboard.access.permissions import queues_view_required
from dashboard.display.converters import name_problem
from dashboard.display.durations import since_ms
from dashboard.insight import failure_index, stream_index
from dashboard.insight import health as verdicts
from dashboard.insight.fleet import fleet_context, fleet_queue
from dashboard.insight.health import StreamVerdict, Verdict
from dashboard.runtime.connection import get_redis
from dashboard.views import charts, edit_replay, payloads
from queue_core import health as queue_health
from queue_core import selectors
from queue_core.connection import Client
from queue_core.health import GroupHealth, StreamHealth
from queue_core.keys import MAX_NAME_LENGTH, stream_visible
from queue_core.types import (
    DeadLetterRow,
    EntryGroupState,
    GroupDetail,
    PendingRow,
    StreamEntry,
    StreamSummary,
)
from queue_core.validation import MAX_IDLE_MS, entry_id_check, entry_id_ms

_DIGITS = re.compile(r"\A\d{1,15}\Z")
#: Idle presets offered by the group page's filter, in seconds.
IDLE_PRESETS = (0, 10, 60, 300, 1800, 3600, 86400)


# --- view rows --------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class EntryRow:
    """A stream entry in the stream page's newest-first table."""

    id: str
    preview: str


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
        from urllib.parse import urlencode

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


@dataclass(frozen=True, slots=True)
class DeadLetterRowView:
    row: DeadLetterRow
    preview: str
    fields: list[payloads.FieldView]

    @property
    def id(self) -> str:
        return self.row.id

    @property
    def last_error_adds(self) -> bool:
        """Whether the last error says more than the reason, so the row shows both: not
        when it is empty or the reason already holds it (a permanent failure's reason
        repeats its message: "permanent failure: 550 …" and "PermanentFailure: 550 …")."""
        error, reason = self.row.last_error.strip(), self.row.reason.strip()
        if not error:
            return False
        message = error.split(": ", 1)[1] if ": " in error else error
        return message.strip() not in reason


# --- health -----------------------------------------------------------------------------


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


def group_page_verdict(*, detail: GroupDetail, liveness: GroupHealth, now_ms: int) -> Verdict:
    """The group page's badge (``dashboard.insight.health``, the one rule), with its failures in
    the last hour counted up to the "failing" mark (one indexed SQL query, at most
    ``FAILING_PER_HOUR`` index entries read)."""
    failures = failure_index.failures_count_capped(
        stream=detail.stream.name,
        group=detail.group.name,
        since=timezone.now() - timedelta(hours=1),
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


# --- contexts (shared with the live surfaces, dashboard.live.registry) -----------------


def _now_ms() -> int:
    return int(time.time() * 1000)


def _check_visible(stream: str) -> None:
    """404 for a stream the allowlist hides, and for companions (they live under a stream)."""
    if not stream_visible(stream, tuple(settings.ACKBOARD_STREAMS)):
        raise Http404("No such stream here.")


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
    now_ms = _now_ms()

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
    return None if at is None else max(0, int(time.time() - at))


def overview_page_names(*, view: str = "") -> tuple[str, ...]:
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
    return stream_index.overview_page(index=index, query=query, size=size).names


def overview_context(*, client: Client, view: str = "") -> dict[str, Any]:
    """One page of the visible streams with their health, for the view ``view`` (a
    canonical query string, ``stream_index.OverviewQuery``: name filter, sort, page).

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
    now_ms = _now_ms()
    page = stream_index.overview_page(
        index=index, query=query, size=settings.ACKBOARD_OVERVIEW_PAGE_SIZE
    )
    summaries = selectors.stream_summaries(client=client, streams=page.names)
    index.remember(summaries)
    # One grouped query on the failure index (per group: health is per group; summed for
    # the failures column); no Redis reads, whatever the stream count.
    by_group = failure_index.failures_count_by_group(
        streams=[s.name for s in summaries],
        since=timezone.now() - timedelta(hours=1),
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
        "figures_missing": max(0, len(snap.names) - index.summarized()),
        "prev_query": query.encode(page=page.page - 1) if page.page > 1 else None,
        "next_query": query.encode(page=page.page + 1) if page.page < page.pages else None,
    }


def _entry_rows(entries: tuple[StreamEntry, ...]) -> list[EntryRow]:
    return [EntryRow(id=e.id, preview=payloads.preview(e.fields)) for e in entries]


def stream_context(*, client: Client, stream: str, before: str | None = None) -> dict[str, Any]:
    """Facts, groups and the newest entries of ``stream``: one round trip."""
    _check_visible(stream)
    detail = selectors.stream_detail(client=client, stream=stream, before=before)
    if detail is None:
        raise Http404("No such stream.")
    return {
        "stream": stream,
        "info": detail.info,
        "groups": detail.groups,
        "entries": _entry_rows(detail.entries.entries),
        "entry_page": detail.entries,
        **charts.stream_rates_context(stream=stream),  # rates: SQL only
    }


def pending_rows_view(
    rows: tuple[PendingRow, ...], failures: dict[str, str], *, now_ms: int | None = None
) -> list[PendingRowView]:
    """``now_ms``: when ``rows`` were read (their idle times are relative to it)."""
    now = _now_ms() if now_ms is None else now_ms
    return [
        PendingRowView(
            id=r.id,
            consumer=r.consumer,
            idle_ms=r.idle_ms,
            deliveries=r.deliveries,
            preview=payloads.preview(r.entry.fields) if r.entry is not None else "",
            payload_missing=r.entry is None,
            last_failure=failures.get(r.id, ""),
            delivered_ms=since_ms(r.idle_ms, now),
        )
        for r in rows
    ]


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
    _check_visible(stream)
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
    now = _now_ms()
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
        "rows": pending_rows_view(page.rows, failures),
        "page": page,
        "filters": filters,
        "next_query": filters.query(page.next_start) if page.next_start else "",
        "first_query": filters.query(None),
        "idle_presets": IDLE_PRESETS,
        "scan_budget": selectors.IDLE_SCAN_BUDGET,
        # Fleet control: the pause and the workers' heartbeats (one round trip).
        **fleet_context(
            client=client,
            stream=stream,
            group=group,
            consumers=detail.consumers,
            replies=read.also,
        ),
        # Rates: the drain estimate and the chart's live point (SQL only).
        **charts.group_rates_context(stream=stream, group=group),
    }


@dataclass(frozen=True, slots=True)
class GroupStateView:
    """The entry page's row for one group (``row`` is set when it is pending there).

    ``state`` is ``pending``, ``waiting``, ``dead-lettered`` (``dlq_id`` is its dead
    letter) or ``acked``; an ``acked`` row with ``dlq_unsure`` set was looked for in the
    dead-letter stream only in part (``selectors.entry_dead_letters``' budget)."""

    group: str
    state: str
    row: PendingRow | None
    dlq_id: str | None = None
    dlq_unsure: bool = False

    @property
    def dlq_before(self) -> str:
        """The dead-letter page's ``before`` that opens at ``dlq_id`` (newest first)."""
        if not self.dlq_id:
            return ""
        ms, _, seq = self.dlq_id.partition("-")
        return f"{ms}-{int(seq or 0) + 1}"


#: A worker stamps a failure with its own clock, Redis stamps the dead letter that
#: follows with its own: the search starts this long before the last failure.
CLOCK_SKEW_MS = 60_000


def _dead_letter_since_ms(entry_id: str, groups: list[str], failures: list[Any]) -> int:
    """The earliest instant a dead letter of the entry from any of ``groups`` can carry:
    the entry's own time, or for a group with recorded failures its last failure (a
    worker moves an entry after its last failed attempt), less ``CLOCK_SKEW_MS``."""
    entry_ms = entry_id_ms(entry_id)
    last: dict[str, int] = {}
    for f in failures:
        last[f.group] = max(last.get(f.group, 0), int(f.failed_at.timestamp() * 1000))
    starts = [last[g] - CLOCK_SKEW_MS if g in last else entry_ms for g in groups]
    return max(entry_ms, min(starts))


def entry_context(
    *, client: Client, stream: str, entry_id: str, fields_from: int = 0
) -> dict[str, Any]:
    """One entry: a page of its fields from ``fields_from`` (``payloads.fields_page``: at
    most ``PAGE_FIELDS`` fields and ``PAGE_FIELD_CHARS`` characters of their text, however
    large the entry), its state in each group (two round trips), failure history (SQL).

    A group that has delivered the entry and holds it no longer either acknowledged it or
    dead-lettered it: only then, a bounded read of the dead letters moved since the
    latest instant the move can have come after tells which (``selectors.
    entry_dead_letters``: usually one round trip, at most ``ENTRY_DLQ_BUDGET`` dead
    letters, never the whole DLQ)."""
    _check_visible(stream)
    detail = selectors.entry_detail(client=client, stream=stream, entry_id=entry_id)
    if detail is None:
        raise Http404("No such entry.")
    states: tuple[EntryGroupState, ...] = detail.groups
    failures = failure_index.failure_history(stream=stream, entry_id=entry_id)
    done = [s.group for s in states if s.state == "acked"]
    found = (
        selectors.entry_dead_letters(
            client=client,
            stream=stream,
            entry_id=entry_id,
            since_ms=_dead_letter_since_ms(entry_id, done, failures),
            groups=done,
        )
        if done
        else None
    )
    views = []
    for s in states:
        dlq_id = found.in_group(s.group) if found is not None and s.state == "acked" else None
        views.append(
            GroupStateView(
                s.group,
                "dead-lettered" if dlq_id else s.state,
                s.pending_row,
                dlq_id=dlq_id,
                dlq_unsure=found is not None and not found.complete and not dlq_id,
            )
        )
    return {
        "stream": stream,
        "entry_id": entry_id,
        "detail": detail,
        "fields": payloads.fields_page(detail.entry.fields, start=fields_from)
        if detail.entry
        else [],
        "states": views,
        "dlq_scanned": found.scanned if found is not None else 0,
        "failures": failures,
    }


def dlq_context(*, client: Client, stream: str, before: str | None = None) -> dict[str, Any]:
    """A newest-first page of the stream's dead-letter stream: one round trip."""
    _check_visible(stream)
    page = selectors.dead_letter_page(client=client, stream=stream, before=before)
    if page is None:
        raise Http404("No such stream or dead-letter stream.")
    budget = payloads.DecodeBudget()  # 50 rows of 2 MB documents must not take 20 s
    rows = [
        DeadLetterRowView(
            row=row,
            preview=payloads.preview(row.entry.fields),
            fields=payloads.fields_page(
                row.entry.fields, count=payloads.DLQ_ROW_FIELDS, budget=budget
            ),
        )
        for row in page.rows
    ]
    edits = edit_replay.dlq_edit_context(client=client, stream=stream, dlq_ids=[r.id for r in rows])
    return {"stream": stream, "page": page, "rows": rows, **edits}


# --- input ------------------------------------------------------------------------------


def _name(value: str, what: str) -> str:
    problem = name_problem(value)
    if problem is not None:
        raise BadRequest(f"That {what} name cannot be opened here ({problem}).")
    return value


def _id(value: str, what: str = "entry id") -> str:
    try:
        return entry_id_check(value, what=what)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _optional_id(request: HttpRequest, param: str) -> str | None:
    value = request.GET.get(param, "").strip()
    return _id(value, f"'{param}' id") if value else None


def _fields_from(request: HttpRequest) -> int:
    """``?fields_from=N``: the entry page's first field shown (0-based; 0 when absent)."""
    value = request.GET.get("fields_from", "").strip()
    if not value:
        return 0
    if not _DIGITS.match(value) or len(value) > 9:
        raise BadRequest("fields_from must be a whole number of fields.")
    return int(value)


def _min_idle_s(request: HttpRequest) -> int:
    value = request.GET.get("min_idle", "").strip()
    if not value:
        return 0
    if not _DIGITS.match(value) or int(value) * 1000 > MAX_IDLE_MS:
        raise BadRequest("Minimum idle must be a whole number of seconds.")
    return int(value)


def _render(
    request: HttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    partials: tuple[str, ...],
    default: str | None,
) -> HttpResponse:
    """The page, or for htmx the partial whose id the request targets (else ``default``)."""
    if getattr(request, "htmx", False):
        target = request.htmx.target  # type: ignore[attr-defined]
        name = target if target in partials else default
        if name:
            template = f"{template}#{name}"
    return render(request, template, context)


# --- views ------------------------------------------------------------------------------


def _bad_input(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Malformed input gets the styled 400 page with the reason (Django's own 400
    handler renders without the request or the message)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except BadRequest as exc:
            return render(request, "400.html", {"exception": str(exc)}, status=400)

    return wrapper


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
@_bad_input
def overview(request: HttpRequest) -> HttpResponse:
    try:
        query = stream_index.OverviewQuery.parse(request.GET)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    context = overview_context(client=get_redis(), view=query.encode())
    return _render(
        request,
        "dashboard/overview.html",
        context,
        partials=("overview-view", "stream-table"),
        default=None,
    )


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
@_bad_input
def stream_detail(request: HttpRequest, stream: str) -> HttpResponse:
    stream = _name(stream, "stream")
    before = _optional_id(request, "before")
    context = stream_context(client=get_redis(), stream=stream, before=before)
    return _render(
        request,
        "dashboard/stream.html",
        context,
        partials=("stream-facts", "group-table", "entry-table"),
        default="entry-table",
    )


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
@_bad_input
def group_detail(request: HttpRequest, stream: str, group: str) -> HttpResponse:
    stream = _name(stream, "stream")
    group = _name(group, "group")
    consumer = request.GET.get("consumer", "").strip()
    if len(consumer) > MAX_NAME_LENGTH:
        raise BadRequest("That consumer name is too long.")
    context = group_context(
        client=get_redis(),
        stream=stream,
        group=group,
        start=_optional_id(request, "start"),
        consumer=consumer,
        min_idle_s=_min_idle_s(request),
    )
    return _render(
        request,
        "dashboard/group.html",
        context,
        partials=("group-summary", "consumer-table", "pending-table"),
        default="pending-table",
    )


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
@_bad_input
def entry_detail(request: HttpRequest, stream: str, entry_id: str) -> HttpResponse:
    stream = _name(stream, "stream")
    context = entry_context(
        client=get_redis(),
        stream=stream,
        entry_id=_id(entry_id),
        fields_from=_fields_from(request),
    )
    return _render(
        request,
        "dashboard/entry.html",
        context,
        partials=("entry-state", "failure-history"),
        default=None,
    )


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
@_bad_input
def dlq(request: HttpRequest, stream: str) -> HttpResponse:
    stream = _name(stream, "stream")
    context = dlq_context(client=get_redis(), stream=stream, before=_optional_id(request, "before"))
    return _render(
        request, "dashboard/dlq.html", context, partials=("dlq-table",), default="dlq-table"
    )
