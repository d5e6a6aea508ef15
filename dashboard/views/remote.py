"""What the CLI (``manage.py ackboard``) and the JSON API (``dashboard.views.api``) share.

Owns turning a request from a terminal or a script (an action, its target and the
fields its button would post) into the button's own call, ``actions.action_run`` or
``bulk.bulk_run``, or the editor's ``edit_replay.edit_replay_run``, and the outcome into
one ``Answer``: an HTTP status and a JSON-able
payload whose ``message`` is the one line a terminal prints.

A terminal has not seen a page, so where a button posts what its page showed, the
request is completed first, and only for a user who may run the action:

- a bulk dry run without ``snapshot_id`` is scoped to the group's newest pending id
  (one XPENDING summary, O(1)), and says which, so the confirmation names it;
- for one action, what its row declares (``Action.remote_dry_run``, ``remote_fields``,
  ``remote_guard``): without ``confirm``, its dry run (Purge: the dead-letter stream's
  length and newest id; Retire idle consumers: the consumers it would retire; Reset
  position and Trim: their previews), which the confirmation must name; the fields its
  request names already (Purge's typed stream name); the guard a page would have shown
  (Claim's owner, idle time and deliveries, from the action's own state read, no extra
  round trip). This module has no code of its own per action.

A confirmed bulk step or purge still needs what its dry run printed, so nothing newer
than what the operator was shown is ever touched. It never writes to Redis or SQL
itself: the runner does, with one audit row per attempt naming the user and the channel
("cli" or "api"); a dry run writes nothing, as the bulk bar's does. A Redis error
propagates for the caller to answer (503, or exit status 5).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from dashboard.access.permissions import may_act
from dashboard.runtime.connection import get_redis
from dashboard.views.action_runner import (
    ActionRequest,
    ActionResult,
    BadRequest,
    Operator,
    check_group,
    check_stream,
)
from dashboard.views.action_table import Remote
from dashboard.views.actions import ACTIONS, action_run
from dashboard.views.answer import Answer, refusal

__all__ = ["Answer", "Fields", "action_answer", "bulk_answer", "refusal"]
from dashboard.views.bulk import BulkAnswer, BulkStep, bulk_cap, bulk_run
from dashboard.views.edit_replay import FieldChanges, edit_replay_run
from queue_core import selectors
from queue_core.results import BulkResult, BulkScope

#: What a remote request posts: the button's form fields (``ids`` is a list).
Fields = Mapping[str, str | list[str]]


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
    """Run one action of ``actions.ACTIONS`` as ``user``, as its button would.

    What differs from a button is the row's to say (``Action.remote_dry_run``,
    ``remote_fields``, ``remote_guard``), applied only for a user who may act (else the
    runner's audited 403): without ``confirm``, a row with a dry run answers it; the
    fields its request names already are added; a pending row's guard fields the request
    left blank come from the action's own state read."""
    data: dict[str, Any] = dict(fields)
    row = ACTIONS.get(action)
    guard = None
    if row is not None and may_act(user, action, stream):
        remote = Remote(user=user, stream=stream, group=group, fields=data, channel=channel)
        if row.remote_dry_run is not None and not _confirmed(fields):
            return row.remote_dry_run(remote)
        if row.remote_fields is not None:
            data.update(row.remote_fields(remote))
        if row.remote_guard is not None:
            guard = functools.partial(row.remote_guard, fields)
    req, outcome = action_run(
        user=user,
        action=action,
        stream=stream,
        group=group,
        target_id=target_id,
        data=data,
        channel=channel,
        fill=guard,
    )
    return _outcome_answer(req, outcome)


def edit_replay_answer(
    *, user: Operator, stream: str, dlq_id: str, changes: FieldChanges, fields: Fields,
    channel: str,
) -> Answer:  # fmt: skip
    """Edit & replay a dead letter as ``user``: ``changes`` applied to its payload fields
    (``fields``: ``reason``, ``force``), through the editor's own path and audit row."""
    req, outcome = edit_replay_run(
        None, user=user, stream=stream, dlq_id=dlq_id, data=fields, edited=changes.edited,
        channel=channel,
    )  # fmt: skip
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
    if step.fingerprint:  # as the bulk bar says it (dashboard/_bulk_bar.html)
        whose = f"whose last failure has cause {step.fingerprint}"
    elif step.ids is None:
        whose = "matching the filter"
    else:
        whose = f"of the {len(step.ids)} selected"
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
