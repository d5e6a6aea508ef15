"""Actions on pending entries and dead letters: Retry, Claim, Dead-letter, Acknowledge,
Replay, Delete, Purge.

Owns seven rows of the action table (``ROWS``, merged into
``dashboard.views.actions.ACTIONS``): each one service call of ``queue_core.services``
and the message it answers with, its permission, its explanation and its subcommand.
The kind of each row ("pending", "dead-letter", "dead-letters") picks its route, its
audit fields and its state-before read (``dashboard.views.actions``).

It reads Redis only for a terminal's or a script's Purge dry run (the dead-letter
stream's length and newest id, one round trip through ``queue_core.selectors``; the state
before is the views') and writes it only through the services, one round trip each,
atomically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from django.conf import settings

from dashboard.runtime.connection import get_redis
from dashboard.views.action_cli import GROUP, STREAM, Arg, Cli, Options, option, reason, yes
from dashboard.views.action_runner import ActionResult, BadRequest, check_stream
from dashboard.views.action_table import Action, Call, Remote
from dashboard.views.answer import Answer, refusal
from dashboard.views.forms import (
    AcknowledgeForm,
    ActionForm,
    ClaimForm,
    DeadLetterForm,
    PurgeForm,
)
from queue_core import selectors, services
from queue_core.types import PendingEntry, PendingRow


def _after(call: Call, *, consumer: str, deliveries: int) -> PendingRow | None:
    """The entry's pending row after its service ran, idle from now: the payload the state
    read found (``call.seen``) with the owner and deliveries the service reported, so the
    pending table re-renders it without reading it again. None when nothing was read."""
    seen = call.seen.row if call.seen is not None else None
    if seen is None:
        return None
    return replace(seen, consumer=consumer, deliveries=deliveries, idle_ms=0)


def _retry(call: Call) -> ActionResult:
    retried = services.entry_retry(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        entry_id=call.entry_id,
        idle_ms=settings.ACKBOARD_RETRY_IDLE_MS,
    )
    after = _after(call, consumer=retried.consumer, deliveries=retried.deliveries)
    return ActionResult(
        "ok",
        f"Entry {call.entry_id} will be redelivered to a worker of {call.req.group} on its "
        "next reclaim sweep.",
        reported={"idle_after_ms": retried.idle_ms},
        pending_row=after and replace(after, idle_ms=retried.idle_ms),
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
        # XCLAIM without IDLE: the claim is a delivery, idle from now.
        pending_row=_after(call, consumer=claimed.consumer, deliveries=claimed.deliveries),
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


# --- for a terminal and a script (dashboard.views.remote) ----------------------------------


def _claim_seen(fields: Mapping[str, Any], found: PendingEntry | None) -> dict[str, str]:
    """Claim's guard for a request that names none (no ``seen_idle_ms``): the entry's
    owner, idle time and deliveries as the action's own state read found them; {} when
    it is not pending (the action then answers why, as the button would)."""
    if fields.get("seen_idle_ms") or found is None or found.row is None:
        return {}
    row = found.row
    return {
        "seen_idle_ms": str(row.idle_ms),
        "seen_deliveries": str(row.deliveries),
        "seen_consumer": row.consumer,
    }


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _purge_dry_run(remote: Remote) -> Answer:
    """What a purge would delete: the length and newest id its confirmation must name
    (``selectors.dead_letter_page``, one round trip)."""
    stream = remote.stream
    try:
        check_stream(stream)
    except BadRequest as exc:
        return refusal(exc.status, str(exc))
    page = selectors.dead_letter_page(client=get_redis(), stream=stream, count=1)
    length = page.length if page is not None else 0
    newest = page.rows[0].id if page is not None and page.rows else None
    message = (
        f"Dry run: purge would delete {_entries(length)} from the dead-letter stream of "
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


def _purge_typed_name(remote: Remote) -> dict[str, str]:
    """The typed name guards a click on the wrong page; here the request names it."""
    return {"confirm_name": remote.stream}


def _entry_cli(name: str) -> Cli:
    """``NAME STREAM GROUP ID [ID …]``: one answer per id."""
    args = [STREAM, GROUP, Arg(("ids",), {"nargs": "+", "metavar": "ID"}, target="id")]
    args.append(reason("Audited; required to acknowledge."))
    if name == "claim":
        args += [
            option("--consumer", "The new owner."),
            option("--seen-idle-ms", "Guard (default: now)."),
            option("--seen-deliveries"),
        ]
    if name in ("claim", "dead-letter"):
        args.append(option("--seen-consumer", "The owner you expect."))
    return Cli(f"{name} pending entries", tuple(args))


#: ``NAME STREAM DLQ_ID [DLQ_ID …]``: one answer per dead letter.
_DEAD_LETTER_ARGS = (STREAM, Arg(("ids",), {"nargs": "+", "metavar": "DLQ_ID"}, target="id"))


def _purge_hint(payload: Mapping[str, Any], options: Options) -> str:
    hint = f" To act, run again with --yes --expected-length {payload['expected_length']}"
    if payload["newest_id"]:
        hint += f" --newest-id {payload['newest_id']}"
    return hint + "."


_PURGE_CLI = Cli(
    "empty a dead-letter stream (dry run unless --yes)",
    (
        STREAM,
        yes("Purge, as the dry run showed it."),
        option("--expected-length", "The length the dry run printed."),
        option("--newest-id", "The newest id the dry run printed."),
    ),
    hint=_purge_hint,
)

#: Retry's line for a row already idle at least ``ACKBOARD_RETRY_IDLE_MS``
#: (``{% action_explain %}`` picks it): why such a Retry changes nothing visible.
RETRY_DUE = (
    "Already due: it has been idle longer than the {retry_idle} Retry gives, so the "
    "next reclaim sweep of a {group} worker takes it anyway. Retry changes nothing "
    "you can see."
)

ROWS: tuple[Action, ...] = (
    Action(
        "retry", "pending", ActionForm, _retry,
        permission="dashboard.retry_entry",
        explain=(
            "Retry makes it due at the next reclaim sweep of a {group} worker: its idle time "
            "becomes {retry_idle}, so a worker whose --min-idle-ms is no longer takes it over. "
            "Same id, this group only."
        ),
        cli=_entry_cli("retry"),
    ),
    Action(
        "claim", "pending", ClaimForm, _claim,
        permission="dashboard.claim_entry",
        remote_guard=_claim_seen,
        explain=(
            "Claim hands it to the consumer you name only until it has been idle for the "
            "workers' --min-idle-ms; then a worker's reclaim sweep takes it back. It counts "
            "as one delivery toward --max-deliveries."
        ),
        cli=_entry_cli("claim"),
    ),
    Action(
        "dead-letter", "pending", DeadLetterForm, _dead_letter,
        permission="dashboard.dead_letter_entry",
        explain=(
            "Dead-letter moves it, with where it came from, to the dead-letter stream and "
            "acknowledges it in {group}; Replay there puts it back."
        ),
        cli=_entry_cli("dead-letter"),
    ),
    Action(
        "acknowledge", "pending", AcknowledgeForm, _acknowledge,
        permission="dashboard.acknowledge_entry",
        explain=(
            "Acknowledge discards it in {group} without running it; other groups keep their "
            "copy. It cannot be undone."
        ),
        cli=_entry_cli("acknowledge"),
    ),
    Action(
        "replay", "dead-letter", ActionForm, _replay,
        permission="dashboard.replay_entry",
        explain=(
            "Replay adds it to the stream again, with a new id, for {group} only (workers of "
            "other groups acknowledge it without running it), and removes it from the dead "
            "letters."
        ),
        cli=Cli("replay dead-lettered entries", _DEAD_LETTER_ARGS),
    ),
    Action(
        "delete", "dead-letter", ActionForm, _delete,
        # Delete and Purge share one permission: both destroy dead-lettered entries.
        permission="dashboard.delete_dead_letter",
        explain="Delete removes this dead letter for good; nothing is replayed.",
        cli=Cli("delete dead-lettered entries", _DEAD_LETTER_ARGS),
    ),
    Action(
        "purge", "dead-letters", PurgeForm, _purge,
        permission="dashboard.delete_dead_letter",
        explain=(
            "Purge deletes every dead letter of this stream for good, and nothing at all if "
            "anything was dead-lettered since this page loaded."
        ),
        cli=_PURGE_CLI,
        remote_dry_run=_purge_dry_run,
        remote_fields=_purge_typed_name,
    ),
)  # fmt: skip
