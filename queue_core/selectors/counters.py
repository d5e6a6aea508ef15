"""The counters and ages the rates sampler stores (``stream_counters``): two pipelined
round trips per tick, O(streams + groups).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from queue_core.connection import Client
from queue_core.selectors._common import (
    _NO_KEY,
    _companions,
    _first_id,
    _group_info,
    _id_after,
    _missing,
    _ms_or_none,
    _raise_transport,
    _stream_info,
    _text,
    _undelivered_after,
)
from queue_core.types import GroupCounters, GroupInfo, StreamCounters, StreamInfo

#: A stream's counters before the ages round: its name, facts and groups.
_CounterRow = tuple[str, StreamInfo, list[GroupInfo]]
#: Round 2's ages by (row index, group index): "oldest" pending and first "undelivered" ms.
_Ages = dict[tuple[int, int], dict[str, int | None]]


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
    rows = _counter_rows(client, streams)
    ages = _counter_ages(client, rows)
    return tuple(_counters(row, index, ages) for index, row in enumerate(rows))


def _counter_rows(client: Client, streams: Sequence[str]) -> list[_CounterRow]:
    """Round 1: XINFO STREAM, XINFO GROUPS and the DLQ's XLEN of every stream, pipelined.
    Streams deleted since discovery (or of another type) are left out."""
    pipe = client.pipeline(transaction=False)
    for name in streams:
        companions = _companions(name)
        pipe.xinfo_stream(name)
        pipe.xinfo_groups(name)
        pipe.xlen(companions[0] if companions else _NO_KEY)
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    rows: list[_CounterRow] = []
    for i, name in enumerate(streams):
        info, groups_raw, dlq_len = replies[3 * i : 3 * i + 3]
        if _missing(info) or _missing(groups_raw) or not isinstance(info, dict):
            continue
        rows.append(
            (name, _stream_info(name, info, dlq_len, 0), [_group_info(g) for g in groups_raw])
        )
    return rows


def _counter_ages(client: Client, rows: list[_CounterRow]) -> _Ages:
    """Round 2, pipelined: the XPENDING summary of each group with pending entries (its
    oldest id) and ``XRANGE key (last-delivered + COUNT 1`` of each group with entries
    after its last-delivered id (the lag in time). No round trip when no group needs
    either."""
    calls: list[tuple[int, int, str]] = []
    pipe = client.pipeline(transaction=False)
    for i, (name, info, groups) in enumerate(rows):
        for j, g in enumerate(groups):
            if g.pending:
                pipe.xpending(name, g.name)
                calls.append((i, j, "oldest"))
            if _undelivered_after(info, g):
                pipe.xrange(name, min=_id_after(g.last_delivered_id), max="+", count=1)
                calls.append((i, j, "undelivered"))
    ages: _Ages = {}
    if not calls:
        return ages
    replies = pipe.execute(raise_on_error=False)
    _raise_transport(replies)
    for (i, j, what), reply in zip(calls, replies, strict=True):
        got = ages.setdefault((i, j), {})
        if what == "oldest" and isinstance(reply, dict) and reply.get("min") is not None:
            got["oldest"] = _ms_or_none(_text(reply["min"]))
        elif what == "undelivered":
            got["undelivered"] = _ms_or_none(_first_id(reply))
    return ages


def _counters(row: _CounterRow, index: int, ages: _Ages) -> StreamCounters:
    """Row ``index``'s counters from its facts and its groups' round-2 ages."""
    name, info, groups = row
    counters = []
    for j, g in enumerate(groups):
        got = ages.get((index, j), {})
        counters.append(
            GroupCounters(
                info=replace(g, oldest_undelivered_ms=got.get("undelivered")),
                oldest_pending_ms=got.get("oldest"),
            )
        )
    return StreamCounters(
        name=name,
        length=info.length,
        entries_added=info.entries_added,
        dlq_length=info.dlq_length,
        groups=tuple(counters),
    )
