"""Frozen value types the selectors return, and the refusal the services raise.

Raw Redis replies never leave ``queue_core``: selectors return these. The worker's types
are in ``queue_core.jobs``, the services' results in ``queue_core.results``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from queue_core.validation import entry_id_ms


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
