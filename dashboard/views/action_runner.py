"""How every operator action runs: parse, read the state before, call, audit, answer.

Owns what the action views (``dashboard.views.actions``, ``dashboard.views.bulk``)
share: the parsed request and its checks (names, ids, the form's first problem), the
runner that turns every refusal into an ``ActionResult`` and writes one AuditEvent row per
attempt (successful, refused by a guard, the form or the permission, or errored), and
the answers. The runner takes the acting user, not the HTTP request, so
``manage.py ackboard`` and the JSON API (``dashboard.views.api``) run an action through
the same permission check, form, guard, service call and audit row as the buttons; the
row records which of them it came from (``ActionRequest.channel``). htmx gets the
message out of band and swaps the changed row, removes it or reloads the page, through
django-htmx's response helpers; a plain POST gets post/redirect/get, or a page saying
why nothing was changed.

It never talks to Redis: the callers pass in the state read and the service call. A
Redis error is audited as "error" and re-raised, for RedisErrorMiddleware's banner.
Costs: one INSERT per attempt, one template render per answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.urls import NoReverseMatch, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import (
    HttpResponseClientRedirect,
    HttpResponseClientRefresh,
    reselect,
    reswap,
    retarget,
    trigger_client_event,
)

from dashboard.access.audit import audit_record
from dashboard.display.converters import name_problem
from dashboard.views.forms import ActionForm
from dashboard.views.htmx import HtmxHttpRequest
from queue_core.keys import CrossSlotName, stream_keys, stream_visible
from queue_core.types import ActionRefused, PendingRow
from queue_core.validation import entry_id_check

#: Where the buttons were: a pending-table row, the entry page, a DLQ row, the DLQ page.
PLACES = ("row", "entry", "dlq-row", "dlq")

#: Who acts: the request's user for a button, the named or token's user for the CLI and API.
Operator = User | AnonymousUser


class BadRequest(Exception):  # noqa: N818 - an answer, not a failure
    """The request cannot be acted on as sent: 400 (malformed) or 404 (unknown)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ActionResult:
    """What one action did, for the audit row and the response."""

    result: str  # ok / refused / error
    message: str
    status: int = 200
    new_ids: list[str] = field(default_factory=list)
    #: The entry left the table it was shown in (dead-lettered, acknowledged, replayed…).
    removed: bool = False
    #: Where the page goes after success, when it no longer exists (Delete group).
    redirect: str = ""
    #: Extra state the service reported, merged into the audit row's state before.
    reported: dict[str, Any] = field(default_factory=dict)
    #: The entry's pending row after the action, built from the state read before and
    #: what the service reported (Retry, Claim): the pending table swaps it in unread.
    pending_row: PendingRow | None = None


@dataclass
class ActionRequest:
    """One parsed action request: what the audit row and the answer need."""

    action: str  # the audit name: "retry", "bulk-retry"…
    stream: str
    group: str
    ids: list[str]
    reason: str = ""
    place: str = "row"
    next_url: str = ""
    #: The page a plain POST returns to without ``next``: "group" or "dlq".
    home: str = "group"
    #: Where it came from, for the audit row: "button", "cli" or "api".
    channel: str = "button"


# --- checks and parsing ---------------------------------------------------------------


def check_stream(stream: str) -> str:
    """400 for a name the dashboard cannot address, 404 outside the allowlist."""
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


def check_group(group: str) -> str:
    """400 for a group name the dashboard cannot address (its existence is Redis's to say)."""
    problem = name_problem(group)
    if problem is not None:
        raise BadRequest(f"that group name cannot be used here ({problem})")
    return group


def check_id(entry_id: str, what: str = "entry id") -> str:
    """400 unless ``entry_id`` is a full stream id (``<ms>-<seq>``)."""
    try:
        return entry_id_check(entry_id, what=what)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _next_url(request: HtmxHttpRequest | None, posted: str) -> str:
    """Where a plain POST returns: the posted ``next``, else the page htmx says it is on;
    only on this host. Nowhere without an HTTP request (the CLI)."""
    if request is None:
        return ""
    candidate = posted or request.htmx.current_url or ""
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return ""


def action_request(
    request: HtmxHttpRequest | None,
    form: ActionForm,
    *,
    action: str,
    stream: str,
    group: str,
    ids: list[str],
    default_place: str,
    home: str = "group",
    channel: str = "button",
) -> ActionRequest:
    """The request's audit fields, from the fields of ``form`` that never refuse.
    ``request`` is None for the CLI and the API, which answer no page."""
    form.is_valid()  # cleans every field; the refusals wait until the state is read
    data = form.cleaned_data
    place = data["place"]
    return ActionRequest(
        action=action,
        stream=stream,
        group=group,
        ids=ids,
        reason=data.get("reason", ""),  # absent only when a required reason was blank
        place=place if place in PLACES else default_place,
        next_url=_next_url(request, data["next"]),
        home=home,
        channel=channel,
    )


def form_data(form: ActionForm) -> Mapping[str, Any]:
    """The form's cleaned values, or a 400 with its first problem."""
    problem = form.problem()
    if problem is not None:
        raise BadRequest(problem)
    return form.cleaned_data


# --- running one action ---------------------------------------------------------------


def run(
    user: Operator,
    req: ActionRequest,
    *,
    state_before: Callable[[], dict[str, Any]],
    call: Callable[[], ActionResult],
) -> ActionResult:
    """Read the state before, call the service, audit the attempt whatever happened."""
    state: dict[str, Any] = {}
    try:
        state = state_before()
        outcome = call()
    except BadRequest as exc:
        outcome = ActionResult("refused", str(exc), status=exc.status)
    except ActionRefused as exc:
        outcome = ActionResult("refused", str(exc), status=409)
    except CrossSlotName as exc:
        outcome = ActionResult("refused", str(exc), status=409)
    except ValueError as exc:
        outcome = ActionResult("refused", str(exc), status=400)
    except redis.RedisError as exc:
        # RedisErrorMiddleware answers with its banner (503); the row says it failed.
        audit(user, req, ActionResult("error", f"{type(exc).__name__}: {exc}"), state)
        raise
    audit(user, req, outcome, state)
    return outcome


def audit(user: Operator, req: ActionRequest, outcome: ActionResult, state: dict[str, Any]) -> None:
    audit_record(
        user=user,
        action=req.action,
        stream=req.stream,
        group=req.group,
        entry_ids=req.ids,
        reason=req.reason,
        result=outcome.result,
        detail=outcome.message,
        state_before={**state, **outcome.reported},
        new_ids=outcome.new_ids,
        channel=req.channel,
    )


def denied(user: Operator, req: ActionRequest) -> ActionResult:
    """A forged or stale POST from a user without the permission: audited, nothing changed."""
    outcome = ActionResult("refused", f"You do not have permission to {req.action}.", status=403)
    audit(user, req, outcome, {})
    return outcome


# --- responses ------------------------------------------------------------------------


def fallback_url(req: ActionRequest) -> str:
    """Where a plain POST returns without ``next``: the DLQ, the group, or the overview."""
    names: list[tuple[str, list[str]]] = []
    if req.home == "dlq":
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


def flash(outcome: ActionResult) -> list[dict[str, str]]:
    level = {"ok": "success", "refused": "warning", "error": "error"}[outcome.result]
    if outcome.status in (400, 403, 404):
        level = "error"
    return [{"level": level, "text": outcome.message}]


def recheck_live(response: HttpResponse) -> HttpResponse:
    """Have live.js re-check whether anything holds live updates, after the swap.

    A dialog or a ticked row held them (its "live-hold" box, see _entry_actions.html).
    When the row it sat in is swapped out, htmx drops the form's own handlers, so the
    page is told instead: live.js re-checks on "change".
    """
    return trigger_client_event(response, "change", after="swap")


def _respond_plain(request: HttpRequest, req: ActionRequest, outcome: ActionResult) -> HttpResponse:
    """Without htmx: post/redirect/get with a message, or a page saying why not."""
    back = outcome.redirect or req.next_url or fallback_url(req)
    if outcome.status == 200:
        level = messages.SUCCESS if outcome.result == "ok" else messages.WARNING
        messages.add_message(request, level, outcome.message)
        return HttpResponseRedirect(back, status=303)
    html = render_to_string(
        "dashboard/_action_result.html", {"flash": flash(outcome), "back": back}, request=request
    )
    return HttpResponse(html, status=outcome.status)


def respond(
    request: HtmxHttpRequest,
    req: ActionRequest,
    outcome: ActionResult,
    *,
    row_html: tuple[str, str] | None = None,
) -> HttpResponse:
    """The answer to one action: a refusal's message, a swapped or removed row, a reload."""
    if not request.htmx:
        return _respond_plain(request, req, outcome)
    oob = render_to_string(
        "dashboard/_action_result.html#messages-oob", {"flash": flash(outcome)}, request=request
    )
    if outcome.status != 200:
        # The forms swap nothing by default (hx-swap="none"), and an error keeps its
        # target (the form), so the data-swap-4xx handler is on the event's path: only
        # the out-of-band message is swapped.
        return reswap(recheck_live(HttpResponse(oob, status=outcome.status)), "none")
    if outcome.redirect:
        messages.add_message(request, messages.SUCCESS, outcome.message)
        return HttpResponseClientRedirect(outcome.redirect)
    if req.place in ("entry", "dlq") or (row_html is None and not outcome.removed):
        # The entry page and the DLQ page show state in several places (and a row that
        # could not be re-rendered is stale): reload, the message carried by the session.
        messages.add_message(request, messages.SUCCESS, outcome.message)
        return HttpResponseClientRefresh()
    if row_html is None:
        # The entry left the table: swapping its row with nothing removes it.
        response = HttpResponse(oob)
    else:
        markup, dom_id = row_html
        response = reselect(HttpResponse(markup + oob), f"#{dom_id}")
    # A pending row is found by its id: the group page's forms and dialogs are shared by
    # all rows, outside the table (templates/dashboard/group.html).
    target = f"#pending-{req.ids[0]}" if req.place == "row" and req.ids else "closest tr"
    return reswap(retarget(recheck_live(response), target), "outerHTML")
