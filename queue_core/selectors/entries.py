"""Stream entries by id: their payloads (``entries_fetch``, one pipelined round trip for
any number) and where one entry stands in each group (``entry_detail``, two round trips).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queue_core.connection import Client
from queue_core.selectors._common import (
    _entry,
    _group_info,
    _id_le,
    _lean_pipeline,
    _missing,
    _pending_row,
    _raise_transport,
)
from queue_core.types import EntryDetail, EntryGroupState, StreamEntry


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
