"""Settlement writes: the failure records and dead-letters the contract decided on.

Owns carrying out ``contract.Settlement``s with a synchronous client: all their failure
records in one pipeline (``failures_record``, with the outage backlog), then one
dead-letter script per entry due for the DLQ (``scripts.DEAD_LETTER``, which moves and
acks atomically: the worker needs the script, not the operator's service). Never acks on
its own and never raises a Redis error: what could not be written is logged and reported
in the result, and the entries concerned stay pending, to come back through reclaim.
Cost: 1 round trip for the records (+1 for their events), then 2 per dead-letter (the
script, its event). ``SettleBatch`` is the Worker's queue of them, written in a thread so
the loop never waits on these writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import redis
from redis.exceptions import RedisClusterException

from queue_core.connection import Client
from queue_core.errors import topology_changed
from queue_core.events import event_publish
from queue_core.failures import (
    FailureBacklog,
    FailureRecord,
    failure_from_exception,
    failures_record,
)
from queue_core.results import DeadLettered
from queue_core.scripts import DEAD_LETTER
from queue_core.scripts.binding import Refusal, ScriptCall
from queue_core.worker.contract import Settlement

log = logging.getLogger("queue_core.worker")

#: How often a worker retries failure records it kept through an outage.
BACKLOG_RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class Settled:
    """What ``settlements_write`` did."""

    #: Failure records written now (records kept in the backlog are not counted).
    written: int = 0
    #: Entries moved to the DLQ (and acked).
    moved: int = 0
    #: Entries due for the DLQ that Redis failed or refused to move: still pending here.
    kept: tuple[str, ...] = ()


def settlements_write(
    *,
    client: Client,
    stream: str,
    group: str,
    consumer: str,
    items: Sequence[Settlement],
    backlog: FailureBacklog | None = None,
) -> Settled:
    """Write the records (one pipeline), then dead-letter what must go, one script each.

    Records Redis cannot take while it is away go to ``backlog`` when it is given (what
    it holds is written first). A dead-letter another consumer won (the entry is no
    longer pending in our name) is logged at info and is neither moved nor kept.
    """
    records = [_record_of(item, group=group, consumer=consumer) for item in items]
    written = failures_record(
        client=client,
        stream=stream,
        records=[record for record in records if record is not None],
        backlog=backlog,
    )
    moved = 0
    kept: list[str] = []
    for item in items:
        if item.dead_letter_reason is None:
            continue
        fate = _dead_letter(client=client, stream=stream, group=group, consumer=consumer,
                            item=item)  # fmt: skip
        if fate is Fate.MOVED:
            moved += 1
        elif fate is not Fate.GONE:
            kept.append(item.entry_id)
            if fate is Fate.REDIS_AWAY:
                break  # the rest stay pending too, and are delivered again later
    return Settled(written=written, moved=moved, kept=tuple(kept))


def _record_of(item: Settlement, *, group: str, consumer: str) -> FailureRecord | None:
    if item.record is not None or item.exc is None:
        return item.record
    return failure_from_exception(
        item.exc,
        group=group,
        entry_id=item.entry_id,
        consumer=consumer,
        attempt=item.attempt,
        duration_ms=item.duration_ms,
        failed_at_ms=item.failed_at_ms,
    )


class Fate(Enum):
    """How one worker dead-letter ended (sync and asyncio clients alike)."""

    MOVED = "moved"
    GONE = "gone"  # no longer pending in our name: another consumer settled or took it
    KEPT = "kept"  # Redis refused the move; it stays pending here
    REDIS_AWAY = "redis-away"  # Redis is unreachable; it stays pending here


def dead_letter_call(
    *, stream: str, group: str, consumer: str, item: Settlement
) -> ScriptCall[DeadLettered | Refusal]:
    """The dead-letter script's run for one settlement: guarded by our own ownership."""
    assert item.dead_letter_reason is not None
    return DEAD_LETTER.call(
        stream=stream,
        group=group,
        entry_id=item.entry_id,
        reason=item.dead_letter_reason,
        last_error=item.last_error,
        expected_consumer=consumer,
    )


def dead_letter_fate(
    outcome: DeadLettered | Refusal | Exception, *, stream: str, group: str, item: Settlement
) -> Fate:
    """Judge (and log, once) the script's reply or the error it raised: the one reading
    of a worker's dead-letter, whichever client ran it."""
    if isinstance(outcome, Exception):
        log.error("could not dead-letter %s %s (%s); it stays pending",
                  stream, item.entry_id, outcome)  # fmt: skip
        # Unreachable, or this node no longer serves the slot (READONLY, CLUSTERDOWN…, a
        # failover under way): the rest would fail alike, so they wait for the next try.
        # Any other error reply (NOGROUP, WRONGTYPE) is not a race another consumer won.
        away = isinstance(
            outcome, redis.ConnectionError | redis.TimeoutError | RedisClusterException
        ) or (isinstance(outcome, redis.ResponseError) and topology_changed(outcome))
        return Fate.REDIS_AWAY if away else Fate.KEPT
    if isinstance(outcome, Refusal):
        if outcome.kind == "too-many-fields":
            log.error("could not dead-letter %s %s (%s); it stays pending",
                      stream, item.entry_id, outcome.message)  # fmt: skip
            return Fate.KEPT
        log.info("not dead-lettering %s %s: %s", stream, item.entry_id, outcome.message)
        return Fate.GONE
    log.warning("dead-lettered %s %s of group %s: %s", stream, item.entry_id, group,
                item.dead_letter_reason)  # fmt: skip
    return Fate.MOVED


def _dead_letter(
    *, client: Client, stream: str, group: str, consumer: str, item: Settlement
) -> Fate:
    """Move one entry to the DLQ; logs why when it does not."""
    call = dead_letter_call(stream=stream, group=group, consumer=consumer, item=item)
    outcome: DeadLettered | Refusal | Exception
    try:
        outcome = call.parse(
            call.script.registered(client)(keys=call.keys, args=call.args, client=client)
        )
    except (redis.RedisError, RedisClusterException) as exc:
        outcome = exc
    fate = dead_letter_fate(outcome, stream=stream, group=group, item=item)
    if fate is Fate.MOVED:
        event_publish(
            client=client, type="dead_letter", stream=stream, group=group, entry_id=item.entry_id
        )
    return fate


class SettleBatch:
    """The Worker's settlements not yet written, and the outage backlog of their records.

    ``queued`` grows as handlers fail; ``write`` moves it to ``writing`` while a thread
    writes it, so a reclaim sweep can tell that these entries are still in hand.
    """

    def __init__(self) -> None:
        self.queued: list[Settlement] = []
        self.writing: list[Settlement] = []
        self.task: asyncio.Task[None] | None = None
        #: Failure records Redis could not take during an outage; written when it is back.
        self.backlog = FailureBacklog()
        #: When to try the backlog again if nothing else is written before.
        self.retry_at = 0.0

    def __len__(self) -> int:
        return len(self.queued) + len(self.writing)

    def due(self, now: float) -> bool:
        """Something to write now, and no write under way."""
        return self.task is None and bool(self.queued or (self.backlog and now >= self.retry_at))

    async def write(self, *, client: Client, stream: str, group: str, consumer: str) -> Settled:
        """Write everything queued (and the backlog) with ``settlements_write``, in a thread."""
        items, self.queued = self.queued, []
        self.writing = items
        try:
            return await asyncio.to_thread(
                settlements_write, client=client, stream=stream, group=group,
                consumer=consumer, items=items, backlog=self.backlog,
            )  # fmt: skip
        finally:
            if self.backlog:
                self.retry_at = time.monotonic() + BACKLOG_RETRY_S
            self.writing = []
