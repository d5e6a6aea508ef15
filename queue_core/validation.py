"""Checks of what a caller asks for: stream ids, names, idle times, counts, reasons.

Every service, selector, bulk request, page and socket checks its input here, before
Redis is asked, so a malformed id is a ValueError with a readable message and never a
Redis error reply. Each check returns the value it accepted (reasons come back trimmed).
Pure Python: no round trip, no Redis import, no Django.
"""

from __future__ import annotations

import re

#: Idle times are capped (ten years) so Lua formats them as plain integers and XCLAIM
#: never computes a delivery time before the epoch (which Redis silently turns into "now").
MAX_IDLE_MS = 10 * 365 * 24 * 3600 * 1000
#: Longest reason kept; reasons are audit text, not payloads.
MAX_REASON_LENGTH = 2000

_ID = re.compile(r"\A(\d{1,20})-(\d{1,20})\Z")
#: Each part of a stream id is an unsigned 64-bit number.
ID_PART_MAX = 2**64 - 1


def entry_id_check(entry_id: str, *, what: str = "entry id") -> str:
    """Return ``entry_id`` if it is a full stream id (``<ms>-<seq>``), else raise ValueError.

    Both parts must fit in 64 bits, as Redis requires.
    """
    match = _ID.match(entry_id) if isinstance(entry_id, str) else None
    if match is None or int(match[1]) > ID_PART_MAX or int(match[2]) > ID_PART_MAX:
        shown = entry_id if isinstance(entry_id, str) and len(entry_id) <= 60 else "that value"
        raise ValueError(f"{what} {shown!r} is not a stream id like 1700000000000-0")
    return entry_id


def entry_id_key(entry_id: str) -> tuple[int, int]:
    """The sort key of a valid stream id: ids compare by (ms, seq), not as text."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def entry_id_ms(entry_id: str) -> int:
    """The millisecond part of a valid stream id: when it was added, by Redis's clock."""
    return int(entry_id.partition("-")[0])


def entry_id_after(entry_id: str) -> str:
    """The smallest stream id greater than ``entry_id`` (a cursor that excludes it)."""
    ms, seq = entry_id_key(entry_id)
    return f"{ms + 1}-0" if seq == ID_PART_MAX else f"{ms}-{seq + 1}"


def name_check(value: str, what: str) -> str:
    """A stream, group or consumer name: any non-empty string (Redis allows any bytes)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    return value


def idle_check(value: int, what: str) -> int:
    """An idle time in ms: a whole number from 0 to ``MAX_IDLE_MS``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_IDLE_MS:
        raise ValueError(f"{what} must be a whole number of ms between 0 and {MAX_IDLE_MS}")
    return value


def count_check(value: int, what: str) -> int:
    """A whole number (``bool`` is not one); the caller decides the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be a whole number")
    return value


def reason_check(reason: str, *, required: bool) -> str:
    """A reason for the audit trail, trimmed and cut to ``MAX_REASON_LENGTH`` characters."""
    if not isinstance(reason, str):
        raise ValueError("reason must be text")
    reason = reason.strip()
    if required and not reason:
        raise ValueError("a reason is required")
    return reason[:MAX_REASON_LENGTH]
