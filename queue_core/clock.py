"""The one wall clock: what "now" is for everything judged against the time of day.

Owns reading wall time for the ages of entries, "idle since" and "seen ago", due times
(a pause's auto-resume, a redrive lease, a retention cutoff), heartbeats' staleness,
failure records' ``failed_at_ms`` and the pages' clocks. Everything in ``queue_core`` and
``dashboard`` that needs the time of day calls ``now_ms``, ``now_s`` or ``now_utc`` here,
so one switch (``use_source``) moves all of it: the tests freeze and advance it
(``tests/clock.py``); production never calls ``use_source``.

It never measures a duration or a deadline (those stay on ``time.monotonic`` and
``time.perf_counter``, which a wall-clock step must not move) and never stands in for
Redis's own time: XPENDING's idle times, XINFO's and TIME stay Redis's.

Costs one global read and one ``time.time_ns()`` per call; it never imports Django.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

#: Where the time comes from, in epoch milliseconds; None is the system's wall clock.
_source: Callable[[], int] | None = None


def now_ms() -> int:
    """Epoch milliseconds now (Redis stream ids' unit)."""
    source = _source
    return time.time_ns() // 1_000_000 if source is None else source()


def now_s() -> float:
    """Epoch seconds now, with the fraction."""
    source = _source
    return time.time() if source is None else source() / 1000


def now_utc() -> datetime:
    """Now as an aware UTC datetime: Django's ``timezone.now()`` with ``USE_TZ``, read
    from this clock."""
    source = _source
    if source is None:
        return datetime.now(UTC)
    return datetime.fromtimestamp(source() / 1000, UTC)


def use_source(source: Callable[[], int] | None) -> Callable[[], int] | None:
    """Read the time from ``source`` (epoch ms) from now on, or from the system's clock
    with None; returns the source it replaces, so a caller can put it back. For tests:
    it changes the time every thread in this process reads."""
    global _source
    previous, _source = _source, source
    return previous
