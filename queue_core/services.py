"""Writes: operator actions and the worker's dead-letter move.

Each service is keyword-only, typed, atomic (a Lua script where it checks before it
acts or touches two keys), guarded and idempotent. A refused guard raises ActionRefused
with a message an operator can read; a malformed id raises ValueError before Redis is
asked; a raw Redis error never escapes for a missing group or a key of the wrong type.
Every change publishes an ``action`` event (a hint for live pages, never state).

Services never import Django and never decide permissions; the dashboard wraps each one
in a permission check and an audit row. Bulk scoping lives in ``queue_core.bulk``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from queue_core.events import event_publish
from queue_core.keys import (
    REPLAY_GROUP_FIELD,
    REPLAY_OF_FIELD,
    RESERVED_PREFIX,
    stream_keys,
)
from queue_core.lua import script
from queue_core.types import (
    Acknowledged,
    ActionRefused,
    Claimed,
    DeadLetterDeleted,
    DeadLettered,
    DeadLettersPurged,
    Replayed,
    Retried,
)

#: The worker's default ``--min-idle-ms``: a retried entry is made at least this idle,
#: so a live worker's next XAUTOCLAIM sweep takes it.
RETRY_IDLE_MS = 30_000
#: Idle times are capped (ten years) so Lua formats them as plain integers and XCLAIM
#: never computes a delivery time before the epoch (which Redis silently turns into "now").
MAX_IDLE_MS = 10 * 365 * 24 * 3600 * 1000
#: Default consumer name for operator claims.
OPERATOR_CONSUMER = "ackboard-operator"
#: Longest reason kept; reasons are audit text, not payloads.
MAX_REASON_LENGTH = 2000

_ID = re.compile(r"\A(\d{1,20})-(\d{1,20})\Z")
_U64 = 2**64 - 1
_ERROR_CODE = re.compile(r"(?:\A|: )(NOGROUP|WRONGTYPE) ")
_T = TypeVar("_T")

ORIGIN_GROUP_FIELD = RESERVED_PREFIX + "origin-group"
ORIGIN_ID_FIELD = RESERVED_PREFIX + "origin-id"


class TooManyFields(ActionRefused):
    """The entry has more fields than one script can copy (Lua's unpack() limit).

    A certain refusal: the script checked before changing anything, so the entry is where
    it was (still pending, or still in the DLQ). Retrying will not help; the operator must
    acknowledge the entry (or delete the dead letter) or have the producer split it.
    """

    def __init__(self, message: str, *, fields: int, limit: int) -> None:
        super().__init__(message)
        self.fields = fields
        self.limit = limit


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def entry_id_check(entry_id: str, *, what: str = "entry id") -> str:
    """Return ``entry_id`` if it is a full stream id (``<ms>-<seq>``), else raise ValueError.

    Both parts must fit in 64 bits, as Redis requires. Pure Python; no round trip.
    """
    match = _ID.match(entry_id) if isinstance(entry_id, str) else None
    if match is None or int(match[1]) > _U64 or int(match[2]) > _U64:
        shown = entry_id if isinstance(entry_id, str) and len(entry_id) <= 60 else "that value"
        raise ValueError(f"{what} {shown!r} is not a stream id like 1700000000000-0")
    return entry_id


def entry_id_key(entry_id: str) -> tuple[int, int]:
    """The sort key of a valid stream id: ids compare by (ms, seq), not as text."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def entry_id_after(entry_id: str) -> str:
    """The smallest stream id greater than ``entry_id`` (a cursor that excludes it)."""
    ms, seq = entry_id_key(entry_id)
    return f"{ms + 1}-0" if seq == _U64 else f"{ms}-{seq + 1}"


def name_check(value: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    return value


def idle_check(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_IDLE_MS:
        raise ValueError(f"{what} must be a whole number of ms between 0 and {MAX_IDLE_MS}")
    return value


def reason_check(reason: str, *, required: bool) -> str:
    if not isinstance(reason, str):
        raise ValueError("reason must be text")
    reason = reason.strip()
    if required and not reason:
        raise ValueError("a reason is required")
    return reason[:MAX_REASON_LENGTH]


def redis_refusal(exc: redis.ResponseError, *, stream: str, group: str = "") -> ActionRefused:
    """Translate the Redis errors an operator can cause into a readable refusal.

    Re-raises anything else: a bug must stay loud.
    """
    # Inside a script the code follows "Error running script (...): @user_script:N: ".
    code = _ERROR_CODE.search(str(exc))
    kind = code[1] if code else ""
    if kind == "NOGROUP":
        return ActionRefused(f"there is no consumer group {group!r} on stream {stream!r}")
    if kind == "WRONGTYPE":
        return ActionRefused(f"{stream!r} is not a stream")
    raise exc


def _run(call: Callable[[], _T], *, stream: str, group: str = "") -> _T:
    try:
        return call()
    except redis.ResponseError as exc:
        raise redis_refusal(exc, stream=stream, group=group) from exc


def _publish(client: redis.Redis, *, action: str, stream: str, group: str, ids: list[str]) -> None:
    event_publish(client=client, type="action", stream=stream, group=group, action=action, ids=ids)


# --- per-entry script calls, shared with queue_core.bulk ------------------------------
# Each pair builds the (keys, args) of one script call and reads its reply, so a bulk
# request can pipeline the very same atomic scripts.


def retry_call(
    *,
    stream: str,
    group: str,
    entry_id: str,
    idle_ms: int,
    expected_consumer: str = "",
    min_idle_ms: int | None = None,
) -> tuple[list[str], list[str | int]]:
    guard = "" if min_idle_ms is None else str(min_idle_ms)
    return [stream], [group, entry_id, idle_ms, expected_consumer, guard]


def acknowledge_call(
    *,
    stream: str,
    group: str,
    entry_id: str,
    expected_consumer: str = "",
    min_idle_ms: int | None = None,
) -> tuple[list[str], list[str | int]]:
    guard = "" if min_idle_ms is None else str(min_idle_ms)
    return [stream], [group, entry_id, expected_consumer, guard]


def dead_letter_call(
    *,
    stream: str,
    group: str,
    entry_id: str,
    reason: str,
    last_error: str = "",
    operator: str = "",
    expected_consumer: str = "",
    min_idle_ms: int | None = None,
) -> tuple[list[str], list[str | int]]:
    keys = stream_keys(stream)
    guard = "" if min_idle_ms is None else str(min_idle_ms)
    args: list[str | int] = [group, entry_id, reason, last_error, operator, expected_consumer]
    return [keys.stream, keys.dlq], [*args, guard]


def refusal_text(reply: Sequence[Any], entry_id: str) -> tuple[str, str]:
    """``(kind, message)`` for a script's ``{false, kind, ...}`` reply."""
    kind = _text(reply[1])
    extra = [_text(v) if isinstance(v, bytes) else v for v in reply[2:]]
    if kind == "not-pending":
        message = f"entry {entry_id} is not pending in this group (acknowledged or moved already)"
    elif kind == "payload-missing":
        message = (
            f"entry {entry_id} was deleted from the stream while pending (payload missing); "
            "dead-letter or acknowledge it instead"
        )
    elif kind == "owner-changed":
        message = f"changed since you looked: entry {entry_id} is now owned by {extra[0]}"
    elif kind == "idle-changed":
        message = (
            f"changed since you looked: entry {entry_id} was delivered again "
            f"(idle {extra[0]} ms now)"
        )
    elif kind == "deliveries-changed":
        message = (
            f"changed since you looked: entry {entry_id} has a delivery count of {extra[0]} now"
        )
    elif kind == "too-many-fields":
        message = _too_many_fields(extra, entry_id).args[0]
    else:
        message = f"entry {entry_id}: {kind}"
    return kind, message


def _too_many_fields(extra: Sequence[Any], entry_id: str) -> TooManyFields:
    fields, limit = int(extra[0]), int(extra[1])
    return TooManyFields(
        f"entry {entry_id} has {fields} fields; a dead-letter move copies at most {limit} in "
        "one atomic step, so nothing was changed and it stays pending. Acknowledge it with a "
        "reason instead (copy what you need with redis-cli XRANGE first), or have the "
        "producer send fewer fields.",
        fields=fields,
        limit=limit,
    )


def retried_from(reply: Sequence[Any], entry_id: str) -> Retried:
    _, owner, deliveries, idle_before, idle_after = reply
    return Retried(
        entry_id=entry_id,
        consumer=_text(owner),
        deliveries=int(deliveries),
        idle_before_ms=int(idle_before),
        idle_ms=int(idle_after),
    )


def acknowledged_from(reply: Sequence[Any], entry_id: str) -> Acknowledged:
    _, owner, deliveries, idle = reply
    return Acknowledged(
        entry_id=entry_id,
        was_pending=True,
        consumer=_text(owner),
        deliveries=int(deliveries),
        idle_ms=int(idle),
    )


def dead_lettered_from(reply: Sequence[Any], entry_id: str) -> DeadLettered:
    dlq_id, owner, deliveries, missing = reply
    return DeadLettered(
        entry_id=entry_id,
        dlq_id=_text(dlq_id),
        consumer=_text(owner),
        deliveries=int(deliveries),
        payload_missing=bool(int(missing)),
    )


# --- pending entries ------------------------------------------------------------------


def entry_retry(
    *,
    client: redis.Redis,
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
    keys, args = retry_call(stream=stream, group=group, entry_id=entry_id, idle_ms=idle_ms)
    retry = script(client, "retry")
    reply = _run(lambda: retry(keys=keys, args=args), stream=stream, group=group)
    if not reply[0]:
        raise ActionRefused(refusal_text(reply, entry_id)[1])
    result = retried_from(reply, entry_id)
    _publish(client, action="retry", stream=stream, group=group, ids=[entry_id])
    return result


def entry_claim(
    *,
    client: redis.Redis,
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
    if seen_deliveries is not None and (
        isinstance(seen_deliveries, bool) or not isinstance(seen_deliveries, int)
    ):
        raise ValueError("seen_deliveries must be a whole number")
    seen = "" if seen_deliveries is None else str(seen_deliveries)
    owner = "" if seen_consumer is None else name_check(seen_consumer, "seen_consumer")
    args: list[str | int] = [group, entry_id, consumer, seen_idle_ms, seen, owner]
    claim = script(client, "claim")
    reply = _run(
        lambda: claim(keys=[stream], args=args),
        stream=stream,
        group=group,
    )
    if not reply[0]:
        kind, message = refusal_text(reply, entry_id)
        if kind == "not-pending":
            message = f"changed since you looked: {message}"
        raise ActionRefused(message)
    _, previous, deliveries, idle_before = reply
    result = Claimed(
        entry_id=entry_id,
        consumer=consumer,
        previous_consumer=_text(previous),
        deliveries=int(deliveries),
        idle_before_ms=int(idle_before),
    )
    _publish(client, action="claim", stream=stream, group=group, ids=[entry_id])
    return result


def entry_dead_letter(
    *,
    client: redis.Redis,
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

    When ``operator`` is set (an operator's action, not a worker's), an ``action`` event
    is published after the move.
    """
    entry_id_check(entry_id)
    if seen_idle_ms is not None:
        idle_check(seen_idle_ms, "seen_idle_ms")
    keys, args = dead_letter_call(
        stream=stream,
        group=group,
        entry_id=entry_id,
        reason=reason,
        last_error=last_error,
        operator=operator,
        expected_consumer=expected_consumer,
        min_idle_ms=seen_idle_ms,
    )
    dead_letter = script(client, "dead_letter")
    reply = _run(lambda: dead_letter(keys=keys, args=args), stream=stream, group=group)
    if not reply[0]:
        kind, message = refusal_text(reply, entry_id)
        if kind == "not-pending":
            return None
        if kind == "too-many-fields":
            raise _too_many_fields(reply[2:], entry_id)
        raise ActionRefused(message)
    result = dead_lettered_from(reply, entry_id)
    if operator:
        _publish(client, action="dead_letter", stream=stream, group=group, ids=[entry_id])
    return result


def entry_acknowledge(
    *,
    client: redis.Redis,
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
    keys, args = acknowledge_call(stream=stream, group=group, entry_id=entry_id)
    acknowledge = script(client, "acknowledge")
    reply = _run(lambda: acknowledge(keys=keys, args=args), stream=stream, group=group)
    if not reply[0]:
        return Acknowledged(entry_id=entry_id, was_pending=False)
    result = acknowledged_from(reply, entry_id)
    _publish(client, action="acknowledge", stream=stream, group=group, ids=[entry_id])
    return result


# --- the dead-letter stream -----------------------------------------------------------


def dlq_replay(*, client: redis.Redis, stream: str, dlq_id: str) -> Replayed:
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
    keys = stream_keys(stream)
    entry_id_check(dlq_id, what="dead-letter id")
    replay = script(client, "dlq_replay")
    reply = _run(
        lambda: replay(
            keys=[keys.stream, keys.dlq],
            args=[dlq_id, RESERVED_PREFIX, REPLAY_GROUP_FIELD, REPLAY_OF_FIELD],
        ),
        stream=keys.dlq,
    )
    if not reply[0]:
        kind = _text(reply[1])
        if kind == "not-found":
            raise ActionRefused(f"dead-letter entry {dlq_id} does not exist (replayed or deleted?)")
        if kind == "payload-missing":
            raise ActionRefused(
                f"dead-letter entry {dlq_id} has no payload: it was deleted from the stream "
                "before it was dead-lettered, so there is nothing to replay"
            )
        if kind == "no-group":
            raise ActionRefused(
                f"cannot replay {dlq_id}: its group {_text(reply[2])!r} no longer exists "
                f"on stream {stream!r}"
            )
        if kind == "too-many-fields":
            fields, limit = int(reply[2]), int(reply[3])
            raise TooManyFields(
                f"dead-letter entry {dlq_id} has {fields} fields; a replay copies at most "
                f"{limit} in one atomic step, so nothing was changed. Copy what you need with "
                "redis-cli XRANGE and delete it instead.",
                fields=fields,
                limit=limit,
            )
        if kind == "wrong-stream":
            raise ActionRefused(
                f"dead-letter entry {dlq_id} came from stream {_text(reply[2])!r}, not {stream!r}"
            )
        raise ActionRefused(f"dead-letter entry {dlq_id} has no origin group or id to replay to")
    new_id, group, origin_id = (_text(v) for v in reply)
    _publish(client, action="replay", stream=stream, group=group, ids=[new_id])
    return Replayed(dlq_id=dlq_id, new_id=new_id, group=group, origin_id=origin_id)


def dlq_delete(*, client: redis.Redis, stream: str, dlq_id: str) -> DeadLetterDeleted:
    """Delete one dead-lettered entry. Idempotent: a missing id gives ``deleted=False``.

    The result names the entry's origin group and id, for the audit row. One Lua script,
    one round trip; O(fields) in Redis.
    """
    keys = stream_keys(stream)
    entry_id_check(dlq_id, what="dead-letter id")
    delete = script(client, "dlq_delete")
    reply = _run(
        lambda: delete(keys=[keys.dlq], args=[dlq_id, ORIGIN_GROUP_FIELD, ORIGIN_ID_FIELD]),
        stream=keys.dlq,
    )
    if not reply[0]:
        return DeadLetterDeleted(dlq_id=dlq_id, deleted=False)
    _, group, origin_id = reply
    result = DeadLetterDeleted(
        dlq_id=dlq_id, deleted=True, origin_group=_text(group), origin_id=_text(origin_id)
    )
    _publish(client, action="delete", stream=stream, group=result.origin_group, ids=[dlq_id])
    return result


def dlq_purge(
    *,
    client: redis.Redis,
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
    keys = stream_keys(stream)
    if isinstance(expected_length, bool) or not isinstance(expected_length, int):
        raise ValueError("expected_length must be a whole number")
    if expected_length < 0:
        raise ValueError("expected_length cannot be negative")
    if newest_id is not None:
        entry_id_check(newest_id, what="newest dead-letter id")
    purge = script(client, "dlq_purge")
    reply = _run(
        lambda: purge(keys=[keys.dlq], args=[expected_length, newest_id or ""]),
        stream=keys.dlq,
    )
    if not reply[0]:
        length, newest = int(reply[2]), _text(reply[3])
        raise ActionRefused(
            f"changed since you looked: the dead-letter stream of {stream!r} now holds "
            f"{length} entries (newest {newest or 'none'}), not {expected_length}; "
            "reload and confirm again"
        )
    deleted = int(reply[1])
    if deleted:
        _publish(client, action="purge", stream=stream, group="", ids=[])
    return DeadLettersPurged(stream=stream, deleted=deleted)
