"""The dry runs of Reset position and Trim: what they would do, changing nothing.

Owns, for the two group-administration actions that touch many entries, their dry run
as a route of its own (``PATTERNS``: ``reset-preview``, ``trim-preview``) for the pages,
and as an answer for ``manage.py ackboard`` and the JSON API (``reset_answer``,
``trim_answer``: the rows' ``remote_dry_run``). A dry run checks the
permission (a denial is audited, as every refused attempt is), reads the preview
(``admin.position_preview``, ``admin.trim_preview``) and answers a card with the Confirm
form, or a one-line message, changing and auditing nothing else, as the bulk bar's dry
run does. The confirmed actions are rows of ``dashboard.views.admin_actions`` and go
through the table's own routes and runner.

It never writes to Redis and reads it only through ``queue_core.admin``'s previews and
``queue_core.selectors``. Costs: one preview (XINFO, a walk of at most
``admin.COUNT_BUDGET`` entries) after the group's or stream's existence check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import URLPattern, URLResolver, path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django_htmx.http import reswap, retarget

from dashboard.access.scopes import may
from dashboard.views.action_runner import (
    ActionRequest,
    ActionResult,
    BadRequest,
    Operator,
    check_group,
    check_stream,
    denied,
    fallback_url,
    form_data,
    respond,
)
from dashboard.views.action_table import Action, Remote, target_request
from dashboard.views.admin_actions import (
    ROWS,
    diff_state,
    entries_words,
    plan_state,
    read_words,
    reset_diff,
    reset_effect,
    reset_refusal,
    trim_floor_words,
    trim_plan,
)
from dashboard.views.admin_forms import PositionForm
from dashboard.views.answer import Answer, refusal
from dashboard.views.forms import ActionForm
from dashboard.views.htmx import HtmxHttpRequest
from queue_core import admin
from queue_core.keys import CrossSlotName
from queue_core.types import ActionRefused

T = TypeVar("T")
_ROW = {row.name: row for row in ROWS}


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
    if not may(user, row.permission, req.stream):
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
    form, req, _ = target_request(
        request, row, data, stream=stream, group=group, consumer="", channel=channel
    )
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
    outcome, diff = _dry_run(user, row, form, req, lambda d: reset_diff(stream, group, d))
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
    outcome, plan = _dry_run(user, row, form, req, lambda d: trim_plan(stream, d))
    return req, outcome, plan


def reset_message(group: str, diff: admin.PositionDiff) -> str:
    """The dry run of a reset in one line (the CLI's and the API's message)."""
    message = (
        f"Dry run: resetting {group} from {diff.before_id}{read_words(diff.before_entries_read)} "
        f"to {diff.after_id}{read_words(diff.after_entries_read)}: {reset_effect(diff)}."
    )
    refusal = reset_refusal(diff)
    if refusal:
        message += " " + refusal
    return message + " Nothing was changed."


def trim_message(stream: str, plan: admin.TrimPlan) -> str:
    message = (
        f"Dry run: trimming {stream} to MINID {plan.minid} would delete "
        f"{entries_words(plan.would_delete, plan.exact)}. {trim_floor_words(plan)}"
    )
    if plan.past_floor:
        message += " This MINID is past the floor: only a forced trim goes there."
    return message + " Nothing was changed."


def _refused(outcome: ActionResult | None) -> Answer:
    if outcome is None:
        return refusal(400, "")
    return refusal(outcome.status, outcome.message)


def reset_answer(remote: Remote) -> Answer:
    """Reset position's dry run for ``manage.py ackboard`` and the JSON API (the row's
    ``remote_dry_run``): the diff and what the confirmation posts, or the refusal."""
    stream, group = remote.stream, remote.group
    req, outcome, diff, _ = reset_dry_run(
        user=remote.user, stream=stream, group=group, fields=remote.fields, channel=remote.channel
    )
    if outcome is not None or diff is None:
        return _refused(outcome)
    payload = {
        "ok": True,
        "dry_run": True,
        "action": req.action,
        "stream": stream,
        "group": group,
        **diff_state(diff),
        # What the confirmation posts: the previewed position, as a concrete id.
        "position": diff.after_id,
        "expected_before_id": diff.before_id,
        "would_refuse": reset_refusal(diff),
        "message": reset_message(group, diff),
    }
    return Answer(200, payload)


def trim_answer(remote: Remote) -> Answer:
    """Trim's dry run for ``manage.py ackboard`` and the JSON API (the row's
    ``remote_dry_run``): the plan (count, floor), or the refusal."""
    stream = remote.stream
    req, outcome, plan = trim_dry_run(
        user=remote.user, stream=stream, fields=remote.fields, channel=remote.channel
    )
    if outcome is not None or plan is None:
        return _refused(outcome)
    payload = {
        "ok": True,
        "dry_run": True,
        "action": req.action,
        "stream": stream,
        **plan_state(plan),
        "message": trim_message(stream, plan),
    }
    return Answer(200, payload)


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
        "count": entries_words(plan.would_delete, plan.exact),
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
