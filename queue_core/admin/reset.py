"""Reset a group's position: ``position_preview`` (the dry run: what would be delivered
again or skipped) and ``position_reset`` (XGROUP SETID with ENTRIESREAD when it is
known, so lag stays right).

The reset is one run of ``position_reset.lua``, which re-checks in the same run that the
group has not moved since the preview and that no consumer is live, unless the group is
paused and every live consumer is an Ackboard worker the pause stops. Its result keeps
the position before (id and entries-read) for the audit row, so a reset can be undone by
resetting to it. ENTRIESREAD (Redis 7+) is set only when the count of entries up to the
position is known (``reads.entries_read_at``); on Redis 6.2 it is left out and the lag is
reported unknown (None). The preview reads only. Never imports Django, never decides
permissions or writes audit rows (the dashboard does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queue_core.admin.positions import Position
from queue_core.admin.reads import (
    COUNT_BUDGET,
    consumers_of,
    count_range,
    entries_read_at,
    group_of,
    heartbeats_of,
    stream_info,
)
from queue_core.admin.shared import (
    NEVER_LIVE,
    SEEN_WITHIN_MS,
    Refused,
    action_publish,
    id_lt,
    now_or_clock,
)
from queue_core.connection import Client
from queue_core.control import HEARTBEAT_STALE_MS
from queue_core.keys import stream_keys
from queue_core.scripts.binding import text
from queue_core.scripts.position_reset import POSITION_RESET, PositionRefusal, PositionSet
from queue_core.validation import count_check, entry_id_check, idle_check, name_check


@dataclass(frozen=True, slots=True)
class PositionDiff:
    """A position change, before and after (``*_entries_read`` None: not known, e.g. Redis
    6.2). ``redeliver``: entries that will be delivered again (moving back); ``skip``:
    entries never delivered (moving forward); exact up to the counting budget, else
    ``exact`` is False and the figure means "more than figure - 1". ``live_consumers``
    and ``paused`` are what the reset's guard looks at. After a reset ``lag`` is what
    XINFO GROUPS reports (None: unknown)."""

    before_id: str
    before_entries_read: int | None
    after_id: str
    after_entries_read: int | None
    redeliver: int
    skip: int
    exact: bool
    live_consumers: tuple[str, ...]
    paused: bool
    lag: int | None = None


def _live_consumers(
    client: Client, stream: str, group: str, now_ms: int, seen_within_ms: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every live consumer, those without a live heartbeat), sorted. A consumer whose
    heartbeat says its worker stopped is neither."""
    beating, stopped = heartbeats_of(client, stream, group, now_ms)
    others = {
        c.name
        for c in consumers_of(client, stream, group)
        if c.name not in beating
        and c.name not in stopped
        and c.idle_ms < seen_within_ms
        and c.name not in NEVER_LIVE
    }
    return tuple(sorted(beating | others)), tuple(sorted(others))


def position_preview(
    *,
    client: Client,
    stream: str,
    group: str,
    position: Position,
    now_ms: int | None = None,
    seen_within_ms: int = SEEN_WITHIN_MS,
    budget: int = COUNT_BUDGET,
) -> PositionDiff:
    """What ``position_reset`` to ``position`` would do, read only: the entries between
    the two positions (delivered again when moving back, skipped when moving forward),
    counted up to ``budget``; the entries-read after; the live consumers and the pause
    the reset's guard checks. At most ``budget`` entries walked, and for an id or a time
    up to twice that again (``entries_read_at``); XINFO GROUPS, STREAM and CONSUMERS,
    one HGETALL, one EXISTS."""
    diff, _ = _preview(client, stream, group, position, now_ms, seen_within_ms, budget)
    return diff


def _preview(
    client: Client,
    stream: str,
    group: str,
    position: Position,
    now_ms: int | None,
    seen_within_ms: int,
    budget: int,
) -> tuple[PositionDiff, str]:
    """The preview, and the max-deleted-entry-id its entries-read was counted with."""
    name_check(stream, "stream")
    name_check(group, "group")
    idle_check(seen_within_ms, "seen_within_ms")
    count_check(budget, "budget")
    if position.mode == "id":
        entry_id_check(position.id, what="position")
    now = now_or_clock(now_ms)
    g = group_of(client, stream, group)
    before = text(g["last-delivered-id"])
    before_read = None if g.get("entries-read") is None else int(g["entries-read"])
    after, after_read, seen_deleted = _after(client, stream, position, budget)
    redeliver = skip = 0
    exact = True
    if id_lt(after, before):
        counted = count_range(client, stream, "(" + after, before, budget)
        redeliver, exact = counted.n, counted.exact
    elif id_lt(before, after):
        counted = count_range(client, stream, "(" + before, after, budget)
        skip, exact = counted.n, counted.exact
    live, _ = _live_consumers(client, stream, group, now, seen_within_ms)
    paused = bool(client.exists(stream_keys(stream).pause(group)))
    diff = PositionDiff(
        before, before_read, after, after_read, redeliver, skip, exact, live, paused
    )
    return diff, seen_deleted


def _after(
    client: Client, stream: str, position: Position, budget: int
) -> tuple[str, int | None, str]:
    """(the id ``position`` stands for now, the entries-read there or None, the
    max-deleted-entry-id that count was made with, '' when none was counted)."""
    info = stream_info(client, stream) or {}
    if position.kind == "end":
        added = info.get("entries-added")
        after = text(info.get("last-generated-id") or b"0-0")
        return after, None if added is None else int(added), ""
    if position.kind == "start":
        return "0-0", _start_entries_read(info), ""
    after_read, seen_deleted = entries_read_at(client, stream, position.id, budget=budget)
    return position.id, after_read, seen_deleted


def _start_entries_read(info: Mapping[str, Any]) -> int | None:
    """Entries read at the start: entries-added minus the length, when every deleted entry
    lies before the first one left (what ``group_create.lua`` computes)."""
    added = info.get("entries-added")
    if added is None:
        return None
    length = int(info.get("length", 0))
    first = info.get("first-entry")
    deleted = text(info.get("max-deleted-entry-id") or b"0-0")
    if length == 0 or (first and id_lt(deleted, text(first[0]))):
        return int(added) - length
    return None


def position_reset(
    *,
    client: Client,
    stream: str,
    group: str,
    position: Position,
    expected_before_id: str,
    now_ms: int | None = None,
    seen_within_ms: int = SEEN_WITHIN_MS,
    budget: int = COUNT_BUDGET,
) -> PositionDiff:
    """XGROUP SETID to ``position`` with ENTRIESREAD (when known), so lag stays right.

    Refused (``Refused``, in the same script run as the SETID): the group's last-delivered
    id is no longer ``expected_before_id`` (moved since the preview); the group has live
    consumers (a live heartbeat, or a consumer without one whose idle is below
    ``seen_within_ms``) and is not paused; or it is paused but consumers that a pause does
    not stop (no live heartbeat, seen within ``seen_within_ms``) are live. The end and the
    start are resolved by the script itself; an id's entries-read is counted first and
    used only while no entry was deleted meanwhile. The result keeps the position before
    (id and entries-read) for the audit row, so the reset can be undone. Costs the
    preview (its counts come with the result) plus one script run (O(groups + consumers
    + workers)).
    """
    entry_id_check(expected_before_id, what="expected_before_id")
    now = now_or_clock(now_ms)
    preview, seen_deleted = _preview(client, stream, group, position, now, seen_within_ms, budget)
    keys = stream_keys(stream)
    reply = POSITION_RESET.call(
        stream=stream,
        pause_key=keys.pause(group),
        workers_key=keys.workers(group),
        group=group,
        expected_before_id=expected_before_id,
        mode=position.mode,
        entry_id=position.id,
        entries_read=preview.after_entries_read if position.mode == "id" else None,
        seen_max_deleted=seen_deleted,
        now_ms=now,
        stale_ms=HEARTBEAT_STALE_MS,
        seen_within_ms=seen_within_ms,
        never_live=NEVER_LIVE,
    ).run(client)
    if isinstance(reply, PositionRefusal):
        raise _reset_refused(reply, stream, group, expected_before_id)
    action_publish(client, action="reset-position", stream=stream, group=group)
    return _reset_diff(reply, preview)


def _reset_refused(
    reply: PositionRefusal, stream: str, group: str, expected_before_id: str
) -> Refused:
    """The operator's message for a refusal of ``position_reset.lua``."""
    names = ", ".join(reply.values)
    if reply.kind == "moved":
        return Refused(
            f"changed since you looked: {group!r} is at {names} now, not "
            f"{expected_before_id}; preview the reset again"
        )
    if reply.kind == "live":
        return Refused(
            f"{group!r} has live consumers ({names}): pause the group first, and "
            "stop consumers that are not Ackboard workers"
        )
    if reply.kind == "not-pausable":
        return Refused(
            f"{group!r} is paused, but consumers a pause does not stop are live "
            f"({names}): stop them first"
        )
    return Refused(f"there is no consumer group {group!r} on stream {stream!r}")


def _reset_diff(reply: PositionSet, preview: PositionDiff) -> PositionDiff:
    """The reset as the script did it; the preview's counts only when the group was still
    where the preview counted from."""
    counted = preview.before_id == reply.before_id
    return PositionDiff(
        reply.before_id,
        reply.before_entries_read,
        reply.after_id,
        reply.after_entries_read,
        preview.redeliver if counted else 0,
        preview.skip if counted else 0,
        preview.exact,
        preview.live_consumers,
        preview.paused,
        reply.lag,
    )
