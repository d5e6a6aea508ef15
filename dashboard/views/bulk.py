"""Bulk actions: Retry, Dead-letter or Acknowledge many pending entries, scoped to a snapshot.

Owns the group page's bulk bar over HTTP: its form (``BulkForm``), its table of actions
(``BULK_ACTIONS``: one row per action, naming the ``queue_core.bulk`` call) and its
answers. The first POST is a dry run: a count and a confirm button, nothing changed and
nothing audited. A confirmed POST handles at most ``ACKBOARD_BULK_CAP`` entries, writes
one AuditEvent row, and offers "Continue" with the cursor for the rest. Entries newer
than ``snapshot_id`` (the newest id the page showed) are never touched: Sidekiq's
"Delete all" took whatever had arrived since.

It never writes to Redis itself (``queue_core.bulk`` does, with the same atomic scripts
as the one-entry actions) and reads it only through selectors: one XPENDING summary (the
group exists), and for a dry run ``bulk.bulk_scope``'s bounded PEL read. Parsing,
auditing and the refusal answers are ``dashboard.views.action_runner``'s. ``bulk_run`` is
the same dry run and the same capped, audited step without an HTML request, for
``manage.py ackboard bulk`` and the JSON API (``dashboard.views.api``).

A filter may name a failure ``fingerprint`` (the Failures page's "by cause" view: act on
a cause): the scope is then the pending entries whose last failure has that cause,
found by ``dashboard.insight.failure_index.cause_match`` (one indexed SQL query per 1,000 pending
rows read), and the audit row names the fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from django_htmx.http import reswap, retarget

from dashboard.access.permissions import action_permission
from dashboard.access.scopes import may
from dashboard.insight.failure_index import cause_match
from dashboard.runtime.connection import get_redis
from dashboard.views.action_runner import (
    ActionRequest,
    ActionResult,
    BadRequest,
    Operator,
    action_request,
    audit,
    check_group,
    check_stream,
    denied,
    fallback_url,
    flash,
    recheck_live,
    respond,
    run,
)
from dashboard.views.forms import (
    MAX_CONSUMER_LENGTH,
    ActionForm,
    PostedText,
    StreamIdField,
    StreamIdListField,
    WholeNumberField,
    due_parse,
)
from dashboard.views.htmx import HtmxHttpRequest
from queue_core import bulk, clock, selectors
from queue_core.connection import Client
from queue_core.fingerprint import FINGERPRINT_LENGTH
from queue_core.results import BulkResult, BulkScope
from queue_core.types import ActionRefused


def bulk_cap() -> int:
    """Most entries one request handles: ``ACKBOARD_BULK_CAP``, within the core's limit."""
    return max(1, min(int(settings.ACKBOARD_BULK_CAP), bulk.MAX_LIMIT))


# --- the form ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkStep:
    """One step of a bulk action as the bar posted it: the scope and the progress so far.

    ``ids`` is the selection, or None for "all matching this filter" (``consumer``,
    ``min_idle_ms`` and ``fingerprint``, from ``cursor`` on).
    """

    snapshot_id: str
    ids: list[str] | None
    consumer: str | None
    min_idle_ms: int | None
    cursor: str | None
    confirm: bool
    done_before: int
    skipped_before: int
    #: Filter: only entries whose last failure has this cause (a failure fingerprint).
    fingerprint: str | None = None
    #: Retry later's due time (epoch ms), when the action needs one.
    due_ms: int | None = None

    @property
    def due_at(self) -> str:
        """The due time as the next step posts it (ISO 8601, UTC, to the millisecond):
        the confirmation and each "Continue" park until the time the dry run showed."""
        if self.due_ms is None:
            return ""
        return datetime.fromtimestamp(self.due_ms / 1000, UTC).isoformat(timespec="milliseconds")


class BulkForm(ActionForm):
    """What the bulk bar posts. Fields are checked in the order declared, and the first
    problem is the 400's message. ``reason_missing`` is the refusal for a blank reason
    (empty when the action needs none); it is asked before the dry run, so the
    confirmation never fails on it."""

    snapshot_id = StreamIdField(
        "snapshot id",
        missing="The page did not say which entries it showed (no snapshot id); reload it.",
    )
    scope = PostedText(strip=False)
    ids = StreamIdListField()
    cursor = StreamIdField("cursor")
    consumer = PostedText()
    min_idle_ms = PostedText(strip=False)
    fingerprint = PostedText()
    confirm = PostedText(strip=False)
    done_before = WholeNumberField("done_before")
    skipped_before = WholeNumberField("skipped_before")
    due_at = PostedText()
    due_in = PostedText()

    def __init__(
        self, *args: Any, cap: int, reason_missing: str = "", due: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.cap = cap
        self.reason_missing = reason_missing
        self.due = due

    @property
    def selected(self) -> bool:
        """The posted rows, rather than every row matching the filter."""
        return bool(self.data.get("scope", "selected") != "filter")

    @property
    def confirmed(self) -> bool:
        return bool(self.data.get("confirm") == "1")

    def clean_ids(self) -> list[str]:
        ids: list[str] = self.cleaned_data["ids"]
        if not self.selected:
            return ids
        if not ids:
            raise ValidationError("Select some entries first, or choose all matching this filter.")
        if len(ids) > self.cap:
            raise ValidationError(f"Select at most {self.cap} entries, or use the filter scope.")
        entry_id = StreamIdField("entry id")
        for each in ids:
            entry_id.clean(each)  # the first bad id is the answer
        return ids

    def clean_consumer(self) -> str:
        consumer: str = self.cleaned_data["consumer"]
        if len(consumer) > MAX_CONSUMER_LENGTH:
            raise ValidationError(f"consumer name is longer than {MAX_CONSUMER_LENGTH} characters")
        return consumer

    def clean_fingerprint(self) -> str:
        fingerprint: str = self.cleaned_data["fingerprint"]
        if self.selected or not fingerprint:
            return ""
        if len(fingerprint) != FINGERPRINT_LENGTH or fingerprint.strip("0123456789abcdef"):
            raise ValidationError(
                f"fingerprint must be {FINGERPRINT_LENGTH} hex digits, as the Failures page shows"
            )
        return fingerprint

    def clean_min_idle_ms(self) -> int | None:
        if self.selected:
            return None  # the filter's idle time means nothing for a selection
        min_idle_ms: int | None = WholeNumberField("min_idle_ms").clean(
            self.cleaned_data["min_idle_ms"]
        )
        return min_idle_ms

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.reason_missing and not data.get("reason"):
            raise ValidationError(self.reason_missing)
        if self.due and "due_at" in data and "due_in" in data:
            data["due_ms"] = due_parse(data["due_at"], data["due_in"], now_ms=clock.now_ms())
        return data

    def step(self) -> BulkStep:
        """The checked scope; call after ``form_data`` found no problem."""
        data, selected = self.cleaned_data, self.selected
        return BulkStep(
            snapshot_id=data["snapshot_id"],
            ids=data["ids"] if selected else None,
            consumer=None if selected else data["consumer"] or None,
            min_idle_ms=data["min_idle_ms"],
            cursor=None if selected else data["cursor"],
            confirm=self.confirmed,
            done_before=data["done_before"] or 0,
            skipped_before=data["skipped_before"] or 0,
            fingerprint=None if selected else data["fingerprint"] or None,
            due_ms=data.get("due_ms"),
        )


# --- the actions ------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkCall:
    """What a row's ``apply`` gets: the request, its checked step, the operator, Redis."""

    req: ActionRequest
    step: BulkStep
    operator: str
    client: Client

    def scope(self) -> dict[str, Any]:
        """The scope arguments every ``queue_core.bulk`` call takes."""
        return _scope(self.client, self.req, self.step)


def _scope(client: Client, req: ActionRequest, step: BulkStep) -> dict[str, Any]:
    match = (
        None
        if step.fingerprint is None
        else cause_match(stream=req.stream, group=req.group, fingerprint=step.fingerprint)
    )
    return {
        "client": client,
        "stream": req.stream,
        "group": req.group,
        "snapshot_id": step.snapshot_id,
        "ids": step.ids,
        "consumer": step.consumer,
        "min_idle_ms": step.min_idle_ms,
        "cursor": step.cursor,
        "limit": bulk_cap(),
        "match": match,
    }


@dataclass(frozen=True)
class BulkAction:
    """One bulk action: a row of ``BULK_ACTIONS``. Claim has none: its guard is one
    row's state as the operator saw it."""

    #: The URL slug, and the one-entry action whose permission it needs. Audited as
    #: "bulk-<name>".
    name: str
    #: What the dry run says would happen to the entries ("retried").
    verb: str
    #: One ``queue_core.bulk`` call.
    apply: Callable[[BulkCall], BulkResult]
    #: Done entries leave the pending table (their rows are removed out of band).
    removes_rows: bool = True
    #: The refusal for a blank reason, when the action needs one.
    reason_missing: str = ""
    #: It needs a due time (``due_at`` or ``due_in``): Retry later.
    due: bool = False

    @property
    def permission(self) -> str:
        return action_permission(self.name)


def _retry(call: BulkCall) -> BulkResult:
    return bulk.bulk_retry(idle_ms=settings.ACKBOARD_RETRY_IDLE_MS, **call.scope())


def _retry_later(call: BulkCall) -> BulkResult:
    assert call.step.due_ms is not None  # the form's clean() set it, or refused
    return bulk.bulk_retry_later(due_ms=call.step.due_ms, **call.scope())


def _dead_letter(call: BulkCall) -> BulkResult:
    reason = call.req.reason or "dead-lettered in bulk by an operator"
    return bulk.bulk_dead_letter(reason=reason, operator=call.operator, **call.scope())


def _acknowledge(call: BulkCall) -> BulkResult:
    return bulk.bulk_acknowledge(reason=call.req.reason, **call.scope())


BULK_ACTIONS: Mapping[str, BulkAction] = {
    row.name: row
    for row in (
        BulkAction("retry", "retried", _retry, removes_rows=False),
        BulkAction(
            "retry-later",
            "retried later",
            _retry_later,
            removes_rows=False,
            due=True,
        ),
        BulkAction("dead-letter", "dead-lettered", _dead_letter),
        BulkAction(
            "acknowledge",
            "acknowledged",
            _acknowledge,
            reason_missing="Acknowledge needs a reason: say why these entries may be discarded.",
        ),
    )
}


# --- one attempt, with or without an HTML request ---------------------------------------


@dataclass
class BulkAnswer:
    """What one bulk request did: a dry run's count, a step's result, or a refusal.

    ``outcome`` is None for a dry run that counted (``dry_run``), which changed and
    audited nothing; a confirmed step has its audited outcome and ``result``.
    """

    row: BulkAction
    req: ActionRequest
    step: BulkStep | None = None
    outcome: ActionResult | None = None
    dry_run: BulkScope | None = None
    result: BulkResult | None = None


def _prepare(
    request: HtmxHttpRequest | None,
    row: BulkAction,
    data: Any,
    *,
    stream: str,
    group: str,
    channel: str = "button",
) -> tuple[BulkForm, ActionRequest]:
    """The bulk form over ``data`` (a QueryDict, or a dict whose ``ids`` is a list) and
    the audit fields."""
    form = BulkForm(data, cap=bulk_cap(), reason_missing=row.reason_missing, due=row.due)
    ids = StreamIdListField().to_python(form["ids"].data)  # for the audit row
    req = action_request(
        request,
        form,
        action="bulk-" + row.name,
        stream=stream,
        group=group,
        ids=ids[:1000],
        default_place="row",
        channel=channel,
    )
    return form, req


def _attempt(user: Operator, row: BulkAction, form: BulkForm, req: ActionRequest) -> BulkAnswer:
    """The permission, the checked step, then a dry run or one capped, audited step."""
    answer = BulkAnswer(row=row, req=req)
    if not may(user, row.permission, req.stream):
        answer.outcome = denied(user, req)
        return answer
    try:
        answer.step = _checked_step(form, req)
    except BadRequest as exc:
        answer.outcome = ActionResult("refused", str(exc), status=exc.status)
        if form.confirmed:  # a refused action is audited; a dry run is not
            audit(user, req, answer.outcome, {})
        return answer
    except redis.RedisError as exc:
        if form.confirmed:  # a dry run changes nothing and is not audited
            audit(user, req, ActionResult("error", f"{type(exc).__name__}: {exc}"), {})
        raise
    if not answer.step.confirm:
        _dry_run(answer, answer.step)
    else:
        _apply(user, answer, answer.step)
    return answer


def bulk_run(
    *, user: Operator, action: str, stream: str, group: str, data: Any, channel: str
) -> BulkAnswer | None:
    """A bulk request as ``user``, without an HTML request: the CLI's and the API's way
    in, through the same form (``data`` holds what the bulk bar posts), dry run, cap,
    guards and audit row (naming ``channel``). None for an unknown bulk action. A Redis
    error is audited (when confirmed) and re-raised."""
    row = BULK_ACTIONS.get(action)
    if row is None:
        return None
    form, req = _prepare(None, row, data, stream=stream, group=group, channel=channel)
    return _attempt(user, row, form, req)


# --- the view ---------------------------------------------------------------------------


@require_POST
@never_cache
@login_required
def bulk_action(request: HtmxHttpRequest, stream: str, group: str, action: str) -> HttpResponse:
    """Retry, Dead-letter or Acknowledge many pending entries, scoped to a snapshot:
    a dry run without ``confirm``, then capped, audited steps."""
    row = BULK_ACTIONS.get(action)
    if row is None:
        raise Http404("no such bulk action")
    form, req = _prepare(request, row, request.POST, stream=stream, group=group)
    answer = _attempt(request.user, row, form, req)
    if answer.outcome is not None and answer.outcome.status != 200:
        return respond(request, req, answer.outcome)  # every refusal before a step too
    context: dict[str, Any] = {
        "action": action,
        "verb": row.verb,
        "scope": answer.step,
        "req": req,
        "cap": bulk_cap(),
    }
    if answer.outcome is None:
        context["dry_run"] = answer.dry_run
    else:
        context["result"] = answer.result
    return _bulk_respond(request, req, context, answer.outcome)


def _checked_step(form: BulkForm, req: ActionRequest) -> BulkStep:
    """The names, the form, then the group (one XPENDING summary): 400 or 404 first."""
    check_stream(req.stream)
    check_group(req.group)
    problem = form.problem()
    if problem is not None:
        raise BadRequest(problem)
    if selectors.pending_summary(client=get_redis(), stream=req.stream, group=req.group) is None:
        raise BadRequest(f"no consumer group {req.group!r} on stream {req.stream!r}", 404)
    return form.step()


def _dry_run(answer: BulkAnswer, step: BulkStep) -> None:
    """Count what a confirm would handle (one bounded PEL read); change and audit nothing."""
    try:
        answer.dry_run = bulk.bulk_scope(**_scope(get_redis(), answer.req, step))
    except (ActionRefused, ValueError) as exc:
        answer.outcome = ActionResult("refused", str(exc), status=409)


def _apply(user: Operator, answer: BulkAnswer, step: BulkStep) -> None:
    """One capped, audited step of the action."""
    req, row = answer.req, answer.row

    def call() -> ActionResult:
        operator = user.get_username()
        result = row.apply(BulkCall(req=req, step=step, operator=operator, client=get_redis()))
        answer.result = result
        # The row lists what was done; when nothing was, what was tried (the skips say why).
        req.ids = list(result.done) or [i.entry_id for i in result.items]
        return _outcome(row, result, step.fingerprint)

    def state() -> dict[str, Any]:
        return {
            **({"fingerprint": step.fingerprint} if step.fingerprint else {}),
            "snapshot_id": step.snapshot_id,
            "scope": "selected" if step.ids is not None else "filter",
            "consumer": step.consumer,
            "min_idle_ms": step.min_idle_ms,
            "cursor": step.cursor,
            "selected": len(step.ids or ()),
        }

    answer.outcome = run(user, req, state_before=state, call=call)


def _outcome(row: BulkAction, result: BulkResult, fingerprint: str | None = None) -> ActionResult:
    skipped = [[i.entry_id, str(i.outcome)] for i in result.skipped]
    count = len(result.done)
    message = f"{row.verb.capitalize()} {count} entr{'y' if count == 1 else 'ies'}"
    if fingerprint:
        message += f" whose last failure has cause {fingerprint}"
    if skipped:
        message += f"; skipped {len(skipped)} that changed or left since you looked"
    message += "." if result.complete else "; more remain."
    return ActionResult(
        "ok" if result.done or not skipped else "refused",
        message,
        new_ids=[i.new_id for i in result.items if i.new_id],
        removed=True,
        reported={"skipped": skipped, "next_cursor": result.next_cursor},
    )


def _bulk_respond(
    request: HtmxHttpRequest,
    req: ActionRequest,
    context: dict[str, Any],
    outcome: ActionResult | None,
) -> HttpResponse:
    """The bulk bar's answer: a dry-run confirmation, progress, or a refusal message."""
    if outcome is not None and outcome.status != 200:
        return respond(request, req, outcome)
    result: BulkResult | None = context.get("result")
    if result is not None:
        step: BulkStep = context["scope"]
        context["done_total"] = step.done_before + len(result.done)
        context["skipped_total"] = step.skipped_before + len(result.skipped)
    if not request.htmx:
        # Without htmx the confirmation and the progress are a page of their own.
        context["flash"] = flash(outcome) if outcome is not None else []
        context["back"] = req.next_url or fallback_url(req)
        return render(request, "dashboard/_action_result.html", context)
    html = render_to_string("dashboard/_bulk_bar.html#bulk-result", context, request=request)
    if outcome is not None:
        row = BULK_ACTIONS[context["action"]]
        removed = list(result.done) if result is not None and row.removes_rows else []
        html += render_to_string(
            "dashboard/_action_result.html#messages-oob",
            {"flash": flash(outcome), "removed_rows": removed},
            request,
        )
    # Selected rows held live updates (live.js); removed rows release them.
    return reswap(retarget(recheck_live(HttpResponse(html)), "#bulk-result"), "outerHTML")
