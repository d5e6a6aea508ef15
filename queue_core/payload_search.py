"""Payload search: find entries by content, one budgeted slice at a time.

Owns the query (``SearchQuery``: a field equals or contains a value, or a JSON path in
a field equals a value), its matching rules (``search_matches``) and the three scans the
dashboard runs: ``stream_search`` and ``dead_letter_search`` (newest first, XREVRANGE in
chunks) and ``pending_search`` (a group's pending entries in id order, XPENDING in
chunks plus one pipelined XRANGE per chunk for their payloads). Matching happens here,
in Python: Redis only ever runs O(log n + chunk) range reads, so a search never blocks
it, whatever the stream's length.

Every scan stops at its budget (``max_entries`` scanned, ``max_ms`` elapsed, checked
after each entry, or ``max_matches`` found) and returns a ``SearchSlice`` whose
``cursor`` is the last id it looked at: passing it back as ``after`` continues exactly
there (the bound is exclusive), so a search continued until ``done`` sees every entry
that was in range once, and none twice.

Matching rules (documented in docs/failure-loop.md, "Find entries by content and time"):

- ``equals``: the field's exact bytes equal the value's UTF-8 bytes;
- ``contains``: the value's UTF-8 bytes occur in the field's bytes (so binary fields are
  searched too, as bytes); an empty value matches any entry that has the field;
- ``json``: the field parses as JSON (at most ``JSON_MAX_BYTES``, nested at most
  ``bounded_json.MAX_DEPTH`` levels; other values never match) and the path
  (``path_parse``: ``$``, ``.key``, ``[3]``, ``["odd key"]``) leads to a value equal to
  the expected one. The expected text is read as JSON when it parses (``42``, ``true``,
  ``"42"``, ``{"a": 1}``), else as a plain string, so ``$.customer.id`` = ``c-1`` and =
  ``"c-1"`` are the same search; an expected value nested deeper than
  ``bounded_json.MAX_DEPTH`` is refused (ValueError, a 400). ``true`` never equals ``1``.

With a ``decode`` (the dashboard's decoders of the searched field: msgpack, protobuf,
base64, compressed content, framework envelopes), a field also matches on its decoded
value: ``equals`` when that value equals the expected one (read as for ``json``),
``contains`` when the text occurs in it (its compact JSON, or the text itself), ``json``
on the decoded value instead of the bytes. ``decode`` returns ``UNDECODED`` when no
decoder applies, and then only the bytes are matched.

It never writes to Redis and never imports Django; the dashboard decides which fields may
be searched (redaction) and renders the matches through ``dashboard.views.payloads``.
Cost: per call, at most ``ceil(max_entries / chunk)`` round trips (two per chunk for the
pending scan), each O(log n + chunk) in Redis, and the matching's CPU, bounded by
``max_ms`` checked entry by entry.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from queue_core.bounded_json import BoundedJSONError, json_read
from queue_core.connection import Client
from queue_core.keys import stream_keys
from queue_core.types import StreamEntry
from queue_core.validation import entry_id_check

OPS = ("equals", "contains", "json")
#: Defaults of one request's budget (the dashboard's settings may lower or raise them).
MAX_ENTRIES = 5000
MAX_MS = 250
MAX_MATCHES = 50
CHUNK = 200
#: Larger values are never parsed as JSON (a JSON-path search skips them).
JSON_MAX_BYTES = 1_000_000
#: Longest path accepted (segments), and longest field name or value searched for.
MAX_PATH_SEGMENTS = 32
MAX_TEXT = 10_000

#: What a ``Decode`` returns when no decoder applies to a value.
UNDECODED: Any = object()
#: A field value's decoded form (JSON-like), or ``UNDECODED``; it never raises.
Decode = Callable[[bytes], Any]

_KEY = re.compile(r"\.([A-Za-z_][A-Za-z0-9_\-]*)")
_INDEX = re.compile(r"\[(\d{1,9})\]")


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """One search: ``field`` (its name's UTF-8 bytes), ``op`` (one of ``OPS``), the
    value as typed, and for ``json`` the parsed path and the expected value."""

    field: bytes
    op: str
    value: str
    path: tuple[str | int, ...] = ()
    path_text: str = ""
    expected: Any = None


def path_parse(text: str) -> tuple[str | int, ...]:
    """A JSON path's segments: ``$`` then any of ``.key`` (letters, digits, ``_``, ``-``;
    not starting with a digit), ``[N]`` (an array index) or ``["any key"]`` (a JSON
    string). ``$`` alone is the whole document. Raises ValueError saying what is wrong."""
    text = text.strip()
    if not text.startswith("$"):
        raise ValueError("a JSON path starts with $ (for example $.customer.id)")
    segments: list[str | int] = []
    i = 1
    while i < len(text):
        if len(segments) >= MAX_PATH_SEGMENTS:
            raise ValueError(f"a JSON path has at most {MAX_PATH_SEGMENTS} steps")
        key = _KEY.match(text, i)
        if key:
            segments.append(key[1])
            i = key.end()
            continue
        index = _INDEX.match(text, i)
        if index:
            segments.append(int(index[1]))
            i = index.end()
            continue
        if text.startswith('["', i):
            end = _quoted_end(text, i + 1)
            if end is None or not text.startswith("]", end):
                raise ValueError(f'unclosed ["…"] at position {i} of the JSON path')
            try:
                segments.append(str(json_read(text[i + 1 : end])))
            except ValueError:
                raise ValueError(f"bad quoted key at position {i} of the JSON path") from None
            i = end + 1
            continue
        raise ValueError(
            f'unexpected {text[i]!r} at position {i} of the JSON path: use .key, [0] or ["key"]'
        )
    return tuple(segments)


def _quoted_end(text: str, start: int) -> int | None:
    """The index just after the JSON string starting at ``text[start]`` (a ``"``)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return None


def search_query(*, field: str, op: str, value: str, path: str = "") -> SearchQuery:
    """A checked query. Raises ValueError (for a 400) on an unknown op, an empty or
    too-long field name or value, or a bad path."""
    if op not in OPS:
        raise ValueError(f"unknown match {op!r}: one of {', '.join(OPS)}")
    if not field:
        raise ValueError("say which field to search")
    if len(field) > MAX_TEXT or len(value) > MAX_TEXT:
        raise ValueError(f"field names and values searched for are at most {MAX_TEXT} characters")
    if op != "json":
        # What a decoded value must equal: the text read as JSON, else the text itself.
        try:
            read: Any = json_read(value)
        except ValueError:
            read = value
        return SearchQuery(field=field.encode(), op=op, value=value, expected=read)
    segments = path_parse(path or "$")
    try:
        expected: Any = json_read(value)
    except BoundedJSONError as exc:
        raise ValueError(f"the value to match is JSON {exc}") from None
    except ValueError:
        expected = value
    return SearchQuery(
        field=field.encode(),
        op=op,
        value=value,
        path=segments,
        path_text=path.strip() or "$",
        expected=expected,
    )


_MISSING = object()


def _walk(document: Any, path: Sequence[str | int]) -> Any:
    node = document
    for step in path:
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                return _MISSING
            node = node[step]
        else:
            if not isinstance(node, dict) or step not in node:
                return _MISSING
            node = node[step]
    return node


def _same(a: Any, b: Any) -> bool:
    """JSON equality: bools are not numbers, 1 equals 1.0, containers compared deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _decoded_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return ""


def search_matches(
    query: SearchQuery, fields: Sequence[tuple[bytes, bytes]], *, decode: Decode | None = None
) -> bool:
    """Whether an entry with ``fields`` matches (any field of that name, if repeated);
    ``decode``: see the module's docstring."""
    want = query.value.encode()
    for name, value in fields:
        if name != query.field:
            continue
        decoded = UNDECODED
        if decode is not None and len(value) <= JSON_MAX_BYTES:
            decoded = decode(value)
        if query.op == "equals":
            if value == want:
                return True
            if decoded is not UNDECODED and _same(decoded, query.expected):
                return True
        elif query.op == "contains":
            if want in value:
                return True
            if decoded is not UNDECODED and query.value in _decoded_text(decoded):
                return True
        else:
            if decoded is UNDECODED:
                try:
                    decoded = json_read(value, max_size=JSON_MAX_BYTES)
                except ValueError:
                    continue
            found = _walk(decoded, query.path)
            if found is not _MISSING and _same(found, query.expected):
                return True
    return False


@dataclass(frozen=True, slots=True)
class SearchSlice:
    """What one budgeted request found.

    ``cursor`` is the last id looked at (None when nothing was): pass it as ``after`` to
    continue. ``done`` when the range is exhausted; else ``stopped_by`` says which budget
    ran out ("entries", "time" or "matches"). ``total`` is about how many entries the
    whole search covers (XLEN, or the group's pending count), for progress.
    """

    matches: tuple[StreamEntry, ...]
    scanned: int
    cursor: str | None
    done: bool
    stopped_by: str
    total: int
    elapsed_ms: int


@dataclass
class _Budget:
    max_entries: int
    max_ms: int
    max_matches: int
    started: float

    def ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)


def _id_text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(item: Any) -> StreamEntry:
    entry_id, fields = item
    pairs = tuple((bytes(k), bytes(v)) for k, v in (fields or {}).items())
    entry_id = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
    return StreamEntry(id=entry_id, fields=pairs)


def _range_search(
    client: Client,
    key: str,
    query: SearchQuery,
    *,
    after: str | None,
    max_entries: int,
    max_ms: int,
    max_matches: int,
    chunk: int,
    decode: Decode | None,
) -> SearchSlice:
    if after is not None:
        entry_id_check(after, what="search cursor")
    budget = _Budget(max_entries, max_ms, max_matches, time.monotonic())
    try:
        total = int(client.xlen(key))
    except redis.ResponseError:
        total = 0
    matches: list[StreamEntry] = []
    scanned = 0
    cursor = after
    while True:
        count = max(1, min(chunk, max_entries - scanned))
        upper = "+" if cursor is None else "(" + cursor
        try:
            raw = client.xrevrange(key, max=upper, min="-", count=count) or []
        except redis.ResponseError:
            raw = []
        for item in raw:
            entry = _entry(item)
            scanned += 1
            cursor = entry.id
            if search_matches(query, entry.fields, decode=decode):
                matches.append(entry)
            stop = _stopped(budget, scanned, len(matches))
            if stop:
                return SearchSlice(tuple(matches), scanned, cursor, False, stop, total, budget.ms())
        if len(raw) < count:
            return SearchSlice(tuple(matches), scanned, cursor, True, "end", total, budget.ms())


def _stopped(budget: _Budget, scanned: int, matched: int) -> str:
    if matched >= budget.max_matches:
        return "matches"
    if scanned >= budget.max_entries:
        return "entries"
    if budget.ms() >= budget.max_ms:
        return "time"
    return ""


def stream_search(
    *,
    client: Client,
    stream: str,
    query: SearchQuery,
    after: str | None = None,
    max_entries: int = MAX_ENTRIES,
    max_ms: int = MAX_MS,
    max_matches: int = MAX_MATCHES,
    chunk: int = CHUNK,
    decode: Decode | None = None,
) -> SearchSlice:
    """The stream's entries matching ``query``, newest first, from just before ``after``
    (None: the newest). One XLEN, then one ``XREVRANGE key (after - COUNT chunk`` per
    chunk until a budget runs out. ``decode``: the searched field's decoders."""
    return _range_search(
        client,
        stream,
        query,
        after=after,
        max_entries=max_entries,
        max_ms=max_ms,
        max_matches=max_matches,
        chunk=chunk,
        decode=decode,
    )


def dead_letter_search(
    *,
    client: Client,
    stream: str,
    query: SearchQuery,
    after: str | None = None,
    max_entries: int = MAX_ENTRIES,
    max_ms: int = MAX_MS,
    max_matches: int = MAX_MATCHES,
    chunk: int = CHUNK,
    decode: Decode | None = None,
) -> SearchSlice:
    """As ``stream_search``, over ``stream``'s dead-letter stream; a dead letter's
    ``ackboard.*`` metadata fields can be searched too."""
    return _range_search(
        client,
        stream_keys(stream).dlq,
        query,
        after=after,
        max_entries=max_entries,
        max_ms=max_ms,
        max_matches=max_matches,
        chunk=chunk,
        decode=decode,
    )


def pending_search(
    *,
    client: Client,
    stream: str,
    group: str,
    query: SearchQuery,
    after: str | None = None,
    max_entries: int = MAX_ENTRIES,
    max_ms: int = MAX_MS,
    max_matches: int = MAX_MATCHES,
    chunk: int = CHUNK,
    decode: Decode | None = None,
) -> SearchSlice:
    """``group``'s pending entries whose payload matches, in id order from just after
    ``after``. Per chunk: one ``XPENDING key group (after + chunk``, then one pipelined
    round trip of ``XRANGE id id`` per row (an entry deleted from the stream has no
    payload and never matches). ``total`` is the group's pending count. Raises
    redis.ResponseError (NOGROUP) for an unknown group."""
    if after is not None:
        entry_id_check(after, what="search cursor")
    budget = _Budget(max_entries, max_ms, max_matches, time.monotonic())
    summary = client.xpending(stream, group)
    total = int(summary.get("pending", 0)) if isinstance(summary, dict) else 0
    matches: list[StreamEntry] = []
    scanned = 0
    cursor = after
    while True:
        count = max(1, min(chunk, max_entries - scanned))
        lower = "-" if cursor is None else "(" + cursor
        rows = client.xpending_range(stream, group, min=lower, max="+", count=count)
        ids = [_id_text(r["message_id"]) for r in rows]
        pipe = client.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(stream, min=entry_id, max=entry_id, count=1)
        found = pipe.execute() if ids else []
        for entry_id, got in zip(ids, found, strict=True):
            scanned += 1
            cursor = entry_id
            if got and search_matches(query, _entry(got[0]).fields, decode=decode):
                matches.append(_entry(got[0]))
            stop = _stopped(budget, scanned, len(matches))
            if stop:
                return SearchSlice(tuple(matches), scanned, cursor, False, stop, total, budget.ms())
        if len(ids) < count:
            return SearchSlice(tuple(matches), scanned, cursor, True, "end", total, budget.ms())
