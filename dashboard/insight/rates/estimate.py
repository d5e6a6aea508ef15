"""The drain estimate: is a group catching up, in words, from its rate samples.

Owns the rules that turn (at, entries_added, entries_read, lag) samples into a kind
(``KINDS``) and a sentence ("lag 12,400 · +38/s net · drains in ~5 min"). Pure: it never
reads the database or Redis; ``dashboard.insight.rates.series`` reads the samples and
calls ``estimate_from``. O(samples) per estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Fewest samples an estimate is made from.
MIN_SAMPLES = 3
#: Net rates within this many entries/s (or this fraction of the produce rate) are "level".
NET_TOLERANCE = 0.2
NET_TOLERANCE_FRACTION = 0.05

KINDS = ("drains", "growing", "stalled", "steady", "idle", "unknown")


@dataclass(frozen=True, slots=True)
class Estimate:
    kind: str  # one of KINDS
    text: str  # "" when kind is "unknown"
    net_per_s: float | None  # consume - produce over the window (positive: draining)
    window_s: int
    lag: int | None = None
    produce_per_s: float | None = None
    consume_per_s: float | None = None
    eta_s: float | None = None  # "drains in" seconds, when draining
    reason: str = ""  # why there is no estimate ("too little data", "rates need Redis 7+")


def _count(n: int) -> str:
    return f"{n:,}"


def _per_s(rate: float) -> str:
    rate = abs(rate)
    if rate >= 10:
        return f"{rate:,.0f}/s"
    return f"{rate:.1f}/s".replace(".0/s", "/s")


def duration(seconds: float) -> str:
    """A rough duration: "45 s", "5 min", "3 h", "2 d"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)} h"
    return f"{round(seconds / 86_400)} d"


def _unknown(window_s: int, reason: str, lag: int | None = None) -> Estimate:
    return Estimate("unknown", "", None, window_s, lag=lag, reason=reason)


def estimate_from(
    rows: Sequence[tuple[float, int | None, int | None, int | None]],
    *,
    window_s: int,
    now: float,
    interval_s: float,
) -> Estimate:
    """The estimate from (at, entries_added, entries_read, lag) samples, oldest first.

    Rules, in order: too little data (fewer than MIN_SAMPLES samples, spanning less than
    half the window, or the newest older than three intervals) -> unknown; no counters
    (Redis < 7) -> unknown; the lag rose and production outran consumption by more than
    the tolerance -> growing; nothing read while entries wait -> stalled; nothing waits
    and nothing moved -> idle; consumption outruns production with entries waiting ->
    drains (with the time to drain); nothing waits (or only a tick's worth) -> drains
    ("keeping up"); otherwise the lag holds -> steady.
    """
    rows = [r for r in rows if now - window_s <= r[0] <= now]
    if len(rows) < MIN_SAMPLES or rows[-1][0] - rows[0][0] < window_s / 2:
        return _unknown(window_s, "too little data")
    if now - rows[-1][0] > 3 * interval_s + 1:
        return _unknown(window_s, "no recent samples (is the sampler running?)")
    first, last = rows[0], rows[-1]
    if None in (first[1], first[2], last[1], last[2], last[3]):
        return _unknown(window_s, "rates need Redis 7+")
    span = last[0] - first[0]
    lag = int(last[3])  # type: ignore[arg-type]
    produce = (last[1] - first[1]) / span  # type: ignore[operator]
    consume = (last[2] - first[2]) / span  # type: ignore[operator]
    if produce < 0 or consume < 0:
        return _unknown(window_s, "a counter was reset in the window", lag)
    net = consume - produce
    tolerance = max(NET_TOLERANCE, NET_TOLERANCE_FRACTION * produce)
    base = Estimate("unknown", "", net, window_s, lag, produce, consume)
    lag_rose = first[3] is not None and lag > first[3]
    if lag_rose and -net > tolerance:
        text = f"lag {_count(lag)} · growing by {_per_s(net)}"
        return _with(base, "growing", text)
    if consume == 0 and lag > 0:
        moved = [r[0] for r in rows if r[2] != last[2]]
        since = rows[0][0] if not moved else next(r[0] for r in rows if r[0] > moved[-1])
        return _with(base, "stalled", f"stalled: nothing read for {duration(now - since)}")
    if lag == 0 and produce == 0 and consume == 0:
        return _with(base, "idle", "idle: nothing produced, nothing waiting")
    if lag <= max(1.0, produce * interval_s):
        return _with(base, "drains", f"lag {_count(lag)} · keeping up at {_per_s(consume)}")
    if net > tolerance:
        eta = lag / net
        text = f"lag {_count(lag)} · +{_per_s(net)} net · drains in ~{duration(eta)}"
        return Estimate("drains", text, net, window_s, lag, produce, consume, eta)
    return _with(base, "steady", f"lag {_count(lag)} · holding (consuming {_per_s(consume)})")


def _with(base: Estimate, kind: str, text: str) -> Estimate:
    return Estimate(
        kind, text, base.net_per_s, base.window_s, base.lag, base.produce_per_s, base.consume_per_s
    )
