"""The Audit page (filter, page) and its CSV export. Read-only: never writes a row."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from dashboard.access.audit import AuditFilter, audit_list
from dashboard.access.permissions import action_permissions, queues_view_required
from dashboard.access.scopes import access_of, reach_q
from dashboard.alerts.models import AUDIT_ACTIONS as ALERT_AUDIT_ACTIONS
from dashboard.models import AuditEvent
from queue_core import clock

PAGE_SIZE = 50
#: Spreadsheet apps run a cell that starts with one of these as a formula (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
CSV_COLUMNS = (
    "time",
    "user",
    "action",
    "stream",
    "group",
    "ids",
    "reason",
    "result",
    "detail",
    "new_ids",
    "state_before",
    "channel",
)


def _filters(request: HttpRequest) -> AuditFilter:
    def get(name: str) -> str:
        # NUL cannot match a stored value, and PostgreSQL refuses it in a query.
        return request.GET.get(name, "").replace("\x00", "").strip()[:1024]

    return AuditFilter(
        user=get("user"), action=get("action"), stream=get("stream"), result=get("result")
    )


def _action_choices() -> list[str]:
    singles = list(action_permissions())
    bulk = [f"bulk-{a}" for a in ("retry", "dead-letter", "acknowledge")]
    redrive = [f"redrive-{a}" for a in ("pause", "resume", "continue", "stop", "cancel")]
    others = [
        "edit-replay", "redrive", "redrive-replay", *redrive, "redrive-finished",
        *ALERT_AUDIT_ACTIONS,
    ]  # fmt: skip
    return singles + bulk + [a for a in others if a not in singles]


def _readable(request: HttpRequest, rows: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
    """The rows of streams the user may read (``dashboard.access.scopes``): a user whose
    roles reach some streams sees neither other streams' rows nor rows without a stream."""
    where = reach_q(access_of(request.user).reach())
    return rows if where is None else rows.filter(where)


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
def audit_page(request: HttpRequest) -> HttpResponse:
    filters = _filters(request)
    page = Paginator(_readable(request, audit_list(filters=filters)), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    query = request.GET.copy()
    query.pop("page", None)
    context: dict[str, Any] = {
        "page_obj": page,
        "filters": filters,
        "actions": _action_choices(),
        "results": [r.value for r in AuditEvent.Result],
        "query": query.urlencode(),
    }
    template = "dashboard/audit.html"
    if getattr(request, "htmx", False):
        template += "#audit-table"
    return render(request, template, context)


def csv_cell(value: object) -> str:
    """``value`` as CSV text that a spreadsheet shows as text and never runs as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


class _Echo:
    """A file-like object whose write returns the line, for streaming csv.writer output."""

    def write(self, value: str) -> str:
        return value


def _csv_rows(events: Iterator[AuditEvent]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for e in events:
        row = (
            e.created_at.isoformat(),
            e.username,
            e.action,
            e.stream,
            e.group,
            " ".join(e.entry_ids),
            e.reason,
            e.result,
            e.detail,
            " ".join(e.new_ids),
            json.dumps(e.state_before, sort_keys=True, default=str),
            e.channel,
        )
        yield writer.writerow([csv_cell(v) for v in row])


@require_GET
@never_cache
@queues_view_required
def audit_csv(request: HttpRequest) -> StreamingHttpResponse:
    """Every row matching the page's filters, streamed (constant memory for large exports)."""
    events = _readable(request, audit_list(filters=_filters(request))).iterator(chunk_size=500)
    response = StreamingHttpResponse(_csv_rows(events), content_type="text/csv; charset=utf-8")
    stamp = clock.now_utc().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="ackboard-audit-{stamp}.csv"'
    return response
