"""The read pages: Overview, Stream, Group, Entry and Dead-letter.

Each page has a ``<page>_context(*, client, …) -> dict`` that the view and the live
broadcaster both call, so a pushed partial and a reloaded page never differ. Contexts
hold dataclasses only (selector results and the small view rows below), never raw Redis
replies. Views are thin: parse and validate the URL and query (400 for malformed input,
404 for names outside the allowlist or that do not exist), call one context function,
render the page or, for htmx, the partial the request targets.

This module never writes to Redis. Payload text goes through ``dashboard.payloads`` and
is escaped by the templates.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from dashboard import failure_index, payloads, stream_index
from dashboard.connection import get_redis
from dashboard.converters import name_problem
from dashboard.fleet import fleet_context, fleet_queue
from dashboard.permissions import queues_view_required
from dashboard.templatetags.ackboard import human_ms, since_ms
from dashboard.templatetags.ackboard_actions import retry_idle_ms
from dashboard.templatetags.ackboard_fragments import NO_STORE
from dashboard.templatetags.ackboard_rows import pending_rows_shown
from dashboard.views import admin_actions, charts, edit_replay
from queue_core import health as queue_health
from queue_core import selectors
from queue_core.connection import Client
from queue_core.health import GroupHealth, GroupState, StreamHealth
from queue_core.keys import MAX_NAME_LENGTH, stream_visible
from queue_core.types import (
    ConsumerInfo,
    DeadLetterRow,
    EntryGroupState,
    PendingRow,
    StreamEntry,
    StreamSummary,
)
from queue_core.validation import MAX_IDLE_MS, entry_id_check

#: An entry added longer ago than this and still pending asks for attention (amber). It
#: is not "stuck": an old entry may just have been delivered from a backlog. "Stuck" and
#: "no live consumer" come from the consumers (queue_core.health, ACKBOARD_STUCK_AFTER_MS).
OLD_PENDING_MS = 5 * 60 * 1000
#: Failures in the last hour at or above this mark a stream "failing" (red), below it amber.
FAILING_PER_HOUR = 100
#: A group this far behind with no consumer is flagged.
_DIGITS = re.compile(r"\A\d{1,15}\Z")
#: Idle presets offered by the group page's filter, in seconds.
IDLE_PRESETS = (0, 10, 60, 300, 1800, 3600, 86400)


# --- view rows --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Health:
    """A stream's badge: ``level`` is ok, warn, bad or idle; ``reasons`` go in the title."""

    level: str
    label: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class OverviewRow:
    summary: StreamSummary
    failures_last_hour: int
    health: Health
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


# --- health -----------------------------------------------------------------------------


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def liveness_reason(group: GroupHealth) -> str:
    """One line on why ``group`` is flagged (for badge titles and the group page)."""
    window = human_ms(group.stuck_after_ms)
    parts = []
    if group.no_live_consumer:
        parts.append(f"no consumer seen in {window} while entries wait")
    if group.stuck:
        holders = group.dead_holders
        held = _plural(group.stuck_entries, "entry", "entries")
        who = _plural(len(holders), "consumer", "consumers")
        parts.append(f"{held} held by {who} not seen in {window}")
    return f"group {group.group}: " + "; ".join(parts)


def stream_health(
    *, summary: StreamSummary, liveness: StreamHealth, failures_last_hour: int, now_ms: int
) -> Health:
    """The overview badge of one stream, worst reason first: its groups' liveness (from
    Redis alone, whoever wrote the workers), then failures from the index."""
    bad = [(g.state.value, liveness_reason(g)) for g in liveness.flagged]
    warn: list[str] = []
    if failures_last_hour >= FAILING_PER_HOUR:
        bad.append(("failing", f"{failures_last_hour} failures in the last hour"))
    elif failures_last_hour:
        warn.append(f"{failures_last_hour} failures in the last hour")
    oldest = summary.oldest_pending_ms
    if oldest is not None and now_ms - oldest > OLD_PENDING_MS:
        warn.append(f"the oldest pending entry was added {human_ms(now_ms - oldest)} ago")
    if summary.dlq_length:
        warn.append(f"{summary.dlq_length} dead-lettered")
    flagged = {g.group for g in liveness.flagged}
    for g in summary.group_stats:
        if g.consumers == 0 and (g.pending or g.lag) and g.name not in flagged:
            warn.append(f"group {g.name} has work but no consumers")
    if bad:
        return Health("bad", bad[0][0], tuple(reason for _, reason in bad) + tuple(warn))
    if warn:
        return Health("warn", "attention", tuple(warn))
    if not summary.groups:
        return Health("idle", "no groups", ("nobody consumes this stream",))
    return Health("ok", "ok", ("no stuck groups, failures or dead letters",))


# --- contexts (shared with the live surfaces, dashboard.live.registry) -----------------


def _now_ms() -> int:
    return int(time.time() * 1000)


def _check_visible(stream: str) -> None:
    """404 for a stream the allowlist hides, and for companions (they live under a stream)."""
    if not stream_visible(stream, tuple(settings.ACKBOARD_STREAMS)):
        raise Http404("No such stream here.")


#: Health badge levels, worst first: the order of the overview's "health" sort.
_LEVEL_RANK = {"bad": 0, "warn": 1, "ok": 2, "idle": 3}


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
        liveness = queue_health.summary_health(
            summary=s, stuck_after_ms=stuck_after_ms, now_ms=now_ms
        )
        badge = stream_health(summary=s, liveness=liveness, failures_last_hour=0, now_ms=now_ms)
        rank = _LEVEL_RANK[badge.level]
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
    (``dashboard.stream_index``; no SCAN on a request once it is built, filtering and
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
    # One grouped query on the failure index; no Redis reads, whatever the stream count.
    failures = failure_index.failures_count_since(
        streams=[s.name for s in summaries],
        since=timezone.now() - timedelta(hours=1),
    )
    rows = []
    for s in summaries:
        liveness = queue_health.summary_health(
            summary=s, stuck_after_ms=settings.ACKBOARD_STUCK_AFTER_MS, now_ms=now_ms
        )
        count = failures.get(s.name, 0)
        badge = stream_health(summary=s, liveness=liveness, failures_last_hour=count, now_ms=now_ms)
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
    health = queue_health.detail_health(
        detail=detail, stuck_after_ms=settings.ACKBOARD_STUCK_AFTER_MS, now_ms=now
    )
    return {
        "stream": stream,
        "group": group,
        "detail": detail,
        "health": health,
        # The consumer table's idle times start from it (``since_span``).
        "now_ms": now,
        "health_ok": health.state is GroupState.OK,
        "health_reason": "" if health.state is GroupState.OK else liveness_reason(health),
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


#: Bumped when the group page's content shows something ``group_content_key`` does not
#: list (a new value, or a new way of showing one).
_GROUP_CONTENT_VERSION = "group-content-1"
#: ``group_context``'s keys: each is in the key below, whole or as it is shown. A new key
#: fails loudly until it is added there.
GROUP_CONTEXT_KEYS = frozenset({
    "stream", "group", "detail", "health", "now_ms", "health_ok", "health_reason",
    "snapshot_id", "rows", "page", "filters", "next_query", "first_query", "idle_presets",
    "scan_budget", "fleet", "rates",
})  # fmt: skip


def _consumer_shown(info: ConsumerInfo, now_ms: int) -> tuple[Any, ...]:
    """A consumer as the page shows it: its idle and inactive times are the instants they
    started, to the second (``consumer_rows``'s ``since_span``), not durations that grow
    with every request."""
    inactive = info.inactive_ms
    return (
        info.name,
        info.pending,
        since_ms(info.idle_ms, now_ms),
        inactive if inactive is None or inactive < 0 else since_ms(inactive, now_ms),
    )


def group_content_key(context: dict[str, Any], *, reset: Any = None) -> str:
    """A digest of everything the group page shows (group.html, reused whole while it is
    unchanged: base.html's ``{% fragment "page" page_key … %}``, which adds the request's
    path, user and permissions, and puts the request's own CSRF token and clock in).

    Every ``group_context`` value is in it as it is, except the ones that change with
    each request while the page shows them the same: ``now_ms`` (only the consumer table
    reads it, to turn idle times into instants), the consumers' idle and inactive times
    (shown as the instants they started, to the second), the pending rows (as the pending
    table's key lists them: ``ackboard_rows.pending_table_key``) and the page's raw rows
    (the same rows). Then ``reset``: the last position reset (Undo), for those who may
    administer the group (the template reads it by itself). The one time-dependent text,
    how long the oldest undelivered entry has waited (``lag_age``), makes the content
    ``NO_STORE`` while the group lags. A value added to the context fails here until it
    is listed (``GROUP_CONTEXT_KEYS``).
    """
    unknown = set(context) ^ GROUP_CONTEXT_KEYS
    if unknown:
        raise ValueError(f"group_content_key: list {sorted(unknown)} in the key")
    detail, health = context["detail"], context["health"]
    if detail.oldest_undelivered_ms is not None:
        return NO_STORE
    now = context["now_ms"]
    due_ms = retry_idle_ms()
    page = context["page"]
    parts = (
        _GROUP_CONTENT_VERSION,
        context["stream"], context["group"],
        replace(detail, consumers=tuple(_consumer_shown(c, now) for c in detail.consumers)),
        replace(health, consumers=tuple(
            (c.seen, *_consumer_shown(c.info, now)) for c in health.consumers
        )),
        context["health_ok"], context["health_reason"], context["snapshot_id"],
        pending_rows_shown(context["rows"], due_ms),
        replace(page, rows=()),
        context["filters"], context["next_query"], context["first_query"],
        context["idle_presets"], context["scan_budget"], context["fleet"], context["rates"],
        due_ms, reset,
    )  # fmt: skip
    return hashlib.blake2b(repr(parts).encode(), digest_size=20).hexdigest()


@dataclass(frozen=True, slots=True)
class GroupStateView:
    """The entry page's row for one group (``row`` is set when it is pending there)."""

    group: str
    state: str
    row: PendingRow | None


def entry_context(*, client: Client, stream: str, entry_id: str) -> dict[str, Any]:
    """One entry: fields, its state in each group (two round trips), failure history (SQL)."""
    _check_visible(stream)
    detail = selectors.entry_detail(client=client, stream=stream, entry_id=entry_id)
    if detail is None:
        raise Http404("No such entry.")
    states: tuple[EntryGroupState, ...] = detail.groups
    return {
        "stream": stream,
        "entry_id": entry_id,
        "detail": detail,
        "fields": payloads.fields_view(detail.entry.fields) if detail.entry else [],
        "states": [GroupStateView(s.group, s.state, s.pending_row) for s in states],
        "failures": failure_index.failure_history(stream=stream, entry_id=entry_id),
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
            fields=payloads.fields_view(row.entry.fields, budget=budget),
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
    # The whole page may be reused (base.html's {% fragment "page" %}), not while a flash
    # message waits to be shown (it is shown once, by the rendering that reads it).
    if not getattr(request, "htmx", False) and not messages.get_messages(request):
        reset = (
            admin_actions.last_reset(stream=stream, group=group)
            if request.user.has_perm("dashboard.administer_group")
            else None
        )
        context["page_key"] = group_content_key(context, reset=reset)
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
    context = entry_context(client=get_redis(), stream=stream, entry_id=_id(entry_id))
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
