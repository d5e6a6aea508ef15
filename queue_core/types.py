"""Frozen value types shared by the worker, selectors and services.

Raw Redis replies never leave ``queue_core``: selectors and services return these.
Sections are owned by the module named in their heading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from queue_core.bounded_json import json_read
from queue_core.validation import entry_id_ms

#: How deep ``Job.json`` reads by default: far deeper than payloads nest in practice, and
#: far enough from Python's recursion limit (1000 frames) for a handler's own stack.
JOB_JSON_MAX_DEPTH = 512


class PermanentFailure(Exception):  # noqa: N818 - the public name the issue asks for
    """Raised by a handler when retrying can never help: the entry is dead-lettered now."""


class UnparseableEntry(Exception):  # noqa: N818
    """Raised by a job parser: the entry is dead-lettered with this reason, never acked silently."""


class ActionRefused(Exception):  # noqa: N818
    """A service's guard refused the action; the message is shown to the operator as is."""


class TooManyFields(ActionRefused):
    """The entry has more fields than one script can copy (Lua's unpack() limit).

    A certain refusal: the script checked before changing anything, so the entry is where
    it was (still pending, or still in the DLQ). Retrying will not help; the operator must
    acknowledge the entry (or delete the dead letter) or have the producer split it.
    """

    def __init__(self, message: str, *, fields: int, limit: int) -> None:
        super().__init__(message)
        self.fields = fields
        self.limit = limit


# --- worker (queue_core.worker) -------------------------------------------------------


# No __slots__: the worker builds each Job by filling its __dict__, about 3x faster than
# the frozen dataclass __init__ (one object.__setattr__ per field) on its hot path.
@dataclass(frozen=True)
class Job:
    """One delivered stream entry, as a handler sees it.

    ``fields`` are decoded as UTF-8 by the default parser; ``raw`` keeps the exact bytes.
    ``delivery_count`` is the group's delivery counter for this entry (1 on first delivery).
    """

    stream: str
    group: str
    id: str
    fields: dict[str, str]
    delivery_count: int
    consumer: str
    raw: dict[bytes, bytes] = field(default_factory=dict, repr=False, compare=False)

    def json(
        self,
        name: str = "payload",
        *,
        max_depth: int = JOB_JSON_MAX_DEPTH,
        max_size: int | None = None,
    ) -> Any:
        """The JSON value of field ``name``; a missing or malformed one is a PermanentFailure,
        and so is one nested deeper than ``max_depth`` or longer than ``max_size``
        characters (None: any length), with the reason (``queue_core.bounded_json``)."""
        try:
            return json_read(self.fields[name], max_depth=max_depth, max_size=max_size)
        except KeyError:
            raise PermanentFailure(f"field {name!r} is missing") from None
        except ValueError as exc:
            raise PermanentFailure(f"field {name!r} is not valid JSON: {exc}") from None


class Outcome(StrEnum):
    """What ``process_entry`` did with one delivered entry."""

    ACKED = "acked"  # the handler returned; XACK sent
    FAILED = "failed"  # the handler raised; left pending, attempt recorded
    DEAD_LETTERED = "dead-lettered"  # moved to {S}:dlq and acked, atomically
    SKIPPED = "skipped"  # a replay meant for another group: acked without running
    NOT_PENDING = "not-pending"  # someone else acked, moved or took it first
    ACK_FAILED = "ack-failed"  # the handler returned but XACK failed (logged); still pending
    DEAD_LETTER_FAILED = "dead-letter-failed"  # due for the DLQ, but Redis failed or refused
    # the move (logged); still pending


@dataclass(frozen=True, slots=True)
class Delivery:
    """One entry delivered to a consumer: raw fields and the group's delivery count."""

    id: str
    fields: dict[bytes, bytes]
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """The outcome of one ``reclaim_stale`` call.

    ``deliveries`` are now owned by the consumer; ``deleted`` ids were trimmed while
    pending (recorded as PayloadMissing); ``cursor`` is where the next call starts
    (``0-0`` once the sweep wrapped around).
    """

    deliveries: tuple[Delivery, ...]
    deleted: tuple[str, ...]
    cursor: str


# --- selectors (queue_core.selectors) -------------------------------------------------


def _age_s(ms: int | None, now_ms: int) -> float | None:
    """Seconds from ``ms`` (an entry id's time) to ``now_ms``; None when there is no entry."""
    return None if ms is None else max(0.0, (now_ms - ms) / 1000)


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One stream entry: its id and its fields as the exact bytes Redis holds.

    Payload rendering (escaping, decoding, redaction) is the dashboard's job.
    """

    id: str
    fields: tuple[tuple[bytes, bytes], ...]

    @property
    def created_ms(self) -> int:
        return entry_id_ms(self.id)


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One group's O(1) figures (XINFO GROUPS plus the XPENDING summary's oldest id).

    For ``queue_core.health``: ``consumer_list`` is its XINFO CONSUMERS (O(consumers));
    ``waiting_id`` is the first entry not yet delivered to it, read only when nothing is
    pending and its lag is not known to be 0 (else None).
    """

    name: str
    consumers: int
    pending: int
    lag: int | None
    oldest_pending_id: str | None
    consumer_list: tuple[ConsumerInfo, ...] = ()
    waiting_id: str | None = None
    #: Lag in time: the time (ms) of the oldest entry not yet delivered to the group (the
    #: entry after last-delivered-id), None when nothing waits. Read in the same round
    #: trip as ``waiting_id`` whenever the lag is not known to be 0.
    oldest_undelivered_ms: int | None = None

    def undelivered_age_s(self, now_ms: int) -> float | None:
        """Seconds the oldest undelivered entry has waited at ``now_ms`` (None: none waits)."""
        return _age_s(self.oldest_undelivered_ms, now_ms)


@dataclass(frozen=True, slots=True)
class StreamSummary:
    """One overview row: a stream's O(1) facts and its groups' worst numbers.

    ``oldest_pending_id`` is the smallest pending id over all groups (its creation time
    gives the age of the oldest pending entry); ``max_lag`` is None when the server does
    not know a group's lag (Redis < 7, or after deletions).
    """

    name: str
    length: int
    groups: int
    consumers: int
    pending: int
    max_lag: int | None
    oldest_pending_id: str | None
    dlq_length: int
    failures_length: int
    group_stats: tuple[GroupStats, ...] = ()

    @property
    def oldest_pending_ms(self) -> int | None:
        if self.oldest_pending_id is None:
            return None
        return entry_id_ms(self.oldest_pending_id)


@dataclass(frozen=True, slots=True)
class StreamOverview:
    """The streams the dashboard may see, from one capped discovery.

    ``truncated`` is True when the cap stopped discovery; ``companions`` counts the
    dead-letter and failure streams found (shown under their stream, never as queues).
    """

    streams: tuple[StreamSummary, ...]
    truncated: bool
    cap: int
    companions: int


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """XINFO STREAM (never FULL) of one stream, plus its companions' lengths."""

    name: str
    length: int
    last_generated_id: str
    first_id: str | None
    last_entry_id: str | None
    max_deleted_entry_id: str | None
    entries_added: int | None
    recorded_first_entry_id: str | None
    groups: int
    dlq_length: int
    failures_length: int


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One consumer group, from XINFO GROUPS. ``lag`` is None when the server cannot tell."""

    name: str
    consumers: int
    pending: int
    last_delivered_id: str
    entries_read: int | None
    lag: int | None
    #: Lag in time (see ``GroupStats``): filled by the selectors that read it
    #: (``stream_detail``, ``stream_counters``), else None.
    oldest_undelivered_ms: int | None = None

    def undelivered_age_s(self, now_ms: int) -> float | None:
        """Seconds the oldest undelivered entry has waited at ``now_ms`` (None: none waits)."""
        return _age_s(self.oldest_undelivered_ms, now_ms)


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """One consumer, from XINFO CONSUMERS. ``inactive_ms`` needs Redis 7.2+, else None."""

    name: str
    pending: int
    idle_ms: int
    inactive_ms: int | None


@dataclass(frozen=True, slots=True)
class PendingRow:
    """One pending entry of a group, with its payload when the entry still exists.

    ``entry`` is None when the entry was trimmed or deleted while pending (payload missing).
    """

    id: str
    consumer: str
    idle_ms: int
    deliveries: int
    entry: StreamEntry | None = None

    @property
    def payload_missing(self) -> bool:
        return self.entry is None


@dataclass(frozen=True, slots=True)
class PendingPage:
    """One page of a group's pending entries, in id order from ``start``.

    ``next_start`` is the id the next page starts after (None at the end of the PEL).
    With an idle filter the page is bounded: ``scanned`` pending entries were looked at,
    up to ``scanned_to`` (inclusive); ``exhausted`` is False when the scan budget ran out
    before 50 matches were found, and the next request continues from ``next_start``.
    """

    rows: tuple[PendingRow, ...]
    start: str | None
    next_start: str | None
    scanned: int
    scanned_to: str | None
    budget_hit: bool


@dataclass(frozen=True, slots=True)
class GroupDetail:
    """Everything the group page shows but the pending rows: one pipelined round trip.

    ``waiting_id`` is the first entry not yet delivered to the group, read (one more round
    trip) only when nothing is pending and entries may be waiting; else None.
    """

    stream: StreamInfo
    group: GroupInfo
    consumers: tuple[ConsumerInfo, ...]
    pending: int
    oldest_pending_id: str | None
    newest_pending_id: str | None
    waiting_id: str | None = None
    #: Lag in time (see ``GroupStats``), also in ``group.oldest_undelivered_ms``.
    oldest_undelivered_ms: int | None = None

    @property
    def oldest_pending_ms(self) -> int | None:
        if self.oldest_pending_id is None:
            return None
        return entry_id_ms(self.oldest_pending_id)

    def undelivered_age_s(self, now_ms: int) -> float | None:
        """Seconds the oldest undelivered entry has waited at ``now_ms`` (None: none waits)."""
        return _age_s(self.oldest_undelivered_ms, now_ms)


@dataclass(frozen=True, slots=True)
class GroupCounters:
    """One group's counters and ages for the rates sampler (``selectors.stream_counters``).

    ``info.entries_read`` and ``info.lag`` are None on Redis < 7 (never made up);
    ``oldest_pending_ms`` is the time of the smallest pending id (None: nothing pending).
    """

    info: GroupInfo
    oldest_pending_ms: int | None


@dataclass(frozen=True, slots=True)
class StreamCounters:
    """One stream's counters for the rates sampler: XINFO STREAM's ``entries-added`` (None
    on Redis < 7), its length, its dead-letter stream's length and its groups'."""

    name: str
    length: int
    entries_added: int | None
    dlq_length: int
    groups: tuple[GroupCounters, ...]


@dataclass(frozen=True, slots=True)
class EntryGroupState:
    """Where one entry stands in one group.

    ``state`` is ``pending`` (delivered, not acked: ``pending_row`` says to whom),
    ``acked`` (delivered and acknowledged) or ``waiting`` (not delivered yet).
    """

    group: str
    state: str
    pending_row: PendingRow | None


@dataclass(frozen=True, slots=True)
class EntryDetail:
    """One entry and its state in every group. ``entry`` is None when it was trimmed."""

    stream: str
    id: str
    entry: StreamEntry | None
    groups: tuple[EntryGroupState, ...]


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """One dead-lettered entry: its origin metadata and its original fields."""

    id: str
    origin_id: str
    group: str
    consumer: str
    reason: str
    deliveries: int | None
    last_error: str
    operator: str
    dead_lettered_at_ms: int | None
    payload_missing: bool
    entry: StreamEntry
    #: The stream id it was replayed from, when it is a replay dead-lettered again ("" if not).
    replay_of: str = ""


@dataclass(frozen=True, slots=True)
class DeadLettersFound:
    """The dead letters of one entry found by a bounded walk of ``{S}:dlq``
    (``selectors.entry_dead_letters``): ``found`` holds (origin group, dead-letter id)
    pairs, oldest first. ``complete`` is True when the walk reached the end of the
    dead-letter stream or found one for every group asked about; else only ``scanned``
    dead letters, up to ``last_id``, were read and a later one may exist."""

    found: tuple[tuple[str, str], ...]
    scanned: int
    complete: bool
    last_id: str | None = None

    def in_group(self, group: str) -> str | None:
        """The newest dead letter of the entry from ``group`` (None: none found)."""
        ids = [dlq_id for g, dlq_id in self.found if g == group]
        return ids[-1] if ids else None


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """Newest-first page of a stream's dead-letter stream; ``next_before`` pages on."""

    stream: str
    length: int
    rows: tuple[DeadLetterRow, ...]
    before: str | None
    next_before: str | None


@dataclass(frozen=True, slots=True)
class EntryPage:
    """Newest-first page of a stream's entries; ``next_before`` pages on (None at the end)."""

    entries: tuple[StreamEntry, ...]
    before: str | None
    next_before: str | None


@dataclass(frozen=True, slots=True)
class StreamDetail:
    """The stream page: facts, groups and the newest entries, in one round trip."""

    info: StreamInfo
    groups: tuple[GroupInfo, ...]
    entries: EntryPage


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """One entry as one group sees it, read before and after an operator acts on it.

    ``row`` is its pending row (with the payload in ``row.entry`` while the stream holds
    it), or None when the group does not hold it pending; ``in_stream`` says whether the
    stream still holds the id (False: trimmed, deleted, or never added).
    """

    id: str
    row: PendingRow | None
    in_stream: bool


@dataclass(frozen=True, slots=True)
class PendingSummary:
    """A group's XPENDING summary: how many entries are pending, and the id range."""

    pending: int
    oldest_id: str | None
    newest_id: str | None


@dataclass(frozen=True, slots=True)
class StreamStamp:
    """What a live page compares between two polls of one stream; never shown to users.

    Each field is a hashable copy of one reply (a missing key is an error marker), so two
    stamps are equal when nothing the stream's pages show has changed. ``last_id`` is the
    stream's last generated id, where a blocking XREAD for new entries starts.
    """

    name: str
    stream: Any
    groups: Any
    dlq_length: Any
    failures_length: Any
    last_id: str | None


@dataclass(frozen=True, slots=True)
class LiveStamps:
    """One poll of open streams (by name) and open groups (by (stream, group))."""

    streams: dict[str, StreamStamp]
    pending: dict[tuple[str, str], Any]


# --- services (queue_core.services) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """An entry moved to the dead-letter stream by ``entry_dead_letter``."""

    entry_id: str
    dlq_id: str
    consumer: str
    deliveries: int
    payload_missing: bool


@dataclass(frozen=True, slots=True)
class Retried:
    """An entry made due for redelivery in its own group by ``entry_retry``.

    Owner and delivery count are unchanged; only the idle time moved, from
    ``idle_before_ms`` to ``idle_ms``.
    """

    entry_id: str
    consumer: str
    deliveries: int
    idle_before_ms: int
    idle_ms: int


@dataclass(frozen=True, slots=True)
class Claimed:
    """An entry handed to ``consumer`` by ``entry_claim`` (a delivery: the count went up)."""

    entry_id: str
    consumer: str
    previous_consumer: str
    deliveries: int
    idle_before_ms: int


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """The outcome of ``entry_acknowledge``; owner and deliveries are the state before."""

    entry_id: str
    was_pending: bool
    consumer: str = ""
    deliveries: int = 0
    idle_ms: int = 0


@dataclass(frozen=True, slots=True)
class Replayed:
    """A dead-lettered entry put back on its stream for ``group`` only, by ``dlq_replay``."""

    dlq_id: str
    new_id: str
    group: str
    origin_id: str


@dataclass(frozen=True, slots=True)
class DeadLetterDeleted:
    """The outcome of ``dlq_delete``; origin fields are empty when nothing was deleted."""

    dlq_id: str
    deleted: bool
    origin_group: str = ""
    origin_id: str = ""


@dataclass(frozen=True, slots=True)
class DeadLettersPurged:
    """The outcome of ``dlq_purge``: how many dead-lettered entries were removed."""

    stream: str
    deleted: int


class BulkOutcome(StrEnum):
    """What a bulk action did to one id. The values are shown to operators as is."""

    DONE = "done"
    NOT_PENDING = "skipped-not-pending"
    NEWER_THAN_SNAPSHOT = "skipped-newer-than-snapshot"
    CHANGED = "skipped-changed"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class BulkScope:
    """One capped page of the ids a bulk action would touch (the dry run).

    ``next_cursor`` is the id to continue from, or None when the scope up to
    ``snapshot_id`` is exhausted. ``scanned`` counts the pending rows read.
    """

    snapshot_id: str
    ids: tuple[str, ...]
    scanned: int
    next_cursor: str | None

    @property
    def count(self) -> int:
        return len(self.ids)

    @property
    def complete(self) -> bool:
        return self.next_cursor is None


@dataclass(frozen=True, slots=True)
class BulkItem:
    """One id's outcome in a bulk action; ``detail`` says why when it was not done.

    ``new_id`` is the dead-letter id when a bulk dead-letter moved the entry.
    """

    entry_id: str
    outcome: BulkOutcome
    detail: str = ""
    new_id: str = ""


@dataclass(frozen=True, slots=True)
class BulkResult:
    """The outcome of one capped bulk request, and where the next request continues."""

    action: str
    snapshot_id: str
    items: tuple[BulkItem, ...]
    next_cursor: str | None

    @property
    def done(self) -> tuple[str, ...]:
        return tuple(i.entry_id for i in self.items if i.outcome is BulkOutcome.DONE)

    @property
    def skipped(self) -> tuple[BulkItem, ...]:
        return tuple(i for i in self.items if i.outcome is not BulkOutcome.DONE)

    @property
    def complete(self) -> bool:
        return self.next_cursor is None
