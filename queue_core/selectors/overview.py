"""Discovery and the overview: which streams there are, and one summary row for each.

``stream_discover`` is one SCAN discovery, O(keyspace), for scripts and benchmarks;
``stream_summaries`` makes two pipelined round trips for any number of streams and is
never O(pending); ``stream_overview`` is both. The dashboard never discovers on a
request: it pages through ``queue_core.stream_index``, which runs the same reads in
bounded steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queue_core.connection import Client
from queue_core.keys import allowed, stream_visible
from queue_core.selectors._common import (
    _NO_KEY,
    _companions,
    _consumer_info,
    _count,
    _first_id,
    _group_info,
    _id_after,
    _may_lag,
    _may_wait,
    _missing,
    _ms_or_none,
    _raise_transport,
    _text,
)
from queue_core.types import ConsumerInfo, GroupInfo, GroupStats, StreamOverview, StreamSummary
from queue_core.validation import entry_id_key

#: Keys SCAN examines per call during discovery (one round trip per this many keys).
SCAN_COUNT = 2_000


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
