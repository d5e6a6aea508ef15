"""What the selector modules share: reply readers, companions, pipelines, lag rules.

Turns raw redis-py replies (or Redis's own for one entry, ``_lean_pipeline``) into the
values of ``queue_core.types``, names a stream's companions, and holds the lag rules that the
overview, the stream and group pages and the rates counters share. It makes no Redis
call of its own. Private to ``queue_core.selectors``: only the modules beside it import
it, and nothing here is re-exported.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from queue_core.connection import Client
from queue_core.keys import CrossSlotName, stream_keys
from queue_core.types import ConsumerInfo, GroupInfo, PendingRow, StreamEntry, StreamInfo
from queue_core.validation import entry_id_key, entry_id_ms

#: XLEN of a name that is never a key answers 0: used for a cross-slot stream's companions.
_NO_KEY = "\x00ackboard-no-companion"


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
    raw: Mapping[str, Any],
    entry: StreamEntry | None = None,
    *,
    entries: Mapping[str, StreamEntry] | None = None,
) -> PendingRow:
    """A pending row from redis-py's parsed ``XPENDING`` reply, with ``entry`` or its entry
    in ``entries``."""
    row_id = _text(raw["message_id"])
    if entries is not None:
        entry = entries.get(row_id)
    return PendingRow(
        row_id, _text(raw["consumer"]), int(raw["time_since_delivered"]),
        int(raw["times_delivered"]), entry,
    )  # fmt: skip


def _pending_summary(reply: Mapping[str, Any]) -> tuple[int, str | None, str | None]:
    """An XPENDING summary's count, oldest and newest id, from redis-py's parsed reply."""
    return (
        int(reply.get("pending", 0) or 0),
        _text(reply.get("min")) or None,
        _text(reply.get("max")) or None,
    )


#: Replies the entry page reads as Redis sends them (``_lean_pipeline``).
_OWN_PARSE = ("XRANGE",)
_lean_callbacks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _lean_pipeline(client: Client) -> Any:
    """A pipeline (no transaction) whose XRANGE replies are Redis's own lists, not
    redis-py's dicts (``_entry`` reads either). Only ``entries.entry_detail`` uses it.
    Kept because the entry page shows an entry exactly as stored: redis-py's dict merges
    fields whose names repeat (``XADD s * a 1 a 2`` reads as ``{a: 2}``); it also halves a
    50,000-field entry's page (docs/benchmarks.md). A cluster pipeline parses replies
    through its nodes' clients: it keeps redis-py's."""
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


def _undelivered_after(info: StreamInfo, group: GroupInfo) -> bool:
    """Whether the stream holds entries after the group's last-delivered id."""
    last = info.last_entry_id
    return (
        _may_lag(group, info.length)
        and last is not None
        and not _id_le(last, group.last_delivered_id)
    )
