"""Fleet control's group administration: retire consumers, create and delete groups,
reset a group's position and trim a stream.

Each write is guarded and atomic where it checks before it acts: one Lua script from
``queue_core.scripts`` (``retire``, ``retire_idle``, ``group_create``, ``group_delete``,
``position_reset``, ``stream_trim``), every key in the stream's slot, so it works on
Redis Cluster. Work that could block Redis long is cut in chunks the caller loops over
(``RETIRE_CHUNK`` pending entries, ``TRIM_CHUNK`` entries), each chunk re-checking its
guard. A refused guard raises ``Refused`` (an ``ActionRefused``: the dashboard answers
409 with its message), except ``consumer_retire``, which reports its refusal in
``Retired.refused``; a malformed position or id raises ValueError before Redis is asked.
Every write that changed something publishes an ``action`` event, as
``queue_core.services`` does, so open pages update.

Previews and dry runs (``idle_consumers_find``, ``position_preview``, ``trim_preview``)
read only. Counting entries walks ``XRANGE`` in pages of ``PAGE`` ids up to a budget
(``COUNT_BUDGET``): exact below it, "more than N" (``exact=False``) beyond it, never an
estimate passed off as a count. ENTRIESREAD (Redis 7+) is set only when the count of
entries up to the position is known (see ``entries_read_at``); on Redis 6.2 it is left
out and the lag is reported unknown (None).

Heartbeats are the workers' (``stream_keys(S).workers(group)``, written by
``queue_core.control``'s worker side): live while ``now_ms - seen_ms <=
HEARTBEAT_STALE_MS`` and without ``stopped_ms`` (the last heartbeat of a worker that
stopped: never live, and its consumer is not taken for a live one without a heartbeat
either). ``now_ms`` is always the caller's clock, passed to the scripts, so a heartbeat
is judged by one clock. Never imports Django, never decides permissions or
writes audit rows (the dashboard does).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import redis

from queue_core.bounded_json import json_read
from queue_core.connection import Client
from queue_core.control import HEARTBEAT_STALE_MS
from queue_core.errors import action_refusal, invalid_id, not_a_group
from queue_core.events import event_publish
from queue_core.keys import stream_keys
from queue_core.scripts.binding import Refusal, calls_pipelined, text
from queue_core.scripts.group_create import GROUP_CREATE
from queue_core.scripts.group_delete import GROUP_DELETE
from queue_core.scripts.position_reset import POSITION_RESET, PositionRefusal
from queue_core.scripts.retire import RETIRE
from queue_core.scripts.retire_idle import RETIRE_IDLE
from queue_core.scripts.stream_trim import STREAM_TRIM, TrimRefusal
from queue_core.services import OWN_CONSUMERS, PARKING_CONSUMER
from queue_core.types import ActionRefused, ConsumerInfo
from queue_core.validation import (
    count_check,
    entry_id_check,
    entry_id_key,
    idle_check,
    name_check,
)

#: The dashboard's default ``ACKBOARD_STUCK_AFTER_MS``: a consumer without a live
#: heartbeat whose ``idle`` is below it is taken as live (``queue_core.health``).
SEEN_WITHIN_MS = 60_000
#: Ackboard's own consumers (operator claims, the parking place): never live.
_NEVER_LIVE = OWN_CONSUMERS
#: Entries made due get at least this idle time (one day), so any worker whose
#: ``--min-idle-ms`` is at most a day takes them on its next XAUTOCLAIM sweep.
RETIRE_DUE_IDLE_MS = 24 * 3600 * 1000
#: Pending entries moved per script run (Redis is blocked for one chunk at most).
RETIRE_CHUNK = 250
#: Passes over a retiring consumer's entries before giving up ("holds entries"): a pass
#: that moved nothing, or this many, means entries keep arriving or cannot be moved.
RETIRE_PASSES = 5
#: Entries deleted per ``stream_trim`` script run.
TRIM_CHUNK = 1000
#: Entries counted at most by a preview (per direction, for ``entries_read_at``).
COUNT_BUDGET = 10_000
#: Ids fetched per XRANGE page while counting.
PAGE = 1000

_U64 = 2**64 - 1
_MS = re.compile(r"\A\d{1,20}\Z")
_ID = re.compile(r"\A\d+-\d+\Z")
_RELATIVE = re.compile(r"\A-\s*(\d{1,9})\s*(s|m|h|d)\Z")
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class Refused(ActionRefused):
    """A guard refused the action; the message is for the operator, as is (409)."""


def _publish(client: Client, *, action: str, stream: str, group: str, ids: list[str]) -> None:
    event_publish(client=client, type="action", stream=stream, group=group, action=action, ids=ids)


def _now(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else now_ms


# --- positions --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Position:
    """Where a group's last-delivered id goes.

    ``kind`` start: ``id`` "0-0" (everything is delivered); end: ``id`` "$", resolved to
    the stream's last id when used; id: the id itself; time: ``id`` is the last possible
    id before that millisecond, so entries added at or after ``time_ms`` are delivered.
    """

    kind: Literal["start", "end", "id", "time"]
    id: str
    time_ms: int | None = None

    @property
    def mode(self) -> str:
        """What the scripts are told: start and end are resolved by them, atomically."""
        return self.kind if self.kind in ("start", "end") else "id"


def _before_ms(ms: int) -> str:
    """The largest id below ``<ms>-0``."""
    return "0-0" if ms <= 0 else f"{ms - 1}-{_U64}"


def position_parse(text: str, *, now_ms: int | None = None) -> Position:
    """``start`` | ``end`` | an id (``<ms>-<seq>``, or ``<ms>`` meaning ``<ms>-0`` as
    Redis reads it) | an ISO-8601 time with a zone (``2026-12-01T10:00:00Z``) | ``now`` |
    a time before now (``-15m``, ``-2h``, ``-30s``, ``-1d``). ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("a position must be text")
    value = text.strip()
    lowered = value.lower()
    if lowered in ("start", "beginning"):
        return Position("start", "0-0")
    if lowered in ("end", "$"):
        return Position("end", "$")
    if _MS.match(value):
        value += "-0"
    if _ID.match(value):
        entry_id_check(value, what="position")
        ms, seq = entry_id_key(value)
        # 0-0 is the start, however it is spelled ("0", "00-0").
        return Position("id", f"{ms}-{seq}") if (ms, seq) != (0, 0) else Position("start", "0-0")
    relative = _RELATIVE.match(lowered)
    if lowered == "now" or relative:
        ms = _now(now_ms)
        if relative:
            ms -= int(relative[1]) * _UNITS[relative[2]]
        return Position("time", _before_ms(max(ms, 0)), time_ms=max(ms, 0))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        shown = value if len(value) <= 60 else value[:57] + "..."
        raise ValueError(
            f"position {shown!r} is not start, end, a stream id like 1700000000000-0, "
            "a time like 2026-12-01T10:00:00Z, or a time before now like -15m"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"time {value!r} has no time zone: add Z (UTC) or an offset like +01:00")
    ms = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    if ms < 0:
        raise ValueError(f"time {value!r} is before 1970, where no stream id lies")
    return Position("time", _before_ms(ms), time_ms=ms)


# --- reading helpers ----------------------------------------------------------------------


def _text_or_none(value: Any) -> str | None:
    return None if value is None else text(value)


def _consumers(client: Client, stream: str, group: str) -> list[ConsumerInfo]:
    try:
        raw: list[Mapping[str, Any]] = client.xinfo_consumers(stream, group)  # type: ignore[assignment]
    except redis.ResponseError as exc:
        raise action_refusal(exc, stream=stream, group=group) from exc
    return [
        ConsumerInfo(
            name=text(c.get("name")),
            pending=int(c.get("pending", 0)),
            idle_ms=int(c.get("idle", 0)),
            inactive_ms=None if c.get("inactive") is None else int(c["inactive"]),
        )
        for c in raw
    ]


def _heartbeats(client: Client, stream: str, group: str, now_ms: int) -> tuple[set[str], set[str]]:
    """(consumers whose heartbeat is live, consumers whose heartbeat says their worker
    stopped), as the scripts judge them: one HGETALL."""
    raw: Mapping[bytes, bytes] = client.hgetall(stream_keys(stream).workers(group))  # type: ignore[assignment]
    live: set[str] = set()
    stopped: set[str] = set()
    for name, value in raw.items():
        try:
            beat = json_read(value)
            seen = int(beat["seen_ms"])
        except (ValueError, KeyError, TypeError, OverflowError):  # OverflowError: Infinity
            continue
        mark = beat.get("stopped_ms")
        if isinstance(mark, int | float) and not isinstance(mark, bool):
            stopped.add(text(name))
        elif now_ms - seen <= HEARTBEAT_STALE_MS:
            live.add(text(name))
    return live, stopped


def _group(client: Client, stream: str, group: str) -> Mapping[str, Any]:
    try:
        groups: list[Mapping[str, Any]] = client.xinfo_groups(stream)  # type: ignore[assignment]
    except redis.ResponseError as exc:
        if not_a_group(exc) or "no such key" in str(exc).lower():
            raise Refused(f"there is no consumer group {group!r} on stream {stream!r}") from exc
        raise
    for g in groups:
        if text(g.get("name")) == group:
            return g
    raise Refused(f"there is no consumer group {group!r} on stream {stream!r}")


def _stream_info(client: Client, stream: str) -> Mapping[str, Any] | None:
    """XINFO STREAM, or None when the key does not exist."""
    try:
        info: Mapping[str, Any] = client.xinfo_stream(stream)
    except redis.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return None
        raise action_refusal(exc, stream=stream) from exc
    return info


@dataclass(frozen=True, slots=True)
class _Count:
    n: int
    exact: bool
    first_id: str | None


def _count_range(client: Client, stream: str, start: str, end: str, budget: int) -> _Count:
    """Entries with ids in [start, end] (``(`` excludes), counted up to ``budget``: exact
    when ``n <= budget``, else ``n == budget + 1`` and ``exact`` is False. O(n) in Redis;
    the payloads come along (XRANGE has no ids-only form)."""
    n, first = 0, None
    cursor = start
    while True:
        count = min(PAGE, budget + 1 - n)
        try:
            page: list[Any] = client.xrange(stream, min=cursor, max=end, count=count)  # type: ignore[assignment]
        except redis.ResponseError as exc:
            # An exclusive bound past the largest id (or before 0-0): an empty range.
            if invalid_id(exc):
                return _Count(n, True, first)
            raise
        if page and first is None:
            first = text(page[0][0])
        n += len(page)
        if n > budget:
            return _Count(budget + 1, False, first)
        if len(page) < count:
            return _Count(n, True, first)
        cursor = "(" + text(page[-1][0])


def _id_lt(a: str, b: str) -> bool:
    return entry_id_key(a) < entry_id_key(b)


def entries_read_at(
    client: Client, stream: str, entry_id: str, *, budget: int | None = None
) -> tuple[int | None, str]:
    """The count of the stream's entries up to ``entry_id``, as ENTRIESREAD wants it, and
    the max-deleted-entry-id it was counted with (the scripts use the count only while
    that is unchanged). None when it cannot be known honestly: Redis 6.2 (no
    entries-added), more than ``budget`` entries on both sides of the id, an entry
    deleted after the id while entries remain after it, or the stream changed while
    counting.

    entries-added minus the entries left after the id; the entries after it are counted
    from the id forward, or, when there are more than ``budget``, as the stream's length
    minus those counted from the head up to the id. Up to two bounded walks plus two
    XINFO STREAM. ``budget`` defaults to ``COUNT_BUDGET``.
    """
    budget = COUNT_BUDGET if budget is None else budget
    info = _stream_info(client, stream)
    if info is None or info.get("entries-added") is None:
        return None, ""
    added = int(info["entries-added"])
    last = text(info["last-generated-id"])
    deleted = text(info.get("max-deleted-entry-id") or b"0-0")
    if not _id_lt(entry_id, last):
        return added, deleted
    after = _count_range(client, stream, "(" + entry_id, last, budget)
    first_after = after.first_id
    if after.exact:
        n_after = after.n
    else:
        head = _count_range(client, stream, "-", entry_id, budget)
        if not head.exact:
            return None, deleted
        n_after = int(info["length"]) - head.n
    again = _stream_info(client, stream)
    if again is None or text(again.get("max-deleted-entry-id") or b"0-0") != deleted:
        return None, deleted
    # Deleted entries after the id count as read only when they all lie before the
    # first entry left after it (a trimmed head); a hole in the middle is unknowable.
    if first_after is not None and not _id_lt(deleted, first_after) and _id_lt(entry_id, deleted):
        return None, deleted
    return added - n_after, deleted


# --- retire -------------------------------------------------------------------------------


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
        if to_consumer == consumer:
            return Retired(
                consumer,
                0,
                to_consumer,
                False,
                "bad target",
                "a consumer's entries cannot be handed to itself",
            )
    elif consumer == PARKING_CONSUMER:
        return Retired(
            consumer,
            0,
            None,
            False,
            "bad target",
            f"{PARKING_CONSUMER} holds the entries made due by retiring others; "
            "hand its entries to a live consumer instead",
        )
    workers = stream_keys(stream).workers(group)
    moved = 0
    cursor, passes, moved_this_pass = "-", 0, 0
    result: Retired | None = None
    while result is None:
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
            result = _retire_refused(reply, consumer, to_consumer, moved)
            break
        moved += reply.moved
        moved_this_pass += reply.moved
        if reply.deleted:
            result = Retired(consumer, moved, to_consumer, True, None)
        elif reply.cursor:
            cursor = reply.cursor
        else:
            passes += 1
            if moved_this_pass == 0 or passes >= RETIRE_PASSES:
                result = Retired(
                    consumer,
                    moved,
                    to_consumer,
                    False,
                    "holds entries",
                    _holds_message(consumer, reply.held, reply.payload_missing),
                    payload_missing=reply.payload_missing,
                )
            cursor, moved_this_pass = "-", 0
    if result.moved or result.deleted:
        _publish(client, action="retire", stream=stream, group=group, ids=[])
    return result


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


# --- idle consumers -----------------------------------------------------------------------


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
    consumers = _consumers(client, stream, group)
    live, _ = _heartbeats(client, stream, group, now_ms)
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
        _publish(client, action="retire-idle", stream=stream, group=group, ids=[])
    return deleted


# --- groups -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupCreated:
    """The new group: its last-delivered id and entries-read as XINFO GROUPS reports them
    (None on Redis 6.2, or when the count was not known), and its lag (None: unknown)."""

    last_id: str
    entries_read: int | None
    lag: int | None = None


def group_create(
    *,
    client: Client,
    stream: str,
    group: str,
    position: Position,
    mkstream: bool = False,
) -> GroupCreated:
    """XGROUP CREATE at ``position`` with ENTRIESREAD when the count of entries up to it is
    known (see ``entries_read_at``), so the lag is right from the start.

    Refused: the group exists, the stream does not (and not ``mkstream``), the key is not a
    stream. At the start or the end one script run; at an id or a time also up to two
    bounded XRANGE walks (``COUNT_BUDGET``).
    """
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(position.id if position.mode == "id" else "0-0", what="position")
    read, seen_deleted = None, ""
    if position.mode == "id":
        read, seen_deleted = entries_read_at(client, stream, position.id)
    reply = GROUP_CREATE.call(
        stream=stream,
        group=group,
        mode=position.mode,
        entry_id=position.id,
        entries_read=read,
        seen_max_deleted=seen_deleted,
        mkstream=mkstream,
    ).run(client)
    if isinstance(reply, Refusal):
        raise Refused(
            {
                "exists": f"there is already a consumer group {group!r} on stream {stream!r}",
                "no-stream": f"there is no stream {stream!r} (create it with the group to "
                "start an empty one)",
                "wrong-type": f"{stream!r} is not a stream",
            }.get(reply.kind, reply.kind)
        )
    _publish(client, action="create-group", stream=stream, group=group, ids=[])
    return GroupCreated(reply.last_id, reply.entries_read, reply.lag)


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    """How many pending entries were dropped with the group (0 when none were pending)."""

    pending_dropped: int


def group_delete(
    *,
    client: Client,
    stream: str,
    group: str,
    expected_pending: int,
    acknowledge: bool,
    now_ms: int | None = None,
) -> GroupDeleted:
    """XGROUP DESTROY, with the group's pause and heartbeat keys. Refused while entries
    are pending unless ``acknowledge`` and the pending count is still
    ``expected_pending`` (what the operator saw), checked in the same script run. Refused
    too while an Ackboard worker of the group has a live heartbeat: on NOGROUP a worker
    creates its group again, which would undo the delete (stop the workers first). One
    round trip; O(groups + workers) to check, O(pending + consumers) for Redis to free."""
    name_check(stream, "stream")
    name_check(group, "group")
    count_check(expected_pending, "expected_pending")
    keys = stream_keys(stream)
    reply = GROUP_DELETE.call(
        stream=stream,
        pause_key=keys.pause(group),
        workers_key=keys.workers(group),
        group=group,
        expected_pending=expected_pending,
        acknowledge=acknowledge,
        now_ms=_now(now_ms),
        stale_ms=HEARTBEAT_STALE_MS,
    ).run(client)
    if isinstance(reply, Refusal):
        if reply.kind == "pending":
            raise Refused(
                f"{reply.message} entries are pending in {group!r}: acknowledge dropping "
                "them (with a reason) to delete the group"
            )
        if reply.kind == "live-workers":
            raise Refused(
                f"{group!r} has running workers ({reply.message}): "
                "stop them first, or they create the group again"
            )
        if reply.kind == "pending-changed":
            raise Refused(
                f"changed since you looked: {reply.message} entries are pending in "
                f"{group!r} now, not {expected_pending}"
            )
        raise Refused(f"there is no consumer group {group!r} on stream {stream!r}")
    _publish(client, action="delete-group", stream=stream, group=group, ids=[])
    return GroupDeleted(reply)


# --- position -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PositionDiff:
    """A position change, before and after (``*_entries_read`` None: not known, e.g. Redis
    6.2). ``redeliver``: entries that will be delivered again (moving back); ``skip``:
    entries never delivered (moving forward); exact up to the counting budget, else
    ``exact`` is False and the figure means "more than figure - 1". ``live_consumers``
    and ``paused`` are what the reset's guard looks at. After a reset ``lag`` is what
    XINFO GROUPS reports (None: unknown)."""

    before_id: str
    before_entries_read: int | None
    after_id: str
    after_entries_read: int | None
    redeliver: int
    skip: int
    exact: bool
    live_consumers: tuple[str, ...]
    paused: bool
    lag: int | None = None


def _live_consumers(
    client: Client, stream: str, group: str, now_ms: int, seen_within_ms: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every live consumer, those without a live heartbeat), sorted. A consumer whose
    heartbeat says its worker stopped is neither."""
    beating, stopped = _heartbeats(client, stream, group, now_ms)
    others = {
        c.name
        for c in _consumers(client, stream, group)
        if c.name not in beating
        and c.name not in stopped
        and c.idle_ms < seen_within_ms
        and c.name not in _NEVER_LIVE
    }
    return tuple(sorted(beating | others)), tuple(sorted(others))


def _target_id(client: Client, stream: str, position: Position) -> str:
    if position.kind == "end":
        info = _stream_info(client, stream)
        return "0-0" if info is None else text(info["last-generated-id"])
    return position.id


def position_preview(
    *,
    client: Client,
    stream: str,
    group: str,
    position: Position,
    now_ms: int | None = None,
    seen_within_ms: int = SEEN_WITHIN_MS,
    budget: int = COUNT_BUDGET,
) -> PositionDiff:
    """What ``position_reset`` to ``position`` would do, read only: the entries between
    the two positions (delivered again when moving back, skipped when moving forward),
    counted up to ``budget``; the entries-read after; the live consumers and the pause
    the reset's guard checks. At most ``budget`` entries walked, and for an id or a time
    up to twice that again (``entries_read_at``); XINFO GROUPS, STREAM and CONSUMERS,
    one HGETALL, one EXISTS."""
    diff, _ = _preview(client, stream, group, position, now_ms, seen_within_ms, budget)
    return diff


def _preview(
    client: Client,
    stream: str,
    group: str,
    position: Position,
    now_ms: int | None,
    seen_within_ms: int,
    budget: int,
) -> tuple[PositionDiff, str]:
    """The preview, and the max-deleted-entry-id its entries-read was counted with."""
    name_check(stream, "stream")
    name_check(group, "group")
    idle_check(seen_within_ms, "seen_within_ms")
    count_check(budget, "budget")
    if position.mode == "id":
        entry_id_check(position.id, what="position")
    now = _now(now_ms)
    g = _group(client, stream, group)
    before = text(g["last-delivered-id"])
    before_read = None if g.get("entries-read") is None else int(g["entries-read"])
    info = _stream_info(client, stream) or {}
    added = info.get("entries-added")
    after_read: int | None = None
    seen_deleted = ""
    if position.kind == "end":
        after = text(info.get("last-generated-id") or b"0-0")
        after_read = None if added is None else int(added)
    elif position.kind == "start":
        after = "0-0"
        after_read = _start_entries_read(info)
    else:
        after = position.id
        after_read, seen_deleted = entries_read_at(client, stream, after, budget=budget)
    redeliver = skip = 0
    exact = True
    if _id_lt(after, before):
        counted = _count_range(client, stream, "(" + after, before, budget)
        redeliver, exact = counted.n, counted.exact
    elif _id_lt(before, after):
        counted = _count_range(client, stream, "(" + before, after, budget)
        skip, exact = counted.n, counted.exact
    live, _ = _live_consumers(client, stream, group, now, seen_within_ms)
    paused = bool(client.exists(stream_keys(stream).pause(group)))
    diff = PositionDiff(
        before, before_read, after, after_read, redeliver, skip, exact, live, paused
    )
    return diff, seen_deleted


def _start_entries_read(info: Mapping[str, Any]) -> int | None:
    """Entries read at the start: entries-added minus the length, when every deleted entry
    lies before the first one left (what ``group_create.lua`` computes)."""
    added = info.get("entries-added")
    if added is None:
        return None
    length = int(info.get("length", 0))
    first = info.get("first-entry")
    deleted = text(info.get("max-deleted-entry-id") or b"0-0")
    if length == 0 or (first and _id_lt(deleted, text(first[0]))):
        return int(added) - length
    return None


def position_reset(
    *,
    client: Client,
    stream: str,
    group: str,
    position: Position,
    expected_before_id: str,
    now_ms: int | None = None,
    seen_within_ms: int = SEEN_WITHIN_MS,
    budget: int = COUNT_BUDGET,
) -> PositionDiff:
    """XGROUP SETID to ``position`` with ENTRIESREAD (when known), so lag stays right.

    Refused (``Refused``, in the same script run as the SETID): the group's last-delivered
    id is no longer ``expected_before_id`` (moved since the preview); the group has live
    consumers (a live heartbeat, or a consumer without one whose idle is below
    ``seen_within_ms``) and is not paused; or it is paused but consumers that a pause does
    not stop (no live heartbeat, seen within ``seen_within_ms``) are live. The end and the
    start are resolved by the script itself; an id's entries-read is counted first and
    used only while no entry was deleted meanwhile. The result keeps the position before
    (id and entries-read) for the audit row, so the reset can be undone. Costs the
    preview (its counts come with the result) plus one script run (O(groups + consumers
    + workers)).
    """
    entry_id_check(expected_before_id, what="expected_before_id")
    now = _now(now_ms)
    preview, seen_deleted = _preview(client, stream, group, position, now, seen_within_ms, budget)
    read = preview.after_entries_read if position.mode == "id" else None
    keys = stream_keys(stream)
    reply = POSITION_RESET.call(
        stream=stream,
        pause_key=keys.pause(group),
        workers_key=keys.workers(group),
        group=group,
        expected_before_id=expected_before_id,
        mode=position.mode,
        entry_id=position.id,
        entries_read=read,
        seen_max_deleted=seen_deleted,
        now_ms=now,
        stale_ms=HEARTBEAT_STALE_MS,
        seen_within_ms=seen_within_ms,
        never_live=_NEVER_LIVE,
    ).run(client)
    if isinstance(reply, PositionRefusal):
        names = ", ".join(reply.values)
        if reply.kind == "moved":
            raise Refused(
                f"changed since you looked: {group!r} is at {names} now, not "
                f"{expected_before_id}; preview the reset again"
            )
        if reply.kind == "live":
            raise Refused(
                f"{group!r} has live consumers ({names}): pause the group first, and "
                "stop consumers that are not Ackboard workers"
            )
        if reply.kind == "not-pausable":
            raise Refused(
                f"{group!r} is paused, but consumers a pause does not stop are live "
                f"({names}): stop them first"
            )
        raise Refused(f"there is no consumer group {group!r} on stream {stream!r}")
    _publish(client, action="reset-position", stream=stream, group=group, ids=[])
    return PositionDiff(
        reply.before_id,
        reply.before_entries_read,
        reply.after_id,
        reply.after_entries_read,
        preview.redeliver if preview.before_id == reply.before_id else 0,
        preview.skip if preview.before_id == reply.before_id else 0,
        preview.exact,
        preview.live_consumers,
        preview.paused,
        reply.lag,
    )


# --- trim ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrimPlan:
    """What ``stream_trim`` to ``minid`` would delete: ``would_delete`` entries (exact up
    to the budget, else ``exact`` False: "more than would_delete - 1"). ``floor_id`` is
    the lowest id a group still needs ('' when the stream has no group): the smallest,
    over the groups, of the oldest pending id and the id just after the last-delivered
    one; ``floor_group`` sets it, for ``floor_reason`` ('pending' or 'undelivered').
    ``past_floor``: an entry at or above the floor lies below ``minid``, so the trim
    would delete an entry a group holds pending or was never delivered."""

    minid: str
    would_delete: int
    exact: bool
    floor_id: str
    past_floor: bool
    floor_group: str = ""
    floor_reason: str = ""


def _minid_check(minid: str) -> str:
    """A full id, or ``<ms>`` meaning ``<ms>-0``, normalised (no leading zeros)."""
    value = minid.strip() if isinstance(minid, str) else minid
    if isinstance(value, str) and _MS.match(value):
        value += "-0"
    entry_id_check(value, what="MINID")
    ms, seq = entry_id_key(value)
    return f"{ms}-{seq}"


def _succ(entry_id: str) -> str:
    ms, seq = entry_id_key(entry_id)
    return f"{ms + 1}-0" if seq == _U64 else f"{ms}-{seq + 1}"


def _floor(client: Client, stream: str) -> tuple[str, str, str]:
    """(floor id, group, reason), or ('', '', '') without groups. One XINFO GROUPS and one
    pipelined XPENDING summary per group with pending entries."""
    try:
        groups: list[Mapping[str, Any]] = client.xinfo_groups(stream)  # type: ignore[assignment]
    except redis.ResponseError as exc:
        if "no such key" in str(exc).lower():
            raise Refused(f"there is no stream {stream!r}") from exc
        raise action_refusal(exc, stream=stream) from exc
    with_pending = [text(g["name"]) for g in groups if int(g.get("pending", 0))]
    oldest: dict[str, str] = {}
    if with_pending:
        pipe = client.pipeline(transaction=False)
        for name in with_pending:
            pipe.xpending(stream, name)
        for name, summary in zip(with_pending, pipe.execute(), strict=True):
            if summary.get("min") is not None:
                oldest[name] = text(summary["min"])
    best: tuple[str, str, str] = ("", "", "")
    for g in groups:
        name = text(g["name"])
        candidate, reason = _succ(text(g["last-delivered-id"])), "undelivered"
        if name in oldest and _id_lt(oldest[name], candidate):
            candidate, reason = oldest[name], "pending"
        if not best[0] or _id_lt(candidate, best[0]):
            best = (candidate, name, reason)
    return best


def _has_entry(client: Client, stream: str, low: str, below: str) -> bool:
    """Whether an entry lies in [low, below): one XRANGE ... COUNT 1."""
    return bool(client.xrange(stream, min=low, max="(" + below, count=1))


def trim_preview(
    *, client: Client, stream: str, minid: str, budget: int = COUNT_BUDGET
) -> TrimPlan:
    """The dry run of ``stream_trim``: the floor and how many entries are below ``minid``
    (XTRIM MINID deletes the entries with smaller ids). Read only: XINFO GROUPS, one
    pipelined XPENDING summary per group with pending entries, a walk of at most
    ``budget`` entries."""
    name_check(stream, "stream")
    minid = _minid_check(minid)
    floor_id, floor_group, reason = _floor(client, stream)
    if minid == "0-0":
        would = _Count(0, True, None)
    else:
        would = _count_range(client, stream, "-", "(" + minid, budget)
    past = (
        bool(floor_id) and _id_lt(floor_id, minid) and _has_entry(client, stream, floor_id, minid)
    )
    return TrimPlan(minid, would.n, would.exact, floor_id, past, floor_group, reason)


@dataclass(frozen=True, slots=True)
class Trimmed:
    """How many entries ``stream_trim`` deleted."""

    deleted: int


def stream_trim(
    *, client: Client, stream: str, minid: str, force: bool, chunk: int = TRIM_CHUNK
) -> Trimmed:
    """XTRIM MINID ``minid``, exactly, in script runs of at most ``chunk`` entries. Each
    run re-checks the floor (see ``TrimPlan``) and, unless ``force``, refuses a MINID
    past it (``Refused``; runs before a refusal have deleted only entries below the
    floor). O(chunk) in Redis per run; about deleted/chunk round trips."""
    name_check(stream, "stream")
    minid = _minid_check(minid)
    deleted = 0
    while True:
        reply = STREAM_TRIM.call(stream=stream, minid=minid, force=force, chunk=chunk).run(client)
        if isinstance(reply, TrimRefusal):
            if reply.kind == "no-stream":
                raise Refused(f"there is no stream {stream!r}")
            why = (
                "its oldest pending entry"
                if reply.floor_reason == "pending"
                else "its first entry not delivered yet"
            )
            raise Refused(
                f"MINID {minid} is past the floor {reply.floor_id} (group "
                f"{reply.floor_group!r}: {why}); it would delete entries a group still "
                "needs. Force it with a typed confirmation to trim anyway"
            )
        deleted += reply.deleted
        if reply.done:
            break
    if deleted:
        _publish(client, action="trim", stream=stream, group="", ids=[])
    return Trimmed(deleted)


__all__ = [
    "COUNT_BUDGET",
    "HEARTBEAT_STALE_MS",
    "PARKING_CONSUMER",
    "RETIRE_DUE_IDLE_MS",
    "SEEN_WITHIN_MS",
    "GroupCreated",
    "GroupDeleted",
    "Position",
    "PositionDiff",
    "Refused",
    "Retired",
    "TrimPlan",
    "Trimmed",
    "consumer_retire",
    "entries_read_at",
    "group_create",
    "group_delete",
    "idle_consumers_find",
    "idle_consumers_retire",
    "position_parse",
    "position_preview",
    "position_reset",
    "stream_trim",
    "trim_preview",
]
