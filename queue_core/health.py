"""Group health from Redis alone: "stuck" and "no live consumer", whoever wrote the workers.

Owns the rule that turns what the selectors read (``XINFO CONSUMERS``, ``XINFO GROUPS``,
the ``XPENDING`` summary and the first undelivered entry's id) into a group's state, and
its roll-up to the stream. Pure functions over selector data: no I/O, no clock of their
own (``now_ms`` is passed in), O(consumers) per group; it never reads Redis, never imports
Django and never looks at ``{S}:failures`` (only Ackboard's worker writes that).

With ``T = stuck_after_ms`` (``ACKBOARD_STUCK_AFTER_MS`` in the dashboard):

- a consumer is **seen** when its ``idle`` is below T;
- a group is **stuck** when consumers not seen within T hold pending entries. Every
  delivery or claim to a consumer refreshes its ``idle``, so its pending entries have been
  held at least that long: no per-entry read (``XPENDING`` extended form) is needed;
- a group has **no live consumer** when work waits (entries pending, or an undelivered
  entry added at least T ago) and no consumer was seen within T, or it has none at all.

What ``idle`` means depends on the server. Redis 7.2+ and Valkey report ``idle`` as the
time since the consumer's last *attempted* read or claim (an empty ``XREADGROUP`` counts)
and add ``inactive``, the time since its last *successful* one. Redis 7.0 and 6.2 report
only ``idle``, as the time since it last *received* entries, and create a consumer only
when it first receives some. So on those servers a live worker waiting on a quiet stream
looks idle; the rule only flags a group when work waits, so a quiet, healthy group stays
"ok" there too, but T must exceed the slowest handler. On every server an operator's
Claim or Retry (``XCLAIM``) refreshes the target consumer's ``idle``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from queue_core.types import ConsumerInfo, GroupDetail, StreamSummary
from queue_core.validation import entry_id_ms


class GroupState(StrEnum):
    """A group's health, worst first in ``_SEVERITY``. The values are shown as is."""

    OK = "ok"
    STUCK = "stuck"
    NO_LIVE_CONSUMER = "no live consumer"


#: Worst last: nobody will move anything when no consumer is live; stuck entries may
#: still be reclaimed by a live worker.
_SEVERITY = (GroupState.OK, GroupState.STUCK, GroupState.NO_LIVE_CONSUMER)


@dataclass(frozen=True, slots=True)
class ConsumerHealth:
    """One consumer and whether it was seen within the threshold (``idle < T``)."""

    info: ConsumerInfo
    seen: bool

    @property
    def holds_stuck(self) -> bool:
        """Not seen within the threshold, yet holding pending entries."""
        return not self.seen and self.info.pending > 0


@dataclass(frozen=True, slots=True)
class GroupHealth:
    """One group's state, with the consumers it was judged from."""

    stream: str
    group: str
    state: GroupState
    stuck: bool
    no_live_consumer: bool
    pending: int
    consumers: tuple[ConsumerHealth, ...]
    stuck_after_ms: int

    @property
    def live_consumers(self) -> int:
        return sum(1 for c in self.consumers if c.seen)

    @property
    def dead_holders(self) -> tuple[ConsumerHealth, ...]:
        """The consumers not seen within the threshold that hold pending entries."""
        return tuple(c for c in self.consumers if c.holds_stuck)

    @property
    def stuck_entries(self) -> int:
        """Entries held by consumers not seen within the threshold."""
        return sum(c.info.pending for c in self.dead_holders)


@dataclass(frozen=True, slots=True)
class StreamHealth:
    """A stream's groups' health; ``state`` is the worst of them (OK without groups)."""

    stream: str
    groups: tuple[GroupHealth, ...]

    @property
    def state(self) -> GroupState:
        return worst_state(g.state for g in self.groups)

    @property
    def flagged(self) -> tuple[GroupHealth, ...]:
        """The groups that are not OK, worst first."""
        bad = [g for g in self.groups if g.state is not GroupState.OK]
        return tuple(sorted(bad, key=lambda g: -_SEVERITY.index(g.state)))


def worst_state(states: Iterable[GroupState]) -> GroupState:
    return max(states, key=_SEVERITY.index, default=GroupState.OK)


def group_health(
    *,
    stream: str,
    group: str,
    consumers: Sequence[ConsumerInfo],
    pending: int,
    waiting_id: str | None,
    stuck_after_ms: int,
    now_ms: int,
) -> GroupHealth:
    """The state of one group. O(consumers), no I/O.

    ``waiting_id`` is the first entry not yet delivered to the group, when the selector
    read it (it does when nothing is pending and the lag is not known to be 0); its id's
    time says how long it has waited.
    """
    judged = tuple(ConsumerHealth(c, c.idle_ms < stuck_after_ms) for c in consumers)
    waited = pending > 0 or (
        waiting_id is not None and now_ms - entry_id_ms(waiting_id) >= stuck_after_ms
    )
    stuck = any(c.holds_stuck for c in judged)
    no_live = waited and not any(c.seen for c in judged)
    state = GroupState.NO_LIVE_CONSUMER if no_live else GroupState.STUCK if stuck else GroupState.OK
    return GroupHealth(
        stream=stream,
        group=group,
        state=state,
        stuck=stuck,
        no_live_consumer=no_live,
        pending=pending,
        consumers=judged,
        stuck_after_ms=stuck_after_ms,
    )


def summary_health(*, summary: StreamSummary, stuck_after_ms: int, now_ms: int) -> StreamHealth:
    """Every group of an overview row (``selectors.stream_summaries``), rolled up."""
    return StreamHealth(
        stream=summary.name,
        groups=tuple(
            group_health(
                stream=summary.name,
                group=g.name,
                consumers=g.consumer_list,
                pending=g.pending,
                waiting_id=g.waiting_id,
                stuck_after_ms=stuck_after_ms,
                now_ms=now_ms,
            )
            for g in summary.group_stats
        ),
    )


def detail_health(*, detail: GroupDetail, stuck_after_ms: int, now_ms: int) -> GroupHealth:
    """The group page's group (``selectors.group_detail``)."""
    return group_health(
        stream=detail.stream.name,
        group=detail.group.name,
        consumers=detail.consumers,
        pending=detail.pending,
        waiting_id=detail.waiting_id,
        stuck_after_ms=stuck_after_ms,
        now_ms=now_ms,
    )
