"""Bulk operator actions, scoped to a snapshot and capped per request.

A bulk request names a snapshot id (the newest id the operator saw) and either explicit
ids or a filter (consumer, minimum idle time). Ids newer than the snapshot are never
touched, so entries that arrived after the page loaded are safe: Sidekiq's "Delete all"
is the known failure here. Each request handles at most ``MAX_LIMIT`` ids and returns a
cursor to continue from, so a large set is worked through with progress, never in one
long call that blocks Redis.

This module owns scoping (which ids) and batching (how many per round trip). What is
done to each id is the per-entry atomic script in ``queue_core.services``, pipelined,
with the same guards; this module must never write to Redis any other way.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import redis
from redis.connection import ConnectionPool
from redis.exceptions import NoScriptError

from queue_core.events import event_publish
from queue_core.lua import script, source
from queue_core.services import (
    RETRY_IDLE_MS,
    acknowledge_call,
    dead_letter_call,
    entry_id_after,
    entry_id_check,
    entry_id_key,
    idle_check,
    name_check,
    reason_check,
    redis_refusal,
    refusal_text,
    retry_call,
)
from queue_core.types import (
    BulkItem,
    BulkOutcome,
    BulkResult,
    BulkScope,
)

#: Most ids one request looks at or changes.
MAX_LIMIT = 1000
#: Pending rows read per XPENDING call: as cheap as one bare 1,000-row page (DESIGN §5).
WINDOW = 1000
#: Most pending rows one request reads while filtering, so a rare filter on a 1M-entry
#: PEL costs at most MAX_SCAN / WINDOW short XPENDING calls, then hands back a cursor.
MAX_SCAN = 10_000
#: Scripts per pipelined round trip when applying an action.
CHUNK = 250

_Call = tuple[list[str], list[str | int]]
#: Scripts known to be loaded, per connection pool (that is, per server).
_LOADED: weakref.WeakKeyDictionary[ConnectionPool, set[str]] = weakref.WeakKeyDictionary()


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


def _check_ids(ids: Iterable[str], limit: int) -> list[str]:
    unique = list(dict.fromkeys(entry_id_check(i) for i in ids))
    if len(unique) > limit:
        raise ValueError(f"at most {limit} ids per request; got {len(unique)}")
    return unique


def _check_filter(ids: Sequence[str] | None, consumer: str | None, min_idle_ms: int | None) -> None:
    if ids is not None and (consumer is not None or min_idle_ms is not None):
        raise ValueError("give either explicit ids or a filter (consumer, min_idle_ms), not both")
    if consumer is not None:
        name_check(consumer, "consumer")
    if min_idle_ms is not None:
        idle_check(min_idle_ms, "min_idle_ms")


def pending_ids_matching(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    snapshot_id: str,
    start_id: str | None = None,
    consumer: str | None = None,
    min_idle_ms: int | None = None,
    limit: int = MAX_LIMIT,
    window: int = WINDOW,
    max_scan: int = MAX_SCAN,
) -> BulkScope:
    """Pending ids in ``group`` from ``start_id`` up to ``snapshot_id`` that match the filter.

    Pages through the XPENDING extended form (with the consumer's own list when
    ``consumer`` is given) in windows of ``window`` rows and filters idle times here,
    never with XPENDING IDLE, whose scan is unbounded when matches are rare. Stops at
    ``limit`` matches or ``max_scan`` rows read, whichever is first, and returns the cursor
    to continue from. Cost: at most ``ceil(max_scan / window)`` round trips, each O(window)
    in Redis, the same as a bare XPENDING page of that size at any depth.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(snapshot_id, what="snapshot id")
    start = "-" if start_id is None else entry_id_check(start_id, what="cursor")
    _check_filter(None, consumer, min_idle_ms)
    _check_limit(limit)
    if not 1 <= window <= 10_000 or max_scan < window:
        raise ValueError("window must be 1..10000 and max_scan at least window")
    if start != "-" and entry_id_key(start) > entry_id_key(snapshot_id):
        return BulkScope(snapshot_id=snapshot_id, ids=(), scanned=0, next_cursor=None)

    ids: list[str] = []
    scanned = 0
    while True:
        want = min(window, max_scan - scanned)
        try:
            rows: Any = client.xpending_range(
                stream, group, min=start, max=snapshot_id, count=want, consumername=consumer
            )
        except redis.ResponseError as exc:
            raise redis_refusal(exc, stream=stream, group=group) from exc
        scanned += len(rows)
        for row in rows:
            entry_id = row["message_id"].decode()
            if min_idle_ms is None or row["time_since_delivered"] >= min_idle_ms:
                ids.append(entry_id)
                if len(ids) == limit:
                    return BulkScope(
                        snapshot_id=snapshot_id,
                        ids=tuple(ids),
                        scanned=scanned,
                        next_cursor=entry_id_after(entry_id),
                    )
        if len(rows) < want:
            return BulkScope(
                snapshot_id=snapshot_id, ids=tuple(ids), scanned=scanned, next_cursor=None
            )
        start = entry_id_after(rows[-1]["message_id"].decode())
        if scanned >= max_scan:
            return BulkScope(
                snapshot_id=snapshot_id, ids=tuple(ids), scanned=scanned, next_cursor=start
            )


def _split_snapshot(ids: list[str], snapshot_id: str) -> tuple[list[str], list[str]]:
    """(ids up to the snapshot, ids newer than it)."""
    limit = entry_id_key(snapshot_id)
    inside = [i for i in ids if entry_id_key(i) <= limit]
    newer = [i for i in ids if entry_id_key(i) > limit]
    return inside, newer


def bulk_scope(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    snapshot_id: str,
    ids: Sequence[str] | None = None,
    consumer: str | None = None,
    min_idle_ms: int | None = None,
    cursor: str | None = None,
    limit: int = MAX_LIMIT,
) -> BulkScope:
    """The dry run: which ids a bulk action with these arguments would touch now.

    With explicit ``ids``: those up to ``snapshot_id`` that are still pending, checked
    with one pipelined XPENDING per id (one round trip, O(log n) each). With a filter:
    ``pending_ids_matching`` from ``cursor``. ``count`` is for this request only; when
    ``complete`` is false, more remain after ``next_cursor``.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(snapshot_id, what="snapshot id")
    _check_filter(ids, consumer, min_idle_ms)
    _check_limit(limit)
    if ids is None:
        return pending_ids_matching(
            client=client,
            stream=stream,
            group=group,
            snapshot_id=snapshot_id,
            start_id=cursor,
            consumer=consumer,
            min_idle_ms=min_idle_ms,
            limit=limit,
        )
    inside, _ = _split_snapshot(_check_ids(ids, limit), snapshot_id)
    pipe = client.pipeline(transaction=False)
    for entry_id in inside:
        pipe.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    replies = pipe.execute(raise_on_error=False)
    _raise_refusals(replies, stream=stream, group=group)
    pending = tuple(i for i, reply in zip(inside, replies, strict=True) if reply)
    return BulkScope(snapshot_id=snapshot_id, ids=pending, scanned=len(inside), next_cursor=None)


def _whole(exc: redis.ResponseError) -> bool:
    """Whether an error reply is about the stream or group (every entry would get it)."""
    try:
        redis_refusal(exc, stream="", group="")
    except redis.ResponseError:
        return False
    return True


def _raise_refusals(replies: Sequence[Any], *, stream: str, group: str) -> None:
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise redis_refusal(reply, stream=stream, group=group) from reply


def _evalsha_all(client: redis.Redis, sha: str, calls: Sequence[_Call]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        pipe.evalsha(sha, len(keys), *keys, *args)
    return list(pipe.execute(raise_on_error=False))


def scripts_pipelined(client: redis.Redis, name: str, calls: Sequence[_Call]) -> list[Any]:
    """Run script ``name`` once per call in one pipelined round trip (EVALSHA).

    Each script stays atomic on its own; the pipeline only saves round trips. On NOSCRIPT
    (a restarted or flushed server) the script is loaded and just those calls run again,
    which is safe because a NOSCRIPT call did nothing. Replies that are errors are
    returned as exception objects.
    """
    sha = script(client, name).sha
    loaded = _LOADED.setdefault(client.connection_pool, set())
    if sha not in loaded:
        # Once per server and process: otherwise the first chunk would all come back
        # NOSCRIPT and run twice.
        client.script_load(source(name))
        loaded.add(sha)
    replies = _evalsha_all(client, sha, calls)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        client.script_load(source(name))
        again = _evalsha_all(client, sha, [calls[i] for i in missing])
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    return replies


def _outcome(reply: Any, entry_id: str) -> BulkItem:
    kind, message = refusal_text(reply, entry_id)
    if kind == "not-pending":
        return BulkItem(entry_id=entry_id, outcome=BulkOutcome.NOT_PENDING, detail=message)
    if kind in ("owner-changed", "idle-changed"):
        return BulkItem(entry_id=entry_id, outcome=BulkOutcome.CHANGED, detail=message)
    return BulkItem(entry_id=entry_id, outcome=BulkOutcome.REFUSED, detail=message)


def _bulk_apply(
    *,
    client: redis.Redis,
    action: str,
    script_name: str,
    call: Callable[[str, str, int | None], _Call],
    new_id: Callable[[Any], str],
    stream: str,
    group: str,
    snapshot_id: str,
    ids: Sequence[str] | None,
    consumer: str | None,
    min_idle_ms: int | None,
    cursor: str | None,
    limit: int,
    chunk_size: int,
) -> BulkResult:
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(snapshot_id, what="snapshot id")
    _check_filter(ids, consumer, min_idle_ms)
    _check_limit(limit)
    if not 1 <= chunk_size <= MAX_LIMIT:
        raise ValueError(f"chunk_size must be between 1 and {MAX_LIMIT}")

    items: list[BulkItem] = []
    if ids is None:
        scope = pending_ids_matching(
            client=client,
            stream=stream,
            group=group,
            snapshot_id=snapshot_id,
            start_id=cursor,
            consumer=consumer,
            min_idle_ms=min_idle_ms,
            limit=limit,
        )
        targets, next_cursor = list(scope.ids), scope.next_cursor
    else:
        targets, newer = _split_snapshot(_check_ids(ids, limit), snapshot_id)
        next_cursor = None
        items.extend(
            BulkItem(
                entry_id=i,
                outcome=BulkOutcome.NEWER_THAN_SNAPSHOT,
                detail=f"entry {i} arrived after snapshot {snapshot_id}; left alone",
            )
            for i in newer
        )

    for start in range(0, len(targets), chunk_size):
        chunk = targets[start : start + chunk_size]
        # The filter is re-checked inside each script: an entry a worker took back between
        # the listing and the script is skipped as changed, not acted on.
        replies = scripts_pipelined(
            client, script_name, [call(entry_id, consumer or "", min_idle_ms) for entry_id in chunk]
        )
        changed = any(i.outcome is BulkOutcome.DONE for i in items) or any(
            not isinstance(reply, Exception) and reply[0] for reply in replies
        )
        if not changed:
            # A missing group or a key of another type refuses the whole request, while
            # nothing has been changed yet.
            _raise_refusals(
                [e for e in replies if isinstance(e, redis.ResponseError) and _whole(e)],
                stream=stream,
                group=group,
            )
        for entry_id, reply in zip(chunk, replies, strict=True):
            if isinstance(reply, Exception):
                # Once entries have been changed, an error must not hide them from the
                # caller (the audit row lists what was done): it is this entry's outcome.
                items.append(
                    BulkItem(
                        entry_id=entry_id,
                        outcome=BulkOutcome.REFUSED,
                        detail=f"entry {entry_id}: Redis refused it: {reply}",
                    )
                )
            elif reply[0]:
                items.append(
                    BulkItem(entry_id=entry_id, outcome=BulkOutcome.DONE, new_id=new_id(reply))
                )
            else:
                items.append(_outcome(reply, entry_id))

    result = BulkResult(
        action=action, snapshot_id=snapshot_id, items=tuple(items), next_cursor=next_cursor
    )
    if result.done:
        event_publish(
            client=client,
            type="action",
            stream=stream,
            group=group,
            action=action,
            ids=list(result.done),
            bulk=True,
        )
    return result


def bulk_retry(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    snapshot_id: str,
    ids: Sequence[str] | None = None,
    consumer: str | None = None,
    min_idle_ms: int | None = None,
    cursor: str | None = None,
    limit: int = MAX_LIMIT,
    idle_ms: int = RETRY_IDLE_MS,
    chunk_size: int = CHUNK,
) -> BulkResult:
    """``entry_retry`` for each id in scope: one pipelined round trip per ``chunk_size`` ids.

    Scope as in ``bulk_scope``. Returns per-id outcomes and the cursor for the next
    request (None when done). O(log n) in Redis per id.
    """
    idle_check(idle_ms, "idle_ms")

    def call(entry_id: str, owner: str, min_idle: int | None) -> _Call:
        return retry_call(
            stream=stream,
            group=group,
            entry_id=entry_id,
            idle_ms=idle_ms,
            expected_consumer=owner,
            min_idle_ms=min_idle,
        )

    return _bulk_apply(
        client=client,
        action="retry",
        script_name="retry",
        call=call,
        new_id=lambda reply: "",
        stream=stream,
        group=group,
        snapshot_id=snapshot_id,
        ids=ids,
        consumer=consumer,
        min_idle_ms=min_idle_ms,
        cursor=cursor,
        limit=limit,
        chunk_size=chunk_size,
    )


def bulk_dead_letter(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    snapshot_id: str,
    reason: str,
    operator: str,
    ids: Sequence[str] | None = None,
    consumer: str | None = None,
    min_idle_ms: int | None = None,
    cursor: str | None = None,
    limit: int = MAX_LIMIT,
    chunk_size: int = CHUNK,
) -> BulkResult:
    """``entry_dead_letter`` for each id in scope; each item's ``new_id`` is its DLQ id.

    One pipelined round trip per ``chunk_size`` ids; O(fields) in Redis per id. Raises
    CrossSlotName for a stream whose DLQ cannot share its slot.
    """
    reason = reason_check(reason, required=True)

    def call(entry_id: str, owner: str, min_idle: int | None) -> _Call:
        return dead_letter_call(
            stream=stream,
            group=group,
            entry_id=entry_id,
            reason=reason,
            operator=operator,
            expected_consumer=owner,
            min_idle_ms=min_idle,
        )

    def dlq_id(reply: Any) -> str:
        value = reply[0]
        return value.decode() if isinstance(value, bytes) else str(value)

    return _bulk_apply(
        client=client,
        action="dead_letter",
        script_name="dead_letter",
        call=call,
        new_id=dlq_id,
        stream=stream,
        group=group,
        snapshot_id=snapshot_id,
        ids=ids,
        consumer=consumer,
        min_idle_ms=min_idle_ms,
        cursor=cursor,
        limit=limit,
        chunk_size=chunk_size,
    )


def bulk_acknowledge(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    snapshot_id: str,
    reason: str,
    ids: Sequence[str] | None = None,
    consumer: str | None = None,
    min_idle_ms: int | None = None,
    cursor: str | None = None,
    limit: int = MAX_LIMIT,
    chunk_size: int = CHUNK,
) -> BulkResult:
    """``entry_acknowledge`` for each id in scope; ``reason`` is required (ValueError).

    One pipelined round trip per ``chunk_size`` ids; O(log n) in Redis per id.
    """
    reason_check(reason, required=True)

    def call(entry_id: str, owner: str, min_idle: int | None) -> _Call:
        return acknowledge_call(
            stream=stream,
            group=group,
            entry_id=entry_id,
            expected_consumer=owner,
            min_idle_ms=min_idle,
        )

    return _bulk_apply(
        client=client,
        action="acknowledge",
        script_name="acknowledge",
        call=call,
        new_id=lambda reply: "",
        stream=stream,
        group=group,
        snapshot_id=snapshot_id,
        ids=ids,
        consumer=consumer,
        min_idle_ms=min_idle_ms,
        cursor=cursor,
        limit=limit,
        chunk_size=chunk_size,
    )
