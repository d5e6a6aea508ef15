"""The read pages: Overview, Stream, Group, Entry and Dead-letter.

Each page has a ``<page>_context(*, client, …) -> dict`` that the view and the live
broadcaster both call, so a pushed partial and a reloaded page never differ. The Stream,
Entry and Dead-letter contexts are here; the Overview's is in
``dashboard.views.overview_page`` and the Group's in ``dashboard.views.group_page``.
Contexts hold dataclasses only (selector results and the small view rows below), never
raw Redis replies. Views are thin: parse and validate the URL and query
(``dashboard.views.page_input``: 400 for malformed input, 404 for names outside the
allowlist or that do not exist), call one context function, render the page or, for
htmx, the partial the request targets.

This module never writes to Redis. Payload text goes through ``dashboard.views.payloads`` and
is escaped by the templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from dashboard.access.permissions import queues_view_required
from dashboard.access.scopes import access_of
from dashboard.insight import failure_index, stream_index
from dashboard.runtime.connection import get_redis
from dashboard.views import charts, edit_replay, payloads
from dashboard.views.group_page import group_context
from dashboard.views.overview_page import overview_context
from dashboard.views.page_input import (
    bad_input,
    check_visible,
    fields_from_param,
    min_idle_param,
    optional_id,
    valid_id,
    valid_name,
)
from queue_core import selectors
from queue_core.connection import Client
from queue_core.keys import MAX_NAME_LENGTH
from queue_core.tracing import trace_id_parse
from queue_core.types import DeadLetterRow, EntryGroupState, PendingRow, StreamEntry
from queue_core.validation import entry_id_ms

# --- view rows --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryRow:
    """A stream entry in the stream page's newest-first table."""

    id: str
    preview: str


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


# --- contexts (shared with the live surfaces, dashboard.live.registry) -----------------


def _entry_rows(stream: str, entries: tuple[StreamEntry, ...]) -> list[EntryRow]:
    return [EntryRow(id=e.id, preview=payloads.preview(e.fields, stream=stream)) for e in entries]


def stream_context(*, client: Client, stream: str, before: str | None = None) -> dict[str, Any]:
    """Facts, groups and the newest entries of ``stream``: one round trip."""
    check_visible(stream)
    detail = selectors.stream_detail(client=client, stream=stream, before=before)
    if detail is None:
        raise Http404("No such stream.")
    return {
        "stream": stream,
        "info": detail.info,
        "groups": detail.groups,
        "entries": _entry_rows(stream, detail.entries.entries),
        "entry_page": detail.entries,
        **charts.stream_rates_context(stream=stream),  # rates: SQL only
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
    check_visible(stream)
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
        "fields": payloads.fields_page(detail.entry.fields, start=fields_from, stream=stream)
        if detail.entry
        else [],
        "states": views,
        "dlq_scanned": found.scanned if found is not None else 0,
        "failures": failures,
        "trace_id": _trace_id_of(detail.entry.fields) if detail.entry else "",
    }


def _trace_id_of(fields: tuple[tuple[bytes, bytes], ...]) -> str:
    """The trace id in the entry's ``ACKBOARD_TRACE_FIELD`` (a ``traceparent``), or "" ."""
    name = settings.ACKBOARD_TRACE_FIELD.encode()
    return next((trace_id_parse(value) for key, value in fields if key == name), "")


def dlq_context(*, client: Client, stream: str, before: str | None = None) -> dict[str, Any]:
    """A newest-first page of the stream's dead-letter stream: one round trip."""
    check_visible(stream)
    page = selectors.dead_letter_page(client=client, stream=stream, before=before)
    if page is None:
        raise Http404("No such stream or dead-letter stream.")
    budget = payloads.DecodeBudget()  # 50 rows of 2 MB documents must not take 20 s
    rows = [
        DeadLetterRowView(
            row=row,
            preview=payloads.preview(row.entry.fields, stream=stream),
            fields=payloads.fields_page(
                row.entry.fields, count=payloads.DLQ_ROW_FIELDS, budget=budget, stream=stream
            ),
        )
        for row in page.rows
    ]
    edits = edit_replay.dlq_edit_context(client=client, stream=stream, dlq_ids=[r.id for r in rows])
    return {"stream": stream, "page": page, "rows": rows, **edits}


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


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
@bad_input
def overview(request: HttpRequest) -> HttpResponse:
    try:
        query = stream_index.OverviewQuery.parse(request.GET)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    reach = access_of(request.user).reach()  # only the streams the user may read
    context = overview_context(client=get_redis(), view=query.encode(), reach=reach)
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
@bad_input
def stream_detail(request: HttpRequest, stream: str) -> HttpResponse:
    stream = valid_name(stream, "stream")
    before = optional_id(request, "before")
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
@bad_input
def group_detail(request: HttpRequest, stream: str, group: str) -> HttpResponse:
    stream = valid_name(stream, "stream")
    group = valid_name(group, "group")
    consumer = request.GET.get("consumer", "").strip()
    if len(consumer) > MAX_NAME_LENGTH:
        raise BadRequest("That consumer name is too long.")
    context = group_context(
        client=get_redis(),
        stream=stream,
        group=group,
        start=optional_id(request, "start"),
        consumer=consumer,
        min_idle_s=min_idle_param(request),
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
@bad_input
def entry_detail(request: HttpRequest, stream: str, entry_id: str) -> HttpResponse:
    stream = valid_name(stream, "stream")
    context = entry_context(
        client=get_redis(),
        stream=stream,
        entry_id=valid_id(entry_id),
        fields_from=fields_from_param(request),
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
@bad_input
def dlq(request: HttpRequest, stream: str) -> HttpResponse:
    stream = valid_name(stream, "stream")
    context = dlq_context(client=get_redis(), stream=stream, before=optional_id(request, "before"))
    return _render(
        request, "dashboard/dlq.html", context, partials=("dlq-table",), default="dlq-table"
    )
