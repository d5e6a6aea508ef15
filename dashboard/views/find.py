"""Find entries by content and time: the payload search and "jump to time" views.

Owns ``payload_find`` (GET ``streams/<s>/find/``: one budgeted slice of
``queue_core.payload_search`` over the stream, its dead letters or a group's pending
entries, rendered as ``templates/dashboard/_find.html#find-results`` for htmx or inside
``find.html`` without it) and ``time_jump`` (GET ``streams/<s>/jump/``: a UTC time, or
a stream id, turned into the page's own position filter, then a redirect). The form
both use is ``_find.html``, included by the stream, group and dead-letter pages.

Budgets: ``ACKBOARD_SEARCH_MAX_ENTRIES`` entries and ``ACKBOARD_SEARCH_MAX_MS``
milliseconds per request (defaults 5,000 and 250), ``SEARCH_MAX_MATCHES`` matches shown
per slice; Continue resumes from the last id looked at. Redacted fields
(``ACKBOARD_REDACT_PATTERN``, and the ``ACKBOARD_REDACT_RULES`` of the stream searched)
cannot be searched: a field or JSON key whose name is redacted is refused (400), and an
redacted is refused (400), and an entry whose searched field is redacted in part (a
secret key inside its JSON) is never reported as a match, so a search cannot be used as
an oracle for a hidden value. Matches are shown through ``dashboard.views.payloads.preview``
(escaped, redacted, cut) like every table row.

It never writes anywhere. Costs: see ``queue_core.payload_search``; the jump reads nothing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import redis
from django.conf import settings
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from dashboard.access.permissions import queues_view_required
from dashboard.display import decoders
from dashboard.runtime.connection import get_redis
from dashboard.views import payloads
from dashboard.views.page_input import bad_input, check_visible, valid_name
from queue_core import payload_search
from queue_core.errors import not_a_group
from queue_core.keys import MAX_NAME_LENGTH, CrossSlotName
from queue_core.payload_search import SearchQuery, SearchSlice
from queue_core.validation import ID_PART_MAX, entry_id_after, entry_id_check, entry_id_ms

WHERE = ("stream", "dlq", "pending")
SEARCH_MAX_MATCHES = 50
_TIME = re.compile(r"\A(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?Z?\Z")
_ID = re.compile(r"\A\d{1,20}(-\d{1,20})?\Z")


def _redacted(name: str, stream: str) -> bool:
    return payloads.field_view(name.encode(), b"", stream=stream).redacted


def _query(request: HttpRequest, stream: str) -> SearchQuery:
    field = request.GET.get("field", "")
    op = request.GET.get("op", "contains")
    path = request.GET.get("path", "")
    try:
        query = payload_search.search_query(
            field=field, op=op, value=request.GET.get("value", ""), path=path
        )
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if _redacted(field, stream) or any(
        isinstance(s, str) and _redacted(s, stream) for s in query.path
    ):
        raise BadRequest("That field is redacted on this stream: it cannot be searched.")
    return query


def _where(request: HttpRequest) -> tuple[str, str]:
    where = request.GET.get("where", "stream")
    if where not in WHERE:
        raise BadRequest(f"Search where? One of {', '.join(WHERE)}.")
    group = request.GET.get("group", "") if where == "pending" else ""
    if where == "pending":
        if not group:
            raise BadRequest("Say which group's pending entries to search.")
        valid_name(group, "group")
        if len(group) > MAX_NAME_LENGTH:
            raise BadRequest("That group name is too long.")
    return where, group


def _after(request: HttpRequest) -> str | None:
    after = request.GET.get("after", "").strip()
    if not after:
        return None
    try:
        return entry_id_check(after, what="'after' id")
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _seen(request: HttpRequest) -> int:
    seen = request.GET.get("seen", "0")
    return int(seen) if seen.isdigit() and len(seen) < 16 else 0


def _visible(stream: str, query: SearchQuery, fields: tuple[tuple[bytes, bytes], ...]) -> bool:
    """A match whose searched field is redacted in part (as the stream's decoders show it)
    is not shown (no oracle)."""
    return not any(
        n == query.field and payloads.field_view(n, v, stream=stream).redacted for n, v in fields
    )


def _decode(stream: str, query: SearchQuery) -> payload_search.Decode:
    """The searched field's decoders (``ACKBOARD_DECODERS``, else auto) as the search's
    ``decode``: the decoded value, or ``UNDECODED`` when none applies."""
    steps = payloads.decoder_steps(stream, query.field.decode("utf-8", "replace"))
    descriptors = getattr(settings, "ACKBOARD_PROTO_DESCRIPTORS", "")

    def decode(value: bytes) -> Any:
        try:
            found = decoders.search_value(
                value, steps, max_bytes=payload_search.JSON_MAX_BYTES, descriptors=descriptors
            )
        except Exception:  # a decoder's bug costs one value's match, never the search
            return payload_search.UNDECODED
        return payload_search.UNDECODED if found is decoders.NOTHING else found

    return decode


def _href(stream: str, where: str, entry_id: str) -> str:
    """Where a match opens: the entry's page, or the dead-letter page from that entry."""
    if where == "dlq":
        before = entry_id_after(entry_id)
        return reverse("dashboard:dlq", args=[stream]) + "?" + urlencode({"before": before})
    return reverse("dashboard:entry-detail", args=[stream, entry_id])


def _search(
    stream: str,
    where: str,
    group: str,
    query: SearchQuery,
    after: str | None,
    budget: dict[str, int],
) -> SearchSlice:
    """One slice of the search over the stream, its dead letters or a group's pending."""
    client = get_redis()
    decode = _decode(stream, query)
    try:
        if where == "stream":
            return payload_search.stream_search(
                client=client, stream=stream, query=query, after=after, decode=decode, **budget
            )
        if where == "dlq":
            return payload_search.dead_letter_search(
                client=client, stream=stream, query=query, after=after, decode=decode, **budget
            )
        return payload_search.pending_search(
            client=client,
            stream=stream,
            group=group,
            query=query,
            after=after,
            decode=decode,
            **budget,
        )
    except CrossSlotName as exc:
        raise BadRequest(str(exc)) from None
    except redis.ResponseError as exc:
        if not_a_group(exc):
            raise Http404("No such consumer group.") from None
        raise


def find_context(
    *, stream: str, where: str, group: str, query: SearchQuery, after: str | None, seen: int
) -> dict[str, Any]:
    """One slice of the search and what the results partial shows."""
    check_visible(stream)
    budget = {
        "max_entries": int(getattr(settings, "ACKBOARD_SEARCH_MAX_ENTRIES", 5000)),
        "max_ms": int(getattr(settings, "ACKBOARD_SEARCH_MAX_MS", 250)),
        "max_matches": SEARCH_MAX_MATCHES,
    }
    found = _search(stream, where, group, query, after, budget)
    matches = [
        {
            "id": e.id,
            "preview": payloads.preview(e.fields, stream=stream),
            "href": _href(stream, where, e.id),
        }
        for e in found.matches
        if _visible(stream, query, e.fields)
    ]
    params = {
        "where": where,
        "group": group,
        "field": query.field.decode(),
        "op": query.op,
        "path": query.path_text,
        "value": query.value,
    }
    more = {**params, "after": found.cursor or "", "seen": str(seen + found.scanned)}
    return {
        "stream": stream,
        "where": where,
        "group": group,
        "query": query,
        "params": params,
        "found": found,
        "matches": matches,
        "scanned_total": seen + found.scanned,
        "continue_query": "" if found.done else urlencode(more),
        "budget": budget,
    }


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
@bad_input
def payload_find(request: HttpRequest, stream: str) -> HttpResponse:
    """One budgeted slice of a payload search; Continue asks for the next."""
    stream = valid_name(stream, "stream")
    where, group = _where(request)
    context = find_context(
        stream=stream,
        where=where,
        group=group,
        query=_query(request, stream),
        after=_after(request),
        seen=_seen(request),
    )
    if getattr(request, "htmx", False):
        return render(request, "dashboard/_find.html#find-results", context)
    return render(request, "dashboard/find.html", context)


def time_to_ms(text: str) -> int:
    """A UTC time (``2026-12-01T21:30``, seconds and milliseconds optional, a trailing Z
    allowed) or epoch milliseconds or a stream id's ms part, as epoch milliseconds.
    Raises ValueError saying what is expected."""
    text = text.strip()
    if _ID.match(text):
        ms = entry_id_ms(text)
        if ms > ID_PART_MAX:
            raise ValueError("that id or time is out of range")
        return ms
    match = _TIME.match(text)
    if match is None:
        raise ValueError("give a UTC time like 2026-12-01T21:30:00, or a stream id")
    year, month, day, hour, minute = (int(match[i]) for i in range(1, 6))
    second = int(match[6] or 0)
    milli = int((match[7] or "0").ljust(3, "0"))
    try:
        at = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"that is not a valid time ({exc})") from None
    ms = int(at.timestamp()) * 1000 + milli
    if ms < 0:
        raise ValueError("stream ids start at 1970-01-01")
    return ms


@require_GET
@never_cache
@queues_view_required
@bad_input
def time_jump(request: HttpRequest, stream: str) -> HttpResponse:
    """Open the stream, dead-letter or pending page at a time: the stream and dead-letter
    pages (newest first) at the newest entry before it (``before=<ms>-0``), the pending
    page at the first pending entry at or after it (its ``start`` filter). The URL ends
    with the table's id, so the browser shows the table it jumped in, not the page's top."""
    stream = valid_name(stream, "stream")
    where, group = _where(request)
    try:
        ms = time_to_ms(request.GET.get("at", ""))
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    check_visible(stream)
    if where == "stream":
        url = (
            reverse("dashboard:stream-detail", args=[stream])
            + "?"
            + urlencode({"before": f"{ms}-0"})
            + "#entry-table"
        )
    elif where == "dlq":
        url = reverse("dashboard:dlq", args=[stream]) + "?" + urlencode({"before": f"{ms}-0"})
        url += "#dlq-table"
    else:
        params = {"start": f"{ms - 1}-{ID_PART_MAX}"} if ms > 0 else {}
        url = reverse("dashboard:group-detail", args=[stream, group])
        url += ("?" + urlencode(params) if params else "") + "#pending-table"
    return HttpResponseRedirect(url)
