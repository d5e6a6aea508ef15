"""One entry, one sweep: ``process_entry`` and ``reclaim_stale``, synchronous.

Owns the workshop semantics generalised to any stream and group: process one delivered
entry under the ack contract (its decisions come from ``contract``, its rare writes go
through ``settle``), and take over stale entries with one XAUTOCLAIM from a kept cursor.
``Worker`` runs ``reclaim_stale`` in a thread for its sweeps. Never raises a handler's
error; each function's docstring counts its round trips.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from queue_core.clock import now_ms
from queue_core.connection import Client
from queue_core.failures import FailureBacklog
from queue_core.jobs import Delivery, Job, Outcome, Reclaimed, UnparseableEntry
from queue_core.parsing import FieldParser, fields_parse
from queue_core.worker.contract import (
    REPLAY_KEY,
    entry_admit,
    handler_failed_settle,
    payload_missing_settle,
    unparseable_settle,
)
from queue_core.worker.lanes import Handler
from queue_core.worker.settle import Settled, settlements_write

log = logging.getLogger("queue_core.worker")


def process_entry(
    *,
    client: Client,
    stream: str,
    group: str,
    consumer: str,
    entry_id: str,
    fields: Mapping[bytes, bytes] | None,
    handler: Handler,
    delivery_count: int = 1,
    max_deliveries: int = 5,
    parser: FieldParser = fields_parse,
) -> Outcome:
    """Process one delivered entry under the ack contract; never raises a handler's error.

    1. A replay meant for another group (REPLAY_GROUP_FIELD) is acked without running.
    2. An entry delivered more than ``max_deliveries`` times, one the parser rejects, or
       one whose payload was trimmed is dead-lettered at once with the reason.
    3. The handler runs (an async one in its own event loop). On success: XACK. On error:
       a record in ``{S}:failures`` and the entry stays pending, unless the error is a
       PermanentFailure or this was delivery ``max_deliveries``: then it is dead-lettered.

    Round trips: 1 on success; 2 on a failure that stays pending (record, event); up to 4
    when it is dead-lettered (record, event, script, event).
    """
    raw = None if fields is None else dict(fields)
    admission = entry_admit(entry_id=entry_id, raw=raw, delivery_count=delivery_count,
                            group=group, max_deliveries=max_deliveries)  # fmt: skip
    if admission.skip:
        log.debug("%s %s is a replay for group %r; acked in %s", stream, entry_id,
                  raw and raw.get(REPLAY_KEY), group)  # fmt: skip
        client.xack(stream, group, entry_id)
        return Outcome.SKIPPED
    settle = functools.partial(
        settlements_write, client=client, stream=stream, group=group, consumer=consumer
    )
    if admission.settle is not None:
        return _dead_letter_outcome(settle(items=[admission.settle]))
    try:
        text = parser(raw)
    except UnparseableEntry as exc:
        rejected = unparseable_settle(
            entry_id=entry_id, raw_missing=raw is None, delivery_count=delivery_count, exc=exc,
            group=group, consumer=consumer, failed_at_ms=now_ms(),
        )  # fmt: skip
        return _dead_letter_outcome(settle(items=[rejected]))
    job = Job(stream, group, entry_id, text, delivery_count, consumer, raw or {})
    return _job_run(client, job, handler, settle, max_deliveries)


def _job_run(
    client: Client,
    job: Job,
    handler: Handler,
    settle: Callable[..., Settled],
    max_deliveries: int,
) -> Outcome:
    """Run the handler: XACK on success; on an error, settle it as the contract says."""
    started = time.perf_counter()
    try:
        _run_handler_sync(handler, job)
    except (Exception, asyncio.CancelledError) as exc:
        # CancelledError here can only come from the handler (this call is synchronous).
        failed = handler_failed_settle(
            entry_id=job.id, delivery_count=job.delivery_count, exc=exc,
            duration_ms=(time.perf_counter() - started) * 1000, failed_at_ms=now_ms(),
            max_deliveries=max_deliveries,
        )  # fmt: skip
        log.warning("handler failed on %s %s (delivery %d): %s", job.stream, job.id,
                    job.delivery_count, failed.last_error)  # fmt: skip
        settled = settle(items=[failed])
        if failed.dead_letter_reason is None:
            return Outcome.FAILED
        return _dead_letter_outcome(settled)
    try:
        client.xack(job.stream, job.group, job.id)
    except (redis.RedisError, RedisClusterException) as exc:  # a cluster with no node for the slot
        log.error("XACK of %s %s failed (%s); it stays pending", job.stream, job.id, exc)
        return Outcome.ACK_FAILED
    return Outcome.ACKED


def _dead_letter_outcome(settled: Settled) -> Outcome:
    """Moved; or still pending in our name (Redis failed or refused); or another consumer
    settled or took it first."""
    if settled.moved:
        return Outcome.DEAD_LETTERED
    return Outcome.DEAD_LETTER_FAILED if settled.kept else Outcome.NOT_PENDING


def _run_handler_sync(handler: Handler, job: Job) -> None:
    """Call a handler from synchronous code; an async one gets its own event loop."""
    result = handler(job)
    if inspect.isawaitable(result):
        asyncio.run(_await(result))


async def _await(awaitable: Awaitable[Any]) -> None:
    await awaitable


def reclaim_stale(
    *,
    client: Client,
    stream: str,
    group: str,
    consumer: str,
    min_idle_ms: int,
    count: int = 100,
    cursor: str = "0-0",
    backlog: FailureBacklog | None = None,
) -> Reclaimed:
    """Take over entries idle at least ``min_idle_ms`` with one XAUTOCLAIM from ``cursor``.

    Keep the returned ``cursor`` for the next call: restarting at 0-0 every time rescans
    the head of the PEL (about 1.7 s of Redis CPU per sweep of a 1M-entry PEL). Entries
    deleted from the stream while pending are recorded as PayloadMissing; on Redis 7+
    XAUTOCLAIM drops them from the PEL itself, on 6.2 (which returns them as nil without
    an id) they are found with one XPENDING and dead-lettered. Delivery counts come from
    one pipelined XPENDING per claimed entry (XAUTOCLAIM has just incremented them).
    Their failure records go through ``backlog`` when it is given (see failures_record).
    """
    reply: Any = client.xautoclaim(
        stream, group, consumer, min_idle_time=min_idle_ms, start_id=cursor, count=count
    )
    next_cursor = _text(reply[0])
    live = [(_text(i), dict(f)) for i, f in reply[1] if i is not None]
    nils = sum(1 for i, _ in reply[1] if i is None)
    deleted = [(_text(i), 0) for i in reply[2]] if len(reply) > 2 else []
    counts = _delivery_counts(client, stream, group, consumer, [i for i, _ in live])
    # Redis 6.2 keeps the nils pending (in our name now): they must be dead-lettered.
    still_pending = (
        _deleted_claimed(client, stream, group, consumer, cursor, next_cursor, counts)
        if nils
        else []
    )
    missing = [
        payload_missing_settle(entry_id=entry_id, attempt=attempt, group=group,
                               consumer=consumer, failed_at_ms=now_ms(), still_pending=pending)
        for pending, found in ((False, deleted), (True, still_pending))
        for entry_id, attempt in found
    ]  # fmt: skip
    if missing:
        log.warning(
            "%d entries of %s were deleted while pending in %s", len(missing), stream, group
        )
        settlements_write(
            client=client, stream=stream, group=group, consumer=consumer, items=missing,
            backlog=backlog,
        )  # fmt: skip
    deliveries = tuple(Delivery(i, f, counts[i]) for i, f in live if i in counts)
    return Reclaimed(
        deliveries=deliveries, deleted=tuple(m.entry_id for m in missing), cursor=next_cursor
    )


def delivery_counts_restore(
    *, client: Client, stream: str, group: str, consumer: str, counts: Mapping[str, int]
) -> None:
    """Set entries' delivery counts back after a sweep claimed entries this worker holds.

    XAUTOCLAIM counts every claim as a delivery, including the worker's own sweep taking an
    entry it is still running (a handler slower than ``min_idle_ms``) or still settling.
    Left alone, that extra count would dead-letter the entry before its handler had run
    ``max_deliveries`` times. One pipelined ``XCLAIM … RETRYCOUNT n JUSTID`` per entry;
    JUSTID itself counts nothing, and the sweep has just reset the entries' idle time, so
    no other consumer can take them in between. Runs only when a sweep met held entries.
    """
    if not counts:
        return
    pipe = client.pipeline(transaction=False)
    for entry_id, count in counts.items():
        pipe.xclaim(stream, group, consumer, 0, [entry_id], retrycount=max(0, count), justid=True)
    pipe.execute()


def _delivery_counts(
    client: Client, stream: str, group: str, consumer: str, ids: list[str]
) -> dict[str, int]:
    """Each claimed entry's delivery count, in one pipelined round trip (none when empty).

    An entry another consumer took in between is left out: it is no longer ours to run.
    """
    counts: dict[str, int] = {}
    if not ids:
        return counts
    pipe = client.pipeline(transaction=False)
    for entry_id in ids:
        pipe.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    for entry_id, rows in zip(ids, pipe.execute(), strict=True):
        if rows and _text(rows[0]["consumer"]) == consumer:
            counts[entry_id] = int(rows[0]["times_delivered"])
    return counts


def _deleted_claimed(
    client: Client,
    stream: str,
    group: str,
    consumer: str,
    start: str,
    end: str,
    live: Mapping[str, int],
) -> list[tuple[str, int]]:
    """Redis 6.2: ids XAUTOCLAIM claimed as nil, i.e. now ours but gone from the stream.

    One XPENDING over the swept range for this consumer, then one pipelined XRANGE per
    candidate to confirm the payload is gone (an in-flight entry of ours still exists).
    Returns (id, delivery count) pairs.
    """
    upper = "+" if end == "0-0" else "(" + end
    rows: Any = client.xpending_range(
        stream, group, min=start, max=upper, count=10_000, consumername=consumer
    )
    candidates = [(_text(r["message_id"]), int(r["times_delivered"])) for r in rows]
    candidates = [(i, n) for i, n in candidates if i not in live]
    if not candidates:
        return []
    pipe = client.pipeline(transaction=False)
    for entry_id, _ in candidates:
        pipe.xrange(stream, min=entry_id, max=entry_id, count=1)
    return [(i, n) for (i, n), found in zip(candidates, pipe.execute(), strict=True) if not found]


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
