"""Group administration: Create group, Delete group, Reset position, Trim.

Owns four rows of the action table (``ROWS``, merged into
``dashboard.views.actions.ACTIONS``: a permission, a form from ``dashboard.views.admin_forms``,
the state before, one ``queue_core.admin`` call and its message each) and the dry runs
of the two that touch many entries, Reset position and Trim. A dry run is its own route
(``PATTERNS``: ``reset-preview``, ``trim-preview``) for the pages, and ``DRY_RUNS`` for
``manage.py ackboard`` and the JSON API: it checks the permission (a denial is audited, as
every refused attempt is), reads the preview (``admin.position_preview``,
``admin.trim_preview``) and answers a card with the Confirm form, changing and auditing
nothing else, as the bulk bar's dry run does. The confirmed actions go through the
table's own routes (``dashboard:group-action``, ``dashboard:stream-action``) and runner:
one AuditEvent row per attempt.

A reset's audit row keeps the position before (``before_id``, ``before_entries_read``)
and how to undo it (a reset back to that id): ``last_reset`` reads it for the group
page's Undo, which opens the dry run of that reset.

It never writes to Redis itself (``queue_core.admin`` does, atomically, and publishes
the change on the events channel so open pages update) and reads it only through
``queue_core.admin``'s previews and ``queue_core.selectors``. Costs: a dry run is one
preview (XINFO, a walk of at most ``admin.COUNT_BUDGET`` entries); a confirmed trim also
reads its preview for the audit row (a reset's service previews by itself). Delete group
answers with a redirect to the stream's page (``ActionResult.redirect``): its own is gone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.db.models import Field
from django.http import HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, URLPattern, URLResolver, path, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django_htmx.http import reswap, retarget

from dashboard.models import AuditEvent
from dashboard.runtime.connection import get_redis
from dashboard.views.action_runner import (
    ActionRequest,
    ActionResult,
    BadRequest,
    Operator,
    action_request,
    check_group,
    check_stream,
    denied,
    fallback_url,
    form_data,
    respond,
)
from dashboard.views.action_table import Action, Call
from dashboard.views.admin_forms import (
    CreateGroupForm,
    DeleteGroupForm,
    PositionForm,
    ResetPositionForm,
    TrimForm,
)
from dashboard.views.forms import ActionForm, Target
from dashboard.views.htmx import HtmxHttpRequest
from queue_core import admin, selectors
from queue_core.keys import CrossSlotName
from queue_core.types import ActionRefused

T = TypeVar("T")

# --- words ----------------------------------------------------------------------------


def _entries(n: int, exact: bool = True) -> str:
    """ "3 entries", "1 entry", or "more than 10000 entries" (a count cut at its budget)."""
    if not exact:
        return f"more than {n - 1} entries"
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _read(entries_read: int | None) -> str:
    return "" if entries_read is None else f" (entries read {entries_read})"


def _position_words(position: admin.Position) -> str:
    if position.kind == "start":
        return "the start (every entry in the stream is delivered)"
    if position.kind == "end":
        return "the end (only entries added from now on are delivered)"
    return f"id {position.id}" if position.kind == "id" else f"time {position.id} (UTC)"


def reset_effect(diff: admin.PositionDiff) -> str:
    """What a reset does to the entries between the two positions, in one phrase."""
    if diff.redeliver:
        return f"{_entries(diff.redeliver, diff.exact)} would be delivered again"
    if diff.skip:
        return f"{_entries(diff.skip, diff.exact)} would be skipped (never delivered)"
    return "no entry would be delivered again or skipped"


def reset_refusal(diff: admin.PositionDiff) -> str:
    """Why a confirm would be refused now ("" when it would not): live consumers on a
    group that is not paused (the guard ``admin.position_reset`` applies)."""
    if diff.live_consumers and not diff.paused:
        names = ", ".join(diff.live_consumers[:10])
        more = f" and {len(diff.live_consumers) - 10} more" if len(diff.live_consumers) > 10 else ""
        return (
            f"The group has live consumers ({names}{more}): pause it first; a reset is "
            "refused while they read."
        )
    return ""


def _seen_within_ms() -> int:
    """Consumers without a heartbeat count as live when seen within this: the stuck
    threshold the health badges use (``ACKBOARD_STUCK_AFTER_MS``)."""
    return int(settings.ACKBOARD_STUCK_AFTER_MS)


# --- reads shared by the rows and the dry runs -----------------------------------------


def _group_exists(stream: str, group: str) -> None:
    """404 unless ``group`` is a consumer group of ``stream`` (one XPENDING summary)."""
    if selectors.pending_summary(client=get_redis(), stream=stream, group=group) is None:
        raise BadRequest(f"no consumer group {group!r} on stream {stream!r}", 404)


def _stream_exists(stream: str) -> None:
    """404 unless ``stream`` is a stream (XLEN and XINFO GROUPS, pipelined)."""
    if not selectors.stream_summaries(client=get_redis(), streams=[stream]):
        raise BadRequest(f"no stream {stream!r}", 404)


def _reset_preview(stream: str, group: str, data: Mapping[str, Any]) -> admin.PositionDiff:
    _group_exists(stream, group)
    return admin.position_preview(
        client=get_redis(),
        stream=stream,
        group=group,
        position=data["parsed"],
        seen_within_ms=_seen_within_ms(),
    )


def _trim_preview(stream: str, data: Mapping[str, Any]) -> admin.TrimPlan:
    _stream_exists(stream)
    return admin.trim_preview(client=get_redis(), stream=stream, minid=data["minid"])


def _plan_state(plan: admin.TrimPlan) -> dict[str, Any]:
    return {
        "minid": plan.minid,
        "would_delete": plan.would_delete,
        "exact": plan.exact,
        "floor_id": plan.floor_id,
        "floor_group": plan.floor_group,
        "floor_reason": plan.floor_reason,
        "past_floor": plan.past_floor,
    }


def _diff_state(diff: admin.PositionDiff) -> dict[str, Any]:
    return {
        "before_id": diff.before_id,
        "before_entries_read": diff.before_entries_read,
        "after_id": diff.after_id,
        "after_entries_read": diff.after_entries_read,
        "redeliver": diff.redeliver,
        "skip": diff.skip,
        "exact": diff.exact,
        "live_consumers": list(diff.live_consumers),
        "paused": diff.paused,
    }


def trim_floor_words(plan: admin.TrimPlan) -> str:
    """Where the floor is and why, for a dry run and a refusal."""
    if not plan.floor_id:
        return "The stream has no consumer group, so no floor."
    why = (
        "its oldest pending entry"
        if plan.floor_reason == "pending"
        else "its first entry not delivered yet"
    )
    return f"The floor is {plan.floor_id}: group {plan.floor_group} ({why})."


# --- the rows ---------------------------------------------------------------------------


def _create_before(call: Call) -> dict[str, Any]:
    """The new group's name goes on the audit row; the stream must exist (404)."""
    name = call.data.get("name")
    if isinstance(name, str):
        call.req.group = name[:1024]
    _stream_exists(call.req.stream)
    return {"position": call.data.get("position", ""), "at": call.data.get("at", "")}


def _create_group(call: Call) -> ActionResult:
    position: admin.Position = call.data["parsed"]
    name: str = call.data["name"]
    created = admin.group_create(
        client=call.client, stream=call.req.stream, group=name, position=position
    )
    lag = "" if created.lag is None else f", lag {created.lag}"
    return ActionResult(
        "ok",
        f"Group {name} created on {call.req.stream} at {_position_words(position)}: last "
        f"delivered id {created.last_id}{lag}.",
        reported={
            "created_last_id": created.last_id,
            "created_entries_read": created.entries_read,
            "position_id": position.id,
        },
    )


def _delete_group(call: Call) -> ActionResult:
    group = call.req.group
    deleted = admin.group_delete(
        client=call.client,
        stream=call.req.stream,
        group=group,
        expected_pending=call.data["expected_pending"] or 0,
        acknowledge=bool(call.data["acknowledge"]),
    )
    dropped = deleted.pending_dropped
    tail = f"; {_entries(dropped)} pending in it were dropped, as acknowledged" if dropped else ""
    try:  # the group's page is gone: the answer goes to the stream's
        redirect = reverse("dashboard:stream-detail", args=[call.req.stream])
    except NoReverseMatch:
        redirect = ""
    return ActionResult(
        "ok",
        f"Group {group} deleted from {call.req.stream}{tail}.",
        reported={"pending_dropped": dropped},
        redirect=redirect,
    )


def _reset_position(call: Call) -> ActionResult:
    data = call.data
    if not data["confirm"] or not data["expected_before_id"]:
        raise BadRequest(
            "A reset needs its dry run first: confirm it with the position the dry run "
            "showed (expected_before_id)."
        )
    diff = admin.position_reset(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        position=data["parsed"],
        expected_before_id=data["expected_before_id"],
        seen_within_ms=_seen_within_ms(),
    )
    moved = (
        f"{_entries(diff.redeliver, diff.exact)} will be delivered again"
        if diff.redeliver
        else f"{_entries(diff.skip, diff.exact)} were skipped"
        if diff.skip
        else "no entry was delivered again or skipped"
    )
    return ActionResult(
        "ok",
        f"Position of {call.req.group} reset from {diff.before_id}"
        f"{_read(diff.before_entries_read)} to {diff.after_id}"
        f"{_read(diff.after_entries_read)}: {moved}. To undo, reset it to {diff.before_id}.",
        # The position before is the audit row's: the reset can be undone from it.
        reported={**_diff_state(diff), "lag": diff.lag, "undo_position": diff.before_id},
    )


def _trim_before(call: Call) -> dict[str, Any]:
    """The dry run's figures at the time of the confirm, for the audit row."""
    if "minid" not in call.data:
        return {}
    return _plan_state(_trim_preview(call.req.stream, call.data))


def _trim(call: Call) -> ActionResult:
    data = call.data
    if not data["confirm"]:
        raise BadRequest("A trim needs its dry run first: confirm it (confirm=1).")
    trimmed = admin.stream_trim(
        client=call.client, stream=call.req.stream, minid=data["minid"], force=data["force"]
    )
    forced = " (forced past the floor)" if data["force"] else ""
    return ActionResult(
        "ok",
        f"Trimmed {_entries(trimmed.deleted)} older than {data['minid']} from "
        f"{call.req.stream}{forced}.",
        reported={"deleted": trimmed.deleted, "force": bool(data["force"])},
    )


ROWS: tuple[Action, ...] = (
    Action("create-group", "stream", CreateGroupForm, _create_group, before=_create_before),
    Action("delete-group", "group", DeleteGroupForm, _delete_group),
    Action("reset-position", "group", ResetPositionForm, _reset_position),
    Action("trim", "stream", TrimForm, _trim, before=_trim_before),
)
_ROW = {row.name: row for row in ROWS}


# --- dry runs ---------------------------------------------------------------------------


def _dry_run(
    user: Operator,
    row: Action,
    form: ActionForm,
    req: ActionRequest,
    read: Callable[[Mapping[str, Any]], T],
) -> tuple[ActionResult | None, T | None]:
    """The permission (a denial is audited), the names, the form, then ``read``: its
    result, or the refusal. Nothing is changed and nothing else is audited. A Redis error
    propagates (503 for a page, exit status 5 or a 503 for the CLI and the API)."""
    if not user.has_perm(row.permission):
        return denied(user, req), None
    try:
        check_stream(req.stream)
        if row.on == "group":
            check_group(req.group)
        return None, read(form_data(form))
    except BadRequest as exc:
        return ActionResult("refused", str(exc), status=exc.status), None
    except (ActionRefused, CrossSlotName) as exc:
        return ActionResult("refused", str(exc), status=409), None
    except ValueError as exc:
        return ActionResult("refused", str(exc), status=400), None


def _prepare(
    request: HtmxHttpRequest | None,
    name: str,
    data: Mapping[str, Any],
    *,
    stream: str,
    group: str,
    channel: str,
) -> tuple[Action, ActionForm, ActionRequest]:
    row = _ROW[name]
    target = Target(stream=stream, group=group if row.on == "group" else "")
    form = row.make_form(data, target)
    req = action_request(
        request,
        form,
        action=row.name,
        stream=stream,
        group=target.group,
        ids=[],
        default_place=row.on,
        channel=channel,
    )
    req.place = row.on
    return row, form, req


def reset_dry_run(
    *,
    user: Operator,
    stream: str,
    group: str,
    fields: Mapping[str, Any],
    channel: str,
    request: HtmxHttpRequest | None = None,
) -> tuple[ActionRequest, ActionResult | None, admin.PositionDiff | None, PositionForm]:
    """Reset position's dry run as ``user``: the diff, or the refusal."""
    row, form, req = _prepare(
        request, "reset-position", fields, stream=stream, group=group, channel=channel
    )
    outcome, diff = _dry_run(user, row, form, req, lambda d: _reset_preview(stream, group, d))
    assert isinstance(form, PositionForm)
    return req, outcome, diff, form


def trim_dry_run(
    *,
    user: Operator,
    stream: str,
    fields: Mapping[str, Any],
    channel: str,
    request: HtmxHttpRequest | None = None,
) -> tuple[ActionRequest, ActionResult | None, admin.TrimPlan | None]:
    """Trim's dry run as ``user``: the plan (count, floor), or the refusal."""
    row, form, req = _prepare(request, "trim", fields, stream=stream, group="", channel=channel)
    outcome, plan = _dry_run(user, row, form, req, lambda d: _trim_preview(stream, d))
    return req, outcome, plan


def reset_message(group: str, diff: admin.PositionDiff) -> str:
    """The dry run of a reset in one line (the CLI's and the API's message)."""
    message = (
        f"Dry run: resetting {group} from {diff.before_id}{_read(diff.before_entries_read)} "
        f"to {diff.after_id}{_read(diff.after_entries_read)}: {reset_effect(diff)}."
    )
    refusal = reset_refusal(diff)
    if refusal:
        message += " " + refusal
    return message + " Nothing was changed."


def trim_message(stream: str, plan: admin.TrimPlan) -> str:
    message = (
        f"Dry run: trimming {stream} to MINID {plan.minid} would delete "
        f"{_entries(plan.would_delete, plan.exact)}. {trim_floor_words(plan)}"
    )
    if plan.past_floor:
        message += " This MINID is past the floor: only a forced trim goes there."
    return message + " Nothing was changed."


def _refused(status: int, message: str) -> tuple[int, dict[str, Any]]:
    result = "error" if status >= 500 else "refused"
    return status, {"ok": False, "result": result, "message": message}


def _reset_answer(
    *, user: Operator, stream: str, group: str, fields: Mapping[str, Any], channel: str
) -> tuple[int, dict[str, Any]]:
    req, outcome, diff, _ = reset_dry_run(
        user=user, stream=stream, group=group, fields=fields, channel=channel
    )
    if outcome is not None or diff is None:
        return _refused(outcome.status if outcome else 400, outcome.message if outcome else "")
    payload = {
        "ok": True,
        "dry_run": True,
        "action": req.action,
        "stream": stream,
        "group": group,
        **_diff_state(diff),
        # What the confirmation posts: the previewed position, as a concrete id.
        "position": diff.after_id,
        "expected_before_id": diff.before_id,
        "would_refuse": reset_refusal(diff),
        "message": reset_message(group, diff),
    }
    return 200, payload


def _trim_answer(
    *, user: Operator, stream: str, group: str, fields: Mapping[str, Any], channel: str
) -> tuple[int, dict[str, Any]]:
    req, outcome, plan = trim_dry_run(user=user, stream=stream, fields=fields, channel=channel)
    if outcome is not None or plan is None:
        return _refused(outcome.status if outcome else 400, outcome.message if outcome else "")
    payload = {
        "ok": True,
        "dry_run": True,
        "action": req.action,
        "stream": stream,
        **_plan_state(plan),
        "message": trim_message(stream, plan),
    }
    return 200, payload


#: The dry runs of the CLI and the API, by action: called when ``confirm`` is not "1",
#: as ``DRY_RUNS[action](user=, stream=, group=, fields=, channel=)``, they answer
#: (HTTP status, JSON payload with ``"dry_run": True`` and a one-line ``message``).
DRY_RUNS: Mapping[str, Callable[..., tuple[int, dict[str, Any]]]] = {
    "reset-position": _reset_answer,
    "trim": _trim_answer,
}


# --- the dry-run views ------------------------------------------------------------------


def _card(
    request: HtmxHttpRequest,
    req: ActionRequest,
    partial: str,
    context: dict[str, Any],
) -> HttpResponse:
    """A dry run's card: swapped into its placeholder for htmx, a page of its own without."""
    context = {**context, "req": req, "stream": req.stream, "group": req.group}
    if not request.htmx:
        context["back"] = req.next_url or fallback_url(req)
        context["partial"] = partial
        return render(request, "dashboard/admin_dry_run.html", context)
    html = render_to_string(f"dashboard/_admin.html#{partial}", context, request=request)
    return reswap(retarget(HttpResponse(html), f"#{partial}"), "outerHTML")


@require_POST
@never_cache
@login_required
def reset_preview(request: HtmxHttpRequest, stream: str, group: str) -> HttpResponse:
    """Reset position's dry run: how many entries would be delivered again or skipped,
    the position before and after, and a Confirm carrying the position it showed."""
    req, outcome, diff, form = reset_dry_run(
        user=request.user,
        stream=stream,
        group=group,
        fields=request.POST,
        channel="button",
        request=request,
    )
    if outcome is not None or diff is None:
        return respond(request, req, outcome or ActionResult("refused", "Nothing was done.", 400))
    context = {
        "diff": diff,
        "effect": reset_effect(diff),
        "would_refuse": reset_refusal(diff),
        "before_read": diff.before_entries_read,
        "kind": form.cleaned_data.get("position", ""),
    }
    return _card(request, req, "reset-result", context)


@require_POST
@never_cache
@login_required
def trim_preview(request: HtmxHttpRequest, stream: str) -> HttpResponse:
    """Trim's dry run: how many entries MINID would delete, and the floor."""
    req, outcome, plan = trim_dry_run(
        user=request.user, stream=stream, fields=request.POST, channel="button", request=request
    )
    if outcome is not None or plan is None:
        return respond(request, req, outcome or ActionResult("refused", "Nothing was done.", 400))
    context = {
        "plan": plan,
        "count": _entries(plan.would_delete, plan.exact),
        "floor": trim_floor_words(plan),
    }
    return _card(request, req, "trim-result", context)


def _patterns() -> list[URLPattern | URLResolver]:
    return [
        path(
            "streams/<name:stream>/groups/<name:group>/preview/reset-position/",
            reset_preview,
            name="reset-preview",
        ),
        path("streams/<name:stream>/preview/trim/", trim_preview, name="trim-preview"),
    ]


def __getattr__(name: str) -> list[URLPattern | URLResolver]:
    """``PATTERNS``, the dry runs' routes, built when ``dashboard/urls.py`` reads them:
    ``path()`` checks its converters when built, and ``urls.py`` registers ``name``
    after importing the views (which import this module)."""
    if name == "PATTERNS":
        return _patterns()
    raise AttributeError(name)


# --- the group page's Undo --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LastReset:
    """What the group page's Undo shows of the newest successful reset (an audit row)."""

    id: int
    username: str
    created_at: datetime
    state_before: dict[str, Any]


#: ``last_reset``'s columns, in its statement's order.
_RESET_COLUMNS = ("id", "username", "created_at", "state_before")


@functools.cache
def _last_reset_statement(vendor: str) -> tuple[str, tuple[tuple[Any, list[Any]], ...]]:
    """``last_reset``'s SQL for a database backend, and each column's converters (what
    the ORM applies to them: the backend's, then the field's), built once per process."""
    del vendor  # the cache key: the statement and converters are the backend's
    meta = AuditEvent._meta
    q = connection.ops.quote_name
    cols: list[Field[Any, Any]] = []
    for name in _RESET_COLUMNS:
        field = meta.get_field(name)
        assert isinstance(field, Field), name  # concrete columns, never a relation
        cols.append(field)
    sql = (
        f"SELECT {', '.join(q(str(f.column)) for f in cols)} FROM {q(meta.db_table)}"
        f" WHERE {q('action')} = %s AND {q('stream')} = %s AND {q('group')} = %s"
        f" AND {q('result')} = %s ORDER BY {q('id')} DESC LIMIT 1"
    )
    converters = []
    for f in cols:
        col = f.get_col(meta.db_table)
        converters.append(
            (col, [*connection.ops.get_db_converters(col), *f.get_db_converters(connection)])
        )
    return sql, tuple(converters)


def last_reset(*, stream: str, group: str) -> LastReset | None:
    """The newest successful reset of ``group``, whose state before says where it was:
    the group page offers to reset it back there (Undo). One prepared SQL statement on
    the ``action`` index (the ORM's compile cost 1-2 ms a page for a 0.05 ms query)."""
    sql, converters = _last_reset_statement(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(sql, ["reset-position", stream, group, AuditEvent.Result.OK.value])
        row = cursor.fetchone()
    if row is None:
        return None
    values = []
    for value, (col, funcs) in zip(row, converters, strict=True):
        for func in funcs:
            value = func(value, col, connection)
        values.append(value)
    return LastReset(*values)
