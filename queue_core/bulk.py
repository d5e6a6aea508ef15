"""Bulk operator actions, scoped to a snapshot and capped per request.

A bulk request names a snapshot id (the newest id the operator saw) and either explicit
ids or a filter (consumer, minimum idle time, and a caller's ``match``: the dashboard's
failure fingerprint, "pending entries whose last failure has this cause"). Ids newer
than the snapshot are never touched, so entries that arrived after the page loaded are
safe: Sidekiq's "Delete all" is the known failure here. Each request handles at most
``MAX_LIMIT`` ids and returns a cursor to continue from, so a large set is worked
through with progress, never in one long call that blocks Redis.

This module owns scoping (which ids) and batching (how many per round trip). What is
done to each id is the per-entry atomic script in ``queue_core.services``, pipelined,
with the same guards; this module must never write to Redis any other way.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeVar, Unpack

import redis

from queue_core import clock, later
from queue_core.connection import Client
from queue_core.errors import action_refusal, not_a_group
from queue_core.events import event_publish
from queue_core.keys import LATER_INDEX_KEY
from queue_core.results import (
    Acknowledged,
    BulkItem,
    BulkOutcome,
    BulkResult,
    BulkScope,
    DeadLettered,
    Retried,
)
from queue_core.scripts import ACKNOWLEDGE, DEAD_LETTER, RETRY, Refusal, ScriptCall, calls_pipelined
from queue_core.scripts.retry_later import RETRY_LATER, RetriedLater
from queue_core.services import RETRY_IDLE_MS
from queue_core.validation import (
    entry_id_after,
    entry_id_check,
    entry_id_key,
    idle_check,
    name_check,
    reason_check,
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

_R = TypeVar("_R")

#: A caller's filter over pending ids: given one window of ids (at most ``WINDOW``), the
#: ones to keep. The dashboard's fingerprint scope is one (one SQL query per window);
#: this module never knows what it asks.
Match = Callable[[Sequence[str]], Collection[str]]


class ScopeArgs(TypedDict, total=False):
    """Which pending ids a bulk request covers, up to its snapshot id.

    Give explicit ``ids`` or a filter (``consumer``, ``min_idle_ms``, ``cursor``), not
    both; neither means every pending id. Defaults are ``_scope``'s.
    """

    #: Explicit ids; those newer than the snapshot are left alone and reported so.
    ids: Sequence[str] | None
    #: Filter: only this consumer's entries.
    consumer: str | None
    #: Filter: only entries idle at least this long (re-checked inside each script).
    min_idle_ms: int | None
    #: Filter: only the ids this keeps, asked once per window of pending ids read.
    match: Match | None
    #: Filter: continue from here (a previous request's ``next_cursor``).
    cursor: str | None
    #: Most ids this request handles (default and cap ``MAX_LIMIT``).
    limit: int


class ApplyArgs(ScopeArgs, total=False):
    #: Scripts per pipelined round trip (default ``CHUNK``).
    chunk_size: int


@dataclass(frozen=True, slots=True)
class _Scope:
    """A bulk request's scope, checked before Redis is asked."""

    stream: str
    group: str
    snapshot_id: str
    ids: list[str] | None
    consumer: str | None
    min_idle_ms: int | None
    cursor: str | None
    limit: int
    chunk_size: int
    match: Match | None = None


def _scope(
    *,
    stream: str,
    group: str,
    snapshot_id: str,
    ids: Sequence[str] | None = None,
    consumer: str | None = None,
    min_idle_ms: int | None = None,
    cursor: str | None = None,
    limit: int = MAX_LIMIT,
    chunk_size: int = CHUNK,
    match: Match | None = None,
) -> _Scope:
    """Every check a bulk request makes; ValueError names the first that fails."""
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(snapshot_id, what="snapshot id")
    _check_filter(ids, consumer, min_idle_ms)
    if ids is not None and match is not None:
        raise ValueError("give either explicit ids or a filter (match), not both")
    _check_limit(limit)
    if not 1 <= chunk_size <= MAX_LIMIT:
        raise ValueError(f"chunk_size must be between 1 and {MAX_LIMIT}")
    checked = None if ids is None else _check_ids(ids, limit)
    return _Scope(
        stream, group, snapshot_id, checked, consumer, min_idle_ms, cursor, limit, chunk_size, match
    )


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
    client: Client,
    stream: str,
    group: str,
    snapshot_id: str,
    start_id: str | None = None,
    consumer: str | None = None,
    min_idle_ms: int | None = None,
    limit: int = MAX_LIMIT,
    window: int = WINDOW,
    max_scan: int = MAX_SCAN,
    match: Match | None = None,
) -> BulkScope:
    """Pending ids in ``group`` from ``start_id`` up to ``snapshot_id`` that match the filter.

    Pages through the XPENDING extended form (with the consumer's own list when
    ``consumer`` is given) in windows of ``window`` rows and filters idle times here,
    never with XPENDING IDLE, whose scan is unbounded when matches are rare; ``match``
    then keeps what it returns of each window's ids (its cost is the caller's). Stops at
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
            raise action_refusal(exc, stream=stream, group=group) from exc
        scanned += len(rows)
        for entry_id in _window_matches(rows, min_idle_ms, match):
            ids.append(entry_id)
            if len(ids) == limit:
                return BulkScope(snapshot_id, tuple(ids), scanned, entry_id_after(ids[-1]))
        if len(rows) < want:
            return BulkScope(snapshot_id, tuple(ids), scanned, next_cursor=None)
        start = entry_id_after(rows[-1]["message_id"].decode())
        if scanned >= max_scan:
            return BulkScope(snapshot_id, tuple(ids), scanned, next_cursor=start)


def _window_matches(rows: Any, min_idle_ms: int | None, match: Match | None) -> list[str]:
    """The ids of one XPENDING window that pass the idle filter, then ``match``, in order."""
    ids = [
        row["message_id"].decode()
        for row in rows
        if min_idle_ms is None or row["time_since_delivered"] >= min_idle_ms
    ]
    if match is not None and ids:
        kept = set(match(ids))
        ids = [i for i in ids if i in kept]
    return ids


def _split_snapshot(ids: list[str], snapshot_id: str) -> tuple[list[str], list[str]]:
    """(ids up to the snapshot, ids newer than it)."""
    limit = entry_id_key(snapshot_id)
    inside = [i for i in ids if entry_id_key(i) <= limit]
    newer = [i for i in ids if entry_id_key(i) > limit]
    return inside, newer


def _matching(client: Client, scope: _Scope) -> BulkScope:
    return pending_ids_matching(
        client=client,
        stream=scope.stream,
        group=scope.group,
        snapshot_id=scope.snapshot_id,
        start_id=scope.cursor,
        consumer=scope.consumer,
        min_idle_ms=scope.min_idle_ms,
        limit=scope.limit,
        match=scope.match,
    )


def bulk_scope(
    *, client: Client, stream: str, group: str, snapshot_id: str, **scope: Unpack[ScopeArgs]
) -> BulkScope:
    """The dry run: which ids a bulk action with these arguments would touch now.

    With explicit ``ids``: those up to ``snapshot_id`` that are still pending, checked
    with one pipelined XPENDING per id (one round trip, O(log n) each). With a filter:
    ``pending_ids_matching`` from ``cursor``. ``count`` is for this request only; when
    ``complete`` is false, more remain after ``next_cursor``.
    """
    checked = _scope(stream=stream, group=group, snapshot_id=snapshot_id, **scope)
    if checked.ids is None:
        return _matching(client, checked)
    inside, _ = _split_snapshot(checked.ids, snapshot_id)
    pipe = client.pipeline(transaction=False)
    for entry_id in inside:
        pipe.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    replies = pipe.execute(raise_on_error=False)
    _raise_refusals(replies, stream=stream, group=group)
    pending = tuple(i for i, reply in zip(inside, replies, strict=True) if reply)
    return BulkScope(snapshot_id=snapshot_id, ids=pending, scanned=len(inside), next_cursor=None)


def _raise_refusals(replies: Sequence[Any], *, stream: str, group: str) -> None:
    """Raise the first error reply: as ActionRefused when the operator caused it."""
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise action_refusal(reply, stream=stream, group=group) from reply


# --- applying an action: the per-entry scripts, pipelined ---------------------------------


def _targets(client: Client, scope: _Scope) -> tuple[list[str], list[BulkItem], str | None]:
    """The ids to act on, the items of explicit ids newer than the snapshot, the cursor."""
    if scope.ids is None:
        found = _matching(client, scope)
        return list(found.ids), [], found.next_cursor
    targets, newer = _split_snapshot(scope.ids, scope.snapshot_id)
    detail = "entry {} arrived after snapshot {}; left alone"
    skipped = [
        BulkItem(i, BulkOutcome.NEWER_THAN_SNAPSHOT, detail.format(i, scope.snapshot_id))
        for i in newer
    ]
    return targets, skipped, None


def _item(entry_id: str, reply: object) -> BulkItem:
    """One id's outcome from its script's parsed reply (or error reply)."""
    if isinstance(reply, Exception):
        # Once entries have been changed, an error must not hide them from the caller
        # (the audit row lists what was done): it is this entry's outcome.
        return BulkItem(
            entry_id, BulkOutcome.REFUSED, f"entry {entry_id}: Redis refused it: {reply}"
        )
    if isinstance(reply, Refusal):
        if reply.kind == "not-pending":
            return BulkItem(entry_id, BulkOutcome.NOT_PENDING, reply.message)
        if reply.kind in ("owner-changed", "idle-changed"):
            return BulkItem(entry_id, BulkOutcome.CHANGED, reply.message)
        return BulkItem(entry_id, BulkOutcome.REFUSED, reply.message)
    new_id = reply.dlq_id if isinstance(reply, DeadLettered) else ""
    return BulkItem(entry_id, BulkOutcome.DONE, new_id=new_id)


def _apply_chunk(
    client: Client, scope: _Scope, calls: list[ScriptCall[_R]], changed: bool
) -> list[_R | Exception]:
    """Run one chunk's scripts in one round trip. While nothing has been changed yet, a
    missing group or a key of another type refuses the whole request instead."""
    replies = calls_pipelined(client, calls)
    if not changed and not any(not isinstance(r, Exception | Refusal) for r in replies):
        whole = [e for e in replies if isinstance(e, redis.ResponseError) and not_a_group(e)]
        _raise_refusals(whole, stream=scope.stream, group=scope.group)
    return replies


def _bulk_apply(
    client: Client,
    action: str,
    scope: _Scope,
    call: Callable[[str], ScriptCall[_R]],
) -> BulkResult:
    """Run ``call``'s script for every id in scope, ``chunk_size`` per round trip, and
    publish one event for the request when anything was done."""
    targets, items, next_cursor = _targets(client, scope)
    for start in range(0, len(targets), scope.chunk_size):
        chunk = targets[start : start + scope.chunk_size]
        # The filter is re-checked inside each script: an entry a worker took back between
        # the listing and the script is skipped as changed, not acted on.
        changed = any(i.outcome is BulkOutcome.DONE for i in items)
        replies = _apply_chunk(client, scope, [call(i) for i in chunk], changed)
        items.extend(_item(i, reply) for i, reply in zip(chunk, replies, strict=True))
    result = BulkResult(action, scope.snapshot_id, tuple(items), next_cursor)
    if result.done:
        event_publish(
            client=client,
            type="action",
            stream=scope.stream,
            group=scope.group,
            action=action,
            ids=list(result.done),
            bulk=True,
        )
    return result


def bulk_retry(
    *,
    client: Client,
    stream: str,
    group: str,
    snapshot_id: str,
    idle_ms: int = RETRY_IDLE_MS,
    **scope: Unpack[ApplyArgs],
) -> BulkResult:
    """``entry_retry`` for each id in scope: one pipelined round trip per ``chunk_size`` ids.

    Scope as in ``bulk_scope`` (``ScopeArgs``). Returns per-id outcomes and the cursor for
    the next request (None when done). O(log n) in Redis per id.
    """
    idle_check(idle_ms, "idle_ms")
    checked = _scope(stream=stream, group=group, snapshot_id=snapshot_id, **scope)
    owner, min_idle = checked.consumer or "", checked.min_idle_ms

    def call(entry_id: str) -> ScriptCall[Retried | Refusal]:
        return RETRY.call(
            stream=stream,
            group=group,
            entry_id=entry_id,
            idle_ms=idle_ms,
            expected_consumer=owner,
            min_idle_ms=min_idle,
        )

    result = _bulk_apply(client, "retry", checked, call)
    # Retry later's parked entries among them: forget their due times (``later_forget``).
    parked = [i.entry_id for i in result.items if i.outcome is BulkOutcome.DONE]
    if parked:
        later.later_forget(client=client, stream=stream, group=group, ids=parked)
    return result


def bulk_retry_later(
    *,
    client: Client,
    stream: str,
    group: str,
    snapshot_id: str,
    due_ms: int,
    **scope: Unpack[ApplyArgs],
) -> BulkResult:
    """``later.entry_retry_later`` for each id in scope: parked until ``due_ms``.

    One SADD (the sweepers' index), then one pipelined round trip per ``chunk_size`` ids;
    O(log n) in Redis per id. The script re-checks the owner of a consumer filter, not an
    idle filter (a parked entry is idle 0 after). Raises ValueError for a due time in the
    past or too far ahead, CrossSlotName for names without companions.
    """
    later.due_check(due_ms, now_ms=clock.now_ms())
    checked = _scope(stream=stream, group=group, snapshot_id=snapshot_id, **scope)
    owner = checked.consumer or ""
    client.sadd(LATER_INDEX_KEY, later.index_member(stream, group))

    def call(entry_id: str) -> ScriptCall[RetriedLater | Refusal]:
        return RETRY_LATER.call(
            stream=stream, group=group, entry_id=entry_id, parking=later.LATER_CONSUMER,
            due_ms=due_ms, max_parked=later.MAX_PARKED, expected_consumer=owner,
        )  # fmt: skip

    return _bulk_apply(client, "retry_later", checked, call)


def bulk_dead_letter(
    *,
    client: Client,
    stream: str,
    group: str,
    snapshot_id: str,
    reason: str,
    operator: str,
    **scope: Unpack[ApplyArgs],
) -> BulkResult:
    """``entry_dead_letter`` for each id in scope; each item's ``new_id`` is its DLQ id.

    One pipelined round trip per ``chunk_size`` ids; O(fields) in Redis per id. Raises
    CrossSlotName for a stream whose DLQ cannot share its slot.
    """
    reason = reason_check(reason, required=True)
    checked = _scope(stream=stream, group=group, snapshot_id=snapshot_id, **scope)
    owner, min_idle = checked.consumer or "", checked.min_idle_ms

    def call(entry_id: str) -> ScriptCall[DeadLettered | Refusal]:
        return DEAD_LETTER.call(
            stream=stream,
            group=group,
            entry_id=entry_id,
            reason=reason,
            operator=operator,
            expected_consumer=owner,
            min_idle_ms=min_idle,
        )

    return _bulk_apply(client, "dead_letter", checked, call)


def bulk_acknowledge(
    *,
    client: Client,
    stream: str,
    group: str,
    snapshot_id: str,
    reason: str,
    **scope: Unpack[ApplyArgs],
) -> BulkResult:
    """``entry_acknowledge`` for each id in scope; ``reason`` is required (ValueError).

    One pipelined round trip per ``chunk_size`` ids; O(log n) in Redis per id.
    """
    reason_check(reason, required=True)
    checked = _scope(stream=stream, group=group, snapshot_id=snapshot_id, **scope)
    owner, min_idle = checked.consumer or "", checked.min_idle_ms

    def call(entry_id: str) -> ScriptCall[Acknowledged | Refusal]:
        return ACKNOWLEDGE.call(
            stream=stream,
            group=group,
            entry_id=entry_id,
            expected_consumer=owner,
            min_idle_ms=min_idle,
        )

    return _bulk_apply(client, "acknowledge", checked, call)
