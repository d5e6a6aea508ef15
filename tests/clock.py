"""The suite's fixed time: freeze ``queue_core.clock`` at one instant and move it by hand.

A test that judges an age, a staleness, a due time or a page's clock against "now" pins
"now" here instead of reading the wall clock, so it gives the same answer at any second of
any date and under any load. The ``clock`` fixture (tests/conftest.py) freezes it at
``FIXED_MS`` for one test; ``frozen_clock`` does the same as a context manager.

It moves only what ``queue_core.clock`` answers in this process: Redis's own time (entry
ids that Redis assigns, XPENDING's idle, TIME, a key's PXAT expiry), Django's own
(sessions, django-axes) and worker subprocesses keep the real clock, so a frozen test
writes its entry ids itself (``entry_id_at``) and sets no PXAT from the frozen time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from queue_core import clock as queue_clock

#: 2026-03-14 15:09:26.535 UTC: mid-month, mid-afternoon, with a non-zero second and
#: millisecond, so a test that drops or rounds either shows it.
FIXED_MS = 1_773_500_966_535


class FrozenClock:
    """A clock that reads ``ms`` until a test moves it. Callable, as ``queue_core.clock``'s
    source is."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    @property
    def s(self) -> float:
        """Epoch seconds now, as ``queue_core.clock.now_s`` answers."""
        return self.ms / 1000

    @property
    def utc(self) -> datetime:
        """Now as an aware UTC datetime, as ``queue_core.clock.now_utc`` answers."""
        return datetime.fromtimestamp(self.ms / 1000, UTC)

    def advance(self, ms: int = 0, *, s: float = 0.0) -> int:
        """Move time forward by ``ms`` milliseconds plus ``s`` seconds; the new now."""
        if ms < 0 or s < 0:
            raise ValueError("a clock only moves forward")
        self.ms += ms + round(s * 1000)
        return self.ms

    def entry_id_at(self, ago_ms: int = 0, seq: int = 0) -> str:
        """A stream id for an entry added ``ago_ms`` before now (for XADD ``id=``)."""
        return f"{self.ms - ago_ms}-{seq}"


@contextmanager
def frozen_clock(at_ms: int = FIXED_MS) -> Iterator[FrozenClock]:
    """``queue_core.clock`` reads a FrozenClock at ``at_ms`` inside the block, and what
    it read before afterwards."""
    frozen = FrozenClock(at_ms)
    previous = queue_clock.use_source(frozen)
    try:
        yield frozen
    finally:
        queue_clock.use_source(previous)
