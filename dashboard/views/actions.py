"""Operator actions over HTTP: check the permission, call one service, audit, respond.

Owns the write views (Retry, Claim, Dead-letter, Acknowledge, Replay, Delete, Purge and
bulk) and their responses: htmx swaps the changed row (or removes it) and shows a short
message out of band; a plain POST gets post/redirect/get. Every attempt, successful,
refused (guard or permission) or errored, writes one AuditEvent row.

It never writes to Redis itself: the services in ``queue_core`` do, atomically. The only
direct reads are one cheap XPENDING or XRANGE of the ids involved, for the audit row's
"state before" and to tell an unknown id (404) from one that changed (409).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from dashboard import payloads
from dashboard.audit import audit_record
from dashboard.connection import get_redis
from dashboard.converters import name_problem
from dashboard.failure_index import last_failures
from dashboard.permissions import DLQ_ACTIONS, ENTRY_ACTIONS, may_act
from dashboard.views.pages import PendingFilters, PendingRowView
from queue_core import bulk, selectors, services
from queue_core.keys import (
    RESERVED_PREFIX,
    CrossSlotName,
    stream_keys,
    stream_visible,
)
from queue_core.types import ActionRefused, BulkResult, PendingPage

#: Where the buttons were: a pending-table row, the entry page, a DLQ row, the DLQ page.
PLACES = ("row", "entry", "dlq-row", "dlq")
_INT = re.compile(r"\A\d{1,15}\Z")
MAX_REASON_LENGTH = services.MAX_REASON_LENGTH


class BadRequest(Exception):  # noqa: N818 - an answer, not a failure
    """The request cannot be acted on as sent: 400 (malformed) or 404 (unknown)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Outcome:
    """What one action did, for the audit row and the response."""

    result: str  # ok / refused / error
    message: str
    status: int = 200
    new_ids: list[str] = field(default_factory=list)
    #: The entry left the table it was shown in (dead-lettered, acknowledged, replayed…).
    removed: bool = False
    #: Extra state the service reported, merged into the audit row's state before.
    reported: dict[str, Any] = field(default_factory=dict)


@dataclass
class ActionRequest:
    """One parsed action request."""

    action: str
    stream: str
    group: str
    ids: list[str]
    reason: str = ""
    place: str = "row"
    next_url: str = ""
    form: Mapping[str, str] = field(default_factory=dict)


# --- parsing --------------------------------------------------------------------------


def _check_stream(stream: str) -> str:
    problem = name_problem(stream)
    if problem is not None:
        raise BadRequest(f"that stream name cannot be used here ({problem})")
    if not stream_visible(stream, tuple(settings.ACKBOARD_STREAMS)):
        raise BadRequest(f"no stream {stream!r} here", status=404)
    try:
        stream_keys(stream)
    except CrossSlotName as exc:
        raise BadRequest(str(exc)) from None
    return stream


def _check_group(group: str) -> str:
    problem = name_problem(group)
    if problem is not None:
        raise BadRequest(f"that group name cannot be used here ({problem})")
    return group


def _check_id(entry_id: str, what: str = "entry id") -> str:
    try:
        return services.entry_id_check(entry_id, what=what)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _int(form: Mapping[str, str], name: str, *, required: bool) -> int | None:
    raw = form.get(name, "").strip()
    if not raw:
        if required:
            raise BadRequest(f"{name} is required")
        return None
    if not _INT.match(raw):
        raise BadRequest(f"{name} must be a whole number")
    return int(raw)


def _next_url(request: HttpRequest) -> str:
    candidate = request.POST.get("next", "") or request.headers.get("HX-Current-URL", "")
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return ""


def _parse(
    request: HttpRequest, *, action: str, stream: str, group: str, ids: list[str]
) -> ActionRequest:
    place = request.POST.get("place", "")
    return ActionRequest(
        action=action,
        stream=stream,
        group=group,
        ids=ids,
        reason=request.POST.get("reason", "").strip()[:MAX_REASON_LENGTH],
        place=place if place in PLACES else ("dlq-row" if action in DLQ_ACTIONS else "row"),
        next_url=_next_url(request),
        form=request.POST,
    )


# --- state before (one cheap read, for the audit row) --------------------------------


def _pending_state(client: redis.Redis, stream: str, group: str, entry_id: str) -> dict[str, Any]:
    """XPENDING of one id: O(log n). An unknown stream or group is a 404."""
    try:
        rows = client.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    except redis.ResponseError as exc:
        if str(exc).startswith(("NOGROUP", "WRONGTYPE")):
            raise BadRequest(f"no consumer group {group!r} on stream {stream!r}", 404) from None
        raise
    if not rows:
        return {"pending": False}
    row = rows[0]
    return {
        "pending": True,
        "consumer": _text(row["consumer"]),
        "idle_ms": int(row["time_since_delivered"]),
        "deliveries": int(row["times_delivered"]),
    }


def _group_check(client: redis.Redis, stream: str, group: str) -> None:
    """404 unless ``group`` exists on ``stream``: one XPENDING summary, O(1)."""
    try:
        client.xpending(stream, group)
    except redis.ResponseError as exc:
        if str(exc).startswith(("NOGROUP", "WRONGTYPE")):
            raise BadRequest(f"no consumer group {group!r} on stream {stream!r}", 404) from None
        raise


def _entry_exists(client: redis.Redis, key: str, entry_id: str) -> bool:
    try:
        return bool(client.xrange(key, min=entry_id, max=entry_id, count=1))
    except redis.ResponseError:
        return False


def _dlq_state(client: redis.Redis, stream: str, dlq_id: str) -> dict[str, Any]:
    """The origin metadata of one dead-lettered entry (XRANGE of one id). Missing: 404."""
    try:
        found = client.xrange(stream_keys(stream).dlq, min=dlq_id, max=dlq_id, count=1)
    except redis.ResponseError:
        found = []
    if not found:
        raise BadRequest(f"no dead-letter entry {dlq_id} (replayed or deleted already?)", 404)
    fields = found[0][1] or {}
    state: dict[str, Any] = {}
    for name in ("origin-group", "origin-id", "consumer", "deliveries", "reason", "operator"):
        value = fields.get((RESERVED_PREFIX + name).encode())
        if value is not None:
            state[name.replace("-", "_")] = _text(value)
    return state


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# --- running one action ---------------------------------------------------------------


def _run(
    request: HttpRequest,
    req: ActionRequest,
    *,
    state_before: Callable[[], dict[str, Any]],
    call: Callable[[], Outcome],
) -> Outcome:
    """Read the state before, call the service, audit the attempt whatever happened."""
    state: dict[str, Any] = {}
    try:
        state = state_before()
        outcome = call()
    except BadRequest as exc:
        outcome = Outcome("refused", str(exc), status=exc.status)
    except ActionRefused as exc:
        outcome = Outcome("refused", str(exc), status=409)
    except CrossSlotName as exc:
        outcome = Outcome("refused", str(exc), status=409)
    except ValueError as exc:
        outcome = Outcome("refused", str(exc), status=400)
    except redis.RedisError as exc:
        # RedisErrorMiddleware answers with its banner (503); the row says it failed.
        _audit(request, req, Outcome("error", f"{type(exc).__name__}: {exc}"), state)
        raise
    _audit(request, req, outcome, state)
    return outcome


def _audit(
    request: HttpRequest, req: ActionRequest, outcome: Outcome, state: dict[str, Any]
) -> None:
    audit_record(
        user=request.user,
        action=req.action,
        stream=req.stream,
        group=req.group,
        entry_ids=req.ids,
        reason=req.reason,
        result=outcome.result,
        detail=outcome.message,
        state_before={**state, **outcome.reported},
        new_ids=outcome.new_ids,
    )


def _denied(request: HttpRequest, req: ActionRequest) -> HttpResponse:
    """A forged or stale POST from a user without the permission: audit it, change nothing."""
    outcome = Outcome("refused", f"You do not have permission to {req.action}.", status=403)
    _audit(request, req, outcome, {})
    return _respond(request, req, outcome)


# --- responses ------------------------------------------------------------------------


def _fallback_url(req: ActionRequest) -> str:
    names: list[tuple[str, list[str]]] = []
    if req.action in DLQ_ACTIONS or req.action == "purge":
        names.append(("dashboard:dlq", [req.stream]))
    elif req.group:
        names.append(("dashboard:group-detail", [req.stream, req.group]))
    names.append(("dashboard:overview", []))
    for name, args in names:
        try:
            return reverse(name, args=args)
        except NoReverseMatch:
            continue
    return "/"


def _flash(outcome: Outcome) -> list[dict[str, str]]:
    level = {"ok": "success", "refused": "warning", "error": "error"}[outcome.result]
    if outcome.status in (400, 403, 404):
        level = "error"
    return [{"level": level, "text": outcome.message}]


def _respond(
    request: HttpRequest,
    req: ActionRequest,
    outcome: Outcome,
    *,
    row_html: tuple[str, str] | None = None,
) -> HttpResponse:
    htmx = bool(getattr(request, "htmx", False))
    if not htmx:
        if outcome.status == 200:
            level = messages.SUCCESS if outcome.result == "ok" else messages.WARNING
            messages.add_message(request, level, outcome.message)
            return HttpResponseRedirect(req.next_url or _fallback_url(req), status=303)
        html = render_to_string(
            "dashboard/_action_result.html",
            {"flash": _flash(outcome), "back": req.next_url or _fallback_url(req)},
            request=request,
        )
        return HttpResponse(html, status=outcome.status)

    oob = render_to_string(
        "dashboard/_action_result.html#messages-oob", {"flash": _flash(outcome)}, request=request
    )
    response = HttpResponse(oob, status=outcome.status)
    # A dialog held live updates while it was open (its "live-hold" box, see
    # _entry_actions.html). When the row it sat in is swapped out, htmx drops the form's
    # own handlers, so the page is told to re-check: live.js re-checks on "change".
    response["HX-Trigger-After-Swap"] = "change"
    # The forms swap nothing by default (hx-swap="none"); this answer says what to replace.
    # An error keeps its target (the form), so the before-swap handler in the action
    # templates, which lets 4xx answers through, is on the event's path.
    if outcome.status != 200:
        response["HX-Reswap"] = "none"  # only the out-of-band message
        return response
    if req.place in ("entry", "dlq"):
        # The entry page and the DLQ page show state in several places: reload them,
        # carrying the message through the session.
        messages.add_message(request, messages.SUCCESS, outcome.message)
        response.content = b""
        response["HX-Refresh"] = "true"
        return response
    if outcome.removed:
        # The entry left the table: swapping the row with nothing removes it.
        response["HX-Retarget"] = "closest tr"
        response["HX-Reswap"] = "outerHTML"
        return response
    if row_html is None:
        messages.add_message(request, messages.SUCCESS, outcome.message)
        response.content = b""
        response["HX-Refresh"] = "true"
        return response
    row_markup, dom_id = row_html
    response.content = (row_markup + oob).encode()
    response["HX-Retarget"] = "closest tr"
    response["HX-Reswap"] = "outerHTML"
    response["HX-Reselect"] = f"#{dom_id}"
    return response


def _row_html(request: HttpRequest, req: ActionRequest) -> tuple[str, str] | None:
    """The pending-table row of ``req.ids[0]`` as the group page renders it, and its DOM id.

    Renders the page's own ``pending-table`` partial with this one row, so the swapped row
    and a reloaded page never differ; the response's HX-Reselect picks the row out. Two
    round trips (XPENDING of one id, XRANGE of one id) and one SQL query. None when the
    entry is no longer pending (then the page reloads instead).
    """
    client = get_redis()
    entry_id = req.ids[0]
    raw: Any = client.xpending_range(req.stream, req.group, min=entry_id, max=entry_id, count=1)
    if not raw:
        return None
    entry = selectors.entries_fetch(client=client, stream=req.stream, ids=[entry_id]).get(entry_id)
    failures = last_failures(stream=req.stream, group=req.group, entry_ids=[entry_id])
    row = PendingRowView(
        id=entry_id,
        consumer=_text(raw[0]["consumer"]),
        idle_ms=int(raw[0]["time_since_delivered"]),
        deliveries=int(raw[0]["times_delivered"]),
        preview=payloads.preview(entry.fields) if entry is not None else "",
        payload_missing=entry is None,
        last_failure=failures.get(entry_id, ""),
    )
    page = PendingPage(
        rows=(), start=None, next_start=None, scanned=1, scanned_to=None, budget_hit=False
    )
    context = {
        "stream": req.stream,
        "group": req.group,
        "rows": [row],
        "page": page,
        "filters": PendingFilters(consumer="", min_idle_s=0, start=""),
        "snapshot_id": "",
    }
    html = render_to_string("dashboard/group.html#pending-table", context, request=request)
    return html, f"pending-{entry_id}"


# --- views ----------------------------------------------------------------------------


def _entry_outcome(req: ActionRequest, request: HttpRequest) -> Outcome:
    client = get_redis()
    entry_id = req.ids[0]
    stream, group = req.stream, req.group
    operator = request.user.get_username()
    if req.action == "retry":
        retried = services.entry_retry(
            client=client,
            stream=stream,
            group=group,
            entry_id=entry_id,
            idle_ms=settings.ACKBOARD_RETRY_IDLE_MS,
        )
        return Outcome(
            "ok",
            f"Entry {entry_id} will be redelivered to a worker of {req.group} on its next "
            "reclaim sweep.",
            reported={"idle_after_ms": retried.idle_ms},
        )
    if req.action == "claim":
        consumer = req.form.get("consumer", "").strip() or settings.ACKBOARD_OPERATOR_CONSUMER
        if len(consumer) > 255:
            raise BadRequest("consumer name is longer than 255 characters")
        seen_idle = _int(req.form, "seen_idle_ms", required=True)
        assert seen_idle is not None
        claimed = services.entry_claim(
            client=client,
            consumer=consumer,
            seen_idle_ms=seen_idle,
            seen_deliveries=_int(req.form, "seen_deliveries", required=False),
            seen_consumer=req.form.get("seen_consumer", "").strip() or None,
            stream=stream,
            group=group,
            entry_id=entry_id,
        )
        return Outcome(
            "ok",
            f"Entry {entry_id} claimed by {claimed.consumer} (was {claimed.previous_consumer}).",
            reported={"claimed_by": claimed.consumer},
        )
    if req.action == "dead-letter":
        moved = services.entry_dead_letter(
            client=client,
            reason=req.reason or "dead-lettered by an operator",
            operator=operator,
            expected_consumer=req.form.get("seen_consumer", "").strip(),
            stream=stream,
            group=group,
            entry_id=entry_id,
        )
        if moved is None:
            return Outcome(
                "refused",
                f"Entry {entry_id} is no longer pending in {req.group}: someone acknowledged "
                "or dead-lettered it first. Nothing was changed.",
                status=409,
            )
        return Outcome(
            "ok",
            f"Entry {entry_id} moved to the dead-letter stream as {moved.dlq_id}.",
            new_ids=[moved.dlq_id],
            removed=True,
        )
    # acknowledge
    if not req.reason:
        raise BadRequest("Acknowledge needs a reason: say why this entry may be discarded.")
    acked = services.entry_acknowledge(
        client=client, stream=stream, group=group, entry_id=entry_id, reason=req.reason
    )
    if not acked.was_pending:
        return Outcome(
            "refused",
            f"Entry {entry_id} is no longer pending in {req.group}. Nothing was changed.",
            status=409,
        )
    return Outcome("ok", f"Entry {entry_id} acknowledged (discarded).", removed=True)


@require_POST
@never_cache
@login_required
def entry_action(
    request: HttpRequest, stream: str, group: str, entry_id: str, action: str
) -> HttpResponse:
    """Retry, Claim, Dead-letter or Acknowledge one pending entry."""
    if action not in ENTRY_ACTIONS:
        raise Http404("no such action")
    req = _parse(request, action=action, stream=stream, group=group, ids=[entry_id[:64]])
    if not may_act(request.user, action):
        return _denied(request, req)
    client = get_redis()

    def state() -> dict[str, Any]:
        _check_stream(stream)
        _check_group(group)
        _check_id(entry_id)
        found = _pending_state(client, stream, group, entry_id)
        if not found["pending"] and not _entry_exists(client, stream, entry_id):
            raise BadRequest(f"no entry {entry_id} in stream {stream!r}", status=404)
        return found

    outcome = _run(request, req, state_before=state, call=lambda: _entry_outcome(req, request))
    row = _row_html(request, req) if outcome.result == "ok" and not outcome.removed else None
    return _respond(request, req, outcome, row_html=row)


def _dlq_outcome(req: ActionRequest) -> Outcome:
    client = get_redis()
    dlq_id = req.ids[0]
    if req.action == "replay":
        replayed = services.dlq_replay(client=client, stream=req.stream, dlq_id=dlq_id)
        return Outcome(
            "ok",
            f"Dead-letter entry {dlq_id} replayed to group {replayed.group} as {replayed.new_id}.",
            new_ids=[replayed.new_id],
            removed=True,
            reported={"origin_group": replayed.group, "origin_id": replayed.origin_id},
        )
    deleted = services.dlq_delete(client=client, stream=req.stream, dlq_id=dlq_id)
    if not deleted.deleted:
        return Outcome(
            "refused", f"Dead-letter entry {dlq_id} was already gone. Nothing was changed.", 409
        )
    return Outcome("ok", f"Dead-letter entry {dlq_id} deleted.", removed=True)


@require_POST
@never_cache
@login_required
def dlq_action(request: HttpRequest, stream: str, dlq_id: str, action: str) -> HttpResponse:
    """Replay or Delete one dead-lettered entry."""
    if action not in DLQ_ACTIONS:
        raise Http404("no such action")
    req = _parse(request, action=action, stream=stream, group="", ids=[dlq_id[:64]])
    if not may_act(request.user, action):
        return _denied(request, req)

    def state() -> dict[str, Any]:
        _check_stream(stream)
        _check_id(dlq_id, "dead-letter id")
        found = _dlq_state(get_redis(), stream, dlq_id)
        req.group = found.get("origin_group", "")
        return found

    outcome = _run(request, req, state_before=state, call=lambda: _dlq_outcome(req))
    return _respond(request, req, outcome)


@require_POST
@never_cache
@login_required
def dlq_purge(request: HttpRequest, stream: str) -> HttpResponse:
    """Empty a dead-letter stream after the operator typed the stream's name."""
    req = _parse(request, action="purge", stream=stream, group="", ids=[])
    req.place = "dlq"
    if not may_act(request.user, "purge"):
        return _denied(request, req)

    def state() -> dict[str, Any]:
        _check_stream(stream)
        if req.form.get("confirm_name", "") != stream:
            raise BadRequest("Type the stream's name exactly to confirm the purge.")
        length = _int(req.form, "expected_length", required=True)
        newest = req.form.get("newest_id", "").strip()
        if newest:
            _check_id(newest, "newest dead-letter id")
        return {"length": length, "newest_id": newest}

    def call() -> Outcome:
        length = _int(req.form, "expected_length", required=True)
        assert length is not None
        purged = services.dlq_purge(
            client=get_redis(),
            stream=stream,
            expected_length=length,
            newest_id=req.form.get("newest_id", "").strip() or None,
        )
        return Outcome(
            "ok",
            f"Purged {purged.deleted} dead-letter entr{'y' if purged.deleted == 1 else 'ies'}.",
            reported={"deleted": purged.deleted},
        )

    outcome = _run(request, req, state_before=state, call=call)
    return _respond(request, req, outcome)


# --- bulk -----------------------------------------------------------------------------

#: Bulk actions the services offer. Claim is per entry only: its guard is the row's state.
BULK_ACTIONS = ("retry", "dead-letter", "acknowledge")


@dataclass
class BulkForm:
    """What the bulk bar posts: the scope (selected ids or the page's filter) and progress."""

    snapshot_id: str
    ids: list[str] | None
    consumer: str | None
    min_idle_ms: int | None
    cursor: str | None
    confirm: bool
    done_before: int
    skipped_before: int


def _bulk_cap() -> int:
    return max(1, min(int(settings.ACKBOARD_BULK_CAP), bulk.MAX_LIMIT))


def _bulk_form(form: Mapping[str, Any], ids: list[str]) -> BulkForm:
    snapshot_id = str(form.get("snapshot_id", "")).strip()
    if not snapshot_id:
        raise BadRequest(
            "The page did not say which entries it showed (no snapshot id); reload it."
        )
    _check_id(snapshot_id, "snapshot id")
    selected = str(form.get("scope", "selected")) != "filter"
    if selected:
        if not ids:
            raise BadRequest("Select some entries first, or choose all matching this filter.")
        if len(ids) > _bulk_cap():
            raise BadRequest(f"Select at most {_bulk_cap()} entries, or use the filter scope.")
        for entry_id in ids:
            _check_id(entry_id)
    cursor = str(form.get("cursor", "")).strip() or None
    if cursor is not None:
        _check_id(cursor, "cursor")
    consumer = str(form.get("consumer", "")).strip() or None
    if consumer is not None and len(consumer) > 255:
        raise BadRequest("consumer name is longer than 255 characters")
    return BulkForm(
        snapshot_id=snapshot_id,
        ids=ids if selected else None,
        consumer=None if selected else consumer,
        min_idle_ms=None if selected else _int(form, "min_idle_ms", required=False),
        cursor=None if selected else cursor,
        confirm=form.get("confirm") == "1",
        done_before=_int(form, "done_before", required=False) or 0,
        skipped_before=_int(form, "skipped_before", required=False) or 0,
    )


def _bulk_apply(action: str, req: ActionRequest, scope: BulkForm, operator: str) -> BulkResult:
    client = get_redis()
    common: dict[str, Any] = {
        "client": client,
        "stream": req.stream,
        "group": req.group,
        "snapshot_id": scope.snapshot_id,
        "ids": scope.ids,
        "consumer": scope.consumer,
        "min_idle_ms": scope.min_idle_ms,
        "cursor": scope.cursor,
        "limit": _bulk_cap(),
    }
    if action == "retry":
        return bulk.bulk_retry(idle_ms=settings.ACKBOARD_RETRY_IDLE_MS, **common)
    if action == "dead-letter":
        reason = req.reason or "dead-lettered in bulk by an operator"
        return bulk.bulk_dead_letter(reason=reason, operator=operator, **common)
    if not req.reason:
        raise BadRequest("Acknowledge needs a reason: say why these entries may be discarded.")
    return bulk.bulk_acknowledge(reason=req.reason, **common)


@require_POST
@never_cache
@login_required
def bulk_action(request: HttpRequest, stream: str, group: str, action: str) -> HttpResponse:
    """Retry, Dead-letter or Acknowledge many pending entries, scoped to a snapshot.

    Without ``confirm`` it is a dry run: a count and a confirm button, nothing changed and
    nothing audited. With it, at most ``ACKBOARD_BULK_CAP`` entries are handled, one audit
    row is written, and a "Continue" button carries the cursor for the rest. Entries newer
    than ``snapshot_id`` (the newest id the page showed) are never touched.
    """
    if action not in BULK_ACTIONS:
        raise Http404("no such bulk action")
    ids = [i.strip() for i in request.POST.getlist("ids") if i.strip()]
    req = _parse(request, action="bulk-" + action, stream=stream, group=group, ids=ids[:1000])
    if not may_act(request.user, action):
        return _denied(request, req)
    try:
        _check_stream(stream)
        _check_group(group)
        scope = _bulk_form(request.POST, ids)
        if action == "acknowledge" and not req.reason:
            # Asked before the dry run, so the confirmation never fails on it.
            raise BadRequest("Acknowledge needs a reason: say why these entries may be discarded.")
        _group_check(get_redis(), stream, group)
    except BadRequest as exc:
        outcome = Outcome("refused", str(exc), status=exc.status)
        if request.POST.get("confirm") == "1":  # a refused action is audited; a dry run is not
            _audit(request, req, outcome, {})
        return _bulk_respond(request, req, None, outcome)
    except redis.RedisError as exc:
        if request.POST.get("confirm") == "1":  # a dry run changes nothing and is not audited
            _audit(request, req, Outcome("error", f"{type(exc).__name__}: {exc}"), {})
        raise
    verb = {"retry": "retried", "dead-letter": "dead-lettered", "acknowledge": "acknowledged"}
    context: dict[str, Any] = {
        "action": action,
        "verb": verb[action],
        "scope": scope,
        "req": req,
        "cap": _bulk_cap(),
    }

    if not scope.confirm:
        try:
            found = bulk.bulk_scope(
                client=get_redis(),
                stream=stream,
                group=group,
                snapshot_id=scope.snapshot_id,
                ids=scope.ids,
                consumer=scope.consumer,
                min_idle_ms=scope.min_idle_ms,
                cursor=scope.cursor,
                limit=_bulk_cap(),
            )
        except (ActionRefused, ValueError) as exc:
            return _bulk_respond(request, req, None, Outcome("refused", str(exc), status=409))
        context["dry_run"] = found
        return _bulk_respond(request, req, context, None)

    result_box: dict[str, BulkResult] = {}

    def call() -> Outcome:
        result = _bulk_apply(action, req, scope, request.user.get_username())
        result_box["result"] = result
        # The row lists what was done; when nothing was, what was tried (the skips say why).
        req.ids = list(result.done) or [i.entry_id for i in result.items]
        skipped = [[i.entry_id, str(i.outcome)] for i in result.skipped]
        verb = {"retry": "Retried", "dead-letter": "Dead-lettered", "acknowledge": "Acknowledged"}
        message = f"{verb[action]} {len(result.done)} entr{'y' if len(result.done) == 1 else 'ies'}"
        if skipped:
            message += f"; skipped {len(skipped)} that changed or left since you looked"
        message += "." if result.complete else "; more remain."
        return Outcome(
            "ok" if result.done or not skipped else "refused",
            message,
            new_ids=[i.new_id for i in result.items if i.new_id],
            removed=True,
            reported={"skipped": skipped, "next_cursor": result.next_cursor},
        )

    def state() -> dict[str, Any]:
        return {
            "snapshot_id": scope.snapshot_id,
            "scope": "selected" if scope.ids is not None else "filter",
            "consumer": scope.consumer,
            "min_idle_ms": scope.min_idle_ms,
            "cursor": scope.cursor,
            "selected": len(scope.ids or ()),
        }

    outcome = _run(request, req, state_before=state, call=call)
    context["result"] = result_box.get("result")
    return _bulk_respond(request, req, context, outcome)


def _bulk_respond(
    request: HttpRequest,
    req: ActionRequest,
    context: dict[str, Any] | None,
    outcome: Outcome | None,
) -> HttpResponse:
    """The bulk bar's answer: a dry-run confirmation, progress, or a refusal message."""
    htmx = bool(getattr(request, "htmx", False))
    if outcome is not None and outcome.status != 200:
        return _respond(request, req, outcome)
    assert context is not None
    result: BulkResult | None = context.get("result")
    if result is not None:
        scope: BulkForm = context["scope"]
        context["done_total"] = scope.done_before + len(result.done)
        context["skipped_total"] = scope.skipped_before + len(result.skipped)
    if not htmx:
        # Without htmx the confirmation and the progress are a page of their own.
        context["flash"] = _flash(outcome) if outcome is not None else []
        context["back"] = req.next_url or _fallback_url(req)
        return render(request, "dashboard/_action_result.html", context)
    html = render_to_string("dashboard/_bulk_bar.html#bulk-result", context, request=request)
    if outcome is not None:
        removed = list(result.done) if result is not None and context["action"] != "retry" else []
        html += render_to_string(
            "dashboard/_action_result.html#messages-oob",
            {"flash": _flash(outcome), "removed_rows": removed},
            request,
        )
    response = HttpResponse(html)
    response["HX-Retarget"] = "#bulk-result"
    response["HX-Reswap"] = "outerHTML"
    # Selected rows hold live updates (live.js); removed rows release them, and live.js
    # re-checks on "change".
    response["HX-Trigger-After-Swap"] = "change"
    return response
