"""One stream's page: its facts, its groups with their lag in time, and a newest-first
page of its entries (``stream_detail``). One round trip, two when some group is behind.
"""

from __future__ import annotations

from dataclasses import replace

from queue_core.connection import Client
from queue_core.selectors._common import (
    _NO_KEY,
    _companions,
    _entry,
    _first_id,
    _group_info,
    _id_after,
    _missing,
    _ms_or_none,
    _raise_transport,
    _stream_info,
    _undelivered_after,
)
from queue_core.types import EntryPage, GroupInfo, StreamDetail, StreamInfo

#: Rows per newest-first page of stream entries.
ENTRY_PAGE_SIZE = 20


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
