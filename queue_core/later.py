"""Retry later: make a pending entry due at a chosen time, in its own group, under its id.

Redis cannot move a pending entry's delivery time into the future (XCLAIM's IDLE and TIME
clamp to now), and any live worker's XAUTOCLAIM takes an entry once it has been idle for
its min-idle, whoever owns it. So an entry retried later is *parked*: one script
(``scripts/retry_later.lua``) XCLAIMs it JUSTID with IDLE 0 to ``LATER_CONSUMER`` and
records its due time in the group's sorted set (``keys.StreamKeys.later``, in the
stream's slot). A *release step* (``later_release``, ``scripts/later_release.lua``) keeps
it parked until then: it XCLAIMs every not-yet-due entry JUSTID IDLE 0 again, so its idle
time never reaches a worker's min-idle, and hands each due one back with a large idle
time (``DUE_IDLE_MS``), so the next XAUTOCLAIM of any live worker takes it. The delivery
count never changes and nothing is ever acknowledged.

The release step runs in every reclaim sweep of ``queue_core``'s own worker (before its
XAUTOCLAIM: ``worker.loop``), and in ``manage.py run_jobs`` for every group that has due
times (``later_sweeper``; the groups come from ``LATER_INDEX_KEY``, never a SCAN). If
nothing runs it, a parked entry becomes reclaimable at the workers' min-idle, that is
early: never lost, never acked. Dead-letter drops an entry's due time in its own script,
Retry with ``later_forget`` right after its script (so it is not parked again); a
claimed or acknowledged entry is dropped by the next release step (no longer the
parking consumer's).

Never imports Django, never decides permissions or audits (the dashboard does). Cost: a
park is one SADD and one script (O(log n)); a release run is O(window · log n) in Redis,
``WINDOW`` entries per script, ``MAX_PARKED`` per group at most.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence

import redis

from queue_core import clock
from queue_core.bounded_json import json_read
from queue_core.connection import Client
from queue_core.events import event_publish
from queue_core.keys import LATER_INDEX_KEY, stream_keys
from queue_core.scripts.binding import Refusal
from queue_core.scripts.retry_later import LATER_RELEASE, RETRY_LATER, LaterWindow, RetriedLater
from queue_core.services import LATER_CONSUMER, later_forget
from queue_core.validation import entry_id_check, name_check

__all__ = [
    "DUE_IDLE_MS",
    "LATER_CONSUMER",
    "MAX_DELAY_MS",
    "MAX_PARKED",
    "LaterWindow",
    "RetriedLater",
    "entry_retry_later",
    "later_due",
    "later_forget",
    "later_release",
    "later_sweep",
    "later_sweeper",
]

log = logging.getLogger("queue_core.later")

#: The idle time a due entry is handed back with: a worker whose ``--min-idle-ms`` is at
#: most a day takes it on its next sweep (as ``admin.retire`` does).
DUE_IDLE_MS = 24 * 3600 * 1000
#: Furthest ahead an entry may be made due.
MAX_DELAY_MS = 30 * 24 * 3600 * 1000
#: Most entries one group may have parked at once: what one release pass must keep
#: parked within a worker's sweep interval (``MAX_PARKED / WINDOW`` scripts).
MAX_PARKED = 10_000
#: Due times one release script looks at.
WINDOW = 500
#: How often ``later_sweeper`` runs (``manage.py run_jobs``): well under the workers'
#: default min-idle (30 s) and the 10 s their sweeps run at most.
SWEEP_EVERY_S = 2.0
#: Groups one sweep looks at, at most.
SWEEP_MAX_GROUPS = 1000


def index_member(stream: str, group: str) -> str:
    """The sweepers' index member naming ``group`` of ``stream``."""
    return json.dumps([stream, group])


def due_check(due_ms: int, *, now_ms: int) -> int:
    """``due_ms`` if it is after ``now_ms`` and at most ``MAX_DELAY_MS`` ahead; else
    ValueError with a message an operator can read."""
    if isinstance(due_ms, bool) or not isinstance(due_ms, int):
        raise ValueError("the due time must be epoch milliseconds")
    if due_ms <= now_ms:
        raise ValueError("the due time is not in the future; use Retry to retry it now")
    if due_ms - now_ms > MAX_DELAY_MS:
        raise ValueError(f"the due time is more than {MAX_DELAY_MS // 86_400_000} days ahead")
    return due_ms


def entry_retry_later(
    *,
    client: Client,
    stream: str,
    group: str,
    entry_id: str,
    due_ms: int,
    expected_consumer: str = "",
) -> RetriedLater:
    """Park a pending entry until ``due_ms`` (epoch ms), then make it due for redelivery
    within its own group, under its own id, with its delivery count unchanged.

    Doing it again moves the due time. Raises ValueError for a malformed id or a due time
    in the past or too far ahead; ActionRefused when the entry is not pending, its
    payload was deleted, ``expected_consumer`` (when given) no longer owns it, or the
    group has ``MAX_PARKED`` entries parked; CrossSlotName for names without companions.
    Two round trips (the sweepers' index, then the script); O(log n) in Redis.
    """
    name_check(stream, "stream")
    name_check(group, "group")
    entry_id_check(entry_id)
    due_check(due_ms, now_ms=clock.now_ms())
    call = RETRY_LATER.call(
        stream=stream, group=group, entry_id=entry_id, parking=LATER_CONSUMER,
        due_ms=due_ms, max_parked=MAX_PARKED, expected_consumer=expected_consumer,
    )  # fmt: skip
    # Indexed first: a crash between the two leaves an index entry the sweep prunes,
    # never a parked entry no sweeper knows of.
    client.sadd(LATER_INDEX_KEY, index_member(stream, group))
    result = call.run(client)
    if isinstance(result, Refusal):
        raise result.error()
    event_publish(client=client, type="action", stream=stream, group=group,
                  action="retry_later", ids=[entry_id])  # fmt: skip
    return result


def later_due(*, client: Client, stream: str, group: str, ids: Sequence[str]) -> dict[str, int]:
    """Entry id -> due epoch ms, for those of ``ids`` that are parked. One ZMSCORE (none
    for no ids); O(ids). A stream without companions has none."""
    if not ids:
        return {}
    try:
        key = stream_keys(stream).later(group)
    except ValueError:
        return {}
    scores = client.zmscore(key, list(ids))
    return {i: int(s) for i, s in zip(ids, scores, strict=True) if s is not None}


def later_release(
    *, client: Client, stream: str, group: str, now_ms: int | None = None
) -> LaterWindow:
    """Keep ``group``'s parked entries parked, release the due ones, drop the rest.

    One script per ``WINDOW`` due times (one round trip when nothing is parked), judged
    at ``now_ms`` (``clock.now_ms()`` by default). An entry parked during the pass may be
    looked at twice or not at all; the next pass sees it. Returns the totals.
    """
    now = clock.now_ms() if now_ms is None else now_ms
    first = looked = kept = released = dropped = 0
    while first < MAX_PARKED:
        window = LATER_RELEASE.call(
            stream=stream, group=group, parking=LATER_CONSUMER, now_ms=now,
            due_idle_ms=DUE_IDLE_MS, first=first, count=WINDOW,
        ).run(client)  # fmt: skip
        if window.group_gone:
            return window
        looked += window.looked
        kept += window.kept
        released += window.released
        dropped += window.dropped
        if window.looked < WINDOW:
            break
        first += window.kept  # the released and dropped left the set: ranks moved up
    if released:
        event_publish(client=client, type="action", stream=stream, group=group,
                      action="retry_later_due", ids=[])  # fmt: skip
    return LaterWindow(looked, kept, released, dropped)


def later_sweep(client: Client, *, max_groups: int = SWEEP_MAX_GROUPS) -> int:
    """``later_release`` for every group of the index (``LATER_INDEX_KEY``); returns how
    many entries were released. A group left with nothing parked, or gone, or a member
    that names none, is pruned from the index. One SSCAN page, then per group what
    ``later_release`` costs plus one EXISTS."""
    released = 0
    _, members = client.sscan(LATER_INDEX_KEY, 0, count=max_groups)
    for raw in list(members)[:max_groups]:
        try:
            stream, group = (str(v) for v in json_read(raw))
            window = later_release(client=client, stream=stream, group=group)
            released += window.released
            if window.group_gone or not client.exists(stream_keys(stream).later(group)):
                client.srem(LATER_INDEX_KEY, raw)
        except (redis.ResponseError, ValueError, TypeError):
            # Not a pair of names, a name without companions, or a key of another type.
            client.srem(LATER_INDEX_KEY, raw)
    return released


def later_sweeper(
    client_factory: Callable[[], Client],
    stopping: threading.Event,
    *,
    every_s: float = SWEEP_EVERY_S,
) -> None:
    """Run ``later_sweep`` every ``every_s`` seconds until ``stopping`` is set (``manage.py
    run_jobs`` runs it in a daemon thread). Any error is logged (a traceback once until a
    sweep succeeds again) and the next sweep tries again: it never ends the thread."""
    traced = False
    while not stopping.is_set():
        try:
            released = later_sweep(client_factory())
            if released:
                log.info("retry later: %d entries due, handed back to their groups", released)
            traced = False
        except redis.RedisError as exc:
            log.warning("retry later sweep failed: %s", exc)
        except Exception:
            if not traced:
                log.exception("retry later sweep failed; retrying every %.0f s", every_s)
                traced = True
        stopping.wait(every_s)
