"""Writes: the operator's actions on one pending entry or one dead-letter stream.

Each service is keyword-only, typed, atomic (one Lua script from ``queue_core.scripts``,
which owns its keys, args and reply), guarded and idempotent. A refused guard raises
ActionRefused with a message an operator can read; a malformed id raises ValueError
before Redis is asked (``queue_core.validation``); a raw Redis error never escapes for a
missing group or a key of the wrong type (``queue_core.errors``). Every change publishes
an ``action`` event (a hint for live pages, never state).

Services never import Django and never decide permissions; the dashboard wraps each one
in a permission check and an audit row. Bulk scoping lives in ``queue_core.bulk``; the
worker moves its own dead letters with the same script (``worker.settle``).
"""

from __future__ import annotations

from collections.abc import Sequence

from queue_core.connection import Client
from queue_core.events import event_publish
from queue_core.keys import stream_keys
from queue_core.results import (
    Acknowledged,
    Claimed,
    DeadLetterDeleted,
    DeadLettered,
    DeadLettersPurged,
    Replayed,
    Retried,
)
from queue_core.scripts import (
    ACKNOWLEDGE,
    CLAIM,
    DEAD_LETTER,
    DLQ_DELETE,
    DLQ_PURGE,
    DLQ_REPLAY,
    RETRY,
    Refusal,
)
from queue_core.validation import (
    count_check,
    entry_id_check,
    idle_check,
    name_check,
    reason_check,
)

#: The worker's default ``--min-idle-ms``: a retried entry is made at least this idle,
#: so a live worker's next XAUTOCLAIM sweep takes it.
RETRY_IDLE_MS = 30_000
#: Default consumer name for operator claims.
OPERATOR_CONSUMER = "ackboard-operator"
#: Where ``admin.consumer_retire`` parks the entries it makes due for reclaim.
PARKING_CONSUMER = "ackboard-retired"
#: Where Retry later parks an entry until it is due (``queue_core.later``).
LATER_CONSUMER = "ackboard-later"
#: Consumer names Ackboard itself uses that no worker reads as. An XCLAIM refreshes their
#: idle, so they would look live: no liveness rule (fleet control, resets) counts them.
OWN_CONSUMERS = (OPERATOR_CONSUMER, PARKING_CONSUMER, LATER_CONSUMER)


def _publish(client: Client, *, action: str, stream: str, group: str, ids: list[str]) -> None:
    event_publish(client=client, type="action", stream=stream, group=group, action=action, ids=ids)


# --- pending entries ------------------------------------------------------------------


def later_forget(*, client: Client, stream: str, group: str, ids: Sequence[str]) -> None:
    """Drop the due times of ``ids`` (a Retry of parked entries: else the release step
    would park them again). One ZREM, none for no ids. A separate command, not part of
    the Retry script, so that script keeps one key and is followed through a slot
    migration; if the ZREM is lost, or a release step runs between the two, the entry is
    parked again and reclaimed at its due time or the workers' min-idle, never lost."""
    if not ids:
        return
    try:
        key = stream_keys(stream).later(group)
    except ValueError:
        return
    client.zrem(key, *ids)


def entry_retry(
    *,
    client: Client,
    stream: str,
    group: str,
    entry_id: str,
    idle_ms: int = RETRY_IDLE_MS,
) -> Retried:
    """Make a pending entry due for redelivery within its own group, under its own id.

    XCLAIMs the entry to its current owner with ``IDLE max(current idle, idle_ms)`` and
    JUSTID, so its delivery count is unchanged and a live worker whose ``min_idle`` is at
    most ``idle_ms`` takes it on its next XAUTOCLAIM sweep (a worker keeps its sweep
    cursor, so "next" may mean after the sweep wraps). Nothing is added to the stream:
    other consumer groups never see the entry twice. Idempotent: retrying twice only
    sets the idle time again.

    Raises ActionRefused when the entry is not pending in ``group`` or its payload was
    deleted (Redis 7 would silently drop it from the pending list). One round trip;
    O(log n) in Redis.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(entry_id)
    idle_check(idle_ms, "idle_ms")
    call = RETRY.call(stream=stream, group=group, entry_id=entry_id, idle_ms=idle_ms)
    result = call.run(client)
    if isinstance(result, Refusal):
        raise result.error()
    if result.consumer == LATER_CONSUMER:
        # Parked by Retry later: forget its due time, or the release step parks it again.
        later_forget(client=client, stream=stream, group=group, ids=[entry_id])
    _publish(client, action="retry", stream=stream, group=group, ids=[entry_id])
    return result


def entry_claim(
    *,
    client: Client,
    stream: str,
    group: str,
    entry_id: str,
    consumer: str = OPERATOR_CONSUMER,
    seen_idle_ms: int,
    seen_deliveries: int | None = None,
    seen_consumer: str | None = None,
) -> Claimed:
    """Compare-and-set XCLAIM of a pending entry to ``consumer``.

    The guard is what the operator saw: the entry must still be pending, idle at least
    ``seen_idle_ms``, and (when given) delivered exactly ``seen_deliveries`` times and owned
    by ``seen_consumer``. A worker that reads or reclaims the entry resets its idle time
    and bumps its count, so the claim is then refused with "changed since you looked".
    Pass all three: a reclaim with JUSTID leaves the count alone, and once the idle time
    has grown back past what was seen, only the owner shows the change. The claim is a delivery: the
    count goes up by one. One Lua script, one round trip; O(log n) in Redis.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    name_check(consumer, "consumer")
    entry_id_check(entry_id)
    idle_check(seen_idle_ms, "seen_idle_ms")
    if seen_deliveries is not None:
        count_check(seen_deliveries, "seen_deliveries")
    if seen_consumer is not None:
        name_check(seen_consumer, "seen_consumer")
    result = CLAIM.call(
        stream=stream,
        group=group,
        entry_id=entry_id,
        consumer=consumer,
        seen_idle_ms=seen_idle_ms,
        seen_deliveries=seen_deliveries,
        seen_consumer=seen_consumer,
    ).run(client)
    if isinstance(result, Refusal):
        raise result.error()
    _publish(client, action="claim", stream=stream, group=group, ids=[entry_id])
    return result


def entry_dead_letter(
    *,
    client: Client,
    stream: str,
    group: str,
    entry_id: str,
    reason: str,
    last_error: str = "",
    operator: str = "",
    expected_consumer: str = "",
    seen_idle_ms: int | None = None,
) -> DeadLettered | None:
    """Move a pending entry to ``{S}:dlq`` with origin metadata and XACK it, atomically.

    Returns None when the entry is no longer pending in ``group`` (someone else acked
    or dead-lettered it first), so doing it twice leaves one copy. One round trip;
    O(fields) in Redis. With ``expected_consumer`` it raises ActionRefused when another
    consumer owns the entry now; with ``seen_idle_ms`` when the entry was delivered again
    since the operator saw it that idle. Raises CrossSlotName for names that cannot be
    moved atomically, and TooManyFields (an ActionRefused) when the entry has more fields
    than the script can copy; the entry then stays pending.

    ``scripts.DEAD_LETTER.move`` plus the event: when ``operator`` is set (an operator's
    action, not a worker's), an ``action`` event is published after the move.
    """
    result = DEAD_LETTER.move(
        client=client,
        stream=stream,
        group=group,
        entry_id=entry_id,
        reason=reason,
        last_error=last_error,
        operator=operator,
        expected_consumer=expected_consumer,
        seen_idle_ms=seen_idle_ms,
    )
    if result is not None and operator:
        _publish(client, action="dead_letter", stream=stream, group=group, ids=[entry_id])
    return result


def entry_acknowledge(
    *,
    client: Client,
    stream: str,
    group: str,
    entry_id: str,
    reason: str,
) -> Acknowledged:
    """Discard a pending entry (XACK), with a required reason for the audit trail.

    Idempotent: an entry that is no longer pending gives ``was_pending=False`` and
    changes nothing. The result carries the owner and delivery count from before the
    XACK. Raises ValueError for an empty reason. One Lua script, one round trip;
    O(log n) in Redis.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(entry_id)
    reason_check(reason, required=True)
    result = ACKNOWLEDGE.call(stream=stream, group=group, entry_id=entry_id).run(client)
    if isinstance(result, Refusal):
        # Unguarded, so the one refusal is "not pending": nothing to do, and idempotent.
        return Acknowledged(entry_id=entry_id, was_pending=False)
    _publish(client, action="acknowledge", stream=stream, group=group, ids=[entry_id])
    return result


# --- the dead-letter stream -----------------------------------------------------------


def dlq_replay(*, client: Client, stream: str, dlq_id: str) -> Replayed:
    """Put a dead-lettered entry back on ``stream`` for its original group only.

    One Lua script: XADD the original fields (without ``ackboard.*`` metadata) plus
    ``ackboard.replay-group=<origin group>`` and ``ackboard.replay-of=<origin id>``, and
    XDEL the entry from ``{S}:dlq``. The group delivers the new entry as usual; workers
    of other groups on the stream acknowledge it without running their handler, so it
    runs once, in the right group. Not idempotent by nature (it creates an entry), but
    safe to repeat: the second call finds the DLQ entry gone and is refused.

    Raises ActionRefused for an unknown DLQ id, a payload-missing entry (nothing to
    replay), or an origin group that no longer exists; TooManyFields when the entry has
    more fields than the script can copy (never one that ``entry_dead_letter`` moved).
    One round trip; O(fields + groups) in Redis.
    """
    entry_id_check(dlq_id, what="dead-letter id")
    result = DLQ_REPLAY.call(stream=stream, dlq_id=dlq_id).run(client)
    if isinstance(result, Refusal):
        raise result.error()
    _publish(client, action="replay", stream=stream, group=result.group, ids=[result.new_id])
    return result


def dlq_delete(*, client: Client, stream: str, dlq_id: str) -> DeadLetterDeleted:
    """Delete one dead-lettered entry. Idempotent: a missing id gives ``deleted=False``.

    The result names the entry's origin group and id, for the audit row. One Lua script,
    one round trip; O(fields) in Redis.
    """
    entry_id_check(dlq_id, what="dead-letter id")
    result = DLQ_DELETE.call(stream=stream, dlq_id=dlq_id).run(client)
    if not result.deleted:
        return result
    _publish(client, action="delete", stream=stream, group=result.origin_group, ids=[dlq_id])
    return result


def dlq_purge(
    *,
    client: Client,
    stream: str,
    expected_length: int,
    newest_id: str | None = None,
) -> DeadLettersPurged:
    """Empty ``{S}:dlq``, but only if it still holds what the operator confirmed.

    ``expected_length`` is the count the operator saw (and typed-confirmed) and
    ``newest_id`` the newest dead-letter id on their page. If anything was dead-lettered
    or removed since, it refuses with "changed since you looked" rather than delete
    entries nobody has seen. Purging an already empty DLQ with ``expected_length=0`` is a
    no-op. One Lua script, one round trip; UNLINK frees the entries in the background.
    """
    if count_check(expected_length, "expected_length") < 0:
        raise ValueError("expected_length cannot be negative")
    if newest_id is not None:
        entry_id_check(newest_id, what="newest dead-letter id")
    call = DLQ_PURGE.call(stream=stream, expected_length=expected_length, newest_id=newest_id)
    result = call.run(client)
    if isinstance(result, Refusal):
        raise result.error()
    if result.deleted:
        _publish(client, action="purge", stream=stream, group="", ids=[])
    return result
