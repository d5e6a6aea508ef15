"""The alert rules, judged by Ackboard itself: the Prometheus rules' twins, one each.

Owns ``RULES`` (each rule's name, threshold, ``for`` duration, window and wording: the
alert names, thresholds and durations of ``deploy/prometheus/ackboard-alerts.yml``, which
tests/dashboard/test_alerts.py holds equal) and ``conditions``, which says which series
meet each rule's condition now. The figures are /metrics' own gauges
(``dashboard.views.ops.gauge_families``: the code Prometheus scrapes) and, for the rules
over a window (rate, deriv, delta), the rates sampler's tier-0 history
(``dashboard.insight.rates``), the newest point being the gauge itself.

Pure: no I/O, no clock (``now_s`` is passed in). How long a condition has held, and
what was sent, is the sender's (``dashboard.alerts.sender``). O(series + samples).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

#: A series: (stream, group); a stream's own is (stream, ""), the deployment's ("", "").
Series = tuple[str, str]
#: A gauge family's samples by series.
Gauge = Mapping[Series, float]


@dataclass(frozen=True, slots=True)
class Sample:
    """One sampler tick of one series (``RateSample`` tier 0), the fields the rules read."""

    at: float
    lag: float | None = None
    entries_read: float | None = None
    dead_letters: float | None = None


@dataclass(frozen=True, slots=True)
class Readings:
    """What the rules judge: gauge families by name, and each series' recent samples in
    time order (at most ``WINDOW_S`` old)."""

    gauges: Mapping[str, Gauge]
    history: Mapping[Series, Sequence[Sample]] = field(default_factory=dict)

    def gauge(self, name: str) -> Gauge:
        return self.gauges.get(name, {})

    def window(self, series: Series, since: float) -> list[Sample]:
        return [s for s in self.history.get(series, ()) if s.at >= since]


#: A rule's condition: the value of every series that meets it now.
Condition = Callable[["AlertRule", Readings, float], dict[Series, float]]


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One alert rule. ``name`` is the Prometheus alert's; ``threshold`` and ``for_s``
    are its expression's bound and its ``for:``; ``window_s`` its range (0: none)."""

    name: str
    severity: str
    threshold: float
    for_s: int
    window_s: int
    summary: str  # formatted with stream, group, value, threshold
    condition: Condition


def _stalled(rule: AlertRule, readings: Readings, now_s: float) -> dict[Series, float]:
    """lag > 0 and rate(entries_read[window]) == 0: entries wait, the group reads none."""
    found = {}
    for series, lag in readings.gauge("ackboard_group_lag").items():
        read = [s.entries_read for s in readings.window(series, now_s - rule.window_s)]
        counts = [r for r in read if r is not None]
        if lag > rule.threshold and len(counts) >= 2 and max(counts) == min(counts):
            found[series] = lag
    return found


def _slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope per second (PromQL's ``deriv``); 0 with fewer than two times."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread


def _lag_growing(rule: AlertRule, readings: Readings, now_s: float) -> dict[Series, float]:
    """deriv(lag[window]) > 0 and lag > threshold, the gauge being the newest point."""
    found = {}
    for series, lag in readings.gauge("ackboard_group_lag").items():
        if lag <= rule.threshold:
            continue
        points = [
            (s.at, s.lag)
            for s in readings.window(series, now_s - rule.window_s)
            if s.lag is not None and s.at < now_s
        ]
        if points and _slope([*points, (now_s, lag)]) > 0:
            found[series] = lag
    return found


def _above(gauge: str) -> Condition:
    def condition(rule: AlertRule, readings: Readings, now_s: float) -> dict[Series, float]:
        return {k: v for k, v in readings.gauge(gauge).items() if v > rule.threshold}

    condition.__doc__ = f"{gauge} > threshold"
    return condition


def _equals(gauge: str) -> Condition:
    def condition(rule: AlertRule, readings: Readings, now_s: float) -> dict[Series, float]:
        return {k: v for k, v in readings.gauge(gauge).items() if v == rule.threshold}

    condition.__doc__ = f"{gauge} == threshold"
    return condition


def _dead_letters_growing(rule: AlertRule, readings: Readings, now_s: float) -> dict[Series, float]:
    """delta(dead-letter length[window]) > 0: the stream's samples, then the gauge."""
    found = {}
    for (stream, _), length in readings.gauge("ackboard_stream_dead_letter_length").items():
        past = [
            s.dead_letters
            for s in readings.window((stream, ""), now_s - rule.window_s)
            if s.dead_letters is not None and s.at < now_s
        ]
        if past and length - past[0] > rule.threshold:
            found[(stream, "")] = length - past[0]
    return found


RULES: tuple[AlertRule, ...] = (
    AlertRule(
        "AckboardGroupStalled", "critical", 0, 300, 300,
        "{stream}/{group} is stalled: {value:g} entries wait and the group has read "
        "nothing for 5 minutes",
        _stalled,
    ),
    AlertRule(
        "AckboardLagGrowing", "warning", 100, 600, 300,
        "{stream}/{group} is falling behind: the lag has grown for 10 minutes (now {value:g})",
        _lag_growing,
    ),
    AlertRule(
        "AckboardOldestUndeliveredTooOld", "warning", 300, 300, 0,
        "{stream}/{group}: the oldest entry not yet delivered has waited {value:.0f} s "
        "(threshold {threshold:g} s)",
        _above("ackboard_group_oldest_undelivered_age_seconds"),
    ),
    AlertRule(
        "AckboardDeadLettersGrowing", "warning", 0, 900, 900,
        "{stream}: dead letters are piling up ({value:g} more in the last 15 minutes)",
        _dead_letters_growing,
    ),
    AlertRule(
        "AckboardNoLiveConsumer", "critical", 1, 120, 0,
        "{stream}/{group} has no live consumer: entries wait and no consumer was seen "
        "within ACKBOARD_STUCK_AFTER_MS",
        _equals("ackboard_group_no_live_consumer"),
    ),
    AlertRule(
        "AckboardRatesSamplerStopped", "warning", 120, 300, 0,
        "Ackboard's rates sampler has not sampled for {value:.0f} s: the rate rules and "
        "the charts are frozen",
        _above("ackboard_rates_sample_age_seconds"),
    ),
)  # fmt: skip
#: The longest window any rule reads (how much history the sender loads).
WINDOW_S = max(rule.window_s for rule in RULES)


@dataclass(frozen=True, slots=True)
class Breach:
    """One series meeting one rule's condition now (``for_s`` not yet judged)."""

    rule: AlertRule
    stream: str
    group: str
    value: float

    @property
    def summary(self) -> str:
        return self.rule.summary.format(
            stream=self.stream, group=self.group, value=self.value, threshold=self.rule.threshold
        )


def conditions(readings: Readings, now_s: float) -> list[Breach]:
    """Every (rule, series) whose condition holds now, in ``RULES`` order."""
    return [
        Breach(rule, stream, group, value)
        for rule in RULES
        for (stream, group), value in sorted(rule.condition(rule, readings, now_s).items())
    ]
