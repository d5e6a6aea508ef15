"""What the CLI (``manage.py ackboard``) and the JSON API (``dashboard.views.api``) share.

Owns turning a request from a terminal or a script (an action, its target and the
fields its button would post) into the button's own call, ``actions.action_run`` or
``bulk.bulk_run``, and the outcome into one ``Answer``: an HTTP status and a JSON-able
payload whose ``message`` is the one line a terminal prints.

A terminal has not seen a page, so where a button posts what its page showed, this
module reads it first, through selectors, and only for a user who may run the action:

- a bulk dry run without ``snapshot_id`` is scoped to the group's newest pending id
  (one XPENDING summary, O(1)), and says which, so the confirmation names it;
- a Claim without ``seen_idle_ms`` takes the entry's owner, idle time and deliveries
  as the action's own state read found them (no extra round trip) as its
  compare-and-set guard;
- a Purge without ``confirm`` is a dry run: the dead-letter stream's length and newest
  id (one round trip), which the confirmation must name.
- a Retire idle consumers without ``confirm`` is a dry run: the consumers it would
  retire (XINFO CONSUMERS and one HGETALL), which the confirmation must name (``names``).

A confirmed bulk step or purge still needs what its dry run printed, so nothing newer
than what the operator was shown is ever touched. It never writes to Redis or SQL
itself: the runner does, with one audit row per attempt naming the user and the channel
("cli" or "api"); a dry run writes nothing, as the bulk bar's does. A Redis error
propagates for the caller to answer (503, or exit status 5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dashboard.access.permissions import may_act
from dashboard.display.durations import human_ms
from dashboard.runtime.connection import get_redis
from dashboard.views.action_runner import (
    ActionRequest,
    ActionResult,
    BadRequest,
    Operator,
    check_group,
    check_stream,
    form_data,
)
from dashboard.views.actions import action_run
from dashboard.views.admin_dry_runs import DRY_RUNS
from dashboard.views.bulk import BulkAnswer, BulkStep, bulk_cap, bulk_run
from dashboard.views.fleet_actions import idle_dry_run
from dashboard.views.forms import IdleDryRunForm, Target
from queue_core import selectors
from queue_core.results import BulkResult, BulkScope
from queue_core.types import ActionRefused, PendingEntry

#: What a remote request posts: the button's form fields (``ids`` is a list).
Fields = Mapping[str, str | list[str]]


@dataclass(frozen=True)
class Answer:
    """One answer: the HTTP status (the CLI maps it to an exit status) and the JSON body.
    ``payload["message"]`` is the one line a terminal prints."""

    status: int
    payload: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def line(self) -> str:
        return str(self.payload["message"])


def refusal(status: int, message: str, **extra: Any) -> Answer:
    """An answer that did nothing: bad input, no token, unknown, refused, Redis down."""
    result = "error" if status >= 500 else "refused"
    return Answer(status, {"ok": False, "result": result, "message": message, **extra})


def _confirmed(fields: Fields) -> bool:
    return fields.get("confirm") == "1"


def _plural(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _outcome_answer(req: ActionRequest, outcome: ActionResult) -> Answer:
    # A result the runner refused without a status of its own (a bulk step that skipped
    # every entry because they changed) is a conflict.
    status = outcome.status if outcome.status != 200 or outcome.result == "ok" else 409
    return Answer(
        status,
        {
            "ok": status == 200,
            "result": outcome.result,
            "action": req.action,
            "stream": req.stream,
            "group": req.group,
            "ids": req.ids,
            "new_ids": outcome.new_ids,
            "reported": outcome.reported,
            "channel": req.channel,
            "message": outcome.message,
        },
    )


# --- one action -------------------------------------------------------------------------


def _claim_seen(found: PendingEntry | None) -> dict[str, str]:
    """The entry's owner, idle time and deliveries as the action's own state read found
    them, as Claim's guard; {} when it is not pending (the action then answers why, as
    the button would)."""
    if found is None or found.row is None:
        return {}
    row = found.row
    return {
        "seen_idle_ms": str(row.idle_ms),
        "seen_deliveries": str(row.deliveries),
        "seen_consumer": row.consumer,
    }


def _purge_dry_run(stream: str) -> Answer:
    """What a purge would delete: the length and newest id its confirmation must name."""
    try:
        check_stream(stream)
    except BadRequest as exc:
        return refusal(exc.status, str(exc))
    page = selectors.dead_letter_page(client=get_redis(), stream=stream, count=1)
    length = page.length if page is not None else 0
    newest = page.rows[0].id if page is not None and page.rows else None
    message = (
        f"Dry run: purge would delete {_plural(length)} from the dead-letter stream of "
        f"{stream}" + (f" (newest {newest})" if newest else "") + ". Nothing was changed."
    )
    payload = {
        "ok": True,
        "dry_run": True,
        "action": "purge",
        "stream": stream,
        "expected_length": length,
        "newest_id": newest,
        "message": message,
    }
    return Answer(200, payload)


def _retire_idle_dry_run(stream: str, group: str, fields: Fields) -> Answer:
    """Which consumers Retire idle would retire now (XINFO CONSUMERS and one HGETALL);
    the confirmation must name them (``names``). Changes nothing, audits nothing."""
    form = IdleDryRunForm(dict(fields), target=Target(stream=stream, group=group))
    try:
        check_stream(stream)
        check_group(group)
        form.is_valid()
        idle_ms = form_data(form)["idle"]
        found = idle_dry_run(client=get_redis(), stream=stream, group=group, idle_ms=idle_ms)
    except BadRequest as exc:
        return refusal(exc.status, str(exc))
    except ActionRefused as exc:  # no such group
        return refusal(404, str(exc))
    names = [c.name for c in found]
    whose = f"{len(names)} consumer{'' if len(names) == 1 else 's'} of {group}"
    message = (
        f"Dry run: {whose} idle at least {human_ms(idle_ms)}, holding nothing, without a live "
        f"heartbeat{': ' + ', '.join(names) if names else ''}. Nothing was changed."
    )
    payload = {
        "ok": True,
        "dry_run": True,
        "action": "retire-idle",
        "stream": stream,
        "group": group,
        "idle": str(fields.get("idle", "")).strip(),
        "idle_ms_at_least": idle_ms,
        "count": len(names),
        "names": names,
        "idle_ms": {c.name: c.idle_ms for c in found},
        "message": message,
    }
    return Answer(200, payload)


def action_answer(
    *,
    user: Operator,
    action: str,
    stream: str,
    group: str = "",
    target_id: str = "",
    fields: Fields,
    channel: str,
) -> Answer:
    """Run one action of ``actions.ACTIONS`` as ``user``, as its button would."""
    data: dict[str, Any] = dict(fields)
    if action == "purge" and may_act(user, action, stream):
        if not _confirmed(fields):
            return _purge_dry_run(stream)
        # The typed name guards a click on the wrong page; here the request names it.
        data["confirm_name"] = stream
    if action == "retire-idle" and may_act(user, action, stream) and not _confirmed(fields):
        return _retire_idle_dry_run(stream, group, fields)
    if action in DRY_RUNS and not _confirmed(fields) and may_act(user, action, stream):
        # Reset position and Trim: a dry run unless confirmed, as their pages' (not audited).
        status, payload = DRY_RUNS[action](
            user=user, stream=stream, group=group, fields=data, channel=channel
        )
        return Answer(status, payload)
    # Claim without a guard takes it from the state read, after the permission check.
    fill = _claim_seen if action == "claim" and not fields.get("seen_idle_ms") else None
    req, outcome = action_run(
        user=user,
        action=action,
        stream=stream,
        group=group,
        target_id=target_id,
        data=data,
        channel=channel,
        fill=fill,
    )
    return _outcome_answer(req, outcome)


# --- bulk -------------------------------------------------------------------------------


def _snapshot_now(stream: str, group: str) -> str:
    """The group's newest pending id now ("0-0" when none is, or the group is unknown:
    the bulk call then says so)."""
    try:
        check_stream(stream)
        check_group(group)
    except BadRequest:
        return "0-0"
    summary = selectors.pending_summary(client=get_redis(), stream=stream, group=group)
    return (summary.newest_id if summary is not None else None) or "0-0"


def _dry_run_answer(answer: BulkAnswer, step: BulkStep, found: BulkScope) -> Answer:
    req = answer.req
    scope = "selected" if step.ids is not None else "filter"
    whose = "matching the filter" if step.ids is None else f"of the {len(step.ids)} selected"
    message = (
        f"Dry run: {_plural(found.count)} {whose} "
        f"{'is' if found.count == 1 else 'are'} pending in {req.group} up to "
        f"{step.snapshot_id} and would be {answer.row.verb}."
    )
    if not found.complete:
        message += f" More may match after these (at most {bulk_cap()} per step)."
    message += " Nothing was changed."
    payload = {
        "ok": True,
        "dry_run": True,
        "action": req.action,
        "stream": req.stream,
        "group": req.group,
        "scope": scope,
        "snapshot_id": step.snapshot_id,
        "cursor": step.cursor,
        "count": found.count,
        "ids": list(found.ids),
        "complete": found.complete,
        "cap": bulk_cap(),
        "message": message,
    }
    return Answer(200, payload)


def _step_answer(
    answer: BulkAnswer, step: BulkStep, result: BulkResult, outcome: ActionResult
) -> Answer:
    done_total = step.done_before + len(result.done)
    skipped_total = step.skipped_before + len(result.skipped)
    base = _outcome_answer(answer.req, outcome)
    payload = {
        **base.payload,
        "dry_run": False,
        "snapshot_id": step.snapshot_id,
        "done": list(result.done),
        "skipped": [[i.entry_id, str(i.outcome), i.detail] for i in result.skipped],
        "next_cursor": result.next_cursor,
        "complete": result.complete,
        "done_total": done_total,
        "skipped_total": skipped_total,
    }
    return Answer(base.status, payload)


def bulk_answer(
    *, user: Operator, action: str, stream: str, group: str, fields: Fields, channel: str
) -> Answer:
    """A bulk request as ``user``, as the bulk bar would post it: a dry run unless
    ``confirm`` is "1", then one capped, audited step from ``cursor``."""
    data: dict[str, Any] = dict(fields)
    if not data.get("snapshot_id") and may_act(user, action, stream):  # else the runner's 403
        if _confirmed(fields):
            return refusal(
                400,
                "A confirmed bulk step needs the snapshot id its dry run printed "
                "(snapshot_id), so nothing newer than what you were shown is touched.",
            )
        data["snapshot_id"] = _snapshot_now(stream, group)
    answer = bulk_run(
        user=user, action=action, stream=stream, group=group, data=data, channel=channel
    )
    if answer is None:
        return refusal(404, f"no bulk action {action!r} (retry, dead-letter or acknowledge)")
    step, outcome = answer.step, answer.outcome
    if step is not None and answer.dry_run is not None:
        return _dry_run_answer(answer, step, answer.dry_run)
    if step is not None and answer.result is not None and outcome is not None:
        return _step_answer(answer, step, answer.result, outcome)
    # Refused before a step (permission, form, unknown group) or by the dry run.
    return _outcome_answer(answer.req, outcome or ActionResult("refused", "Nothing was done."))
