"""Produce and Duplicate: add an entry to a stream, or a copy of an existing entry.

Owns the two writes an operator uses to put work on a queue by hand:
``stream_produce`` (XADD ``*`` of the fields given, one Lua script,
``scripts/stream_produce.lua``) and ``entry_duplicate`` (XADD ``*`` of a copy of one
entry's fields, read and copied in one Lua script, ``scripts/entry_duplicate.lua``).
Both return the new id and publish an ``action`` event, as the other services do.

Two decisions, both to keep a console from writing what nobody meant:

- A stream that does not exist is refused unless ``create`` is asked for: producing to a
  typo'd name would otherwise create a new stream no worker reads.
- A duplicate copies the entry's own fields, never Ackboard's (``ackboard.*``: a
  replay's target group, its replayed-from id, an edit's marks). The copy is a new
  entry for every group of the stream, as a producer's XADD would be.

The bounds are edit & replay's (``dashboard.views.edit_replay``): at most
``MAX_FIELDS`` fields, names of at most ``MAX_NAME_BYTES`` bytes, never the reserved
prefix, and ``MAX_ENTRY_BYTES`` in all. They are checked here, before Redis is asked
(ValueError), so every caller (the page, the CLI, the API) gets the same refusal.

It never imports Django and never decides permissions or audits (the dashboard does).
Cost: one round trip each, O(fields) in Redis.
"""

from __future__ import annotations

from collections.abc import Sequence

from queue_core.connection import Client
from queue_core.events import event_publish
from queue_core.keys import RESERVED_PREFIX
from queue_core.scripts.binding import Refusal
from queue_core.scripts.produce import ENTRY_DUPLICATE, STREAM_PRODUCE, Duplicated, Produced
from queue_core.validation import entry_id_check, name_check

__all__ = [
    "MAX_ENTRY_BYTES",
    "MAX_FIELDS",
    "MAX_NAME_BYTES",
    "Duplicated",
    "Produced",
    "entry_duplicate",
    "fields_check",
    "stream_produce",
]

#: At most this many fields in one produced entry (edit & replay's limit; the script's
#: own, Lua's unpack(), is about 3,990).
MAX_FIELDS = 1000
#: A field name's longest, in bytes.
MAX_NAME_BYTES = 1024
#: An entry's names and values together, at most (a request to the web is bounded by
#: Django's DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB by default, before this).
MAX_ENTRY_BYTES = 4 * 1024 * 1024
_RESERVED = RESERVED_PREFIX.encode()


def fields_check(fields: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``fields`` as a list if they are an entry this module adds, else ValueError
    saying which bound: none, too many, an empty or long or reserved or repeated name,
    too large in all."""
    checked = list(fields)
    if not checked:
        raise ValueError("the entry has no field: nothing to add")
    if len(checked) > MAX_FIELDS:
        raise ValueError(f"an entry has at most {MAX_FIELDS} fields ({len(checked)} given)")
    seen: set[bytes] = set()
    total = 0
    for name, value in checked:
        if not isinstance(name, bytes) or not isinstance(value, bytes):
            raise ValueError("field names and values must be bytes")
        shown = name[:80].decode(errors="replace")
        if not name:
            raise ValueError("a field has no name")
        if len(name) > MAX_NAME_BYTES:
            raise ValueError(f"field {shown!r}…: a name has at most {MAX_NAME_BYTES} bytes")
        if name.startswith(_RESERVED):
            raise ValueError(f"field {shown!r}: names starting with {RESERVED_PREFIX} are reserved")
        if name in seen:
            raise ValueError(f"field {shown!r} appears twice")
        seen.add(name)
        total += len(name) + len(value)
    if total > MAX_ENTRY_BYTES:
        raise ValueError(
            f"the entry is {total} bytes; one entry takes at most {MAX_ENTRY_BYTES // 1024} KB"
        )
    return checked


def stream_produce(
    *, client: Client, stream: str, fields: Sequence[tuple[bytes, bytes]], create: bool = False
) -> Produced:
    """Add an entry of ``fields`` (in their order) to ``stream``; returns its new id.

    Raises ValueError for fields past a bound (``fields_check``) and ActionRefused, with
    nothing changed, for a stream that does not exist (unless ``create``) or a key that
    is not a stream.
    """
    name_check(stream, "stream")
    checked = fields_check(fields)
    result = STREAM_PRODUCE.call(stream=stream, fields=checked, create=create).run(client)
    if isinstance(result, Refusal):
        raise result.error()
    event_publish(
        client=client, type="action", stream=stream, action="produce", ids=[result.new_id]
    )
    return result


def entry_duplicate(*, client: Client, stream: str, entry_id: str) -> Duplicated:
    """Add a copy of entry ``entry_id``'s own fields (not ``ackboard.*``) to the end of
    ``stream``, atomically; returns the copy's id.

    Raises ValueError for a malformed id, ActionRefused for an entry that is not in the
    stream (never added, deleted or trimmed) or has nothing of its own to copy.
    """
    name_check(stream, "stream")
    entry_id_check(entry_id)
    result = ENTRY_DUPLICATE.call(stream=stream, entry_id=entry_id).run(client)
    if isinstance(result, Refusal):
        raise result.error()
    event_publish(
        client=client, type="action", stream=stream, action="duplicate", ids=[result.new_id]
    )
    return result
