"""Pending entries: a page of a group's PEL (``pending_page``), the one pending entry an
operator acts on (``pending_entry_fetch``) and the XPENDING summary (``pending_summary``).

Pages go by start id, never by offset (XPENDING's extended form is O(log n + rows) from
any start id). The idle filter reads bounded windows and filters them here, never
``XPENDING … IDLE``, which can scan the whole PEL in one command. The plain page is
built in a queue half and a finish half so that ``groups.group_page`` can put it in the
group header's round trip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from queue_core.connection import Client
from queue_core.errors import not_a_group
from queue_core.selectors._common import (
    _entry,
    _id_after,
    _id_le,
    _pending_row,
    _raise_transport,
    _text,
)
from queue_core.selectors.entries import entries_fetch
from queue_core.types import PendingEntry, PendingPage, PendingRow, PendingSummary, StreamEntry

#: Rows per pending page (XPENDING extended form: ~0.13 ms on a 1M PEL at any depth).
PENDING_PAGE_SIZE = 50
#: The idle filter reads the PEL in windows of this many rows and filters them here:
#: ``XPENDING … IDLE t`` would scan the whole PEL in one command when matches are rare
#: (~116 ms of blocked Redis on 1M entries). One window costs well under a millisecond
#: of Redis time and other clients run between windows.
IDLE_SCAN_WINDOW = 2_000
#: Most PEL rows one idle-filtered request reads before it stops and offers "continue".
IDLE_SCAN_BUDGET = 20_000


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
