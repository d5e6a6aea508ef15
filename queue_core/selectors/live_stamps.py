"""Change stamps for the live pages (``stream_stamps``): one round trip, O(1) and
O(groups) reads per stream and one XPENDING summary per group. A live page re-renders
only when one of its stamps changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from queue_core.connection import Client
from queue_core.selectors._common import _NO_KEY, _companions, _raise_transport, _text
from queue_core.types import LiveStamps, StreamStamp

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
