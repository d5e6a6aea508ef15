"""The live-update broadcaster: one per web process, shared by every open socket.

It owns what the browser sees change without a reload. It tracks which surfaces (the
kinds in ``dashboard.live.registry``) have at least one socket, and:

- polls cheap change stamps for the streams of those surfaces only, on a tick
  (``settings.ACKBOARD_LIVE_TICK``): ``selectors.stream_stamps``, one pipelined round
  trip of ``XINFO STREAM``, ``XINFO GROUPS``, two ``XLEN`` (DLQ, failures) per stream and
  an ``XPENDING`` summary per open group, all O(1) or O(groups), then, when group pages
  are open, one more round trip of a GET (its pause) and an HGETALL (its workers'
  heartbeats, O(workers)) per open group (``dashboard.insight.fleet.fleet_stamps``);
- wakes at once on new entries (one blocking ``XREAD`` over the open streams, from the
  last ids it polled) and on ``failure`` / ``dead_letter`` / ``action`` events published
  on ``queue_core.keys.EVENTS_CHANNEL`` (dead-letter actions and the worker's dead
  letters publish them, so a DLQ page hears of them at once);
- re-renders a surface's partials only when its signature over the poll changed (or an
  event touched its stream), once per surface and distinct permission set, never per
  socket, and hands only the partials whose HTML changed to the outbox of each socket
  of that surface and set (``dashboard.live.outbox``: the same strings for every socket,
  no channel layer, no copy; a slow socket skips states for itself alone);
- on the rates sampler's ``rates`` event (one per tick, from whichever process holds its
  lease: ``dashboard.insight.rates.sampler``), re-renders the open stream and group pages, whose
  signatures carry the tick's time, so their facts partial brings the chart's newest
  point even to a queue where nothing changed (only the partials whose HTML changed are
  sent: the facts with the point and the estimate, not the whole page);
- after a ``failure`` event, checks the failure index (one SQL query, no Redis) every
  50 ms for 2 s, because pages show failures from the index that the ingestor fills a
  moment after the worker wrote ``{S}:failures``.

So Redis load grows with the number of *open streams*, never with the number of tabs.

Each surface is rendered and pushed on its own: one that fails (a template or payload bug,
a hostile value) is skipped and the others go on. Its failure is logged at most once a
minute per surface (``dashboard.runtime.logs``), as one short line, with the traceback only
the first time, so a failure that repeats every cycle cannot flood the log. It never
writes to Redis and never renders for one user (``dashboard.live.render``).

Paged or filtered tables (pending entries, latest entries, dead letters) are pushed as
their default view only: the first page, unfiltered. A browser showing a deeper page or
a filter has that table marked ``data-live="off"`` and live.js leaves it alone, so one
rendering per surface still serves everyone (rendering every view anyone looks at would
make the cost grow with what users do).

The two wake-ups (the events subscription and the new-entries XREAD) are its mixin
``dashboard.live.wakeups.WakeUps``; this module polls, renders and pushes.

Sockets are per process because each process renders for its own sockets; processes
share change *events* through Redis pub/sub, never pushes.

On a Redis Cluster (``get_redis()`` returns a cluster client when the server says so):

- the polls go through the same selectors, which split their pipelines by node;
- events: classic PUBLISH reaches every node of a cluster, so the broadcaster subscribes
  on one node (from the client's node list) and, when that node dies or refuses,
  re-reads the slot map and subscribes on another one, with the same backoff;
- new entries: XREAD cannot span hash slots, so the watcher blocks with one XREAD per
  slot (streams with a shared hash tag share one), at most MAX_WATCHED_SLOTS at once,
  the streams of open pages first; a stream left out is still seen on the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
from django.conf import settings
from django.db import close_old_connections
from django.db.models import Max
from django.http import Http404
from redis.exceptions import RedisClusterException

from dashboard.insight.fleet import fleet_stamps
from dashboard.live import registry
from dashboard.live.outbox import Outbox
from dashboard.live.registry import Perms, Poll, Surface
from dashboard.live.render import surface_render
from dashboard.live.wakeups import REDIS_AWAY, LiveCounters, WakeUps
from dashboard.models import IndexedFailure
from dashboard.runtime.connection import get_redis
from dashboard.runtime.logs import FailureLog, log
from queue_core import selectors
from queue_core.connection import Client

T = TypeVar("T")
#: A surface and the permission set one rendering of it is made for.
Key = tuple[Surface, Perms]

#: Minimum gap between two woken poll+render cycles: an event or XADD storm costs at most
#: four renders and pushes a second (plus the tick's), whatever its rate. A change after a
#: quiet spell is still pushed at once.
MIN_INTERVAL_S = 0.25
#: After a wake, wait this long so a burst of events lands in one render.
COALESCE_S = 0.02
#: Idle times and ages are shown relative to now, so open surfaces are re-rendered this
#: often even when their stats did not change (only partials whose HTML changed are sent).
REFRESH_S = 15.0
#: How often the overview re-discovers streams (SCAN, which is O(keyspace)).
DISCOVER_S = 10.0
#: After a failure event, the failure index is checked this often, for a while, to catch
#: the row the ingestor writes a moment later (it polls every 0.5 s by default). Each check
#: is one indexed SQL query and no Redis command; a change triggers a full cycle.
FAILURE_WATCH_EVERY_S = 0.05
#: The failure-index check covers at most this many streams (the overview's first ones).
MAX_MARKED_STREAMS = 500


def failure_marks(*, streams: Iterable[str]) -> dict[str, int]:
    """The newest failure-index row id per stream: one indexed SQL query.

    Pages show failures from the index, which the ingestor fills a moment after the
    worker wrote ``{S}:failures``; this is how a cycle notices that moment.
    """
    names = sorted(set(streams))[:MAX_MARKED_STREAMS]
    if not names:
        return {}
    rows = (
        IndexedFailure.objects.filter(stream__in=names)
        .values_list("stream")
        .annotate(newest=Max("id"))
        .order_by()
    )
    return dict(rows)


def _marks_fresh(streams: set[str]) -> dict[str, int]:
    close_old_connections()
    try:
        return failure_marks(streams=streams)
    finally:
        close_old_connections()  # back to the pool on PostgreSQL (settings: CONN_MAX_AGE 0)


@dataclass
class _CycleWork:
    """What one cycle's work in the thread found and rendered, for the loop to push."""

    signatures: dict[Surface, Any]
    marks: dict[str, int]
    html: dict[Key, dict[str, str]]
    last_ids: dict[str, str]
    overview_streams: tuple[str, ...] | None
    polled: tuple[str, ...]


@dataclass
class Broadcaster(WakeUps):
    """See the module docstring. Use ``get_broadcaster()``; never one per socket."""

    token: str = field(default_factory=lambda: secrets.token_hex(4))
    counters: LiveCounters = field(default_factory=LiveCounters)
    #: The streams the last cycle polled (tests assert that closed pages are not polled).
    polled: tuple[str, ...] = ()
    #: On a cluster, the node the event subscription is on now (None while there is none).
    subscribed: tuple[str, int] | None = None
    #: The outboxes of the sockets on each surface and permission set.
    _subs: dict[Key, set[Outbox]] = field(default_factory=dict)
    _html: dict[Key, dict[str, str]] = field(default_factory=dict)
    _signatures: dict[Surface, Any] = field(default_factory=dict)
    _forced: set[Key] = field(default_factory=set)
    _dirty_streams: set[str] = field(default_factory=set)
    _last_ids: dict[str, str] = field(default_factory=dict)
    _overview_streams: tuple[str, ...] = ()
    _discovered_at: float = 0.0
    _refreshed_at: float = 0.0
    _loop: asyncio.AbstractEventLoop | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _wake: asyncio.Event | None = None
    _polled_event: asyncio.Event | None = None
    _executor: ThreadPoolExecutor | None = None
    _tick: float = 1.0
    _url: str = ""
    _cluster: bool | None = None
    _stopping: bool = False
    _watch_failures_until: float = 0.0
    _marks: dict[str, int] = field(default_factory=dict)
    _failures: FailureLog = field(default_factory=FailureLog)
    #: The rates sampler's last tick (epoch s) as its last ``rates`` event said.
    _rates_at: float | None = None

    # --- sockets ----------------------------------------------------------------------

    def attach(self, surface: Surface, perms: Perms, outbox: Outbox) -> None:
        """Add a socket's ``outbox`` to ``surface``; it gets the last rendered HTML at once,
        if there is one (else the surface is rendered now)."""
        self._ensure_running()
        key = (surface, perms)
        self._subs.setdefault(key, set()).add(outbox)
        cached = self._html.get(key)
        if cached is None:
            self._forced.add(key)
            self._poke()
        else:
            outbox.offer(cached)

    def detach(self, surface: Surface, perms: Perms, outbox: Outbox) -> None:
        key = (surface, perms)
        outboxes = self._subs.get(key)
        if outboxes is None:
            return
        outboxes.discard(outbox)
        if not outboxes:
            del self._subs[key]
            self._html.pop(key, None)
            if not any(s == surface for s, _ in self._subs):
                self._signatures.pop(surface, None)
            if not self._subs:
                self._last_ids = {}  # nothing open: the XREAD watcher goes quiet too

    def open_surfaces(self) -> set[Surface]:
        return {s for s, _ in self._subs}

    def sockets(self) -> int:
        return sum(len(outboxes) for outboxes in self._subs.values())

    # --- lifecycle --------------------------------------------------------------------

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop and all(not t.done() for t in self._tasks):
            return
        if self._loop is not loop:
            # A new event loop (a test's, or after a restart): state from the old one is
            # meaningless there.
            for state in (self._subs, self._html, self._signatures, self._last_ids):
                state.clear()
            self._forced.clear()
            self._dirty_streams.clear()
        for task in self._tasks:
            task.cancel()
        self._loop = loop
        self._tick = float(settings.ACKBOARD_LIVE_TICK)
        self._url = settings.ACKBOARD_REDIS_URL
        self._cluster = None  # asked of the server (through get_redis) on first use
        self._wake = asyncio.Event()
        self._polled_event = asyncio.Event()
        if self._executor is None:
            # One thread: renders run one at a time and keep one DB connection.
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="ackboard-live")
        self._tasks = [
            loop.create_task(self._run_cycles(), name="ackboard-live-cycles"),
            loop.create_task(self._listen_events(), name="ackboard-live-events"),
            loop.create_task(self._watch_entries(), name="ackboard-live-xread"),
        ]
        log.info("live broadcaster started (tick %.2fs, group token %s)", self._tick, self.token)

    async def stop(self) -> None:
        """Cancel the tasks (tests; the web process just exits)."""
        tasks, self._tasks = self._tasks, []
        self._stopping = True
        for task in tasks:
            # The XREAD watcher ends by itself within one block; cancelling redis-py's
            # asyncio client inside a blocking read can leave the loop hanging.
            if task.get_name() != "ackboard-live-xread":
                task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 5.0)
        self._stopping = False
        if self._executor is not None:
            # Let a render that was in flight finish before the loop goes away.
            await asyncio.get_running_loop().run_in_executor(self._executor, lambda: None)
        self._loop = None
        self.subscribed = None
        self._subs.clear()
        self._html.clear()
        self._signatures.clear()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # --- the cycle ----------------------------------------------------------------------

    async def _run_cycles(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        next_tick = loop.time()
        last_woken = 0.0
        while True:
            deadline = next_tick
            if self._watch_failures_until > loop.time():
                deadline = min(deadline, loop.time() + FAILURE_WATCH_EVERY_S)
            ticked = False
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, deadline - loop.time()))
                await asyncio.sleep(COALESCE_S)
            except TimeoutError:
                if loop.time() >= next_tick:
                    next_tick = loop.time() + self._tick
                    ticked = True
                elif not await self._failures_ingested():
                    continue
            if not ticked:
                # The gap is between woken cycles only: it bounds what a storm costs, and
                # the tick (one cycle per ACKBOARD_LIVE_TICK) does not hold back the push
                # of a write that lands just after it.
                gap = MIN_INTERVAL_S - (loop.time() - last_woken)
                if gap > 0:
                    await asyncio.sleep(gap)
                last_woken = loop.time()
            self._wake.clear()
            if not self._subs:
                continue
            await self._guarded_cycle()

    async def _guarded_cycle(self) -> None:
        """One cycle; a failure is logged (briefly) and the next tick tries again."""
        try:
            await self._cycle()
        except REDIS_AWAY as exc:
            # Once a minute, not once a tick, through a Redis outage.
            self._failures.report("poll", "live poll (retrying every tick)", exc, traced=False)
        except Exception as exc:
            self._failures.report("cycle", "live cycle", exc)
        finally:
            if self._polled_event is not None:
                self._polled_event.set()
                self._polled_event = asyncio.Event()

    async def _cycle(self) -> None:
        keys = list(self._subs)
        forced, self._forced = self._forced, set()
        dirty, self._dirty_streams = self._dirty_streams, set()
        now = time.monotonic()
        if now - self._refreshed_at >= REFRESH_S:
            self._refreshed_at = now
            forced.update(keys)
        discover = any(s.spec.every_stream for s, _ in keys) and (
            now - self._discovered_at >= DISCOVER_S or not self._overview_streams
        )
        if discover:
            self._discovered_at = now
        outcome = await self._in_thread(
            self._work, keys, dict(self._signatures), forced, dirty, discover
        )
        self.counters.cycles += 1
        self.polled = outcome.polled
        self._last_ids = outcome.last_ids
        self._marks = outcome.marks
        if outcome.overview_streams is not None:
            self._overview_streams = outcome.overview_streams
        for surface, sig in outcome.signatures.items():
            if any(s == surface for s, _ in self._subs):
                self._signatures[surface] = sig
        await self._push(outcome.html)

    async def _push(self, rendered: dict[Key, dict[str, str]]) -> None:
        """Hand each open surface's sockets the partials whose HTML changed since its last
        push: one dict update per socket, no send awaited (each outbox sends by itself)."""
        for key, partials in rendered.items():
            outboxes = self._subs.get(key)
            if not outboxes:
                continue  # every socket left while we rendered
            old = self._html.get(key, {})
            changed = {name: html for name, html in partials.items() if old.get(name) != html}
            self._html[key] = partials
            if changed:
                self.counters.pushes += 1
                for outbox in list(outboxes):
                    outbox.offer(changed)

    async def _failures_ingested(self) -> bool:
        """Whether the failure index has rows for open streams newer than the last cycle's."""
        surfaces = self.open_surfaces()
        streams = {s.stream for s in surfaces if s.stream}
        if any(s.spec.every_stream for s in surfaces):
            streams.update(self._overview_streams)
        if not streams:
            return False
        try:
            marks = await self._in_thread(_marks_fresh, streams)
        except Exception as exc:  # a database hiccup only delays the update to the tick
            log.warning("live failure-index check failed: %s", exc)
            return False
        changed = {s for s in streams if marks.get(s) != self._marks.get(s)}
        self._dirty_streams.update(changed)
        return bool(changed)

    async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    # --- in the broadcaster's thread (sync Redis, templates) ----------------------------

    def _work(
        self,
        keys: list[Key],
        old_signatures: dict[Surface, Any],
        forced: set[Key],
        dirty: set[str],
        discover: bool,
    ) -> _CycleWork:
        """Poll, compare, render the surfaces whose signature or stream changed."""
        close_old_connections()
        try:
            client = get_redis()
            surfaces = sorted({s for s, _ in keys})
            poll, discovered = self._poll(client, surfaces, discover)
            signatures = {s: s.spec.signature(s, poll) for s in surfaces}
            html: dict[Key, dict[str, str]] = {}
            for surface in surfaces:
                stale = (
                    signatures[surface] != old_signatures.get(surface)
                    or any(surface.shows(name) for name in dirty)
                    or (surface.spec.every_stream and discovered is not None)
                )
                wanted = [p for s, p in keys if s == surface and (stale or (s, p) in forced)]
                if wanted:
                    html.update(self._render(client, surface, wanted))
            last_ids = {n: s.last_id for n, s in poll.stamps.streams.items() if s.last_id}
            polled = tuple(sorted(poll.stamps.streams))
            return _CycleWork(signatures, dict(poll.marks), html, last_ids, discovered, polled)
        finally:
            close_old_connections()  # back to the pool on PostgreSQL (settings: CONN_MAX_AGE 0)

    def _poll(
        self, client: Client, surfaces: list[Surface], discover: bool
    ) -> tuple[Poll, tuple[str, ...] | None]:
        """The stamps and failure marks of the open surfaces' streams (and the streams
        the overview lists, re-discovered when ``discover``)."""
        # The rows of the open overview pages, from the process's stream index (no SCAN:
        # dashboard.insight.stream_index refreshes it off this path), so an open overview costs
        # O(page) per poll, whatever the number of streams.
        shown = tuple(
            sorted(
                {n for s in surfaces if s.spec.every_stream for n in registry.overview_streams(s)}
            )
        )
        discovered = shown if discover else None
        streams = {s.stream for s in surfaces if s.stream}
        if any(s.spec.every_stream for s in surfaces):
            streams.update(shown)
        groups = {(s.stream, s.group) for s in surfaces if s.group}
        stamps = selectors.stream_stamps(client=client, streams=streams, groups=groups)
        # Open group pages only: a GET and an HGETALL per group, one more round trip.
        fleet = fleet_stamps(client=client, groups=groups) if groups else {}
        marks = failure_marks(streams=streams)
        return Poll(stamps, marks, shown, fleet, rates_at=self._rates_at), discovered

    def _render(
        self, client: Client, surface: Surface, wanted: list[Perms]
    ) -> dict[Key, dict[str, str]]:
        """``surface`` rendered for each permission set in ``wanted``; {} if it fails."""
        try:
            context = registry.surface_context(surface=surface, client=client)
            self.counters.renders += 1
            return {
                (surface, perms): surface_render(surface=surface, context=context, perms=perms)
                for perms in wanted
            }
        except Http404:
            return {}  # deleted or never existed; the page itself says so on reload
        except (redis.ConnectionError, redis.TimeoutError, RedisClusterException):
            raise  # Redis is away: every surface would fail; the cycle retries
        except Exception as exc:
            # This surface only: skipped (its sockets keep what they have), the others go
            # on. Its signature is kept, so it is tried again when its stream changes or
            # on the refresh, not on every tick.
            self._failures.report(surface, surface.label(), exc)
            return {}


_broadcaster: Broadcaster | None = None


def get_broadcaster() -> Broadcaster:
    """This process's broadcaster (created on first use; started by the first socket)."""
    global _broadcaster
    if _broadcaster is None:
        _broadcaster = Broadcaster()
    return _broadcaster
