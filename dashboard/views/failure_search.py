"""The Failures page: search the failure index by stream, group, error type, text and time.

Two views of the same filters: the attempts, newest first (``failure_search``), and "by
cause" (``view=causes``: ``failure_index.causes``, one row per failure fingerprint with
the entries still pending whose last failure has it, and per group the bulk buttons that
act on them through ``dashboard.views.bulk``). The by-cause table refreshes itself every
``CAUSES_REFRESH_S`` seconds (htmx polling of this view's own partial; the page has no
socket), and each refresh is capped as the first load is.

Thin: parse the query string, call ``dashboard.insight.failure_index``, render. It never writes;
only the by-cause view reads Redis (the pending lists, bounded by ``causes``), and when
Redis is unreachable it still shows the causes, saying "pending now" is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
from django import forms
from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from dashboard.access.permissions import queues_view_required
from dashboard.access.scopes import Access, access_of
from dashboard.display.converters import name_problem
from dashboard.insight import failure_index
from dashboard.insight.failure_index import BadCursor, FailureFilter, FailurePage, search_budget_ms
from dashboard.models import IndexedFailure
from dashboard.runtime.connection import get_redis
from dashboard.views.htmx import HtmxHttpRequest
from queue_core import clock
from queue_core.keys import MAX_NAME_LENGTH, stream_visible

_TIME_FORMATS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]
#: The "within" shortcuts: a lower time bound relative to now.
WINDOWS = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}
#: The actions offered on a cause (their permissions are ``dashboard.<name>_entry``).
ACT_ON_CAUSE = ("retry", "dead_letter", "acknowledge")
#: The by-cause table refreshes itself this often (seconds).
CAUSES_REFRESH_S = 5


class FailureSearchForm(forms.Form):
    stream = forms.CharField(required=False, max_length=MAX_NAME_LENGTH)
    group = forms.CharField(required=False, max_length=MAX_NAME_LENGTH)
    error_type = forms.CharField(required=False, max_length=255)
    q = forms.CharField(required=False, max_length=200)
    window = forms.ChoiceField(
        required=False, choices=[("", "any time")] + [(w, f"last {w}") for w in WINDOWS]
    )
    since = forms.DateTimeField(required=False, input_formats=_TIME_FORMATS)
    until = forms.DateTimeField(required=False, input_formats=_TIME_FORMATS)
    before = forms.CharField(required=False, max_length=40)
    after = forms.CharField(required=False, max_length=40)
    view = forms.ChoiceField(required=False, choices=[("", "attempts"), ("causes", "by cause")])

    def clean_stream(self) -> str:
        stream: str = self.cleaned_data["stream"]
        if stream and not stream_visible(stream, tuple(settings.ACKBOARD_STREAMS)):
            raise forms.ValidationError("That stream is outside this dashboard's allowlist.")
        return stream

    def filters(self, reach: tuple[str, ...] | None = None) -> FailureFilter:
        """The search, over the streams ``reach`` lets the user read (None: all)."""
        data = self.cleaned_data
        since = data["since"]
        if since is None and data["window"]:
            since = clock.now_utc() - WINDOWS[data["window"]]
        return FailureFilter(
            stream=data["stream"],
            group=data["group"],
            error_type=data["error_type"],
            text=data["q"],
            since=since,
            until=data["until"],
            reach=reach,
        )


@dataclass(frozen=True, slots=True)
class FailureRow:
    """A result row with the links the template needs (None when a link cannot be made)."""

    failure: IndexedFailure
    entry_url: str | None
    stream_url: str | None
    group_url: str | None


def _url(name: str, **kwargs: str) -> str | None:
    # A malformed record may lack a group or a valid entry id (reverse() refuses one), or
    # name a stream or group no URL can carry: then it gets no link.
    if not all(kwargs.values()):
        return None
    if any(name_problem(kwargs[k]) for k in ("stream", "group") if k in kwargs):
        return None
    try:
        return reverse(name, kwargs=kwargs)
    except NoReverseMatch:
        return None


def _rows(page: FailurePage) -> list[FailureRow]:
    patterns = tuple(settings.ACKBOARD_STREAMS)
    return [
        FailureRow(
            failure=f,
            entry_url=_url("dashboard:entry-detail", stream=f.stream, entry_id=f.entry_id),
            stream_url=_url("dashboard:stream-detail", stream=f.stream),
            group_url=_url("dashboard:group-detail", stream=f.stream, group=f.group),
        )
        for f in page.rows
        # Rows from before an allowlist change stay hidden.
        if stream_visible(f.stream, patterns)
    ]


@require_GET
@never_cache
@vary_on_headers("HX-Request")
@queues_view_required
def failure_search(request: HtmxHttpRequest) -> HttpResponse:
    form = FailureSearchForm(request.GET)
    query = request.GET.copy()
    for key in ("before", "after"):
        query.pop(key, None)
    other = query.copy()
    other.pop("view", None)
    causes_query = other.copy()
    causes_query["view"] = "causes"
    if not any(other.get(k) for k in ("window", "since", "until")):
        # Grouping reads every row the filters leave: start from the last day (the
        # Within menu's "any time" is there, capped by the budget like any search).
        causes_query["window"] = "24h"
    context: dict[str, Any] = {
        "form": form,
        "query": query.urlencode(),
        "rows": [],
        "page": None,
        "too_broad": False,
        "budget_ms": search_budget_ms(),
        "by_cause": request.GET.get("view") == "causes",
        "attempts_query": other.urlencode(),
        "causes_query": causes_query.urlencode(),
        "refresh_s": CAUSES_REFRESH_S,
        "next_url": request.get_full_path(),
    }
    status = 200
    if not form.is_valid():
        status = 400
    elif context["by_cause"]:
        context.update(_causes_context(form, request.user))
    else:
        try:
            page = failure_index.failure_search(
                filters=form.filters(access_of(request.user).reach()),
                before=form.cleaned_data["before"] or None,
                after=form.cleaned_data["after"] or None,
            )
        except BadCursor:
            form.add_error(None, "That page link is not valid; start again from the newest.")
            status = 400
        except failure_index.SearchTooBroad:
            context["too_broad"] = True
        else:
            context.update(page=page, rows=_rows(page))
    template = "dashboard/failures.html"
    if request.htmx:
        template += "#failure-table"
        # htmx is configured not to swap 4xx; the partial carries the error text itself.
        status = 200
    return render(request, template, context, status=status)


@dataclass(frozen=True, slots=True)
class CauseGroup:
    """One (stream, group) a cause affects: its page's link and its bulk actions' URLs
    (None when no link can be made: then it has no buttons either)."""

    stream: str
    group: str
    url: str | None
    retry_url: str = ""
    dead_letter_url: str = ""
    acknowledge_url: str = ""


def _cause_group(stream: str, group: str, access: Access) -> CauseGroup:
    """A group's link, and its bulk actions' URLs where the user's permission reaches
    its stream ("" where not: no button)."""
    url = _url("dashboard:group-detail", stream=stream, group=group)
    if url is None:
        return CauseGroup(stream, group, None)
    retry = reverse("dashboard:bulk-action", args=[stream, group, "retry"])
    base = retry.removesuffix("retry/")
    urls = {
        "retry": retry,
        "dead_letter": base + "dead-letter/",
        "acknowledge": base + "acknowledge/",
    }
    for name in urls:
        if not access.may(f"dashboard.{name}_entry", stream):
            urls[name] = ""
    return CauseGroup(stream, group, url, urls["retry"], urls["dead_letter"], urls["acknowledge"])


@dataclass(frozen=True, slots=True)
class CauseRow:
    cause: failure_index.Cause
    groups: list[CauseGroup]


def _causes_context(form: FailureSearchForm, user: Any) -> dict[str, Any]:
    """The by-cause view's context: the causes (or too_broad), with their groups' links,
    and the act-on-cause snapshot (entries added after this page was made are never
    touched: a stream id is a millisecond time)."""
    patterns = tuple(settings.ACKBOARD_STREAMS)
    access = access_of(user)
    try:
        client = get_redis()
        page = failure_index.causes(filters=form.filters(access.reach()), client=client)
        pending_known = True
    except failure_index.SearchTooBroad:
        return {"too_broad": True}
    except redis.RedisError:
        page = failure_index.causes(filters=form.filters(access.reach()), client=None)
        pending_known = False
    # The same groups recur under many causes: each is linked once (reverse() is ~0.2 ms).
    groups: dict[tuple[str, str], CauseGroup] = {}
    rows = [
        CauseRow(
            cause=c,
            groups=[
                groups.get((s, g)) or groups.setdefault((s, g), _cause_group(s, g, access))
                for s, g in c.groups
                if stream_visible(s, patterns)
            ],
        )
        for c in page.causes
    ]
    # A cause's buttons act per group: shown where the permission reaches its stream.
    can = {name: access.anywhere(f"dashboard.{name}_entry") for name in ACT_ON_CAUSE}
    return {
        "can": can,
        "can_act": any(can.values()),
        "causes": page,
        "cause_rows": rows,
        "pending_known": pending_known,
        "cause_snapshot": f"{clock.now_ms()}-0",
    }
