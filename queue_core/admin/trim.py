"""Trim a stream: ``trim_preview`` (the dry run: how many entries are below a MINID, and
the floor no trim should pass) and ``stream_trim`` (XTRIM MINID, exactly).

The floor is the lowest id a group still needs: its oldest pending entry, or its first
entry not delivered yet. The trim is cut in runs of ``stream_trim.lua`` of at most
``TRIM_CHUNK`` entries, so Redis is blocked for one chunk at most, and each run re-checks
the floor; past it, ``Refused`` unless forced. The preview reads only. Never imports
Django, never decides permissions or writes audit rows (the dashboard does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from queue_core.admin.reads import COUNT_BUDGET, Count, count_range
from queue_core.admin.shared import MS_ONLY, U64, Refused, action_publish, id_lt
from queue_core.connection import Client
from queue_core.errors import action_refusal
from queue_core.scripts.binding import text
from queue_core.scripts.stream_trim import STREAM_TRIM, TrimRefusal
from queue_core.validation import entry_id_check, entry_id_key, name_check

#: Entries deleted per ``stream_trim`` script run.
TRIM_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class TrimPlan:
    """What ``stream_trim`` to ``minid`` would delete: ``would_delete`` entries (exact up
    to the budget, else ``exact`` False: "more than would_delete - 1"). ``floor_id`` is
    the lowest id a group still needs ('' when the stream has no group): the smallest,
    over the groups, of the oldest pending id and the id just after the last-delivered
    one; ``floor_group`` sets it, for ``floor_reason`` ('pending' or 'undelivered').
    ``past_floor``: an entry at or above the floor lies below ``minid``, so the trim
    would delete an entry a group holds pending or was never delivered."""

    minid: str
    would_delete: int
    exact: bool
    floor_id: str
    past_floor: bool
    floor_group: str = ""
    floor_reason: str = ""


def _minid_check(minid: str) -> str:
    """A full id, or ``<ms>`` meaning ``<ms>-0``, normalised (no leading zeros)."""
    value = minid.strip() if isinstance(minid, str) else minid
    if isinstance(value, str) and MS_ONLY.match(value):
        value += "-0"
    entry_id_check(value, what="MINID")
    ms, seq = entry_id_key(value)
    return f"{ms}-{seq}"


def _succ(entry_id: str) -> str:
    ms, seq = entry_id_key(entry_id)
    return f"{ms + 1}-0" if seq == U64 else f"{ms}-{seq + 1}"


def _floor(client: Client, stream: str) -> tuple[str, str, str]:
    """(floor id, group, reason), or ('', '', '') without groups. One XINFO GROUPS and one
    pipelined XPENDING summary per group with pending entries."""
    try:
        groups: list[Mapping[str, Any]] = client.xinfo_groups(stream)  # type: ignore[assignment]
    except redis.ResponseError as exc:
        if "no such key" in str(exc).lower():
            raise Refused(f"there is no stream {stream!r}") from exc
        raise action_refusal(exc, stream=stream) from exc
    with_pending = [text(g["name"]) for g in groups if int(g.get("pending", 0))]
    oldest: dict[str, str] = {}
    if with_pending:
        pipe = client.pipeline(transaction=False)
        for name in with_pending:
            pipe.xpending(stream, name)
        for name, summary in zip(with_pending, pipe.execute(), strict=True):
            if summary.get("min") is not None:
                oldest[name] = text(summary["min"])
    best: tuple[str, str, str] = ("", "", "")
    for g in groups:
        name = text(g["name"])
        candidate, reason = _succ(text(g["last-delivered-id"])), "undelivered"
        if name in oldest and id_lt(oldest[name], candidate):
            candidate, reason = oldest[name], "pending"
        if not best[0] or id_lt(candidate, best[0]):
            best = (candidate, name, reason)
    return best


def _has_entry(client: Client, stream: str, low: str, below: str) -> bool:
    """Whether an entry lies in [low, below): one XRANGE ... COUNT 1."""
    return bool(client.xrange(stream, min=low, max="(" + below, count=1))


def trim_preview(
    *, client: Client, stream: str, minid: str, budget: int = COUNT_BUDGET
) -> TrimPlan:
    """The dry run of ``stream_trim``: the floor and how many entries are below ``minid``
    (XTRIM MINID deletes the entries with smaller ids). Read only: XINFO GROUPS, one
    pipelined XPENDING summary per group with pending entries, a walk of at most
    ``budget`` entries."""
    name_check(stream, "stream")
    minid = _minid_check(minid)
    floor_id, floor_group, reason = _floor(client, stream)
    if minid == "0-0":
        would = Count(0, True, None)
    else:
        would = count_range(client, stream, "-", "(" + minid, budget)
    past = bool(floor_id) and id_lt(floor_id, minid) and _has_entry(client, stream, floor_id, minid)
    return TrimPlan(minid, would.n, would.exact, floor_id, past, floor_group, reason)


@dataclass(frozen=True, slots=True)
class Trimmed:
    """How many entries ``stream_trim`` deleted."""

    deleted: int


def stream_trim(
    *, client: Client, stream: str, minid: str, force: bool, chunk: int = TRIM_CHUNK
) -> Trimmed:
    """XTRIM MINID ``minid``, exactly, in script runs of at most ``chunk`` entries. Each
    run re-checks the floor (see ``TrimPlan``) and, unless ``force``, refuses a MINID
    past it (``Refused``; runs before a refusal have deleted only entries below the
    floor). O(chunk) in Redis per run; about deleted/chunk round trips."""
    name_check(stream, "stream")
    minid = _minid_check(minid)
    deleted = 0
    while True:
        reply = STREAM_TRIM.call(stream=stream, minid=minid, force=force, chunk=chunk).run(client)
        if isinstance(reply, TrimRefusal):
            raise _trim_refused(reply, stream, minid)
        deleted += reply.deleted
        if reply.done:
            break
    if deleted:
        action_publish(client, action="trim", stream=stream, group="")
    return Trimmed(deleted)


def _trim_refused(reply: TrimRefusal, stream: str, minid: str) -> Refused:
    """The operator's message for a refusal of ``stream_trim.lua``."""
    if reply.kind == "no-stream":
        return Refused(f"there is no stream {stream!r}")
    why = (
        "its oldest pending entry"
        if reply.floor_reason == "pending"
        else "its first entry not delivered yet"
    )
    return Refused(
        f"MINID {minid} is past the floor {reply.floor_id} (group "
        f"{reply.floor_group!r}: {why}); it would delete entries a group still "
        "needs. Force it with a typed confirmation to trim anyway"
    )
