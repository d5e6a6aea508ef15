"""Writing failure records to ``{S}:failures``: one entry per failed attempt, capped.

Owns the record's layout (read by the dashboard's failure ingestor): UTF-8 text fields
``group``, ``entry_id``, ``consumer``, ``attempt``, ``error_type``, ``message`` (at most
2,000 chars), ``traceback`` (at most 8,000, keeping the tail), ``duration_ms`` and
``failed_at_ms``. It never acks, never dead-letters and never raises a Redis error into
the caller's loop: a record that cannot be written is logged, and the entry it describes
stays pending anyway.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from queue_core.events import event_message
from queue_core.keys import EVENTS_CHANNEL, stream_keys

log = logging.getLogger("queue_core.failures")

MAX_MESSAGE = 2000
MAX_TRACEBACK = 8000
#: ``XADD MAXLEN ~``: the log is a recent window, not an archive (the ingestor keeps one).
FAILURES_MAXLEN = 10_000
PAYLOAD_MISSING = "PayloadMissing"


@dataclass(frozen=True, slots=True)
class FailureRecord:
    """One failed attempt, as written to ``{S}:failures``."""

    group: str
    entry_id: str
    consumer: str
    attempt: int
    error_type: str
    message: str
    traceback: str = ""
    duration_ms: float = 0.0
    failed_at_ms: int = 0

    def fields(self) -> dict[str, str]:
        return {
            "group": self.group,
            "entry_id": self.entry_id,
            "consumer": self.consumer,
            "attempt": str(self.attempt),
            "error_type": self.error_type,
            "message": self.message[:MAX_MESSAGE],
            "traceback": self.traceback[-MAX_TRACEBACK:],
            "duration_ms": f"{self.duration_ms:.3f}",
            "failed_at_ms": str(self.failed_at_ms or now_ms()),
        }


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def failure_from_exception(
    exc: BaseException,
    *,
    group: str,
    entry_id: str,
    consumer: str,
    attempt: int,
    duration_ms: float,
    failed_at_ms: int | None = None,
) -> FailureRecord:
    """A record for a handler's exception: type name, bounded message and traceback tail."""
    tb = "".join(traceback.format_exception(exc))
    return FailureRecord(
        group=group,
        entry_id=entry_id,
        consumer=consumer,
        attempt=attempt,
        error_type=type(exc).__name__,
        message=str(exc)[:MAX_MESSAGE],
        traceback=tb[-MAX_TRACEBACK:],
        duration_ms=duration_ms,
        failed_at_ms=failed_at_ms or now_ms(),
    )


def failures_record(
    *, client: redis.Redis, stream: str, records: Sequence[FailureRecord], publish: bool = True
) -> int:
    """XADD each record to ``{S}:failures`` (MAXLEN ~ 10,000) in one pipelined round trip.

    Publishes one ``failure`` event per record written, all in one more pipelined round
    trip. Returns how many were written; a Redis error is logged (never raised), because
    losing a record must not stop the loop.
    """
    if not records:
        return 0
    key = stream_keys(stream).failures
    pipe = client.pipeline(transaction=False)
    for record in records:
        pipe.xadd(key, record.fields(), maxlen=FAILURES_MAXLEN, approximate=True)  # type: ignore[arg-type]
    try:
        replies = pipe.execute(raise_on_error=False)
    except redis.RedisError as exc:
        log.error("could not record %d failure(s) of %s: %s", len(records), stream, exc)
        return 0
    written: list[FailureRecord] = []
    for record, reply in zip(records, replies, strict=True):
        if isinstance(reply, Exception):
            log.error("could not record failure of %s %s: %s", stream, record.entry_id, reply)
            continue
        written.append(record)
    if publish and written:
        # One pipelined round trip for all the events, not one PUBLISH each: in a failure
        # storm every attempt lands here, and per-record round trips capped the worker at
        # a few thousand failures a second.
        pipe = client.pipeline(transaction=False)
        for record in written:
            message = event_message(
                type="failure", stream=stream, group=record.group, entry_id=record.entry_id
            )
            pipe.publish(EVENTS_CHANNEL, message)
        try:
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not publish %d failure events for %s: %s", len(written), stream, exc)
    return len(written)
