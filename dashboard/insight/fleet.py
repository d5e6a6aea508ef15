"""What the dashboard shows of a group's fleet: its pause, its workers, what they add up to.

Owns reading a group's two fleet-control keys (``queue_core.control``: the pause and the
workers' heartbeats) for the group page, its live updates and ``/metrics``, and turning
them into what those show:

- ``fleet_context``: the group page's ``fleet`` (``FleetView``: the banner's sentence,
  the not-pausable consumers, one ``WorkerRow`` per heartbeat, live, stale or stopped),
  from the two keys and the page's own XINFO CONSUMERS (``control.fleet_state`` decides);
- ``fleet_stamps``: what a live group page compares between two polls, so the Workers
  section and the banner are pushed when a worker appears, goes stale, stops, confirms
  a pause or finishes jobs, and the pause changes; never because a live worker's
  ``seen_ms`` moved (every 2 s per worker), which is left out while it is live;
- ``fleets_read``: many groups' keys at once, and ``FleetCollector``, for ``/metrics``
  (per-worker up, processed and failed; per-group paused).

Reads only: one pipelined round trip of a GET and an HGETALL per group (O(workers)),
parsed by ``control``'s own readers (a pause that cannot be read still pauses, a
heartbeat that cannot be read is skipped). Never writes Redis or SQL; never renders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from django.conf import settings
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from queue_core import clock, control
from queue_core.connection import Client
from queue_core.control import FleetState, Heartbeat, Pause
from queue_core.errors import wrong_type
from queue_core.keys import CrossSlotName, stream_keys
from queue_core.services import OWN_CONSUMERS
from queue_core.types import ConsumerInfo

Group = tuple[str, str]
#: Consumer names Ackboard itself uses (the operator's claims, retired entries' parking):
#: never a target to hand entries to.
RESERVED = frozenset(OWN_CONSUMERS)


@dataclass(frozen=True, slots=True)
class GroupFleet:
    """One group's fleet-control keys as read: its pause (None: not paused) and its
    heartbeats (sorted by consumer, live and stale)."""

    pause: Pause | None
    heartbeats: tuple[Heartbeat, ...]
    #: Why its keys cannot be read (a name whose keys cannot share its cluster slot);
    #: "" when they were read.
    problem: str = ""
    #: Heartbeat fields that could not be read (not JSON, past the reader's bounds, not a
    #: heartbeat): skipped, and counted so the page can say so.
    unreadable: int = 0


def _pause_of(reply: Any, now_ms: int) -> Pause | None:
    if isinstance(reply, redis.ResponseError) and wrong_type(reply):
        return control.UNREADABLE_PAUSE  # something is there: it still pauses
    if isinstance(reply, Exception):
        raise reply
    if reply is None:
        return None
    pause = Pause.from_json(reply)
    return pause if pause.active(now_ms) else None


def _heartbeats_of(reply: Any) -> tuple[tuple[Heartbeat, ...], int]:
    """The readable heartbeats, sorted by consumer, and how many fields were not."""
    if isinstance(reply, redis.ResponseError) and wrong_type(reply):
        return (), 0
    if isinstance(reply, Exception):
        raise reply
    beats = []
    unreadable = 0
    for field, value in (reply or {}).items():
        consumer = field.decode(errors="replace") if isinstance(field, bytes) else str(field)
        beat = Heartbeat.from_json(consumer, value)
        if beat is None:
            unreadable += 1
        else:
            beats.append(beat)
    return tuple(sorted(beats, key=lambda b: b.consumer)), unreadable


def _fleet(pause: Any, workers: Any, now_ms: int) -> GroupFleet:
    beats, unreadable = _heartbeats_of(workers)
    return GroupFleet(_pause_of(pause, now_ms), beats, unreadable=unreadable)


def _replies(client: Client, groups: Iterable[Group]) -> tuple[dict[Group, Any], dict[Group, str]]:
    """Each group's raw (GET pause, HGETALL workers) replies, in one pipelined round
    trip; and the groups whose keys cannot be named (``CrossSlotName``), with why."""
    pairs, unreadable = [], {}
    for pair in sorted(set(groups)):
        try:
            keys = stream_keys(pair[0])
            pairs.append((pair, keys.pause(pair[1]), keys.workers(pair[1])))
        except CrossSlotName as exc:
            unreadable[pair] = str(exc)
    if not pairs:
        return {}, unreadable
    pipe = client.pipeline(transaction=False)
    for _, pause_key, workers_key in pairs:
        pipe.get(pause_key)
        pipe.hgetall(workers_key)
    replies = pipe.execute(raise_on_error=False)
    raw = {pair: (replies[2 * i], replies[2 * i + 1]) for i, (pair, _, _) in enumerate(pairs)}
    return raw, unreadable


def fleets_read(
    *, client: Client, groups: Iterable[Group], now_ms: int | None = None
) -> dict[Group, GroupFleet]:
    """The pause and heartbeats of each of ``groups``: one pipelined round trip, a GET
    and an HGETALL per group. A stream whose keys cannot share its slot
    (``CrossSlotName``) has none, and says why (``GroupFleet.problem``). Connection errors and
    timeouts propagate."""
    now = clock.now_ms() if now_ms is None else now_ms
    raw, unreadable = _replies(client, groups)
    read = {pair: _fleet(pause, workers, now) for pair, (pause, workers) in raw.items()}
    return {**read, **{pair: GroupFleet(None, (), problem=why) for pair, why in unreadable.items()}}


def fleet_read(*, client: Client, stream: str, group: str, now_ms: int | None = None) -> GroupFleet:
    """One group's pause and heartbeats: one round trip (see ``fleets_read``)."""
    return fleets_read(client=client, groups=[(stream, group)], now_ms=now_ms)[(stream, group)]


def fleet_queue(pipe: Any, stream: str, group: str) -> int:
    """Adds one group's fleet reads (GET pause, HGETALL workers) to ``pipe``, another
    read's round trip (``selectors.group_page``); returns how many (0 when its keys
    cannot be named). ``fleet_of`` reads their replies."""
    try:
        keys = stream_keys(stream)
    except CrossSlotName:
        return 0
    pipe.get(keys.pause(group))
    pipe.hgetall(keys.workers(group))
    return 2


def fleet_of(stream: str, replies: Sequence[Any], now_ms: int) -> GroupFleet:
    """The ``GroupFleet`` from ``fleet_queue``'s replies (none: its keys cannot be named)."""
    if not replies:
        try:
            stream_keys(stream)
        except CrossSlotName as exc:
            return GroupFleet(None, (), problem=str(exc))
        raise ValueError("fleet_of: no replies for a stream whose keys can be named")
    pause, workers = replies
    return _fleet(pause, workers, now_ms)


# --- live ---------------------------------------------------------------------------------

#: A heartbeat's ``seen_ms`` in its JSON, found without parsing it.
_SEEN = re.compile(rb'"seen_ms"\s*:\s*(-?\d{1,20})')
#: A heartbeat that says its worker stopped (``stopped_ms`` a number, not null).
_STOPPED = re.compile(rb'"stopped_ms"\s*:\s*-?\d')


def _beat_stamp(field: Any, raw: Any, now_ms: int) -> tuple[Any, ...]:
    """One heartbeat's part of a stamp, from its raw JSON: all of it but ``seen_ms``,
    whether it is live (never once it says its worker stopped), and ``seen_ms`` only
    once it is not (then it no longer moves). No JSON parsing: regexes find ``seen_ms``
    and ``stopped_ms`` (about 1 µs a heartbeat, against about 30 µs to parse and check
    one), so an open group page costs little per poll whatever its workers."""
    data = raw if isinstance(raw, bytes) else str(raw).encode()
    match = _SEEN.search(data)
    if match is None:
        return (field, False, None, data)  # unreadable: the page skips it
    seen = int(match[1])
    live = now_ms - seen <= control.HEARTBEAT_STALE_MS and _STOPPED.search(data) is None
    rest = data[: match.start(1)] + data[match.end(1) :]
    return (field, live, None if live else seen, rest)


def _stamp_of(pause: Any, workers: Any, now_ms: int) -> Any:
    if isinstance(pause, Exception) or isinstance(workers, Exception):
        if not all(
            not isinstance(e, Exception) or (isinstance(e, redis.ResponseError) and wrong_type(e))
            for e in (pause, workers)
        ):
            raise next(e for e in (pause, workers) if isinstance(e, Exception))
        pause = "wrong type" if isinstance(pause, Exception) else pause
        workers = {} if isinstance(workers, Exception) else workers
    beats = tuple(sorted(_beat_stamp(f, v, now_ms) for f, v in (workers or {}).items()))
    return (pause, beats)


def fleet_stamps(
    *, client: Client, groups: Iterable[Group], now_ms: int | None = None
) -> dict[Group, Any]:
    """A comparable stamp of each group's fleet: equal between two polls when nothing the
    page shows of it changed. A live worker's ``seen_ms`` is left out (it moves every
    beat); its going stale is in (``now_ms`` decides). One pipelined round trip, a GET
    and an HGETALL per group; the replies are compared as they came, not parsed."""
    now = clock.now_ms() if now_ms is None else now_ms
    raw, unreadable = _replies(client, groups)
    stamps = {pair: _stamp_of(pause, workers, now) for pair, (pause, workers) in raw.items()}
    return {**stamps, **{pair: ("unreadable", why) for pair, why in unreadable.items()}}


# --- the group page ----------------------------------------------------------------------


def utc_text(epoch_ms: int) -> str:
    """``2026-12-01 23:00:00 UTC``."""
    return f"{datetime.fromtimestamp(epoch_ms / 1000, tz=UTC):%Y-%m-%d %H:%M:%S} UTC"


def _n(count: int, word: str, plural: str = "") -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """One heartbeat as the Workers section shows it: live, or greyed out as stale (no
    heartbeat for HEARTBEAT_STALE_MS) or stopped (its last heartbeat said so; the time
    is ``beat.stopped_ms``)."""

    beat: Heartbeat
    live: bool
    #: It confirms the pause in force (False when not paused, or once it stopped).
    confirmed: bool

    @property
    def stopped(self) -> bool:
        return self.beat.stopped


@dataclass(frozen=True)
class FleetView:
    """The group page's fleet: the banner and the Workers section."""

    state: FleetState
    rows: tuple[WorkerRow, ...]
    #: "Paused by ops-oncall (deploy), 3 of 3 workers confirmed, 2 jobs still finishing",
    #: or what runs when it is not paused.
    sentence: str
    #: "Resumes by itself at 2026-12-01 23:00:00 UTC", or "".
    resumes: str
    #: The paused-since line: "since 2026-12-01 22:00:00 UTC", or "".
    since: str
    #: Consumers of the group Retire may hand entries to: those with a live heartbeat,
    #: then the others seen within the stuck threshold (never Ackboard's own names, nor a
    #: worker whose heartbeat says it stopped).
    targets: tuple[str, ...] = ()
    #: Why the fleet cannot be read or controlled here ("": it can).
    problem: str = ""
    #: Heartbeats of the group that could not be read, not shown (``GroupFleet.unreadable``).
    unreadable: int = 0

    @property
    def paused(self) -> bool:
        return self.state.pause is not None

    @property
    def stale(self) -> int:
        return len(self.state.workers) - len(self.state.live)


def _sentence(state: FleetState) -> str:
    live = len(state.live)
    pause = state.pause
    if pause is None:
        if not state.workers:
            return "Not paused. No Ackboard worker has sent a heartbeat for this group."
        return f"Not paused: {_n(live, 'Ackboard worker')} live."
    return (
        f"Paused by {pause.by} ({pause.reason}), {state.confirmed} of "
        f"{_n(live, 'worker')} confirmed, {_n(state.finishing, 'job')} still finishing."
    )


def fleet_view(
    *, fleet: GroupFleet, consumers: Sequence[ConsumerInfo], now_ms: int, seen_within_ms: int
) -> FleetView:
    """What the banner and the Workers section show (pure; ``control.fleet_state``)."""
    state = control.fleet_state(
        pause=fleet.pause,
        heartbeats=fleet.heartbeats,
        consumers=consumers,
        now_ms=now_ms,
        seen_within_ms=seen_within_ms,
    )
    rows = tuple(
        WorkerRow(
            beat=beat,
            live=beat.live(now_ms),
            confirmed=state.pause is not None and not beat.stopped and beat.confirms(state.pause),
        )
        for beat in state.workers
    )
    pause = state.pause
    resumes = ""
    since = ""
    if pause is not None:
        if pause.until_ms is not None:
            resumes = f"Resumes by itself at {utc_text(pause.until_ms)}."
        if pause.at_ms:
            since = f"since {utc_text(pause.at_ms)}"
    beating = {beat.consumer for beat in state.live}
    stopped = {beat.consumer for beat in state.workers if beat.stopped}
    usable = [c for c in consumers if c.name not in RESERVED and c.name not in stopped]
    targets = tuple(
        [c.name for c in usable if c.name in beating]
        + [c.name for c in usable if c.name not in beating and c.idle_ms <= seen_within_ms]
    )
    return FleetView(state=state, rows=rows, sentence=_sentence(state), resumes=resumes,
                     since=since, targets=targets, problem=fleet.problem,
                     unreadable=fleet.unreadable)  # fmt: skip


def fleet_context(
    *,
    client: Client,
    stream: str,
    group: str,
    consumers: Sequence[ConsumerInfo],
    replies: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The group page's ``fleet``: one round trip (``fleet_read``), or none given the
    replies of ``fleet_queue``'s commands read in another one, and the page's own XINFO
    CONSUMERS. Not-pausable consumers are those seen within ``ACKBOARD_STUCK_AFTER_MS``
    without a live heartbeat."""
    now = clock.now_ms()
    fleet = (
        fleet_read(client=client, stream=stream, group=group, now_ms=now)
        if replies is None
        else fleet_of(stream, replies, now)
    )
    view = fleet_view(
        fleet=fleet,
        consumers=consumers,
        now_ms=now,
        seen_within_ms=int(settings.ACKBOARD_STUCK_AFTER_MS),
    )
    return {"fleet": view}


def pause_state(pause: Pause | None) -> dict[str, Any]:
    """A pause as an audit row's state records it (None: not paused)."""
    if pause is None:
        return {"paused": False}
    return {
        "paused": True,
        "paused_by": pause.by,
        "pause_reason": pause.reason,
        "paused_at_ms": pause.at_ms,
        "resume_at_ms": pause.until_ms,
    }


def heartbeats_live(fleet: GroupFleet, now_ms: int) -> Mapping[str, Heartbeat]:
    """The live heartbeats of ``fleet`` by consumer."""
    return {b.consumer: b for b in fleet.heartbeats if b.live(now_ms)}


# --- /metrics -----------------------------------------------------------------------------


class FleetCollector(Collector):
    """Per-worker and per-group fleet figures for ``/metrics`` (a prometheus-client
    collector over what ``fleets_read`` returned):

    - ``ackboard_worker_up`` (1 live, 0 stale or stopped),
      ``ackboard_worker_processed_total`` and ``ackboard_worker_failed_total`` (counters
      since the worker started: they reset when it restarts, which ``rate()`` handles),
      labels stream, group, consumer;
    - ``ackboard_group_paused`` (1 paused, 0 not) and
      ``ackboard_group_pause_confirmed_workers``, labels stream, group;
    - ``ackboard_fleet_groups_unread``: groups left out because there were more than the
      cap (``ACKBOARD_METRICS_FRESH_MAX``), so the scrape stays bounded.
    """

    def __init__(self, fleets: Mapping[Group, GroupFleet], now_ms: int, unread: int = 0) -> None:
        self.fleets = fleets
        self.now_ms = now_ms
        self.unread = unread

    def collect(self) -> Iterator[Metric]:
        w_labels = ["stream", "group", "consumer"]
        g_labels = ["stream", "group"]
        up = GaugeMetricFamily(
            "ackboard_worker_up",
            "1 while the Ackboard worker's heartbeat is live (seen in the last 10 s, and it "
            "has not said it stopped), else 0",
            labels=w_labels,
        )
        processed = CounterMetricFamily(
            "ackboard_worker_processed",
            "Handler calls that returned, since the worker started (from its heartbeat)",
            labels=w_labels,
        )
        failed = CounterMetricFamily(
            "ackboard_worker_failed",
            "Handler calls that raised, since the worker started (from its heartbeat)",
            labels=w_labels,
        )
        paused = GaugeMetricFamily(
            "ackboard_group_paused", "1 while the group is paused, else 0", labels=g_labels
        )
        confirmed = GaugeMetricFamily(
            "ackboard_group_pause_confirmed_workers",
            "Live workers that confirm the group's pause (0 when not paused)",
            labels=g_labels,
        )
        for (stream, group), fleet in sorted(self.fleets.items()):
            pause = fleet.pause
            live = [b for b in fleet.heartbeats if b.live(self.now_ms)]
            paused.add_metric([stream, group], int(pause is not None))
            confirmed.add_metric(
                [stream, group],
                0 if pause is None else sum(1 for b in live if b.confirms(pause)),
            )
            for beat in fleet.heartbeats:
                labels = [stream, group, beat.consumer]
                up.add_metric(labels, int(beat.live(self.now_ms)))
                processed.add_metric(labels, beat.processed)
                failed.add_metric(labels, beat.failed)
        yield from (up, processed, failed, paused, confirmed)
        yield GaugeMetricFamily(
            "ackboard_fleet_groups_unread",
            "Groups whose pause and heartbeats were not read for this scrape (over the cap)",
            value=self.unread,
        )


def metrics_fleets(*, client: Client, groups: Sequence[Group], cap: int) -> FleetCollector:
    """The collector over the first ``cap`` of ``groups`` (sorted): one pipelined round
    trip, two commands a group; the rest are counted as unread."""
    pairs = sorted(set(groups))
    now = clock.now_ms()
    fleets = fleets_read(client=client, groups=pairs[:cap], now_ms=now)
    return FleetCollector(fleets, now, unread=max(0, len(pairs) - cap))
