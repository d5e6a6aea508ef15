"""The dead-letter stream ``{S}:dlq``: a newest-first page (``dead_letter_page``), one
dead letter by id (``dead_letter_fetch``) and the dead letters of one entry
(``entry_dead_letters``, a walk bounded by count and by bytes).

``dead_letter_row`` reads a DLQ entry and its origin metadata; the redrive code in the
dashboard reads its rows with it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from queue_core.connection import Client
from queue_core.keys import DEAD_LETTER_FIELDS, REPLAY_OF_FIELD, RESERVED_PREFIX
from queue_core.selectors._common import (
    _companions,
    _id_after,
    _int,
    _missing,
    _raise_transport,
    _text,
)
from queue_core.types import DeadLetterPage, DeadLetterRow, DeadLettersFound, StreamEntry

#: Rows per newest-first page of dead-lettered entries.
DLQ_PAGE_SIZE = 50
#: The entry page tells a dead-lettered entry from an acknowledged one by reading the
#: dead letters moved after it (``entry_dead_letters``): at most this many, and about
#: this many bytes of them, in chunks of ``ENTRY_DLQ_FIRST`` growing to ``ENTRY_DLQ_CHUNK``.
ENTRY_DLQ_BUDGET = 1_000
ENTRY_DLQ_BYTES = 4_000_000
ENTRY_DLQ_FIRST = 20
ENTRY_DLQ_CHUNK = 250

#: The dead-letter metadata a DLQ row shows, by short name (the names live in keys).
_META = {field.removeprefix(RESERVED_PREFIX): field.encode() for field in DEAD_LETTER_FIELDS}
_RESERVED = RESERVED_PREFIX.encode()
_REPLAY_OF = REPLAY_OF_FIELD.encode()


def dead_letter_row(item: Any) -> DeadLetterRow:
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
    items = [] if _missing(raw) else [dead_letter_row(i) for i in raw]
    more = len(items) > count
    items = items[:count]
    return DeadLetterPage(
        stream=stream,
        length=length if isinstance(length, int) else 0,
        rows=tuple(items),
        before=before,
        next_before=items[-1].id if more and items else None,
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
    return dead_letter_row(found[0]) if found else None


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
    want = set(groups)
    found: list[tuple[str, str]] = []
    start, scanned, spent, chunk, last = f"{max(0, since_ms)}-0", 0, 0, ENTRY_DLQ_FIRST, None
    while scanned < budget and spent < byte_budget:
        count = min(chunk, budget - scanned)
        try:
            items: list[Any] = client.xrange(dlq, min=start, max="+", count=count) or []
        except redis.ResponseError:  # not a stream: it holds no dead letters
            return DeadLettersFound(found=(), scanned=scanned, complete=True)
        matches, size = _origin_matches(items, entry_id)
        found.extend(matches)
        want.difference_update(group for group, _ in matches)
        scanned += len(items)
        spent += size
        if items:
            last = _text(items[-1][0])
        if len(items) < count or (groups and not want):
            return DeadLettersFound(tuple(found), scanned, complete=True, last_id=last)
        start = _id_after(last or start)
        chunk = _next_chunk(size, len(items), byte_budget)
    return DeadLettersFound(tuple(found), scanned, complete=False, last_id=last)


def _origin_matches(items: Sequence[Any], entry_id: str) -> tuple[list[tuple[str, str]], int]:
    """The (origin group, dead-letter id) of each DLQ entry in ``items`` (one chunk of
    XRANGE) that is a dead letter of ``entry_id``, and the chunk's size in bytes (field
    names and values)."""
    origin_key, group_key = _META["origin-id"], _META["origin-group"]
    origin = entry_id.encode()
    matches: list[tuple[str, str]] = []
    size = 0
    for item_id, fields in items:
        fields = fields or {}
        size += sum(len(k) + len(v) for k, v in fields.items())
        if fields.get(origin_key) == origin:
            matches.append((_text(fields.get(group_key)), _text(item_id)))
    return matches, size


def _next_chunk(size: int, read: int, byte_budget: int) -> int:
    """The next chunk's count after one of ``read`` dead letters of ``size`` bytes: grown
    while the dead letters are small, so about 4 chunks fill the byte budget."""
    per = max(1, size // max(1, read))
    return max(ENTRY_DLQ_FIRST, min(ENTRY_DLQ_CHUNK, byte_budget // (4 * per)))
