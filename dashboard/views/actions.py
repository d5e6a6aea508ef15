"""Operator actions: the action table and its views.

Owns ``ACTIONS``, one row per action on one pending entry (Retry, Claim, Dead-letter,
Acknowledge, Retry later), on one dead-lettered entry (Replay, Delete), on a whole dead-letter
stream (Purge), on a consumer group (Pause, Resume, Retire idle consumers, Delete group,
Reset position), on one consumer (Retire), on a stream (Create group, Trim, Produce)
or on one entry of a stream in no group (Duplicate). A row
(``dashboard.views.action_table.Action``) is the action's one declaration: its name (URL
slug, audit name, CLI subcommand, API action), what it acts on (``action_table.KINDS``),
the form that parses its POST, the one service call that does it with the message it
answers, its permission (``dashboard.access.permissions`` derives its map from the rows),
its explanation (``{% action_explain %}``) and its subcommand (``Action.cli``). The rows
live in ``dashboard.views.entry_actions`` (entries and dead letters),
``dashboard.views.later_actions`` (Retry later), ``dashboard.views.fleet_actions`` (the
fleet), ``dashboard.views.admin_actions`` (group administration) and
``dashboard.views.produce`` (Produce, Duplicate): their ``ROWS``, merged here. The views
look the row up and read
the state before (``_prepare``, one branch per kind); ``dashboard.views.action_runner``
does the rest (permission, form, call, audit, answer), for bulk (``dashboard.views.bulk``)
too. ``action_run`` is the same path without an HTML request: ``manage.py ackboard`` and
the JSON API (``dashboard.views.api``) call it with the acting user and get the
``ActionResult`` a button would have answered with, audited the same way.

It never writes to Redis (the services in ``queue_core`` do, atomically) and reads it
only through ``queue_core.selectors``: the state before is one round trip (the entry's
XPENDING and XRANGE, the dead letter's XRANGE, a group's XPENDING summary, or a
consumer's group header), plus what a row's ``before`` reads, for the audit row and to
tell an unknown target (404) from one that changed (409). A pending entry is read once
per action: the call gets what the read found (``Call.seen``: a terminal's Claim takes
its guard from it), and a Retry or Claim from a pending-table row re-renders the row
from it and what the service reported, for one SQL query and no further round trip.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import redis
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from dashboard.access import permissions
from dashboard.access.scopes import may
from dashboard.display.converters import name_problem
from dashboard.insight.failure_index import last_failures
from dashboard.runtime.connection import get_redis
from dashboard.views import admin_actions, entry_actions, fleet_actions, later_actions, produce
from dashboard.views.action_runner import (
    ActionRequest,
    ActionResult,
    BadRequest,
    Operator,
    action_request,
    audit,
    check_group,
    check_id,
    check_stream,
    denied,
    form_data,
    respond,
    run,
)
from dashboard.views.action_table import TARGET_KINDS, Action, Call, target_request
from dashboard.views.forms import MAX_CONSUMER_LENGTH, ActionForm, PurgeForm, Target
from dashboard.views.group_page import PendingFilters, later_due_of, pending_rows_view
from dashboard.views.htmx import HtmxHttpRequest
from queue_core import selectors
from queue_core.types import PendingEntry, PendingPage, PendingRow

#: The modules whose ``ROWS`` make the table, in its order: pending entries and dead
#: letters (Retry, Claim, Dead-letter, Acknowledge, Replay, Delete, Purge), Retry later,
#: fleet control (Pause, Resume, Retire, Retire idle consumers), group administration
#: (Create/Delete group, Reset position, Trim), then Produce and Duplicate.
ROW_MODULES = (entry_actions, later_actions, fleet_actions, admin_actions, produce)
_table: dict[str, Action] = {}
#: Every action by name. Everything derived from the rows reads it when it needs it
#: (never a copy made at import), so a row is in effect wherever its table is.
ACTIONS: Mapping[str, Action] = _table


def actions_build() -> Mapping[str, Action]:
    """Build ``ACTIONS`` (in place) from the ``ROWS`` of ``ROW_MODULES`` and register their
    permissions (``dashboard.access.permissions``). Run once, when this module loads; a
    test that declares a row of its own runs it again. Two rows with one name are an
    error: the name is the route's slug, the audit action and the subcommand."""
    rows = [row for module in ROW_MODULES for row in module.ROWS]
    names = [row.name for row in rows]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"two action rows named {', '.join(twice)}")
    _table.clear()
    _table.update({row.name: row for row in rows})
    permissions.actions_register({name: row.permission for name, row in _table.items()})
    return ACTIONS


actions_build()


def _action(name: str, on: str) -> Action:
    row = ACTIONS.get(name)
    if row is None or row.on != on:
        raise Http404("no such action")
    return row


def _attempt(
    user: Operator,
    row: Action,
    form: ActionForm,
    req: ActionRequest,
    *,
    state_before: StateRead,
    target: str = "",
    fill: Fill | None = None,
) -> ActionResult:
    """One row's attempt: the permission, the state before, the form, the service.
    ``target`` is what ``Call.target`` says (a consumer row's consumer); ``fill`` gives
    the form fields the caller left blank from what the state read found (``action_run``)."""
    if not may(user, row.permission, req.stream):
        if row.on == "dead-letter":
            # The refusal's audit row names the group the dead letter belongs to (the
            # state read fills it in); a dead letter that cannot be read names none.
            with contextlib.suppress(BadRequest, redis.RedisError, ValueError):
                state_before()
        if row.on == "consumer":
            # The audit row has no ids: its state names the consumer the POST aimed at.
            outcome = ActionResult(
                "refused", f"You do not have permission to {req.action}.", status=403
            )
            audit(user, req, outcome, {"consumer": target[:255]})
            return outcome
        return denied(user, req)
    seen: list[PendingEntry | None] = [None]

    def state() -> dict[str, Any]:
        before, seen[0] = state_before()
        return before

    def call() -> ActionResult:
        filled = form if fill is None else _filled(row, form, fill(seen[0]))
        data = form_data(filled)
        operator = user.get_username()
        on = Call(
            req=req, data=data, operator=operator, client=get_redis(), target=target, seen=seen[0]
        )
        return row.run(on)

    return run(user, req, state_before=state, call=call)


def _filled(row: Action, form: ActionForm, looked: Mapping[str, str]) -> ActionForm:
    """A pending row's form again, with ``looked`` in the fields the caller left blank."""
    if not looked:
        return form
    posted: Mapping[str, Any] = form.data
    return row.form({**posted, **{k: v for k, v in looked.items() if not posted.get(k)}})


#: A kind's state-before read: the state for the audit row, and what it found that the
#: call and the answer reuse (a "pending" row's entry; None for the other kinds), so the
#: entry is read once per action.
StateRead = Callable[[], tuple[dict[str, Any], PendingEntry | None]]
#: Form fields a caller left blank, from what the state read found (Claim's guard).
Fill = Callable[[PendingEntry | None], Mapping[str, str]]
Prepared = tuple[ActionForm, ActionRequest, StateRead]


def _prepare(
    request: HtmxHttpRequest | None,
    row: Action,
    data: Mapping[str, Any],
    *,
    stream: str,
    group: str,
    target_id: str,
    channel: str = "button",
) -> Prepared:
    """The row's form over ``data``, the audit fields and the state-before read, by kind.

    ``target_id`` is the pending entry's id, the dead letter's, or a "consumer" row's
    consumer; a dead letter's group is its origin's (read with its state), and Purge has
    neither.
    """
    if row.on in TARGET_KINDS:
        return _prepare_target(
            request, row, data, stream=stream, group=group, consumer=target_id, channel=channel
        )
    if row.on == "dead-letters":
        return _prepare_purge(request, row, data, stream=stream, channel=channel)
    if row.on == "entry":
        return _prepare_entry(
            request, row, data, stream=stream, entry_id=target_id, channel=channel
        )
    pending = row.on == "pending"
    form = row.form(data)
    req = action_request(
        request,
        form,
        action=row.name,
        stream=stream,
        group=group if pending else "",
        ids=[target_id[:64]],
        default_place="row" if pending else "dlq-row",
        home="group" if pending else "dlq",
        channel=channel,
    )
    if pending:
        return form, req, lambda: _pending_state(stream, group, target_id)
    return form, req, lambda: (_dead_letter_state(req, target_id), None)


def _prepare_purge(
    request: HtmxHttpRequest | None,
    row: Action,
    data: Mapping[str, Any],
    *,
    stream: str,
    channel: str,
) -> Prepared:
    """Purge's form, audit fields and state: the dead-letter stream as the page saw it."""
    purge = PurgeForm(data, stream=stream)
    req = action_request(
        request,
        purge,
        action=row.name,
        stream=stream,
        group="",
        ids=[],
        default_place="dlq",
        channel=channel,
    )
    req.place = "dlq"  # the page reloads, wherever the form was

    def state() -> tuple[dict[str, Any], None]:
        check_stream(stream)
        checked = form_data(purge)
        return {"length": checked["expected_length"], "newest_id": checked["newest_id"] or ""}, None

    return purge, req, state


def _prepare_entry(
    request: HtmxHttpRequest | None,
    row: Action,
    data: Mapping[str, Any],
    *,
    stream: str,
    entry_id: str,
    channel: str,
) -> Prepared:
    """An "entry" row's form, audit fields (the entry's id, no group) and state: the
    stream and id checked, then the row's own ``before`` (which reads the entry)."""
    form = row.form(data)
    req = action_request(
        request,
        form,
        action=row.name,
        stream=stream,
        group="",
        ids=[entry_id[:64]],
        default_place="entry",
        channel=channel,
    )
    req.place = "entry"

    def state() -> tuple[dict[str, Any], None]:
        check_stream(stream)
        check_id(entry_id)
        if row.before is None:
            return {}, None
        data = getattr(form, "cleaned_data", {})
        return row.before(Call(req=req, data=data, operator="", client=get_redis())), None

    return form, req, state


def check_consumer(consumer: str) -> str:
    """400 for a consumer name the dashboard cannot address (its existence is Redis's)."""
    problem = name_problem(consumer)
    if problem is not None:
        raise BadRequest(f"that consumer name cannot be used here ({problem})")
    if len(consumer) > MAX_CONSUMER_LENGTH:
        raise BadRequest(f"consumer name is longer than {MAX_CONSUMER_LENGTH} characters")
    return consumer


def _target_state(
    row: Action, form: ActionForm, req: ActionRequest, target: Target
) -> dict[str, Any]:
    """The state before of a "group", "consumer" or "stream" row: its names checked, then
    for a group its XPENDING summary (one round trip, O(1) plus O(consumers); 404 for an
    unknown group), for a consumer the group's header (``selectors.group_detail``, one
    round trip, O(consumers); 404 for a consumer not in the group), then the row's own
    ``before``. A stream's row reads nothing itself (Create group may make the stream)."""
    check_stream(target.stream)
    client = get_redis()
    state: dict[str, Any] = {}
    if row.on == "group":
        check_group(target.group)
        summary = selectors.pending_summary(client=client, stream=target.stream, group=target.group)
        if summary is None:
            raise BadRequest(f"no consumer group {target.group!r} on stream {target.stream!r}", 404)
        state["pending"] = summary.pending
    elif row.on == "consumer":
        check_group(target.group)
        check_consumer(target.consumer)
        detail = selectors.group_detail(client=client, stream=target.stream, group=target.group)
        if detail is None:
            raise BadRequest(f"no consumer group {target.group!r} on stream {target.stream!r}", 404)
        found = [c for c in detail.consumers if c.name == target.consumer]
        if not found:
            raise BadRequest(
                f"no consumer {target.consumer!r} in group {target.group!r} (retired already?)",
                404,
            )
        state.update(
            consumer=target.consumer,
            consumer_pending=found[0].pending,
            consumer_idle_ms=found[0].idle_ms,
            pending=detail.pending,
        )
    if row.before is not None:
        data = getattr(form, "cleaned_data", {})
        state.update(
            row.before(Call(req=req, data=data, operator="", client=client, target=target.consumer))
        )
    return state


def _prepare_target(
    request: HtmxHttpRequest | None,
    row: Action,
    data: Mapping[str, Any],
    *,
    stream: str,
    group: str,
    consumer: str,
    channel: str,
) -> Prepared:
    """A "group", "consumer" or "stream" row's form, audit fields and state read
    (``action_table.target_request``). A plain POST without ``next`` returns to the
    group's page, or the stream's."""
    form, req, target = target_request(
        request, row, data, stream=stream, group=group, consumer=consumer, channel=channel
    )
    if request is not None and not req.next_url and row.on == "stream":
        with contextlib.suppress(NoReverseMatch):
            req.next_url = reverse("dashboard:stream-detail", args=[stream])
    return form, req, lambda: (_target_state(row, form, req, target), None)


def action_run(
    *,
    user: Operator,
    action: str,
    stream: str,
    group: str = "",
    target_id: str = "",
    data: Mapping[str, Any],
    channel: str,
    fill: Fill | None = None,
) -> tuple[ActionRequest, ActionResult]:
    """Run one action of ``ACTIONS`` as ``user``, without an HTML request.

    The CLI's and the API's way in: the same permission, form (``data`` holds what the
    button posts), state read, guard, service call and audit row (naming ``channel``)
    as the button's. ``target_id`` is the entry's or dead letter's id, or a consumer
    row's consumer ("" for a group's or a stream's row). ``fill`` gives a pending row's
    fields that ``data`` left blank from the entry its state read found, as a page shows
    it before its button posts (a terminal's Claim takes its guard from it). Returns the
    audit fields (a dead letter's group filled in) and the outcome; an unknown action is
    a 404 outcome, not audited, as the route's 404 is. A Redis error is audited as
    "error" and re-raised.
    """
    row = ACTIONS.get(action)
    if row is None:
        return (
            ActionRequest(action=action, stream=stream, group=group, ids=[], channel=channel),
            ActionResult("refused", f"no action {action!r}", status=404),
        )
    form, req, state = _prepare(
        None, row, data, stream=stream, group=group, target_id=target_id, channel=channel
    )
    outcome = _attempt(user, row, form, req, state_before=state, target=target_id, fill=fill)
    return req, outcome


def _row_html(request: HttpRequest, req: ActionRequest, row: PendingRow) -> tuple[str, str]:
    """The pending-table row ``row`` (the entry after the action, as its service reported
    it) as the group page renders it, and its DOM id.

    Renders the page's own ``pending-table`` partial with this one row, so the swapped row
    and a reloaded page never differ; the response's HX-Reselect picks the row out. One
    SQL query (its last failure), no Redis read: the state read before the action gave
    the payload, and the service the owner, idle time and deliveries after.
    """
    failures = last_failures(stream=req.stream, group=req.group, entry_ids=[row.id])
    page = PendingPage(
        rows=(), start=None, next_start=None, scanned=1, scanned_to=None, budget_hit=False
    )
    context = {
        "stream": req.stream,
        "group": req.group,
        # The group page's own row view: a swapped row and a reloaded page never differ.
        "rows": pending_rows_view(
            (row,),
            failures,
            stream=req.stream,
            due=later_due_of(get_redis(), req.stream, req.group, (row,)),
        ),  # fmt: skip
        "page": page,
        "filters": PendingFilters(consumer="", min_idle_s=0, start=""),
        "snapshot_id": "",
    }
    html = render_to_string("dashboard/group.html#pending-table", context, request=request)
    return html, f"pending-{row.id}"


# --- views ----------------------------------------------------------------------------


def _pending_state(
    stream: str, group: str, entry_id: str
) -> tuple[dict[str, Any], PendingEntry | None]:
    """The entry as its group sees it (``selectors.pending_entry_fetch``, one round trip),
    for the audit row, and the entry itself, for the call and the answer: 404 for an
    unknown group, and for an entry neither pending there nor in the stream."""
    check_stream(stream)
    check_group(group)
    check_id(entry_id)
    found = selectors.pending_entry_fetch(
        client=get_redis(), stream=stream, group=group, entry_id=entry_id
    )
    if found is None:
        raise BadRequest(f"no consumer group {group!r} on stream {stream!r}", 404)
    if found.row is None:
        if not found.in_stream:
            raise BadRequest(f"no entry {entry_id} in stream {stream!r}", status=404)
        return {"pending": False}, found
    row = found.row
    state = {
        "pending": True,
        "consumer": row.consumer,
        "idle_ms": row.idle_ms,
        "deliveries": row.deliveries,
    }
    return state, found


@require_POST
@never_cache
@login_required
def entry_action(
    request: HtmxHttpRequest, stream: str, group: str, entry_id: str, action: str
) -> HttpResponse:
    """Retry, Claim, Dead-letter or Acknowledge one pending entry."""
    row = _action(action, "pending")
    form, req, state = _prepare(
        request, row, request.POST, stream=stream, group=group, target_id=entry_id
    )
    outcome = _attempt(request.user, row, form, req, state_before=state)
    # A row that stays in the pending table is re-rendered; the entry page reloads.
    stays = outcome.result == "ok" and not outcome.removed and req.place not in ("entry", "dlq")
    after = outcome.pending_row if stays else None
    return respond(
        request, req, outcome, row_html=_row_html(request, req, after) if after else None
    )


def _dead_letter_state(req: ActionRequest, dlq_id: str) -> dict[str, Any]:
    """The dead letter's origin metadata, for the audit row (and its group); 404 if gone."""
    check_stream(req.stream)
    check_id(dlq_id, "dead-letter id")
    found = selectors.dead_letter_fetch(client=get_redis(), stream=req.stream, dlq_id=dlq_id)
    if found is None:
        raise BadRequest(f"no dead-letter entry {dlq_id} (replayed or deleted already?)", 404)
    req.group = found.group
    # As the dead-letter script wrote them (it writes every one, "" when it had none).
    return {
        "origin_group": found.group,
        "origin_id": found.origin_id,
        "consumer": found.consumer,
        "deliveries": "" if found.deliveries is None else str(found.deliveries),
        "reason": found.reason,
        "operator": found.operator,
    }


@require_POST
@never_cache
@login_required
def stream_entry_action(
    request: HtmxHttpRequest, stream: str, entry_id: str, action: str
) -> HttpResponse:
    """An action on one entry of a stream, in no group: Duplicate. Its answer goes to
    the page the action names (the new entry's), else the entry page reloads."""
    row = _action(action, "entry")
    form, req, state = _prepare(
        request, row, request.POST, stream=stream, group="", target_id=entry_id
    )
    outcome = _attempt(request.user, row, form, req, state_before=state)
    return respond(request, req, outcome)


@require_POST
@never_cache
@login_required
def dlq_action(request: HtmxHttpRequest, stream: str, dlq_id: str, action: str) -> HttpResponse:
    """Replay or Delete one dead-lettered entry."""
    row = _action(action, "dead-letter")
    form, req, state = _prepare(
        request, row, request.POST, stream=stream, group="", target_id=dlq_id
    )
    outcome = _attempt(request.user, row, form, req, state_before=state)
    return respond(request, req, outcome)


@require_POST
@never_cache
@login_required
def dlq_purge(request: HtmxHttpRequest, stream: str) -> HttpResponse:
    """Empty a dead-letter stream after the operator typed the stream's name."""
    row = _action("purge", "dead-letters")
    form, req, state = _prepare(request, row, request.POST, stream=stream, group="", target_id="")
    outcome = _attempt(request.user, row, form, req, state_before=state)
    return respond(request, req, outcome)


def _target_action(
    request: HtmxHttpRequest, row: Action, *, stream: str, group: str = "", consumer: str = ""
) -> HttpResponse:
    form, req, state = _prepare(
        request, row, request.POST, stream=stream, group=group, target_id=consumer
    )
    outcome = _attempt(request.user, row, form, req, state_before=state, target=consumer)
    return respond(request, req, outcome)


@require_POST
@never_cache
@login_required
def group_action(request: HtmxHttpRequest, stream: str, group: str, action: str) -> HttpResponse:
    """An action on a consumer group: Pause, Resume, Retire idle consumers, Delete group,
    Reset position. The page reloads on success."""
    return _target_action(request, _action(action, "group"), stream=stream, group=group)


@require_POST
@never_cache
@login_required
def consumer_action(
    request: HtmxHttpRequest, stream: str, group: str, consumer: str, action: str
) -> HttpResponse:
    """An action on one consumer of a group: Retire. The page reloads on success."""
    row = _action(action, "consumer")
    return _target_action(request, row, stream=stream, group=group, consumer=consumer)


@require_POST
@never_cache
@login_required
def stream_action(request: HtmxHttpRequest, stream: str, action: str) -> HttpResponse:
    """An action on a stream: Create group, Trim. The page reloads on success."""
    return _target_action(request, _action(action, "stream"), stream=stream)
