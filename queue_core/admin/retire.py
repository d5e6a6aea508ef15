"""Retire consumers: ``consumer_retire`` hands one consumer's pending entries on (or
makes them due for reclaim) and then deletes it; ``idle_consumers_find`` and
``idle_consumers_retire`` find and delete the consumers that are idle, hold nothing and
have no live heartbeat.

Each write is a guarded script (``retire.lua``, ``retire_idle.lua``), every key in the
stream's slot; a retire is cut in runs of at most ``RETIRE_CHUNK`` pending entries, each
re-checking the heartbeat. ``consumer_retire`` reports a refusal in ``Retired.refused``
rather than raising. ``now_ms`` is always the caller's clock, passed to the scripts, so a
heartbeat is judged by one clock. Never imports Django, never decides permissions or
writes audit rows (the dashboard does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from queue_core.admin.reads import consumers_of, heartbeats_of
from queue_core.admin.shared import action_publish
from queue_core.connection import Client
from queue_core.control import HEARTBEAT_STALE_MS
from queue_core.errors import action_refusal
from queue_core.keys import stream_keys
from queue_core.scripts.binding import Refusal, calls_pipelined
from queue_core.scripts.retire import RETIRE
from queue_core.scripts.retire_idle import RETIRE_IDLE
from queue_core.services import PARKING_CONSUMER
from queue_core.types import ConsumerInfo
from queue_core.validation import count_check, idle_check, name_check

#: Entries made due get at least this idle time (one day), so any worker whose
#: ``--min-idle-ms`` is at most a day takes them on its next XAUTOCLAIM sweep.
RETIRE_DUE_IDLE_MS = 24 * 3600 * 1000
#: Pending entries moved per script run (Redis is blocked for one chunk at most).
RETIRE_CHUNK = 250
#: Passes over a retiring consumer's entries before giving up ("holds entries"): a pass
#: that moved nothing, or this many, means entries keep arriving or cannot be moved.
RETIRE_PASSES = 5


@dataclass(frozen=True, slots=True)
class Retired:
    """What ``consumer_retire`` did. ``moved`` entries went to ``to`` (None: made due,
    parked on ``PARKING_CONSUMER``). ``refused`` is None, or why the consumer was not
    deleted: "live heartbeat", "holds entries", "no such consumer", "no such target",
    "bad target"; ``message`` says it for the operator. Entries moved before a refusal
    stay moved (none is ever lost)."""

    consumer: str
    moved: int
    to: str | None
    deleted: bool
    refused: str | None
    message: str = ""
    payload_missing: int = 0


def consumer_retire(
    *,
    client: Client,
    stream: str,
    group: str,
    consumer: str,
    to_consumer: str | None,
    now_ms: int,
    due_idle_ms: int = RETIRE_DUE_IDLE_MS,
    chunk: int = RETIRE_CHUNK,
) -> Retired:
    """Hand ``consumer``'s pending entries to ``to_consumer`` (a consumer of the group, or
    a worker with a live heartbeat that has received nothing yet; the entries keep their
    idle time, so they are as due for reclaim as before), or, with ``to_consumer`` None,
    make them due for reclaim (parked on ``PARKING_CONSUMER`` with
    idle at least ``due_idle_ms``: any live worker's next XAUTOCLAIM sweep takes them);
    then delete the consumer (XGROUP DELCONSUMER).

    Moves are XCLAIM ... JUSTID: not deliveries, so delivery counts are unchanged. Each
    run of ``retire.lua`` moves at most ``chunk`` entries and deletes the consumer only
    when it holds nothing then: a consumer that still holds entries (one delivered to it
    between chunks, or one whose payload was deleted, which is left for the operator to
    dead-letter or acknowledge) is never deleted with them. Refused while the consumer
    has a live heartbeat (checked on every run). O(consumers + chunk log n) in Redis per
    run; about pending/chunk round trips.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    name_check(consumer, "consumer")
    count_check(now_ms, "now_ms")
    idle_check(due_idle_ms, "due_idle_ms")
    if to_consumer is not None:
        name_check(to_consumer, "to_consumer")
    bad = _bad_target(consumer, to_consumer)
    if bad is not None:
        return bad
    result = _retire_in_chunks(
        client,
        stream=stream,
        group=group,
        consumer=consumer,
        to_consumer=to_consumer,
        now_ms=now_ms,
        due_idle_ms=due_idle_ms,
        chunk=chunk,
    )
    if result.moved or result.deleted:
        action_publish(client, action="retire", stream=stream, group=group)
    return result


def _bad_target(consumer: str, to_consumer: str | None) -> Retired | None:
    """The refusal of a target that can never take the entries, before Redis is asked:
    the consumer itself, or, when making entries due, the parking place itself."""
    if to_consumer == consumer:
        return Retired(
            consumer,
            0,
            to_consumer,
            False,
            "bad target",
            "a consumer's entries cannot be handed to itself",
        )
    if to_consumer is None and consumer == PARKING_CONSUMER:
        return Retired(
            consumer,
            0,
            None,
            False,
            "bad target",
            f"{PARKING_CONSUMER} holds the entries made due by retiring others; "
            "hand its entries to a live consumer instead",
        )
    return None


def _retire_in_chunks(
    client: Client,
    *,
    stream: str,
    group: str,
    consumer: str,
    to_consumer: str | None,
    now_ms: int,
    due_idle_ms: int,
    chunk: int,
) -> Retired:
    """Run ``retire.lua`` chunk after chunk over the consumer's entries, from the start
    again after each pass, until it deletes the consumer, refuses, or a pass that moved
    nothing (or the ``RETIRE_PASSES``-th) leaves it holding entries."""
    workers = stream_keys(stream).workers(group)
    moved = 0
    cursor, passes, moved_this_pass = "-", 0, 0
    while True:
        reply = RETIRE.call(
            stream=stream,
            workers_key=workers,
            group=group,
            consumer=consumer,
            to_consumer=to_consumer or "",
            parking_consumer=PARKING_CONSUMER,
            due_idle_ms=due_idle_ms,
            now_ms=now_ms,
            stale_ms=HEARTBEAT_STALE_MS,
            cursor=cursor,
            chunk=chunk,
        ).run(client)
        if isinstance(reply, Refusal):
            return _retire_refused(reply, consumer, to_consumer, moved)
        moved += reply.moved
        moved_this_pass += reply.moved
        if reply.deleted:
            return Retired(consumer, moved, to_consumer, True, None)
        if reply.cursor:
            cursor = reply.cursor
            continue
        passes += 1
        if moved_this_pass == 0 or passes >= RETIRE_PASSES:
            return Retired(
                consumer,
                moved,
                to_consumer,
                False,
                "holds entries",
                _holds_message(consumer, reply.held, reply.payload_missing),
                payload_missing=reply.payload_missing,
            )
        cursor, moved_this_pass = "-", 0


def _holds_message(consumer: str, held: int, missing: int) -> str:
    message = f"{consumer} still holds {held} pending entries, so it was not deleted"
    if missing:
        message += (
            f"; {missing} of them had their payload deleted from the stream: dead-letter "
            "or acknowledge them, then retire it again"
        )
    else:
        message += " (entries kept arriving while it was retired); retire it again"
    return message


def _retire_refused(reply: Refusal, consumer: str, to_consumer: str | None, moved: int) -> Retired:
    if reply.kind == "live-heartbeat":
        return Retired(
            consumer,
            moved,
            to_consumer,
            False,
            "live heartbeat",
            f"{consumer} has a live heartbeat (a running worker): stop it first, "
            f"or wait until it has sent none for {HEARTBEAT_STALE_MS // 1000} s",
        )
    if reply.kind == "no-such-target":
        return Retired(
            consumer,
            moved,
            to_consumer,
            False,
            "no such target",
            f"there is no consumer {to_consumer!r} in this group to hand the entries to",
        )
    return Retired(
        consumer,
        moved,
        to_consumer,
        False,
        "no such consumer",
        f"there is no consumer {consumer!r} in this group",
    )


def idle_consumers_find(
    *, client: Client, stream: str, group: str, idle_ms: int, now_ms: int
) -> list[ConsumerInfo]:
    """The dry run of ``idle_consumers_retire``: consumers idle at least ``idle_ms`` that
    hold nothing and have no live heartbeat, sorted by name.

    "Idle" is XINFO CONSUMERS ``idle``. On Redis 7.2+ and Valkey that is the time since
    the last *attempted* read, so a live worker waiting on a quiet stream is never idle;
    ``inactive`` (since the last successful read) is never smaller, so ``idle`` is the
    stricter test there. On Redis 7.0 and 6.2 (no ``inactive``) ``idle`` is the time since
    the consumer last received entries: a live consumer of a quiet stream may look idle,
    and deleting it costs nothing (it holds nothing; its next read recreates it).
    XINFO CONSUMERS + one HGETALL; O(consumers).
    """
    name_check(stream, "stream")
    name_check(group, "group")
    idle_check(idle_ms, "idle_ms")
    count_check(now_ms, "now_ms")
    consumers = consumers_of(client, stream, group)
    live, _ = heartbeats_of(client, stream, group, now_ms)
    return sorted(
        (c for c in consumers if c.idle_ms >= idle_ms and c.pending == 0 and c.name not in live),
        key=lambda c: c.name,
    )


def idle_consumers_retire(
    *,
    client: Client,
    stream: str,
    group: str,
    names: Sequence[str],
    idle_ms: int,
    now_ms: int,
) -> list[str]:
    """Delete the consumers ``names`` (a dry run's) that are still idle at least
    ``idle_ms``, hold nothing and have no live heartbeat, each re-checked atomically by
    ``retire_idle.lua``; the others are kept. Returns the names deleted, in the order
    given. One pipelined round trip; O(consumers) in Redis per name."""
    name_check(stream, "stream")
    name_check(group, "group")
    idle_check(idle_ms, "idle_ms")
    count_check(now_ms, "now_ms")
    for name in names:
        name_check(name, "consumer")
    workers = stream_keys(stream).workers(group)
    calls = [
        RETIRE_IDLE.call(
            stream=stream,
            workers_key=workers,
            group=group,
            consumer=name,
            idle_ms=idle_ms,
            now_ms=now_ms,
            stale_ms=HEARTBEAT_STALE_MS,
        )
        for name in dict.fromkeys(names)
    ]
    deleted: list[str] = []
    replies: list[bool | Refusal | Exception] = calls_pipelined(client, calls)
    for call, reply in zip(calls, replies, strict=True):
        if isinstance(reply, redis.ResponseError):
            raise action_refusal(reply, stream=stream, group=group) from reply
        if isinstance(reply, Exception):
            raise reply
        if reply is True:
            deleted.append(str(call.args[1]))
    if deleted:
        action_publish(client, action="retire-idle", stream=stream, group=group)
    return deleted
