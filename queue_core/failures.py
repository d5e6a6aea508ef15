"""Writing failure records to ``{S}:failures``: one entry per failed attempt, capped.

Owns the record's layout (read by the dashboard's failure ingestor): UTF-8 text fields
``group``, ``entry_id``, ``consumer``, ``attempt``, ``error_type``, ``message`` (at most
2,000 chars), ``traceback`` (at most 8,000, keeping the tail), ``duration_ms`` and
``failed_at_ms``, and ``trace_id`` when the attempt ran inside an OpenTelemetry span
(``queue_core.tracing``). It never acks, never dead-letters and never raises a Redis error into
the caller's loop: a record that cannot be written is logged, and the entry it describes
stays pending anyway. Given a ``FailureBacklog``, records that could not be written
because Redis was away (unreachable, loading, read-only) are kept there, at most 10,000,
and written first by the next call, so an entry's failure history survives an outage.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from queue_core.clock import now_ms
from queue_core.connection import Client, publisher
from queue_core.events import event_message
from queue_core.keys import EVENTS_CHANNEL, stream_keys
from queue_core.tracing import current_trace_id

log = logging.getLogger("queue_core.failures")

MAX_MESSAGE = 2000
MAX_TRACEBACK = 8000
#: ``XADD MAXLEN ~``: the log is a recent window, not an archive (the ingestor keeps one).
FAILURES_MAXLEN = 10_000
PAYLOAD_MISSING = "PayloadMissing"
#: Records a FailureBacklog keeps: as many as the log itself holds, since more would be
#: trimmed on arrival anyway. A record is at most ~10 KB (message and traceback tail), so
#: a full backlog is at most ~100 MB, and a few MB with typical tracebacks.
BACKLOG_MAX = FAILURES_MAXLEN


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
    trace_id: str = ""

    def fields(self) -> dict[str, str]:
        fields = {
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
        if self.trace_id:
            fields["trace_id"] = self.trace_id
        return fields


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
    """A record for a handler's exception: type name, bounded message and traceback tail,
    and the current span's trace id (the recording API and the adapters build it inside
    the framework's handler span)."""
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
        trace_id=current_trace_id(),
    )


class FailureBacklog:
    """Failure records of one stream not yet written because Redis was away, oldest first.

    Holds at most ``cap`` records; past that the oldest are dropped and counted, and the
    count is logged once, when the backlog is next written (or given up at exit). Safe to
    share between threads (the Worker's settle and reclaim steps both write records).
    """

    def __init__(self, cap: int = BACKLOG_MAX) -> None:
        self.cap = cap
        self._records: deque[FailureRecord] = deque(maxlen=cap)
        self._dropped = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._records)

    @property
    def dropped(self) -> int:
        """Records dropped since the backlog was last written."""
        return self._dropped

    def keep(self, records: Iterable[FailureRecord], *, dropped: int = 0) -> None:
        """Append records (oldest first); past ``cap`` the oldest held ones go."""
        records = list(records)
        with self._lock:
            over = max(0, len(self._records) + len(records) - self.cap)
            self._records.extend(records)  # the deque's maxlen drops the oldest
            self._dropped += dropped + over

    def take(self) -> tuple[list[FailureRecord], int]:
        """Everything held and the drop count, leaving the backlog empty."""
        with self._lock:
            records, dropped = list(self._records), self._dropped
            self._records.clear()
            self._dropped = 0
        return records, dropped


def failures_record(
    *,
    client: Client,
    stream: str,
    records: Sequence[FailureRecord],
    publish: bool = True,
    backlog: FailureBacklog | None = None,
) -> int:
    """XADD each record to ``{S}:failures`` (MAXLEN ~ 10,000) in one pipelined round trip.

    Publishes one ``failure`` event per record written, all in one more pipelined round
    trip. Returns how many were written; a Redis error is logged (never raised), because
    losing a record must not stop the loop. With a ``backlog``, what it holds is written
    first, and records Redis could not take because it was away go back into it.
    """
    kept: list[FailureRecord] = []
    dropped = 0
    if backlog is not None and len(backlog):
        kept, dropped = backlog.take()
        records = [*kept, *records]
    if not records:
        return 0
    key = stream_keys(stream).failures
    pipe = client.pipeline(transaction=False)
    for record in records:
        pipe.xadd(key, record.fields(), maxlen=FAILURES_MAXLEN, approximate=True)  # type: ignore[arg-type]
    try:
        replies = pipe.execute(raise_on_error=False)
    except redis.RedisError as exc:
        # Unreachable, timed out or still loading (redis-py raises BusyLoadingError as a
        # ConnectionError): nothing was written.
        if backlog is None:
            log.error("could not record %d failure(s) of %s: %s", len(records), stream, exc)
        else:
            backlog.keep(records, dropped=dropped)
            log.error("could not record %d failure(s) of %s (%s); keeping %d to write when "
                      "Redis is back", len(records), stream, exc, len(backlog))  # fmt: skip
        return 0
    written, again = _replies_sort(stream, records, replies, keep_read_only=backlog is not None)
    if backlog is not None and (kept or again):
        _backlog_settle(backlog, stream, again, late=replies[: len(kept)], dropped=dropped)
    if publish and written:
        _events_publish(client, stream, written)
    return len(written)


def _replies_sort(
    stream: str, records: Sequence[FailureRecord], replies: Sequence[Any], *, keep_read_only: bool
) -> tuple[list[FailureRecord], list[FailureRecord]]:
    """(written, to write again): a read-only replica's refusal is worth another try when
    there is a backlog to keep it in; any other refusal would repeat, and is logged."""
    written: list[FailureRecord] = []
    again: list[FailureRecord] = []
    for record, reply in zip(records, replies, strict=True):
        if isinstance(reply, Exception):
            if keep_read_only and isinstance(reply, redis.ReadOnlyError):
                again.append(record)  # a replica mid-failover: the primary will take it
                continue
            # Any other refusal (the key is not a stream...) would refuse it again.
            log.error("could not record failure of %s %s: %s", stream, record.entry_id, reply)
            continue
        written.append(record)
    return written, again


def _backlog_settle(
    backlog: FailureBacklog,
    stream: str,
    again: list[FailureRecord],
    *,
    late: Sequence[Any],
    dropped: int,
) -> None:
    """Keep what a read-only Redis refused; otherwise say how the kept records fared
    (``late`` are the replies to them)."""
    if again:
        backlog.keep(again, dropped=dropped)
        log.error("could not record %d failure(s) of %s (read-only); keeping %d to "
                  "write when Redis is back", len(again), stream, len(backlog))  # fmt: skip
        return
    written = sum(not isinstance(reply, Exception) for reply in late)
    if dropped:
        log.warning("wrote %d failure records of %s kept while Redis was away; %d "
                    "older ones were dropped (the backlog keeps at most %d)",
                    written, stream, dropped, backlog.cap)  # fmt: skip
    else:
        log.info("wrote %d failure records of %s kept while Redis was away", written,
                 stream)  # fmt: skip


def _events_publish(client: Client, stream: str, written: list[FailureRecord]) -> None:
    """One pipelined round trip for all the events, not one PUBLISH each: in a failure
    storm every attempt lands here, and per-record round trips capped the worker at a few
    thousand failures a second. On a cluster the pipeline goes to the node that serves the
    stream (redis-py refuses PUBLISH in a cluster pipeline); PUBLISH reaches subscribers
    on every node of the cluster."""
    try:
        pipe = publisher(client, stream).pipeline(transaction=False)
    except redis.RedisError as exc:
        log.warning("could not publish %d failure events for %s: %s", len(written), stream, exc)
        return
    for record in written:
        message = event_message(
            type="failure", stream=stream, group=record.group, entry_id=record.entry_id
        )
        pipe.publish(EVENTS_CHANNEL, message)
    try:
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("could not publish %d failure events for %s: %s", len(written), stream, exc)
