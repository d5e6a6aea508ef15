"""Failure history from any worker: the public calls a plain redis-py worker makes.

Owns what a worker that is not ``queue_core.Worker`` needs for the dashboard to see its
failures ("Last failure", the entry's failure history, the Failures page after
``ingest_failures``, "Failures 1 h") and to dead-letter the way Ackboard's worker does:

- ``failed_attempt_record``: one record in ``{S}:failures`` and its ``failure`` event;
- ``failed_entry_dead_letter``: move a pending entry to ``{S}:dlq`` and XACK it, atomically;
- ``failure_recorded``: wrap a handler so a failure is recorded, and dead-lettered after
  ``max_deliveries``, without changing the worker's loop (its contract is below);
- ``*_async`` twins of all three for a ``redis.asyncio.Redis`` client.

It holds no rule of its own. A record is ``failures.failure_from_exception`` (layout,
caps); the decision to dead-letter and its reason are ``contract.handler_failed_settle``;
the move is ``scripts.DEAD_LETTER`` (original fields plus the ``ackboard.*`` origin
metadata, and the XACK, in one script; a second move finds nothing pending). The sync
calls write through the Worker's own ``settle.settlements_write`` (so through
``failures.failures_record``). The asyncio twins send the same commands, built by the same
functions, on an asyncio client: ``_settlement_write_async`` mirrors ``settlements_write``
for one entry, and the tests hold both to the same records, events and dead letters.

The wrapper's contract, for a loop that acks when the handler returns:
- the handler returned: its result is returned; the loop acks as before;
- it raised and the entry was not moved: the attempt is recorded and the *same exception*
  is re-raised, so the loop's error path runs and the entry stays pending;
- it raised and the entry was moved to the DLQ (delivery ``max_deliveries``, or a
  ``PermanentFailure``): ``Outcome.DEAD_LETTERED`` is returned. The script has already
  acked it, so a loop that acks anyway sends a harmless no-op XACK.
Every path where the entry was *not* moved raises, so a loop that acks on return can never
ack a failed entry: not when Redis is away, refuses the move, or another consumer took the
entry while the handler ran (acking then would drop that consumer's delivery).

Never acks a success (the caller's loop does), never raises a Redis error (they are logged,
and the entry stays pending), never imports Django. Cost per failure: 1 round trip for the
delivery count when it is not given (XPENDING for that one id, O(log PEL)), 2 for the record
and its event, and 2 more (script, event) when the entry is moved. Nothing on success.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import redis
import redis.asyncio
from redis.commands.core import AsyncScript

from queue_core.clock import now_ms
from queue_core.events import event_message
from queue_core.failures import (
    FAILURES_MAXLEN,
    FailureRecord,
    _replies_sort,
    failure_from_exception,
)
from queue_core.jobs import Outcome
from queue_core.keys import EVENTS_CHANNEL, stream_keys
from queue_core.results import DeadLettered
from queue_core.scripts.binding import Refusal, script_source, text
from queue_core.validation import entry_id_check
from queue_core.worker.config import WorkerConfig
from queue_core.worker.contract import Settlement, handler_failed_settle
from queue_core.worker.settle import (
    Fate,
    Settled,
    _record_of,
    dead_letter_call,
    dead_letter_fate,
    settlements_write,
)

log = logging.getLogger("queue_core.recording")

P = ParamSpec("P")
R = TypeVar("R")

#: The Worker's default, read from ``WorkerConfig`` so the two cannot drift.
MAX_DELIVERIES: int = next(
    f.default for f in dataclasses.fields(WorkerConfig) if f.name == "max_deliveries"
)  # type: ignore[assignment]


# -- Shared by the sync calls and their asyncio twins: no I/O ---------------------------


def _pending_parse(rows: Sequence[Any]) -> tuple[int, str] | None:
    """(delivery count, owner) from an XPENDING range of one id; None when not pending."""
    if not rows:
        return None
    return int(rows[0]["times_delivered"]), text(rows[0]["consumer"])


def _attempt_of(pending: tuple[int, str] | None) -> int:
    """The attempt a record carries: the delivery count, 0 when the entry is not pending
    any more (someone acked or moved it while the handler ran)."""
    return 0 if pending is None else pending[0]


def _record_item(
    *, group: str, consumer: str, entry_id: str, exc: BaseException, attempt: int,
    duration_ms: float,
) -> Settlement:  # fmt: skip
    """A failed attempt to record and nothing more: the Worker's record, built once."""
    record = failure_from_exception(exc, group=group, entry_id=entry_id, consumer=consumer,
                                    attempt=attempt, duration_ms=duration_ms)  # fmt: skip
    return Settlement(entry_id=entry_id, attempt=attempt, record=record)


def _verdict_item(
    *, entry_id: str, exc: BaseException, attempt: int, duration_ms: float, max_deliveries: int
) -> Settlement:
    """The Worker's verdict on a handler's failure: its record, plus a dead-letter when the
    error is a PermanentFailure or this was delivery ``max_deliveries``."""
    return handler_failed_settle(
        entry_id=entry_id, delivery_count=attempt, exc=exc, duration_ms=duration_ms,
        failed_at_ms=now_ms(), max_deliveries=max_deliveries,
    )  # fmt: skip


def _dead_letter_item(*, entry_id: str, reason: str, last_error: str) -> Settlement:
    entry_id_check(entry_id)  # a malformed id is the caller's bug: ValueError, before Redis
    return Settlement(entry_id=entry_id, attempt=0, dead_letter_reason=reason,
                      last_error=last_error)  # fmt: skip


def _outcome(settled: Settled) -> Outcome:
    """A dead-letter's outcome, as ``process_entry`` reports it."""
    if settled.moved:
        return Outcome.DEAD_LETTERED
    return Outcome.DEAD_LETTER_FAILED if settled.kept else Outcome.NOT_PENDING


def _moved(item: Settlement, settled: Settled) -> bool:
    """The wrapper returns instead of re-raising only when this entry left the PEL through
    the DLQ move; every other outcome leaves it pending (or in another consumer's hands)."""
    return item.dead_letter_reason is not None and settled.moved == 1


def _deliveries_check(max_deliveries: int) -> int:
    if isinstance(max_deliveries, bool) or not isinstance(max_deliveries, int):
        raise TypeError("max_deliveries must be an int")
    if max_deliveries < 1:
        raise ValueError("max_deliveries must be at least 1")
    return max_deliveries


# -- Synchronous (redis.Redis) ----------------------------------------------------------


def entry_pending(
    *, client: redis.Redis, stream: str, group: str, entry_id: str
) -> tuple[int, str] | None:
    """(delivery count, owning consumer) of a pending entry, None when it is not pending.

    One XPENDING of that id: one round trip, O(log PEL) in Redis. Raises Redis errors.
    """
    rows = client.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    return _pending_parse(rows)


def _attempt_read(client: redis.Redis, stream: str, group: str, entry_id: str) -> int:
    try:
        return _attempt_of(entry_pending(client=client, stream=stream, group=group,
                                         entry_id=entry_id))  # fmt: skip
    except redis.RedisError as exc:
        log.warning("could not read the delivery count of %s %s (%s); recording attempt 0",
                    stream, entry_id, exc)  # fmt: skip
        return 0


def failed_attempt_record(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    entry_id: str,
    exc: BaseException,
    duration_ms: float = 0.0,
    attempt: int | None = None,
) -> FailureRecord | None:
    """Record one failed attempt in ``{S}:failures`` and publish its ``failure`` event.

    The record is the Worker's, field for field: error type, message (at most 2,000
    chars), traceback tail (at most 8,000), duration, attempt and time. ``attempt`` is the
    entry's delivery count; when omitted it is read with one XPENDING for the id (0 if the
    entry is no longer pending). Never acks, never dead-letters, never raises a Redis
    error: returns the record written, or None when Redis did not take it (logged).
    Round trips: 2, plus 1 without ``attempt``.
    """
    if attempt is None:
        attempt = _attempt_read(client, stream, group, entry_id)
    item = _record_item(group=group, consumer=consumer, entry_id=entry_id, exc=exc,
                        attempt=attempt, duration_ms=duration_ms)  # fmt: skip
    settled = settlements_write(client=client, stream=stream, group=group, consumer=consumer,
                                items=[item])  # fmt: skip
    return item.record if settled.written else None


def failed_entry_dead_letter(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    entry_id: str,
    reason: str,
    last_error: str = "",
) -> Outcome:
    """Move an entry ``consumer`` holds to ``{S}:dlq`` and XACK it, in one atomic script.

    The Worker's move: the entry's fields plus origin metadata (``keys.DEAD_LETTER_FIELDS``:
    stream, group, id, consumer, deliveries, ``last_error``, ``reason``...), then a
    ``dead_letter`` event. Returns DEAD_LETTERED; NOT_PENDING when it is no longer pending
    in ``consumer``'s name (acked, moved already, or taken by another consumer: doing it
    twice leaves one copy); DEAD_LETTER_FAILED when Redis failed or refused (logged; it
    stays pending). ValueError for a malformed id; CrossSlotName for a stream whose
    companions cannot share its slot. Round trips: 2 (the script, the event).
    """
    item = _dead_letter_item(entry_id=entry_id, reason=reason, last_error=last_error)
    return _outcome(settlements_write(client=client, stream=stream, group=group,
                                      consumer=consumer, items=[item]))  # fmt: skip


def failure_recorded(
    handler: Callable[P, R],
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    max_deliveries: int = MAX_DELIVERIES,
) -> Callable[Concatenate[str, P], R | Outcome]:
    """``handler`` taking the entry id first: failures recorded, dead-lettered when due.

    ``failure_recorded(handle, ...)(entry_id, *args)`` calls ``handle(*args)``. On an
    ``Exception`` it reads the delivery count (XPENDING), records the attempt and, on
    delivery ``max_deliveries`` or a PermanentFailure, moves the entry to the DLQ: then it
    returns ``Outcome.DEAD_LETTERED``; otherwise it re-raises the handler's exception. See
    the module docstring for why a loop that acks on return stays correct.
    """
    _deliveries_check(max_deliveries)

    @functools.wraps(handler)
    def recorded(entry_id: str, /, *args: P.args, **kwargs: P.kwargs) -> R | Outcome:
        entry_id_check(entry_id)  # a caller's bug: fail before the handler runs
        started = time.perf_counter()
        try:
            return handler(*args, **kwargs)
        except Exception as exc:
            duration_ms = (time.perf_counter() - started) * 1000
            attempt = _attempt_read(client, stream, group, entry_id)
            item = _verdict_item(entry_id=entry_id, exc=exc, attempt=attempt,
                                 duration_ms=duration_ms,
                                 max_deliveries=max_deliveries)  # fmt: skip
            settled = settlements_write(client=client, stream=stream, group=group,
                                        consumer=consumer, items=[item])  # fmt: skip
            if _moved(item, settled):
                return Outcome.DEAD_LETTERED
            raise

    return recorded


# -- asyncio (redis.asyncio.Redis) ------------------------------------------------------


async def entry_pending_async(
    *, client: redis.asyncio.Redis, stream: str, group: str, entry_id: str
) -> tuple[int, str] | None:
    """``entry_pending`` on an asyncio client."""
    rows = await client.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    return _pending_parse(rows)


async def _attempt_read_async(
    client: redis.asyncio.Redis, stream: str, group: str, entry_id: str
) -> int:
    try:
        return _attempt_of(await entry_pending_async(client=client, stream=stream, group=group,
                                                     entry_id=entry_id))  # fmt: skip
    except redis.RedisError as exc:
        log.warning("could not read the delivery count of %s %s (%s); recording attempt 0",
                    stream, entry_id, exc)  # fmt: skip
        return 0


async def failed_attempt_record_async(
    *,
    client: redis.asyncio.Redis,
    stream: str,
    group: str,
    consumer: str,
    entry_id: str,
    exc: BaseException,
    duration_ms: float = 0.0,
    attempt: int | None = None,
) -> FailureRecord | None:
    """``failed_attempt_record`` on an asyncio client: the same record and event."""
    if attempt is None:
        attempt = await _attempt_read_async(client, stream, group, entry_id)
    item = _record_item(group=group, consumer=consumer, entry_id=entry_id, exc=exc,
                        attempt=attempt, duration_ms=duration_ms)  # fmt: skip
    settled = await _settlement_write_async(client, stream, group, consumer, item)
    return item.record if settled.written else None


async def failed_entry_dead_letter_async(
    *,
    client: redis.asyncio.Redis,
    stream: str,
    group: str,
    consumer: str,
    entry_id: str,
    reason: str,
    last_error: str = "",
) -> Outcome:
    """``failed_entry_dead_letter`` on an asyncio client: the same script and event."""
    item = _dead_letter_item(entry_id=entry_id, reason=reason, last_error=last_error)
    return _outcome(await _settlement_write_async(client, stream, group, consumer, item))


def failure_recorded_async(
    handler: Callable[P, Awaitable[R]],
    *,
    client: redis.asyncio.Redis,
    stream: str,
    group: str,
    consumer: str,
    max_deliveries: int = MAX_DELIVERIES,
) -> Callable[Concatenate[str, P], Coroutine[Any, Any, R | Outcome]]:
    """``failure_recorded`` for an async handler and an asyncio client.

    Only ``Exception`` counts as a failure: a cancelled task (``CancelledError``, e.g. at
    shutdown) propagates unrecorded and the entry stays pending, as in the Worker.
    """
    _deliveries_check(max_deliveries)

    @functools.wraps(handler)
    async def recorded(entry_id: str, /, *args: P.args, **kwargs: P.kwargs) -> R | Outcome:
        entry_id_check(entry_id)  # a caller's bug: fail before the handler runs
        started = time.perf_counter()
        try:
            return await handler(*args, **kwargs)
        except Exception as exc:
            duration_ms = (time.perf_counter() - started) * 1000
            attempt = await _attempt_read_async(client, stream, group, entry_id)
            item = _verdict_item(entry_id=entry_id, exc=exc, attempt=attempt,
                                 duration_ms=duration_ms,
                                 max_deliveries=max_deliveries)  # fmt: skip
            settled = await _settlement_write_async(client, stream, group, consumer, item)
            if _moved(item, settled):
                return Outcome.DEAD_LETTERED
            raise

    return recorded


async def _settlement_write_async(
    client: redis.asyncio.Redis, stream: str, group: str, consumer: str, item: Settlement
) -> Settled:
    """``settle.settlements_write`` for one item on an asyncio client (no outage backlog:
    a record Redis cannot take is logged and lost; the entry stays pending either way)."""
    record = _record_of(item, group=group, consumer=consumer)
    written = 0 if record is None else await _record_write_async(client, stream, record)
    if item.dead_letter_reason is None:
        return Settled(written=written)
    fate = await _dead_letter_async(client, stream, group, consumer, item)
    kept = (item.entry_id,) if fate in (Fate.KEPT, Fate.REDIS_AWAY) else ()
    return Settled(written=written, moved=int(fate is Fate.MOVED), kept=kept)


async def _record_write_async(
    client: redis.asyncio.Redis, stream: str, record: FailureRecord
) -> int:
    """``failures.failures_record`` for one record: the XADD (MAXLEN ~), then its event."""
    pipe = client.pipeline(transaction=False)
    pipe.xadd(stream_keys(stream).failures, record.fields(),  # type: ignore[arg-type]
              maxlen=FAILURES_MAXLEN, approximate=True)  # fmt: skip
    try:
        replies = await pipe.execute(raise_on_error=False)
    except redis.RedisError as exc:
        log.error("could not record 1 failure(s) of %s: %s", stream, exc)
        return 0
    written, _ = _replies_sort(stream, [record], replies, keep_read_only=False)
    if not written:
        return 0
    message = event_message(type="failure", stream=stream, group=record.group,
                            entry_id=record.entry_id)  # fmt: skip
    await _publish_async(client, message, f"failure event for {stream}")
    return 1


#: The dead-letter script as an AsyncScript (it loads itself on NOSCRIPT). Kept apart
#: from ``DEAD_LETTER``'s sync registration, which must never see an asyncio client.
_ASYNC_SCRIPTS: dict[str, AsyncScript] = {}


def _async_script(client: redis.asyncio.Redis, name: str) -> AsyncScript:
    script = _ASYNC_SCRIPTS.get(name)
    if script is None:
        script = _ASYNC_SCRIPTS[name] = client.register_script(script_source(name))
    return script


async def _dead_letter_async(
    client: redis.asyncio.Redis, stream: str, group: str, consumer: str, item: Settlement
) -> Fate:
    """``settle._dead_letter`` on an asyncio client: the same script call and the same
    judgement of its reply (``settle.dead_letter_fate``), then the ``dead_letter`` event."""
    call = dead_letter_call(stream=stream, group=group, consumer=consumer, item=item)
    outcome: DeadLettered | Refusal | Exception
    try:
        reply = await _async_script(client, call.script.name)(
            keys=call.keys, args=call.args, client=client
        )
        outcome = call.parse(reply)
    except redis.RedisError as exc:
        outcome = exc
    fate = dead_letter_fate(outcome, stream=stream, group=group, item=item)
    if fate is Fate.MOVED:
        message = event_message(type="dead_letter", stream=stream, group=group,
                                entry_id=item.entry_id)  # fmt: skip
        await _publish_async(client, message, f"dead_letter event for {stream}")
    return fate


async def _publish_async(client: redis.asyncio.Redis, message: str, what: str) -> None:
    """PUBLISH an event; events are hints, so a failure is logged, never raised."""
    try:
        await client.publish(EVENTS_CHANNEL, message)
    except redis.RedisError as exc:
        log.warning("could not publish %s: %s", what, exc)
