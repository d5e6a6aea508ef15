"""The ack contract's decisions: what becomes of one delivered entry, as pure functions.

Owns every rule that decides an entry's fate before and after its handler runs, so
``process_entry`` (one entry) and ``Worker`` (the loop) cannot drift apart:

- a replay meant for another group (REPLAY_GROUP_FIELD) is acked without running;
- an entry delivered more than ``max_deliveries`` times is dead-lettered without running;
- an entry the parser rejects (or whose payload was trimmed) is dead-lettered at once,
  with a failure record, its reason and last error cut to MAX_MESSAGE;
- a handler error is a failure record and the entry stays pending, unless it is a
  PermanentFailure or this was delivery ``max_deliveries``: then it is dead-lettered.

Never does I/O: no Redis, no clock, no logging. Callers pass the time in and carry out
the verdict (ack, run, or write a Settlement with ``settle.settlements_write``). Cost: a
dict lookup or a string format per entry. The loop inlines the replay check on its hot
path (``Worker._accept_new``) with this module's ``REPLAY_KEY``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from queue_core.failures import MAX_MESSAGE, PAYLOAD_MISSING, FailureRecord
from queue_core.jobs import PermanentFailure, UnparseableEntry
from queue_core.keys import REPLAY_GROUP_FIELD
from queue_core.parsing import PAYLOAD_MISSING_REASON

#: The replay target field as the raw entry holds it.
REPLAY_KEY = REPLAY_GROUP_FIELD.encode()


@dataclass(frozen=True, slots=True)
class Settlement:
    """A rare outcome to write for one entry: a failure record and/or a dead-letter.

    A handler's failure carries its exception, not a record: formatting the traceback
    happens where the record is written (``settle``), off the loop's thread.
    """

    entry_id: str
    attempt: int
    record: FailureRecord | None = None
    exc: BaseException | None = None
    duration_ms: float = 0.0
    failed_at_ms: int = 0
    #: Set when the entry goes to the DLQ; None leaves it pending.
    dead_letter_reason: str | None = None
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class Admission:
    """Before parsing: run the entry, skip it (ack without running), or settle it now."""

    skip: bool = False
    settle: Settlement | None = None


RUN = Admission()
SKIP = Admission(skip=True)


def replay_elsewhere(raw: Mapping[bytes, bytes] | None, group: bytes) -> bool:
    """A replay put back for another group: this group acks it without running it."""
    if raw is None:
        return False
    target = raw.get(REPLAY_KEY)
    return target is not None and target != group


def entry_admit(
    *,
    entry_id: str,
    raw: Mapping[bytes, bytes] | None,
    delivery_count: int,
    group: str,
    max_deliveries: int,
) -> Admission:
    """The checks before parsing, in order: replay for another group, then max deliveries."""
    if replay_elsewhere(raw, group.encode()):
        return SKIP
    if delivery_count > max_deliveries:
        reason = (
            f"delivered {delivery_count} times (max {max_deliveries}) without an outcome; "
            "the handler may have crashed its worker each time"
        )
        return Admission(
            settle=Settlement(entry_id=entry_id, attempt=delivery_count, dead_letter_reason=reason)
        )
    return RUN


def unparseable_settle(
    *,
    entry_id: str,
    raw_missing: bool,
    delivery_count: int,
    exc: UnparseableEntry,
    group: str,
    consumer: str,
    failed_at_ms: int,
) -> Settlement:
    """A parser's rejection: a record, and a dead-letter with the reason, both bounded.

    ``raw_missing`` (the entry was deleted while pending) records it as PayloadMissing.
    """
    message = str(exc)
    return Settlement(
        entry_id=entry_id,
        attempt=delivery_count,
        record=FailureRecord(
            group=group,
            entry_id=entry_id,
            consumer=consumer,
            attempt=delivery_count,
            error_type=PAYLOAD_MISSING if raw_missing else type(exc).__name__,
            message=message,
            failed_at_ms=failed_at_ms,
        ),
        dead_letter_reason=f"unparseable: {message}"[:MAX_MESSAGE],
        last_error=message[:MAX_MESSAGE],
    )


def handler_failed_settle(
    *,
    entry_id: str,
    delivery_count: int,
    exc: BaseException,
    duration_ms: float,
    failed_at_ms: int,
    max_deliveries: int,
) -> Settlement:
    """A handler's error: recorded; dead-lettered when permanent or on the last delivery."""
    reason: str | None = None
    if isinstance(exc, PermanentFailure):
        reason = f"permanent failure: {exc}"[:MAX_MESSAGE]
    elif delivery_count >= max_deliveries:
        reason = f"handler failed on delivery {delivery_count} of max {max_deliveries}"
    return Settlement(
        entry_id=entry_id,
        attempt=delivery_count,
        exc=exc,
        duration_ms=duration_ms,
        failed_at_ms=failed_at_ms,
        dead_letter_reason=reason,
        last_error=f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE],
    )


def payload_missing_settle(
    *,
    entry_id: str,
    attempt: int,
    group: str,
    consumer: str,
    failed_at_ms: int,
    still_pending: bool,
) -> Settlement:
    """An entry trimmed from the stream while pending, found by a reclaim sweep.

    Recorded as PayloadMissing. Redis 7+ has already dropped it from the PEL; on 6.2
    (``still_pending``) it is dead-lettered, so it does not stay pending forever.
    """
    return Settlement(
        entry_id=entry_id,
        attempt=attempt,
        record=FailureRecord(
            group=group,
            entry_id=entry_id,
            consumer=consumer,
            attempt=attempt,
            error_type=PAYLOAD_MISSING,
            message=PAYLOAD_MISSING_REASON,
            failed_at_ms=failed_at_ms,
        ),
        dead_letter_reason=PAYLOAD_MISSING_REASON if still_pending else None,
    )
