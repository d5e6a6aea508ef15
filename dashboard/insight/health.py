"""The health verdict: one rule for a group's badge, shown the same on every page.

Owns ``group_verdict`` (a group's level, label and reasons, from its liveness in Redis,
``queue_core.health``, and its failures in the last hour, from the failure index) and
``stream_verdict`` (a stream's badge: its worst group's verdict, unchanged, so the
overview and that group's page say the same thing with the same reason). The overview,
the group page and their live pushes all call these through their ``*_context()``;
``verdict_html`` is the badge's markup on both pages. Nothing else decides what "ok",
"failing" or "stuck" means.

Pure: no I/O, no clock of its own (``now_ms`` is passed in). O(groups) per stream. The
reasons never hold a value that grows by itself between two reads (an age, a count of
seconds): a page whose verdict did not change renders the same (the pending table's
cached rendering and the live pushes' comparison rely on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from dashboard.display.durations import human_ms
from queue_core.health import GroupHealth, GroupState, StreamHealth

#: Failures in the last hour at or above this make a group "failing" (red), below amber.
#: Counts are read only up to it on the group page (``failures_count_capped``).
FAILING_PER_HOUR = 100
#: A group whose oldest pending entry was added longer ago than this asks for attention
#: (amber). It is not "stuck": it may just have been delivered from a backlog. "Stuck" and
#: "no live consumer" come from the consumers (``queue_core.health``).
OLD_PENDING_MS = 5 * 60 * 1000

OK, WARN, BAD, IDLE = "ok", "warn", "bad", "idle"
#: Levels, worst first: also the overview's "health" order.
LEVEL_RANK = {BAD: 0, WARN: 1, OK: 2, IDLE: 3}
#: Among red verdicts, which is worst: nobody moves anything when no consumer is live;
#: stuck entries may still be reclaimed; failing handlers still make progress elsewhere.
_LABEL_RANK = {
    GroupState.NO_LIVE_CONSUMER.value: 0,
    GroupState.STUCK.value: 1,
    "failing": 2,
    "attention": 3,
}


@dataclass(frozen=True, slots=True)
class Verdict:
    """A badge: ``level`` (ok, warn, bad, idle) colours it, ``label`` is its word and
    ``reasons`` say why, worst first. ``reason`` (the first) is shown beside the badge;
    all of them go in its title."""

    level: str
    label: str
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        return self.reasons[0] if self.reasons else ""

    @property
    def text(self) -> str:
        """``failing: 100+ failures in the last hour``; the label alone when no reason."""
        return f"{self.label}: {self.reason}" if self.reason else self.label

    def rank(self) -> tuple[int, int]:
        return LEVEL_RANK[self.level], _LABEL_RANK.get(self.label, len(_LABEL_RANK))


VERDICT_OK = Verdict(OK, "ok")


@dataclass(frozen=True, slots=True)
class StreamVerdict:
    """A stream's badge (``verdict``: its worst group's, as that group's page shows it;
    ``group`` names that group) and every group that is not ok, worst first."""

    verdict: Verdict
    group: str | None
    flagged: tuple[tuple[str, Verdict], ...]

    @property
    def level(self) -> str:
        return self.verdict.level

    @property
    def label(self) -> str:
        return self.verdict.label

    @property
    def reason(self) -> str:
        return self.verdict.reason

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every flagged group's reasons, each naming its group (the badge's title)."""
        if not self.flagged:
            return self.verdict.reasons
        return tuple(f"group {g}: {r}" for g, v in self.flagged for r in v.reasons)


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def liveness_reason(group: GroupHealth) -> str:
    """Why ``group``'s consumers make it stuck or leave it with no live consumer ("" when
    neither)."""
    window = human_ms(group.stuck_after_ms)
    parts = []
    if group.no_live_consumer:
        parts.append(f"no consumer seen in {window} while entries wait")
    if group.stuck:
        held = _plural(group.stuck_entries, "entry", "entries")
        who = _plural(len(group.dead_holders), "consumer", "consumers")
        parts.append(f"{held} held by {who} not seen in {window}")
    return "; ".join(parts)


def failures_text(count: int) -> str:
    """``100+ failures in the last hour`` at or past the mark (counts may be capped
    there), else the count."""
    if count >= FAILING_PER_HOUR:
        return f"{FAILING_PER_HOUR}+ failures in the last hour"
    return _plural(count, "failure", "failures") + " in the last hour"


def group_verdict(
    *,
    liveness: GroupHealth,
    failures_last_hour: int,
    oldest_pending_ms: int | None,
    consumers: int,
    lag: int | None,
    dlq_length: int,
    now_ms: int,
) -> Verdict:
    """The one rule for a group's health, worst reason first. O(1) after ``liveness``.

    Red (``bad``): its consumers (``no live consumer``, ``stuck``: ``queue_core.health``),
    then ``failing`` at ``FAILING_PER_HOUR`` failures in the last hour or more. Amber
    (``attention``): fewer failures, an oldest pending entry added more than
    ``OLD_PENDING_MS`` ago, work waiting on a group nobody has joined, and dead letters in
    the stream (``dlq_length``: the group page shows them, whichever group they came
    from). Otherwise ``ok``. ``failures_last_hour`` may be capped at the mark.
    """
    bad: list[tuple[str, str]] = []
    if liveness.state is not GroupState.OK:
        bad.append((liveness.state.value, liveness_reason(liveness)))
    if failures_last_hour >= FAILING_PER_HOUR:
        bad.append(("failing", failures_text(failures_last_hour)))
    warn: list[str] = []
    if 0 < failures_last_hour < FAILING_PER_HOUR:
        warn.append(failures_text(failures_last_hour))
    if oldest_pending_ms is not None and now_ms - oldest_pending_ms > OLD_PENDING_MS:
        warn.append(f"the oldest pending entry was added over {human_ms(OLD_PENDING_MS)} ago")
    if consumers == 0 and (liveness.pending or lag) and not liveness.no_live_consumer:
        warn.append("entries wait but no consumer has joined the group")
    if dlq_length:
        warn.append(f"{dlq_length} dead-lettered in this stream")
    if bad:
        return Verdict(BAD, bad[0][0], tuple(r for _, r in bad) + tuple(warn))
    if warn:
        return Verdict(WARN, "attention", tuple(warn))
    return VERDICT_OK


def stream_verdict(*, groups: Sequence[tuple[str, Verdict]], dlq_length: int) -> StreamVerdict:
    """A stream's badge: its worst group's verdict as is (ties go to the first group), so
    the overview shows what that group's page shows. A stream without groups is ``idle``
    ("no groups"), or amber when it has dead letters. O(groups)."""
    if not groups:
        if dlq_length:
            return StreamVerdict(
                Verdict(WARN, "attention", (f"{dlq_length} dead-lettered",)), None, ()
            )
        return StreamVerdict(Verdict(IDLE, "no groups", ("nobody consumes this stream",)), None, ())
    ranked = sorted(enumerate(groups), key=lambda ig: (ig[1][1].rank(), ig[0]))
    worst_group, worst = ranked[0][1]
    flagged = tuple(gv for _, gv in ranked if gv[1].level != OK)
    return StreamVerdict(worst, worst_group, flagged)


def summary_verdict(
    *,
    liveness: StreamHealth,
    summary_groups: Sequence[tuple[str, int, int | None, int | None]],
    failures: dict[str, int],
    dlq_length: int,
    now_ms: int,
) -> StreamVerdict:
    """``stream_verdict`` over an overview row's groups: ``summary_groups`` holds each
    group's (name, consumers, lag, oldest pending ms), in ``liveness.groups``' order;
    ``failures`` each group's failures in the last hour (absent: none)."""
    verdicts = [
        (
            name,
            group_verdict(
                liveness=health,
                failures_last_hour=failures.get(name, 0),
                oldest_pending_ms=oldest_ms,
                consumers=consumers,
                lag=lag,
                dlq_length=dlq_length,
                now_ms=now_ms,
            ),
        )
        for health, (name, consumers, lag, oldest_ms) in zip(
            liveness.groups, summary_groups, strict=True
        )
    ]
    return stream_verdict(groups=verdicts, dlq_length=dlq_length)


_BADGE = (
    '<span class="verdict" data-verdict="{level}">'
    '<span class="badge {level}" title="{title}">{label}</span>{reason}</span>'
)
_REASON = ' <span class="verdict-reason">{reason}</span>'


def verdict_html(verdict: Verdict | StreamVerdict, *, cut: int = 160) -> str:
    """The badge with its reason beside it, escaped: the same markup on the overview and
    the group page. The title holds every reason; the shown one is cut at ``cut``."""
    reason = verdict.reason
    if len(reason) > cut:
        reason = reason[: cut - 1] + "…"
    return _BADGE.format(
        level=escape(verdict.level),
        title=escape("; ".join(verdict.reasons)),
        label=escape(verdict.label),
        reason=_REASON.format(reason=escape(reason)) if reason else "",
    )
