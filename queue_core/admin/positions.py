"""What a group's position is (``Position``) and how an operator writes one
(``position_parse``): start, end, a stream id, a time, or a time before now.

Pure: reads nothing from Redis (an end is resolved by the scripts, atomically) and never
imports Django. Imports only ``shared`` from this package. A malformed position raises
ValueError before Redis is asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from queue_core.admin.shared import MS_ONLY, U64, now_or_clock
from queue_core.validation import entry_id_check, entry_id_key

_ID = re.compile(r"\A\d+-\d+\Z")
_RELATIVE = re.compile(r"\A-\s*(\d{1,9})\s*(s|m|h|d)\Z")
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class Position:
    """Where a group's last-delivered id goes.

    ``kind`` start: ``id`` "0-0" (everything is delivered); end: ``id`` "$", resolved to
    the stream's last id when used; id: the id itself; time: ``id`` is the last possible
    id before that millisecond, so entries added at or after ``time_ms`` are delivered.
    """

    kind: Literal["start", "end", "id", "time"]
    id: str
    time_ms: int | None = None

    @property
    def mode(self) -> str:
        """What the scripts are told: start and end are resolved by them, atomically."""
        return self.kind if self.kind in ("start", "end") else "id"


def _before_ms(ms: int) -> str:
    """The largest id below ``<ms>-0``."""
    return "0-0" if ms <= 0 else f"{ms - 1}-{U64}"


def position_parse(text: str, *, now_ms: int | None = None) -> Position:
    """``start`` | ``end`` | an id (``<ms>-<seq>``, or ``<ms>`` meaning ``<ms>-0`` as
    Redis reads it) | an ISO-8601 time with a zone (``2026-12-01T10:00:00Z``) | ``now`` |
    a time before now (``-15m``, ``-2h``, ``-30s``, ``-1d``). ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("a position must be text")
    value = text.strip()
    lowered = value.lower()
    if lowered in ("start", "beginning"):
        return Position("start", "0-0")
    if lowered in ("end", "$"):
        return Position("end", "$")
    if MS_ONLY.match(value):
        value += "-0"
    if _ID.match(value):
        entry_id_check(value, what="position")
        ms, seq = entry_id_key(value)
        # 0-0 is the start, however it is spelled ("0", "00-0").
        return Position("id", f"{ms}-{seq}") if (ms, seq) != (0, 0) else Position("start", "0-0")
    relative = _RELATIVE.match(lowered)
    if lowered == "now" or relative:
        ms = now_or_clock(now_ms)
        if relative:
            ms -= int(relative[1]) * _UNITS[relative[2]]
        return Position("time", _before_ms(max(ms, 0)), time_ms=max(ms, 0))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        shown = value if len(value) <= 60 else value[:57] + "..."
        raise ValueError(
            f"position {shown!r} is not start, end, a stream id like 1700000000000-0, "
            "a time like 2026-12-01T10:00:00Z, or a time before now like -15m"
        ) from None
    if moment.tzinfo is None:
        raise ValueError(f"time {value!r} has no time zone: add Z (UTC) or an offset like +01:00")
    ms = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    if ms < 0:
        raise ValueError(f"time {value!r} is before 1970, where no stream id lies")
    return Position("time", _before_ms(ms), time_ms=ms)
