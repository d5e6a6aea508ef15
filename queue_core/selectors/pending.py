"""Reads: what the dashboard shows about streams, groups, consumers and pending entries.

Owns every Redis read the pages make, and their cost. Each selector is keyword-only,
returns frozen dataclasses from ``queue_core.types`` (raw replies never leave this
module), and makes a fixed number of pipelined round trips whatever the number of
streams, groups or rows. It never writes, never calls ``XINFO STREAM FULL`` (it returns
whole PELs) and never runs an unbounded ``XPENDING … IDLE`` scan.

Costs on a 1,000,000-entry PEL (docs/running-at-scale.md, benchmarks/dashboard_scale.py): XINFO
STREAM/GROUPS, XLEN and the XPENDING summary are O(1) or O(groups/consumers); XPENDING
extended form is O(log n + rows) from any start id, so pages go by start id, never by
offset. A missing stream or group is ``None`` from the selector, never an exception;
connection errors and timeouts propagate (the dashboard shows a banner).

On a Redis Cluster (``queue_core.connection``) a pipeline is non-transactional and split
by node: its commands are written to every primary involved, then read, so a "round
trip" is one per primary in parallel, never one per stream. Each command names one
stream or a companion in the stream's slot.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis

from queue_core.connection import Client
from queue_core.errors import not_a_group
from queue_core.keys import (
    DEAD_LETTER_FIELDS,
    REPLAY_OF_FIELD,
    RESERVED_PREFIX,
    CrossSlotName,
    allowed,
    stream_keys,
    stream_visible,
)
from queue_core.types import (
    ConsumerInfo,
    DeadLetterPage,
    DeadLetterRow,
    DeadLettersFound,
    EntryDetail,
    EntryGroupState,
    EntryPage,
    GroupCounters,
    GroupDetail,
    GroupInfo,
    GroupStats,
    LiveStamps,
    PendingEntry,
    PendingPage,
    PendingRow,
    PendingSummary,
    StreamCounters,
    StreamDetail,
    StreamEntry,
    StreamInfo,
    StreamOverview,
    StreamStamp,
    StreamSummary,
)
from queue_core.validation import entry_id_key, entry_id_ms

#: Rows per pending page (XPENDING extended form: ~0.13 ms on a 1M PEL at any depth).
PENDING_PAGE_SIZE = 50
#: Rows per newest-first page of stream entries and dead-lettered entries.
ENTRY_PAGE_SIZE = 20
DLQ_PAGE_SIZE = 50
#: The idle filter reads the PEL in windows of this many rows and filters them here:
#: ``XPENDING … IDLE t`` would scan the whole PEL in one command when matches are rare
#: (~116 ms of blocked Redis on 1M entries). One window costs well under a millisecond
#: of Redis time and other clients run between windows.
IDLE_SCAN_WINDOW = 2_000
#: Most PEL rows one idle-filtered request reads before it stops and offers "continue".
IDLE_SCAN_BUDGET = 20_000
#: The entry page tells a dead-lettered entry from an acknowledged one by reading the
#: dead letters moved after it (``entry_dead_letters``): at most this many, and about
#: this many bytes of them, in chunks of ``ENTRY_DLQ_FIRST`` growing to ``ENTRY_DLQ_CHUNK``.
ENTRY_DLQ_BUDGET = 1_000
ENTRY_DLQ_BYTES = 4_000_000
ENTRY_DLQ_FIRST = 20
ENTRY_DLQ_CHUNK = 250
#: Keys SCAN examines per call during discovery (one round trip per this many keys).
SCAN_COUNT = 2_000
#: XLEN of a name that is never a key answers 0: used for a cross-slot stream's companions.
_NO_KEY = "\x00ackboard-no-companion"

#: The dead-letter metadata a DLQ row shows, by short name (the names live in keys).
_META = {field.removeprefix(RESERVED_PREFIX): field.encode() for field in DEAD_LETTER_FIELDS}
_RESERVED = RESERVED_PREFIX.encode()
_REPLAY_OF = REPLAY_OF_FIELD.encode()


# --- small helpers ----------------------------------------------------------------------


def _text(value: Any) -> str:
    """A name or id from Redis as text; invalid UTF-8 is replaced, for display only."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _raise_transport(replies: Sequence[Any]) -> None:
    """Connection errors and timeouts inside a pipeline reply are re-raised, not hidden."""
    for reply in replies:
        if isinstance(reply, redis.ConnectionError | redis.TimeoutError):
            raise reply


def _count(reply: Any) -> int:
    return reply if isinstance(reply, int) else 0


def _missing(reply: Any) -> bool:
    """A reply that means "no such key / group" (or a key of another type)."""
    return isinstance(reply, redis.ResponseError)


def _companions(stream: str) -> tuple[str, str] | None:
    try:
        keys = stream_keys(stream)
    except CrossSlotName:
        return None
    return keys.dlq, keys.failures


def _entry(item: Any) -> StreamEntry:
    """An entry from redis-py's parsed reply (fields as a dict) or Redis's own (a flat
    list of names and values: ``_lean_pipeline``)."""
    entry_id, fields = item
    if isinstance(fields, list):
        pairs = tuple(zip(fields[::2], fields[1::2], strict=True))
    else:
        pairs = tuple((bytes(k), bytes(v)) for k, v in (fields or {}).items())
    return StreamEntry(id=_text(entry_id), fields=pairs)


def _id_after(entry_id: str) -> str:
    """An exclusive range start (Redis 6.2+): the ids strictly after ``entry_id``."""
    return "(" + entry_id


def _id_le(a: str, b: str) -> bool:
    return entry_id_key(a) <= entry_id_key(b)


def _stream_info(name: str, info: Mapping[str, Any], dlq_len: Any, failures_len: Any) -> StreamInfo:
    first = info.get("first-entry")
    last = info.get("last-entry")
    max_deleted = _text(info.get("max-deleted-entry-id")) or None
    return StreamInfo(
        name=name,
        length=int(info.get("length", 0)),
        last_generated_id=_text(info.get("last-generated-id")) or "0-0",
        first_id=_text(first[0]) if first else None,
        last_entry_id=_text(last[0]) if last else None,
        max_deleted_entry_id=None if max_deleted == "0-0" else max_deleted,
        entries_added=_int(info.get("entries-added")),
        recorded_first_entry_id=_text(info.get("recorded-first-entry-id")) or None,
        groups=int(info.get("groups", 0)),
        dlq_length=_count(dlq_len),
        failures_length=_count(failures_len),
    )


def _group_info(raw: Mapping[str, Any]) -> GroupInfo:
    return GroupInfo(
        name=_text(raw.get("name")),
        consumers=int(raw.get("consumers", 0)),
        pending=int(raw.get("pending", 0)),
        last_delivered_id=_text(raw.get("last-delivered-id")) or "0-0",
        entries_read=_int(raw.get("entries-read")),
        lag=_int(raw.get("lag")),
    )


def _pending_row(
    raw: Mapping[str, Any] | Sequence[Any],
    entry: StreamEntry | None = None,
    *,
    entries: Mapping[str, StreamEntry] | None = None,
) -> PendingRow:
    """A pending row from redis-py's parsed reply (a dict) or Redis's own (id, consumer,
    idle ms, deliveries: ``_lean_pipeline``), with ``entry`` or its entry in ``entries``."""
    if isinstance(raw, Mapping):
        entry_id, consumer = raw["message_id"], raw["consumer"]
        idle_ms, deliveries = raw["time_since_delivered"], raw["times_delivered"]
    else:
        entry_id, consumer, idle_ms, deliveries = raw
    row_id = _text(entry_id)
    if entries is not None:
        entry = entries.get(row_id)
    return PendingRow(row_id, _text(consumer), int(idle_ms), int(deliveries), entry)


def _pending_summary(reply: Any) -> tuple[int, str | None, str | None]:
    """An XPENDING summary's count, oldest and newest id, from redis-py's parsed reply (a
    dict) or Redis's own ([count, min, max, consumers]: ``_lean_pipeline``)."""
    if isinstance(reply, Mapping):
        found = (reply.get("pending", 0), reply.get("min"), reply.get("max"))
    else:
        found = (reply[0], reply[1], reply[2])
    return int(found[0] or 0), _text(found[1]) or None, _text(found[2]) or None


#: Replies the group page reads as Redis sends them (``_lean_pipeline``).
_OWN_PARSE = ("XPENDING", "XRANGE")
_lean_callbacks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _lean_pipeline(client: Client) -> Any:
    """A pipeline (no transaction) whose XPENDING and XRANGE replies are Redis's own
    lists, not redis-py's dicts: ``_pending_row``, ``_pending_summary`` and ``_entry``
    read either. redis-py builds a dict per pending row and per entry's fields, which on
    the group page (51 rows, 50 payloads) cost more than Redis's work and the round trip
    together. A cluster pipeline parses replies through its nodes' clients: it keeps
    redis-py's (the same answers)."""
    pipe = client.pipeline(transaction=False)
    if isinstance(client, redis.Redis):
        lean = _lean_callbacks.get(client)
        if lean is None:
            lean = type(client.response_callbacks)(client.response_callbacks)
            for name in _OWN_PARSE:
                lean.pop(name, None)
            _lean_callbacks[client] = lean
        pipe.response_callbacks = lean
    return pipe


# --- discovery and the overview ---------------------------------------------------------


def stream_discover(
    *, client: Client, patterns: Iterable[str], cap: int
) -> tuple[tuple[str, ...], bool, int]:
    """Stream names matching the allowlist, without companions: (names, truncated, companions).

    One whole discovery in one call, O(keyspace): for scripts and benchmarks. The
    dashboard never runs it on a request; it reads ``queue_core.stream_index``, which does
    the same SCAN in bounded steps in the background.

    Cost: ``SCAN … MATCH p TYPE stream COUNT 2000`` per pattern, one round trip per
    2,000 keys of the whole keyspace (SCAN cannot skip other keys); it stops once
    ``cap`` streams are found. On a cluster the client's ``scan_iter`` runs SCAN on
    every primary, page by page in turn, so the names are merged (and deduplicated,
    capped) as on one server; the cost is the same per key, spread over the primaries.
    Names that are not valid UTF-8 cannot be addressed by the dashboard and are left out.
    """
    patterns = tuple(patterns)
    found: set[str] = set()
    companions = 0
    for pattern in patterns:
        for raw in client.scan_iter(match=pattern, count=SCAN_COUNT, _type="stream"):
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if not allowed(name, patterns) or name in found:
                continue
            if not stream_visible(name, patterns):
                companions += 1  # allowed, so hidden only because it is a companion
                continue
            if len(found) >= cap:
                return tuple(sorted(found)), True, companions
            found.add(name)
    return tuple(sorted(found)), False, companions


#: A stream's overview facts before the oldest-pending round: its name, (length, DLQ
#: length, failure-log length) and groups.
_SummaryRow = tuple[str, tuple[int, int, int], list[GroupInfo]]


def _summary_rows(client: Client, streams: Sequence[str]) -> list[_SummaryRow]:
    """Round 1: XLEN, XINFO GROUPS and the companions' XLEN of every stream, pipelined.
    Streams deleted since discovery (or of another type) are left out."""
    pipe = client.pipeline(transaction=False)
    for name in streams:
        pipe.xlen(name)
        pipe.xinfo_groups(name)
        companions = _companions(name)
        # A cross-slot name has no companions: XLEN of a name that is never a key is 0.
        pipe.xlen(companions[0] if companions else _NO_KEY)
        pipe.xlen(companions[1] if companions else _NO_KEY)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    rows: list[_SummaryRow] = []
    for i, name in enumerate(streams):
        length, groups_raw, dlq_len, failures_len = replies[4 * i : 4 * i + 4]
        # XINFO GROUPS fails on a missing key (XLEN would say 0) and on another type.
        if _missing(length) or _missing(groups_raw):
            continue
        groups = [_group_info(g) for g in groups_raw]
        rows.append((name, (int(length), _count(dlq_len), _count(failures_len)), groups))
    return rows


@dataclass(frozen=True, slots=True)
class _GroupReads:
    """Round 2's answers for one group: oldest pending id, consumers, first waiting id
    (only when nothing is pending, for health) and first undelivered id (lag in time)."""

    oldest_pending_id: str | None = None
    consumers: tuple[ConsumerInfo, ...] = ()
    waiting_id: str | None = None
    undelivered_id: str | None = None


def _may_wait(group: GroupInfo, length: int) -> bool:
    """Whether entries may wait undelivered while nothing is pending: its first waiting id
    is worth one ``XRANGE … COUNT 1`` (the lag is unknown on Redis 6.2 and after XDEL)."""
    return not group.pending and length > 0 and group.lag != 0


def _may_lag(group: GroupInfo, length: int) -> bool:
    """Whether entries may wait undelivered (pending or not): the first one's id is the lag
    in time, worth one ``XRANGE … COUNT 1`` unless the lag is known to be 0."""
    return length > 0 and group.lag != 0


def _ms_or_none(entry_id: str | None) -> int | None:
    return None if entry_id is None else entry_id_ms(entry_id)


def _consumer_info(raw: Mapping[str, Any]) -> ConsumerInfo:
    return ConsumerInfo(
        name=_text(raw.get("name")),
        pending=int(raw.get("pending", 0)),
        idle_ms=int(raw.get("idle", 0)),
        inactive_ms=_int(raw.get("inactive")),
    )


def _first_id(reply: Any) -> str | None:
    """The id of an ``XRANGE … COUNT 1`` reply's entry (None when empty or an error)."""
    return _text(reply[0][0]) if isinstance(reply, list) and reply else None


def _group_reads(client: Client, rows: list[_SummaryRow]) -> dict[tuple[int, str], _GroupReads]:
    """Round 2, pipelined, by (row index, group): the XPENDING summary of each group with
    pending entries (its smallest id), XINFO CONSUMERS of each group with consumers
    (O(consumers)), and for a group whose lag is not known to be 0,
    ``XRANGE key (last-delivered + COUNT 1`` (O(log n), one entry) for how long work has
    waited (health, when nothing is pending) and the lag in time. No round trip when no
    group needs any of them."""
    calls: list[tuple[tuple[int, str], str]] = []
    pipe = client.pipeline(transaction=False)
    for i, (name, (length, _, _), groups) in enumerate(rows):
        for g in groups:
            if g.pending:
                pipe.xpending(name, g.name)
                calls.append(((i, g.name), "oldest"))
            if g.consumers:
                pipe.xinfo_consumers(name, g.name)
                calls.append(((i, g.name), "consumers"))
            if _may_lag(g, length):
                pipe.xrange(name, min=_id_after(g.last_delivered_id), max="+", count=1)
                calls.append(((i, g.name), "waiting" if _may_wait(g, length) else "undelivered"))
    found: dict[tuple[int, str], dict[str, Any]] = {}
    if not calls:
        return {}
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    for (key, what), reply in zip(calls, replies, strict=True):
        got = found.setdefault(key, {})
        if what == "oldest" and isinstance(reply, dict) and reply.get("min") is not None:
            got["oldest_pending_id"] = _text(reply["min"])
        elif what == "consumers" and isinstance(reply, list):
            got["consumers"] = tuple(_consumer_info(c) for c in reply)
        elif what in ("waiting", "undelivered"):
            got["undelivered_id"] = _first_id(reply)
            if what == "waiting":
                got["waiting_id"] = got["undelivered_id"]
    return {key: _GroupReads(**values) for key, values in found.items()}


def _summary(
    row: _SummaryRow, index: int, reads: Mapping[tuple[int, str], _GroupReads]
) -> StreamSummary:
    """Row ``index`` of the overview from its facts and its groups' round-2 reads."""
    name, (length, dlq_length, failures_length), groups = row
    none = _GroupReads()
    stats = []
    for g in groups:
        got = reads.get((index, g.name), none)
        stats.append(
            GroupStats(
                name=g.name,
                consumers=g.consumers,
                pending=g.pending,
                lag=g.lag,
                oldest_pending_id=got.oldest_pending_id,
                consumer_list=got.consumers,
                waiting_id=got.waiting_id,
                oldest_undelivered_ms=_ms_or_none(got.undelivered_id),
            )
        )
    oldest_ids = [s.oldest_pending_id for s in stats if s.oldest_pending_id]
    lags = [g.lag for g in groups if g.lag is not None]
    return StreamSummary(
        name=name,
        length=length,
        groups=len(groups),
        consumers=sum(g.consumers for g in groups),
        pending=sum(g.pending for g in groups),
        max_lag=max(lags) if lags else None,
        oldest_pending_id=min(oldest_ids, key=entry_id_key) if oldest_ids else None,
        dlq_length=dlq_length,
        failures_length=failures_length,
        group_stats=tuple(stats),
    )


def stream_summaries(*, client: Client, streams: Sequence[str]) -> tuple[StreamSummary, ...]:
    """The overview row of each stream, in two pipelined round trips for any number.

    Round 1, per stream: XLEN, XINFO GROUPS, XLEN of the DLQ and of the failure log
    (O(1) / O(groups)). Round 2, per group: the XPENDING summary (O(consumers)) when
    entries are pending, for the oldest pending id; XINFO CONSUMERS (O(consumers)) when
    it has consumers; and when nothing is pending but entries may wait undelivered, the
    first waiting entry (``XRANGE … COUNT 1``, O(log n), one payload), the inputs of
    ``queue_core.health``. So the whole overview is O(streams + groups + consumers),
    never O(pending). Streams deleted since discovery are left out. XLEN rather than
    XINFO STREAM: the overview needs only the length, and XINFO STREAM also sends the
    first and last entries, whose payloads may be large.
    """
    if not streams:
        return ()
    rows = _summary_rows(client, streams)
    reads = _group_reads(client, rows)
    return tuple(_summary(row, index, reads) for index, row in enumerate(rows))


def stream_overview(*, client: Client, patterns: Iterable[str], cap: int) -> StreamOverview:
    """Discovery plus the summaries: SCAN round trips plus two pipelined ones, O(keyspace +
    streams). For scripts and benchmarks; the overview pages through ``stream_index``."""
    names, truncated, companions = stream_discover(client=client, patterns=patterns, cap=cap)
    return StreamOverview(
        streams=stream_summaries(client=client, streams=names),
        truncated=truncated,
        cap=cap,
        companions=companions,
    )


# --- one stream -------------------------------------------------------------------------


def stream_detail(
    *, client: Client, stream: str, before: str | None = None, count: int = ENTRY_PAGE_SIZE
) -> StreamDetail | None:
    """Facts, groups and one newest-first page of entries: one round trip of five O(1)-ish
    commands (XREVRANGE is O(log n + count)). None when the stream does not exist. A
    second round trip only when some group is behind (``_with_undelivered``: its lag in
    time)."""
    companions = _companions(stream)
    pipe = client.pipeline(transaction=False)
    pipe.xinfo_stream(stream)
    pipe.xinfo_groups(stream)
    pipe.xlen(companions[0] if companions else _NO_KEY)
    pipe.xlen(companions[1] if companions else _NO_KEY)
    pipe.xrevrange(stream, max=_id_after(before) if before else "+", min="-", count=count + 1)
    info, groups_raw, dlq_len, failures_len, entries_raw = pipe.execute(raise_on_error=False)
    _raise_transport([info, groups_raw, dlq_len, failures_len, entries_raw])
    if _missing(info) or not isinstance(info, dict):
        return None
    entries = [] if _missing(entries_raw) else [_entry(e) for e in entries_raw]
    more = len(entries) > count
    entries = entries[:count]
    stream_info = _stream_info(stream, info, dlq_len, failures_len)
    groups = [] if _missing(groups_raw) else [_group_info(g) for g in groups_raw]
    return StreamDetail(
        info=stream_info,
        groups=tuple(_with_undelivered(client, stream, stream_info, groups)),
        entries=EntryPage(
            entries=tuple(entries),
            before=before,
            next_before=entries[-1].id if more and entries else None,
        ),
    )


def _undelivered_after(info: StreamInfo, group: GroupInfo) -> bool:
    """Whether the stream holds entries after the group's last-delivered id."""
    last = info.last_entry_id
    return (
        _may_lag(group, info.length)
        and last is not None
        and not _id_le(last, group.last_delivered_id)
    )


def _with_undelivered(
    client: Client, stream: str, info: StreamInfo, groups: list[GroupInfo]
) -> list[GroupInfo]:
    """``groups`` with their lag in time: one more pipelined round trip, only when some
    group has entries after its last-delivered id (``XRANGE … COUNT 1`` each, O(log n))."""
    behind = [i for i, g in enumerate(groups) if _undelivered_after(info, g)]
    if not behind:
        return groups
    pipe = client.pipeline(transaction=False)
    for i in behind:
        pipe.xrange(stream, min=_id_after(groups[i].last_delivered_id), max="+", count=1)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    out = list(groups)
    for i, reply in zip(behind, replies, strict=True):
        out[i] = replace(out[i], oldest_undelivered_ms=_ms_or_none(_first_id(reply)))
    return out


# --- one group --------------------------------------------------------------------------


def group_detail(*, client: Client, stream: str, group: str) -> GroupDetail | None:
    """The group page's header: one round trip of XINFO STREAM, XINFO GROUPS, XINFO
    CONSUMERS (O(consumers)), the XPENDING summary and two XLENs. None when the stream
    or the group does not exist. A second round trip only when the stream holds entries
    after the group's last-delivered id: ``XRANGE … COUNT 1`` (O(log n)) for the first
    one, whose id says how long work has waited (health, when nothing is pending) and is
    the lag in time (``oldest_undelivered_ms``)."""
    pipe = client.pipeline(transaction=False)
    _group_detail_queue(pipe, stream, group)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    return _group_detail_finish(client, stream, group, replies)


def _group_detail_queue(pipe: Any, stream: str, group: str) -> int:
    """Adds ``group_detail``'s commands to ``pipe``; returns how many."""
    companions = _companions(stream)
    pipe.xinfo_stream(stream)
    pipe.xinfo_groups(stream)
    pipe.xinfo_consumers(stream, group)
    pipe.xpending(stream, group)
    pipe.xlen(companions[0] if companions else _NO_KEY)
    pipe.xlen(companions[1] if companions else _NO_KEY)
    return 6


def _group_detail_finish(
    client: Client, stream: str, group: str, replies: Sequence[Any]
) -> GroupDetail | None:
    info, groups_raw, consumers_raw, summary, dlq_len, failures_len = replies
    if _missing(info) or _missing(consumers_raw) or _missing(summary):
        return None
    found = [g for g in groups_raw if _text(g.get("name")) == group]
    if not found:
        return None
    stream_info = _stream_info(stream, info, dlq_len, failures_len)
    group_info = _group_info(found[0])
    undelivered_id = None
    if _undelivered_after(stream_info, group_info):
        undelivered_id = _first_id(
            client.xrange(stream, min=_id_after(group_info.last_delivered_id), max="+", count=1)
        )
        group_info = replace(group_info, oldest_undelivered_ms=_ms_or_none(undelivered_id))
    waiting_id = undelivered_id if _may_wait(group_info, stream_info.length) else None
    pending, oldest_pending_id, newest_pending_id = _pending_summary(summary)
    return GroupDetail(
        stream=stream_info,
        group=group_info,
        consumers=tuple(_consumer_info(c) for c in consumers_raw),
        pending=pending,
        oldest_pending_id=oldest_pending_id,
        newest_pending_id=newest_pending_id,
        waiting_id=waiting_id,
        oldest_undelivered_ms=group_info.oldest_undelivered_ms,
    )


def entries_fetch(*, client: Client, stream: str, ids: Sequence[str]) -> dict[str, StreamEntry]:
    """The entries with ``ids`` (one ``XRANGE id id`` each, one round trip, O(log n) each).

    Ids that were trimmed or deleted are absent from the result.
    """
    if not ids:
        return {}
    pipe = client.pipeline(transaction=False)
    for entry_id in ids:
        pipe.xrange(stream, min=entry_id, max=entry_id, count=1)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    found: dict[str, StreamEntry] = {}
    for reply in replies:
        if isinstance(reply, list) and reply and reply[0][1] is not None:
            entry = _entry(reply[0])
            found[entry.id] = entry
    return found


@dataclass(slots=True)
class _PendingScan:
    """What one pending-page request read: the rows it keeps and how far it looked."""

    rows: list[PendingRow] = field(default_factory=list)
    scanned: int = 0
    last_seen: str | None = None
    more: bool = False
    budget_hit: bool = False
    #: Entries read beside the pending rows (``_pending_plain``), and up to which id that
    #: read was complete ("+" when it reached the stream's end): an id at or below it
    #: that is not among them is not in the stream.
    entries: dict[str, StreamEntry] = field(default_factory=dict)
    entries_to: str | None = None


def _pending_plain(
    client: Client,
    stream: str,
    group: str,
    cursor: str,
    count: int,
    consumer: str | None,
    with_entries: bool,
) -> _PendingScan:
    """No idle filter: one XPENDING of ``count + 1`` rows (the extra one says "more").

    With ``with_entries``, in the same round trip, ``XRANGE cursor + COUNT count``: the
    entries from where the page starts. When the pending entries are dense in the stream
    (a backlog: every delivered entry still pending) these are the rows' payloads, and the
    page costs one round trip instead of two; when they are sparse the rows it did not
    cover are fetched after (``_with_entries``), two round trips as without it. The guess
    costs Redis one read of at most ``count`` entries.
    """
    pipe = client.pipeline(transaction=False)
    _pending_plain_queue(pipe, stream, group, cursor, count, consumer, with_entries)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    return _pending_plain_finish(replies, count, with_entries)


def _pending_plain_queue(
    pipe: Any,
    stream: str,
    group: str,
    cursor: str,
    count: int,
    consumer: str | None,
    with_entries: bool,
) -> int:
    """Adds ``_pending_plain``'s commands to ``pipe``; returns how many."""
    pipe.xpending_range(stream, group, min=cursor, max="+", count=count + 1, consumername=consumer)
    if with_entries:
        pipe.xrange(stream, min=cursor, max="+", count=count)
    return 2 if with_entries else 1


def _pending_plain_finish(replies: Sequence[Any], count: int, with_entries: bool) -> _PendingScan:
    if isinstance(replies[0], Exception):
        raise replies[0]
    raw = replies[0]
    scan = _PendingScan(scanned=len(raw), more=len(raw) > count)
    near = replies[1] if with_entries else None
    if isinstance(near, list):
        for item in near:
            if item[1] is not None:
                entry = _entry(item)
                scan.entries[entry.id] = entry
        scan.entries_to = "+" if len(near) < count else _text(near[-1][0])
    # Each row made once, with its entry when the read beside it had it.
    entries = scan.entries
    scan.rows = [_pending_row(item, entries=entries) for item in raw[:count]]
    scan.last_seen = scan.rows[-1].id if scan.rows else None
    return scan


def _pending_idle_scan(
    client: Client,
    stream: str,
    group: str,
    cursor: str,
    count: int,
    consumer: str | None,
    min_idle_ms: int,
    budget: int,
    window: int,
) -> _PendingScan:
    """An idle filter: windows of ``window`` rows filtered here, at most ``budget`` rows
    read; never ``XPENDING … IDLE``, which can scan the whole list in one command."""
    scan = _PendingScan()
    while True:
        take = min(window, budget - scan.scanned)
        raw = client.xpending_range(
            stream, group, min=cursor, max="+", count=take, consumername=consumer
        )
        for item in raw:
            scan.scanned += 1
            if int(item["time_since_delivered"]) >= min_idle_ms:
                if len(scan.rows) == count:
                    scan.more = True
                    return scan
                scan.rows.append(_pending_row(item))
            scan.last_seen = _text(item["message_id"])
        if len(raw) < take:
            return scan  # the end of the PEL
        cursor = _id_after(_text(raw[-1]["message_id"]))
        if scan.scanned >= budget:
            scan.budget_hit = scan.more = True
            return scan


def _with_entries(
    client: Client,
    stream: str,
    rows: list[PendingRow],
    known: Mapping[str, StreamEntry] | None = None,
    known_to: str | None = None,
) -> list[PendingRow]:
    """The rows with their payloads: those already with theirs or in ``known`` (complete up
    to ``known_to``), the rest by one pipelined round trip (``entries_fetch``), none when
    ``known`` covers them. A row whose entry is in neither keeps ``entry`` None."""
    known = known or {}
    wanted = [
        r.id
        for r in rows
        if r.entry is None
        and r.id not in known
        and not (known_to and (known_to == "+" or _id_le(r.id, known_to)))
    ]
    entries = {**known, **entries_fetch(client=client, stream=stream, ids=wanted)}
    return [
        r
        if r.entry is not None or r.id not in entries
        else PendingRow(r.id, r.consumer, r.idle_ms, r.deliveries, entries[r.id])
        for r in rows
    ]


def pending_page(
    *,
    client: Client,
    stream: str,
    group: str,
    start: str | None = None,
    consumer: str | None = None,
    min_idle_ms: int = 0,
    count: int = PENDING_PAGE_SIZE,
    budget: int = IDLE_SCAN_BUDGET,
    window: int = IDLE_SCAN_WINDOW,
    with_entries: bool = True,
) -> PendingPage | None:
    """One page of pending entries after ``start`` (exclusive), in id order.

    Without an idle filter: one ``XPENDING key group (start + count+1 [consumer]``,
    O(log n + count) at any depth, with ``XRANGE (start + COUNT count`` in the same round
    trip, which holds the rows' payloads when the pending entries are dense; the rows it
    did not cover cost one more pipelined round trip of ``XRANGE id id`` each. With
    ``min_idle_ms``: windows of ``window`` rows are read and filtered here, at most
    ``budget`` rows per request; when the budget runs out first the page says how far it
    looked (``scanned_to``) and where to continue.
    None when the stream or group does not exist.
    """
    cursor = _id_after(start) if start else "-"
    try:
        if min_idle_ms <= 0:
            scan = _pending_plain(client, stream, group, cursor, count, consumer, with_entries)
        else:
            scan = _pending_idle_scan(
                client, stream, group, cursor, count, consumer, min_idle_ms, budget, window
            )
    except redis.ResponseError as exc:
        if not_a_group(exc):
            return None
        raise
    return _pending_page_finish(client, stream, start, scan, with_entries)


def _pending_page_finish(
    client: Client, stream: str, start: str | None, scan: _PendingScan, with_entries: bool
) -> PendingPage:
    rows = (
        _with_entries(client, stream, scan.rows, scan.entries, scan.entries_to)
        if with_entries and scan.rows
        else scan.rows
    )
    return PendingPage(
        rows=tuple(rows),
        start=start,
        next_start=scan.last_seen if scan.more else None,
        scanned=scan.scanned,
        scanned_to=scan.last_seen,
        budget_hit=scan.budget_hit,
    )


@dataclass(frozen=True, slots=True)
class GroupPage:
    """``group_page``'s reads: the header, the pending page (None for either: no such
    stream or group) and the raw replies of the caller's own commands, in order."""

    detail: GroupDetail | None
    page: PendingPage | None
    also: list[Any]


def group_page(
    *,
    client: Client,
    stream: str,
    group: str,
    start: str | None = None,
    consumer: str | None = None,
    min_idle_ms: int = 0,
    also: Callable[[Any], int] | None = None,
) -> GroupPage:
    """``group_detail`` and ``pending_page`` in one round trip, with ``also``'s commands
    (a function that adds read commands of the stream's slot to the pipeline and returns
    how many: the fleet's pause and heartbeats) in the same one; their raw replies, errors
    included, come back in ``GroupPage.also``. The follow-ups are each read's own: the
    first undelivered entry when the group lags, the payloads of sparse pending rows, and
    the idle filter's windows (read after, as ``pending_page`` does). ``page`` is None
    when ``detail`` is."""
    cursor = _id_after(start) if start else "-"
    plain = min_idle_ms <= 0
    pipe = _lean_pipeline(client)
    detail_n = _group_detail_queue(pipe, stream, group)
    pending_n = (
        _pending_plain_queue(pipe, stream, group, cursor, PENDING_PAGE_SIZE, consumer, True)
        if plain
        else 0
    )
    also_n = also(pipe) if also is not None else 0
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    head, rest = replies[:detail_n], replies[detail_n:]
    extra = list(rest[pending_n : pending_n + also_n])
    detail = _group_detail_finish(client, stream, group, head)
    if detail is None:
        return GroupPage(None, None, extra)
    if not plain:
        page = pending_page(
            client=client, stream=stream, group=group, start=start, consumer=consumer,
            min_idle_ms=min_idle_ms,
        )  # fmt: skip
        return GroupPage(detail, page, extra)
    try:
        scan = _pending_plain_finish(rest[:pending_n], PENDING_PAGE_SIZE, True)
    except redis.ResponseError as exc:
        if not_a_group(exc):
            return GroupPage(detail, None, extra)
        raise
    return GroupPage(detail, _pending_page_finish(client, stream, start, scan, True), extra)


# --- one entry --------------------------------------------------------------------------


def entry_detail(*, client: Client, stream: str, entry_id: str) -> EntryDetail | None:
    """One entry and where it stands in each group: two round trips (XRANGE id id and
    XINFO GROUPS, then one ``XPENDING key group id id 1`` per group, O(log n) each).

    None when the stream does not exist, or the entry is neither in the stream nor
    pending anywhere. ``entry_id`` must be a valid id (``validation.entry_id_check``).
    """
    pipe = _lean_pipeline(client)  # the entry's fields as Redis's flat list (no dict)
    pipe.xrange(stream, min=entry_id, max=entry_id, count=1)
    pipe.xinfo_groups(stream)
    found, groups_raw = pipe.execute(raise_on_error=False)
    _raise_transport([found, groups_raw])
    if _missing(groups_raw):
        return None
    groups = [_group_info(g) for g in groups_raw]
    entry = _entry(found[0]) if isinstance(found, list) and found and found[0][1] else None
    pending: list[Any] = []
    if groups:
        pipe = client.pipeline(transaction=False)
        for g in groups:
            pipe.xpending_range(stream, g.name, min=entry_id, max=entry_id, count=1)
        pending = pipe.execute(raise_on_error=False)
        _raise_transport(pending)
    states: list[EntryGroupState] = []
    for g, reply in zip(groups, pending, strict=True):
        if isinstance(reply, list) and reply:
            states.append(EntryGroupState(g.name, "pending", _pending_row(reply[0], entry)))
        elif _id_le(entry_id, g.last_delivered_id):
            states.append(EntryGroupState(g.name, "acked", None))
        else:
            states.append(EntryGroupState(g.name, "waiting", None))
    if entry is None and not any(s.state == "pending" for s in states):
        return None
    return EntryDetail(stream=stream, id=entry_id, entry=entry, groups=tuple(states))


# --- the dead-letter stream -------------------------------------------------------------


def _dead_letter_row(item: Any) -> DeadLetterRow:
    entry_id, fields = item
    fields = fields or {}
    meta = {name: fields.get(key) for name, key in _META.items()}
    original = tuple(
        (bytes(k), bytes(v)) for k, v in fields.items() if not bytes(k).startswith(_RESERVED)
    )
    return DeadLetterRow(
        id=_text(entry_id),
        origin_id=_text(meta["origin-id"]),
        group=_text(meta["origin-group"]),
        consumer=_text(meta["consumer"]),
        reason=_text(meta["reason"]),
        deliveries=_int(meta["deliveries"]),
        last_error=_text(meta["last-error"]),
        operator=_text(meta["operator"]),
        dead_lettered_at_ms=_int(meta["dead-lettered-at"]),
        payload_missing=meta["payload-missing"] == b"1",
        entry=StreamEntry(id=_text(entry_id), fields=original),
        replay_of=_text(fields.get(_REPLAY_OF)),
    )


def dead_letter_page(
    *, client: Client, stream: str, before: str | None = None, count: int = DLQ_PAGE_SIZE
) -> DeadLetterPage | None:
    """Newest-first page of ``{S}:dlq``: one round trip (EXISTS, XLEN, XREVRANGE, all
    O(log n + count)). None when neither the stream nor its DLQ exists."""
    companions = _companions(stream)
    if companions is None:
        return None
    dlq = companions[0]
    pipe = client.pipeline(transaction=False)
    pipe.exists(stream)
    pipe.xlen(dlq)
    pipe.xrevrange(dlq, max=_id_after(before) if before else "+", min="-", count=count + 1)
    exists, length, raw = pipe.execute(raise_on_error=False)
    _raise_transport([exists, length, raw])
    if not exists and not (isinstance(length, int) and length):
        return None
    items = [] if _missing(raw) else [_dead_letter_row(i) for i in raw]
    more = len(items) > count
    items = items[:count]
    return DeadLetterPage(
        stream=stream,
        length=length if isinstance(length, int) else 0,
        rows=tuple(items),
        before=before,
        next_before=items[-1].id if more and items else None,
    )


# --- live change stamps -----------------------------------------------------------------

#: XINFO STREAM fields that move when entries are added, trimmed or deleted (the first
#: and last entries it also sends are left out of a stamp).
_STAMP_FIELDS = ("length", "last-generated-id", "entries-added", "max-deleted-entry-id")


def _stamp(reply: Any) -> Any:
    """A hashable, comparable copy of a reply; an error becomes a marker naming its type."""
    if isinstance(reply, dict):
        return tuple(sorted((str(k), _stamp(v)) for k, v in reply.items()))
    if isinstance(reply, list | tuple):
        return tuple(_stamp(v) for v in reply)
    if isinstance(reply, Exception):
        return ("error", type(reply).__name__)
    return reply


def _stream_stamp(name: str, replies: Sequence[Any]) -> StreamStamp:
    info, groups_raw, dlq_len, failures_len = replies
    last_id = None
    if isinstance(info, dict):
        last_id = _text(info.get("last-generated-id")) or None
        info = {k: info.get(k) for k in _STAMP_FIELDS}
    return StreamStamp(
        name=name,
        stream=_stamp(info),
        groups=_stamp(groups_raw),
        dlq_length=_stamp(dlq_len),
        failures_length=_stamp(failures_len),
        last_id=last_id,
    )


def stream_stamps(
    *, client: Client, streams: Iterable[str], groups: Iterable[tuple[str, str]] = ()
) -> LiveStamps:
    """Change stamps of ``streams`` and of the XPENDING summaries of ``groups``: one
    round trip, for the live pages, which re-render only when a stamp changed.

    Per stream: XINFO STREAM (O(1), never FULL), XINFO GROUPS (O(groups)) and XLEN of the
    DLQ and of the failure log (O(1)); per group: the XPENDING summary (O(consumers)).
    A missing stream or group stamps as an error marker, not an exception; connection
    errors and timeouts propagate.
    """
    names = sorted(set(streams))
    pairs = sorted(set(groups))
    pipe = client.pipeline(transaction=False)
    for name in names:
        companions = _companions(name)
        pipe.xinfo_stream(name)
        pipe.xinfo_groups(name)
        pipe.xlen(companions[0] if companions else _NO_KEY)
        pipe.xlen(companions[1] if companions else _NO_KEY)
    for name, group in pairs:
        pipe.xpending(name, group)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    stamps = {name: _stream_stamp(name, replies[4 * i : 4 * i + 4]) for i, name in enumerate(names)}
    offset = 4 * len(names)
    pending = {pair: _stamp(replies[offset + j]) for j, pair in enumerate(pairs)}
    return LiveStamps(streams=stamps, pending=pending)


# --- what an operator action reads ------------------------------------------------------


def pending_entry_fetch(
    *, client: Client, stream: str, group: str, entry_id: str
) -> PendingEntry | None:
    """One entry as ``group`` sees it: its pending row and its payload, in one round trip.

    ``XPENDING key group id id 1`` and ``XRANGE key id id``, pipelined, O(log n) each (the
    XRANGE sends the payload, so this is for one entry an operator acts on, not for a
    table). None when the stream or the group does not exist. ``entry_id`` must be a
    valid id (``validation.entry_id_check``).
    """
    pipe = client.pipeline(transaction=False)
    pipe.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
    pipe.xrange(stream, min=entry_id, max=entry_id, count=1)
    pending, found = pipe.execute(raise_on_error=False)
    _raise_transport([pending, found])
    if isinstance(pending, redis.ResponseError):
        if not_a_group(pending):
            return None
        raise pending
    entry = None
    if isinstance(found, list) and found and found[0][1] is not None:
        entry = _entry(found[0])
    row = _pending_row(pending[0], entry) if pending else None
    return PendingEntry(id=entry_id, row=row, in_stream=entry is not None)


def pending_summary(*, client: Client, stream: str, group: str) -> PendingSummary | None:
    """The XPENDING summary of ``group``: one round trip, O(1) plus O(consumers).

    None when the stream or the group does not exist.
    """
    try:
        summary = client.xpending(stream, group)
    except redis.ResponseError as exc:
        if not_a_group(exc):
            return None
        raise
    return PendingSummary(
        pending=int(summary.get("pending", 0)),
        oldest_id=_text(summary.get("min")) or None,
        newest_id=_text(summary.get("max")) or None,
    )


def dead_letter_fetch(*, client: Client, stream: str, dlq_id: str) -> DeadLetterRow | None:
    """One dead-lettered entry of ``stream`` with its origin metadata: one ``XRANGE id id``
    of the DLQ, O(log n). None when it is not there (replayed or deleted already), when
    the DLQ key is not a stream, or when ``stream`` cannot have companions."""
    companions = _companions(stream)
    if companions is None:
        return None
    try:
        found = client.xrange(companions[0], min=dlq_id, max=dlq_id, count=1)
    except redis.ResponseError:
        return None
    return _dead_letter_row(found[0]) if found else None


def entry_dead_letters(
    *,
    client: Client,
    stream: str,
    entry_id: str,
    since_ms: int,
    groups: Sequence[str] = (),
    budget: int = ENTRY_DLQ_BUDGET,
    byte_budget: int = ENTRY_DLQ_BYTES,
) -> DeadLettersFound | None:
    """The dead letters of entry ``entry_id`` (by their origin id), looking only at those
    added to ``{S}:dlq`` at or after ``since_ms``, oldest first: ``XRANGE dlq since + COUNT
    c`` a chunk at a time (each O(log n + c), so Redis serves others between chunks), at
    most ``budget`` dead letters and about ``byte_budget`` bytes of them. With ``groups``
    it stops once each of them has a dead letter of the entry. The chunks start small
    (``ENTRY_DLQ_FIRST``) and grow only while the dead letters read are small, so a DLQ of
    huge payloads costs a few of them, not a chunk of them. Round trips: one per chunk,
    usually one (the caller starts the walk just before the move). Measured
    (``benchmarks/entry_dead_letters.py``, 2-core machine, Redis 7.0, 100,000 dead
    letters of 1 KB): the worst case, 1,000 read without a match, costs about 0.5 ms of
    Redis over 5 round trips, its longest command 0.2 ms, 3-6 ms of wall time; of 100 KB
    dead letters it stops at 40 (4 MB), 0.2 ms of Redis. ``complete`` says whether a
    later dead letter may have been missed.

    A dead letter's id is stamped by Redis when the entry is moved, so it is never older
    than the entry's own (Redis-stamped) id nor than the failure that led to the move;
    the caller passes the latest instant it knows the move came after. None when
    ``stream`` cannot have companions (its name cannot share a slot with them).
    """
    companions = _companions(stream)
    if companions is None:
        return None
    dlq = companions[0]
    origin_key, group_key = _META["origin-id"], _META["origin-group"]
    want = set(groups)
    found: list[tuple[str, str]] = []
    start, scanned, spent, chunk, last = f"{max(0, since_ms)}-0", 0, 0, ENTRY_DLQ_FIRST, None
    while scanned < budget and spent < byte_budget:
        count = min(chunk, budget - scanned)
        try:
            items: list[Any] = client.xrange(dlq, min=start, max="+", count=count) or []
        except redis.ResponseError:  # not a stream: it holds no dead letters
            return DeadLettersFound(found=(), scanned=scanned, complete=True)
        size = 0
        for item_id, fields in items:
            fields = fields or {}
            size += sum(len(k) + len(v) for k, v in fields.items())
            if fields.get(origin_key) == entry_id.encode():
                group = _text(fields.get(group_key))
                found.append((group, _text(item_id)))
                want.discard(group)
        scanned += len(items)
        spent += size
        if items:
            last = _text(items[-1][0])
        if len(items) < count:
            return DeadLettersFound(tuple(found), scanned, complete=True, last_id=last)
        if groups and not want:
            return DeadLettersFound(tuple(found), scanned, complete=True, last_id=last)
        start = _id_after(last or start)
        # Grow the chunk while the dead letters are small: ~4 chunks fill the byte budget.
        per = max(1, size // max(1, len(items)))
        chunk = max(ENTRY_DLQ_FIRST, min(ENTRY_DLQ_CHUNK, byte_budget // (4 * per)))
    return DeadLettersFound(tuple(found), scanned, complete=False, last_id=last)


# --- the rates sampler's counters -------------------------------------------------------


def stream_counters(*, client: Client, streams: Sequence[str]) -> tuple[StreamCounters, ...]:
    """The counters and ages the rates sampler stores, in two pipelined round trips.

    Round 1, per stream: XINFO STREAM (O(1), never FULL; it also sends the first and last
    entries), XINFO GROUPS (O(groups)) and XLEN of the dead-letter stream. Round 2, per
    group: the XPENDING summary when entries are pending (O(consumers)) and, when its lag
    is not known to be 0, ``XRANGE key (last-delivered + COUNT 1`` (O(log n), one entry)
    for the lag in time. So a tick is O(streams + groups). ``entries_added``,
    ``entries_read`` and ``lag`` are None on Redis < 7 (the server has no such counters).
    Streams deleted since discovery are left out.
    """
    if not streams:
        return ()
    pipe = client.pipeline(transaction=False)
    for name in streams:
        companions = _companions(name)
        pipe.xinfo_stream(name)
        pipe.xinfo_groups(name)
        pipe.xlen(companions[0] if companions else _NO_KEY)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    found: list[tuple[str, StreamInfo, list[GroupInfo]]] = []
    for i, name in enumerate(streams):
        info, groups_raw, dlq_len = replies[3 * i : 3 * i + 3]
        if _missing(info) or _missing(groups_raw) or not isinstance(info, dict):
            continue
        found.append(
            (name, _stream_info(name, info, dlq_len, 0), [_group_info(g) for g in groups_raw])
        )
    calls: list[tuple[int, int, str]] = []
    pipe = client.pipeline(transaction=False)
    for i, (name, info, groups) in enumerate(found):
        for j, g in enumerate(groups):
            if g.pending:
                pipe.xpending(name, g.name)
                calls.append((i, j, "oldest"))
            if _undelivered_after(info, g):
                pipe.xrange(name, min=_id_after(g.last_delivered_id), max="+", count=1)
                calls.append((i, j, "undelivered"))
    reads: dict[tuple[int, int], dict[str, int | None]] = {}
    if calls:
        replies = pipe.execute(raise_on_error=False)
        _raise_transport(replies)
        for (i, j, what), reply in zip(calls, replies, strict=True):
            got = reads.setdefault((i, j), {})
            if what == "oldest" and isinstance(reply, dict) and reply.get("min") is not None:
                got["oldest"] = _ms_or_none(_text(reply["min"]))
            elif what == "undelivered":
                got["undelivered"] = _ms_or_none(_first_id(reply))
    out = []
    for i, (name, info, groups) in enumerate(found):
        counters = []
        for j, g in enumerate(groups):
            got = reads.get((i, j), {})
            counters.append(
                GroupCounters(
                    info=replace(g, oldest_undelivered_ms=got.get("undelivered")),
                    oldest_pending_ms=got.get("oldest"),
                )
            )
        out.append(
            StreamCounters(
                name=name,
                length=info.length,
                entries_added=info.entries_added,
                dlq_length=info.dlq_length,
                groups=tuple(counters),
            )
        )
    return tuple(out)
