"""Actions on pending entries and dead letters: Retry, Claim, Dead-letter, Acknowledge,
Replay, Delete, Purge.

Owns seven rows of the action table (``ROWS``, merged into
``dashboard.views.actions.ACTIONS``), each one service call of ``queue_core.services``
and the message it answers with. The kind of each row ("pending", "dead-letter",
"dead-letters") picks its route, its audit fields and its state-before read
(``dashboard.views.actions``).

It never reads Redis (the state before is the views') and writes it only through the
services, one round trip each, atomically.
"""

from __future__ import annotations

from django.conf import settings

from dashboard.views.action_runner import ActionResult
from dashboard.views.action_table import Action, Call
from dashboard.views.forms import (
    AcknowledgeForm,
    ActionForm,
    ClaimForm,
    DeadLetterForm,
    PurgeForm,
)
from queue_core import services


def _retry(call: Call) -> ActionResult:
    retried = services.entry_retry(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        entry_id=call.entry_id,
        idle_ms=settings.ACKBOARD_RETRY_IDLE_MS,
    )
    return ActionResult(
        "ok",
        f"Entry {call.entry_id} will be redelivered to a worker of {call.req.group} on its "
        "next reclaim sweep.",
        reported={"idle_after_ms": retried.idle_ms},
    )


def _claim(call: Call) -> ActionResult:
    claimed = services.entry_claim(
        client=call.client,
        consumer=call.data["consumer"],
        seen_idle_ms=call.data["seen_idle_ms"],
        seen_deliveries=call.data["seen_deliveries"],
        seen_consumer=call.data["seen_consumer"] or None,
        stream=call.req.stream,
        group=call.req.group,
        entry_id=call.entry_id,
    )
    return ActionResult(
        "ok",
        f"Entry {call.entry_id} claimed by {claimed.consumer} (was {claimed.previous_consumer}).",
        reported={"claimed_by": claimed.consumer},
    )


def _dead_letter(call: Call) -> ActionResult:
    moved = services.entry_dead_letter(
        client=call.client,
        reason=call.req.reason or "dead-lettered by an operator",
        operator=call.operator,
        expected_consumer=call.data["seen_consumer"],
        stream=call.req.stream,
        group=call.req.group,
        entry_id=call.entry_id,
    )
    if moved is None:
        return ActionResult(
            "refused",
            f"Entry {call.entry_id} is no longer pending in {call.req.group}: someone "
            "acknowledged or dead-lettered it first. Nothing was changed.",
            status=409,
        )
    return ActionResult(
        "ok",
        f"Entry {call.entry_id} moved to the dead-letter stream as {moved.dlq_id}.",
        new_ids=[moved.dlq_id],
        removed=True,
    )


def _acknowledge(call: Call) -> ActionResult:
    acked = services.entry_acknowledge(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        entry_id=call.entry_id,
        reason=call.req.reason,
    )
    if not acked.was_pending:
        return ActionResult(
            "refused",
            f"Entry {call.entry_id} is no longer pending in {call.req.group}. Nothing was changed.",
            status=409,
        )
    return ActionResult("ok", f"Entry {call.entry_id} acknowledged (discarded).", removed=True)


def _replay(call: Call) -> ActionResult:
    dlq_id = call.entry_id
    replayed = services.dlq_replay(client=call.client, stream=call.req.stream, dlq_id=dlq_id)
    return ActionResult(
        "ok",
        f"Dead-letter entry {dlq_id} replayed to group {replayed.group} as {replayed.new_id}.",
        new_ids=[replayed.new_id],
        removed=True,
        reported={"origin_group": replayed.group, "origin_id": replayed.origin_id},
    )


def _delete(call: Call) -> ActionResult:
    dlq_id = call.entry_id
    deleted = services.dlq_delete(client=call.client, stream=call.req.stream, dlq_id=dlq_id)
    if not deleted.deleted:
        return ActionResult(
            "refused", f"Dead-letter entry {dlq_id} was already gone. Nothing was changed.", 409
        )
    return ActionResult("ok", f"Dead-letter entry {dlq_id} deleted.", removed=True)


def _purge(call: Call) -> ActionResult:
    purged = services.dlq_purge(
        client=call.client,
        stream=call.req.stream,
        expected_length=call.data["expected_length"],
        newest_id=call.data["newest_id"],
    )
    return ActionResult(
        "ok",
        f"Purged {purged.deleted} dead-letter entr{'y' if purged.deleted == 1 else 'ies'}.",
        reported={"deleted": purged.deleted},
    )


ROWS: tuple[Action, ...] = (
    Action("retry", "pending", ActionForm, _retry),
    Action("claim", "pending", ClaimForm, _claim),
    Action("dead-letter", "pending", DeadLetterForm, _dead_letter),
    Action("acknowledge", "pending", AcknowledgeForm, _acknowledge),
    Action("replay", "dead-letter", ActionForm, _replay),
    Action("delete", "dead-letter", ActionForm, _delete),
    Action("purge", "dead-letters", PurgeForm, _purge),
)
