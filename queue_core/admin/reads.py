"""The read-only Redis helpers group administration shares: a group's consumers and its
workers' heartbeats, XINFO GROUPS and STREAM, and bounded counting of entries, up to
``entries_read_at``, the count ENTRIESREAD wants.

Counting walks ``XRANGE`` in pages of ``PAGE`` ids up to a budget (``COUNT_BUDGET``):
exact below it, "more than N" (``Count.exact`` False) beyond it, never an estimate passed
off as a count. Heartbeats are judged as the scripts judge them (see ``heartbeats_of``).
Imports only ``shared`` from this package; never writes to Redis, never imports Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from queue_core.admin.shared import Refused, id_lt
from queue_core.bounded_json import json_read
from queue_core.connection import Client
from queue_core.control import HEARTBEAT_STALE_MS
from queue_core.errors import action_refusal, invalid_id, not_a_group
from queue_core.keys import stream_keys
from queue_core.scripts.binding import text
from queue_core.types import ConsumerInfo

#: Entries counted at most by a preview (per direction, for ``entries_read_at``).
COUNT_BUDGET = 10_000
#: Ids fetched per XRANGE page while counting.
PAGE = 1000


def consumers_of(client: Client, stream: str, group: str) -> list[ConsumerInfo]:
    """The group's consumers: one XINFO CONSUMERS, O(consumers)."""
    try:
        raw: list[Mapping[str, Any]] = client.xinfo_consumers(stream, group)  # type: ignore[assignment]
    except redis.ResponseError as exc:
        raise action_refusal(exc, stream=stream, group=group) from exc
    return [
        ConsumerInfo(
            name=text(c.get("name")),
            pending=int(c.get("pending", 0)),
            idle_ms=int(c.get("idle", 0)),
            inactive_ms=None if c.get("inactive") is None else int(c["inactive"]),
        )
        for c in raw
    ]


def heartbeats_of(
    client: Client, stream: str, group: str, now_ms: int
) -> tuple[set[str], set[str]]:
    """(consumers whose heartbeat is live, consumers whose heartbeat says their worker
    stopped), as the scripts judge them: live while ``now_ms - seen_ms <=
    HEARTBEAT_STALE_MS`` and without ``stopped_ms``. One HGETALL."""
    raw: Mapping[bytes, bytes] = client.hgetall(stream_keys(stream).workers(group))  # type: ignore[assignment]
    live: set[str] = set()
    stopped: set[str] = set()
    for name, value in raw.items():
        try:
            beat = json_read(value)
            seen = int(beat["seen_ms"])
        except (ValueError, KeyError, TypeError, OverflowError):  # OverflowError: Infinity
            continue
        mark = beat.get("stopped_ms")
        if isinstance(mark, int | float) and not isinstance(mark, bool):
            stopped.add(text(name))
        elif now_ms - seen <= HEARTBEAT_STALE_MS:
            live.add(text(name))
    return live, stopped


def group_of(client: Client, stream: str, group: str) -> Mapping[str, Any]:
    """The group's XINFO GROUPS row; ``Refused`` when there is no such group."""
    try:
        groups: list[Mapping[str, Any]] = client.xinfo_groups(stream)  # type: ignore[assignment]
    except redis.ResponseError as exc:
        if not_a_group(exc) or "no such key" in str(exc).lower():
            raise Refused(f"there is no consumer group {group!r} on stream {stream!r}") from exc
        raise
    for g in groups:
        if text(g.get("name")) == group:
            return g
    raise Refused(f"there is no consumer group {group!r} on stream {stream!r}")


def stream_info(client: Client, stream: str) -> Mapping[str, Any] | None:
    """XINFO STREAM, or None when the key does not exist."""
    try:
        info: Mapping[str, Any] = client.xinfo_stream(stream)
    except redis.ResponseError as exc:
        if "no such key" in str(exc).lower():
            return None
        raise action_refusal(exc, stream=stream) from exc
    return info


@dataclass(frozen=True, slots=True)
class Count:
    """A bounded count (``exact`` False: more than ``n - 1``) and the first id counted."""

    n: int
    exact: bool
    first_id: str | None


def count_range(client: Client, stream: str, start: str, end: str, budget: int) -> Count:
    """Entries with ids in [start, end] (``(`` excludes), counted up to ``budget``: exact
    when ``n <= budget``, else ``n == budget + 1`` and ``exact`` is False. O(n) in Redis;
    the payloads come along (XRANGE has no ids-only form)."""
    n, first = 0, None
    cursor = start
    while True:
        count = min(PAGE, budget + 1 - n)
        try:
            page: list[Any] = client.xrange(stream, min=cursor, max=end, count=count)  # type: ignore[assignment]
        except redis.ResponseError as exc:
            # An exclusive bound past the largest id (or before 0-0): an empty range.
            if invalid_id(exc):
                return Count(n, True, first)
            raise
        if page and first is None:
            first = text(page[0][0])
        n += len(page)
        if n > budget:
            return Count(budget + 1, False, first)
        if len(page) < count:
            return Count(n, True, first)
        cursor = "(" + text(page[-1][0])


def entries_read_at(
    client: Client, stream: str, entry_id: str, *, budget: int | None = None
) -> tuple[int | None, str]:
    """The count of the stream's entries up to ``entry_id``, as ENTRIESREAD wants it, and
    the max-deleted-entry-id it was counted with (the scripts use the count only while
    that is unchanged). None when it cannot be known honestly: Redis 6.2 (no
    entries-added), more than ``budget`` entries on both sides of the id, an entry
    deleted after the id while entries remain after it, or the stream changed while
    counting.

    entries-added minus the entries left after the id; the entries after it are counted
    from the id forward, or, when there are more than ``budget``, as the stream's length
    minus those counted from the head up to the id. Up to two bounded walks plus two
    XINFO STREAM. ``budget`` defaults to ``COUNT_BUDGET``.
    """
    budget = COUNT_BUDGET if budget is None else budget
    info = stream_info(client, stream)
    if info is None or info.get("entries-added") is None:
        return None, ""
    added = int(info["entries-added"])
    last = text(info["last-generated-id"])
    deleted = text(info.get("max-deleted-entry-id") or b"0-0")
    if not id_lt(entry_id, last):
        return added, deleted
    after = count_range(client, stream, "(" + entry_id, last, budget)
    first_after = after.first_id
    if after.exact:
        n_after = after.n
    else:
        head = count_range(client, stream, "-", entry_id, budget)
        if not head.exact:
            return None, deleted
        n_after = int(info["length"]) - head.n
    again = stream_info(client, stream)
    if again is None or text(again.get("max-deleted-entry-id") or b"0-0") != deleted:
        return None, deleted
    # Deleted entries after the id count as read only when they all lie before the
    # first entry left after it (a trimmed head); a hole in the middle is unknowable.
    if first_after is not None and not id_lt(deleted, first_after) and id_lt(entry_id, deleted):
        return None, deleted
    return added - n_after, deleted
