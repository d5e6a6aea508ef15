"""The live-update broadcaster: one per web process, shared by every open socket.

It owns what the browser sees change without a reload. It tracks which surfaces
(overview, stream, group, entry pages) have at least one socket, and:

- polls cheap change stamps for the streams of those surfaces only, on a tick
  (``settings.ACKBOARD_LIVE_TICK``): ``selectors.stream_stamps``, one pipelined round
  trip of ``XINFO STREAM``, ``XINFO GROUPS``, two ``XLEN`` (DLQ, failures) per stream and
  an ``XPENDING`` summary per open group, all O(1) or O(groups);
- wakes at once on new entries (one blocking ``XREAD`` over the open streams, from the
  last ids it polled) and on ``failure`` / ``dead_letter`` / ``action`` events published
  on ``queue_core.keys.EVENTS_CHANNEL``;
- re-renders a surface's partials only when its stats changed (or an event touched its
  stream), once per surface and distinct permission set, never per socket, and pushes
  only the partials whose HTML changed, to the surface's channels group.

- after a ``failure`` event, checks the failure index (one SQL query, no Redis) every
  50 ms for 2 s, because pages show failures from the index that the ingestor fills a
  moment after the worker wrote ``{S}:failures``.

So Redis load grows with the number of *open streams*, never with the number of tabs.

Each surface is rendered and pushed on its own: one that fails (a template or payload bug,
a hostile value) is skipped and the others go on. Its failure is logged at most once a
minute per surface (``FAILURE_LOG_EVERY_S``), as one short line, with the traceback only
the first time, so a failure that repeats every cycle cannot flood the log.
It never writes to Redis and never renders for one user: partials are rendered with a
stand-in user that has only a permission set and a stand-in request that only knows
the page's path, from a plain dict, so no CSRF token or per-user state can leak into a
shared push.

Paged or filtered tables (pending entries, latest entries) are pushed as their default
view only: the first page, unfiltered. A browser showing a deeper page or a filter has
that table marked ``data-live="off"`` and live.js leaves it alone, so one rendering per
surface still serves everyone (rendering every view anyone looks at would make the cost
grow with what users do).

Groups are per process (the name carries a random token) because each process renders
for its own sockets; processes share change *events* through Redis pub/sub.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote

import redis
import redis.asyncio as aioredis
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.context_processors import PermWrapper
from django.db import close_old_connections
from django.db.models import Max
from django.http import Http404, HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse

from dashboard.connection import get_redis
from dashboard.models import FailureRecord
from queue_core import selectors
from queue_core.keys import EVENTS_CHANNEL
from queue_core.types import LiveStamps

log = logging.getLogger("ackboard.live")

#: Permission names (``dashboard.retry_entry``, …) a rendering is made for.
Perms = frozenset[str]
T = TypeVar("T")

#: Event types that make the broadcaster re-render at once rather than on the next tick.
REACT_TO = frozenset({"failure", "dead_letter", "action"})
#: Partials of each surface kind: (template, partial names). Each partial's root element
#: id equals its name, which is what the browser swaps.
PARTIALS: dict[str, tuple[str, tuple[str, ...]]] = {
    "overview": ("dashboard/overview.html", ("stream-table",)),
    "stream": ("dashboard/stream.html", ("stream-facts", "group-table", "entry-table")),
    "group": ("dashboard/group.html", ("group-summary", "consumer-table", "pending-table")),
    "entry": ("dashboard/entry.html", ("entry-state", "failure-history")),
}
#: Minimum gap between two poll+render cycles: an event or XADD storm costs at most four
#: renders and pushes a second, whatever its rate. A change after a quiet spell is still
#: pushed at once.
MIN_INTERVAL_S = 0.25
#: After a wake, wait this long so a burst of events lands in one render.
COALESCE_S = 0.02
#: Idle times and ages are shown relative to now, so open surfaces are re-rendered this
#: often even when their stats did not change (only partials whose HTML changed are sent).
REFRESH_S = 15.0
#: How often the overview re-discovers streams (SCAN, which is O(keyspace)).
DISCOVER_S = 10.0
#: After a failure event, the failure index is checked this often, for this long, to catch
#: the row the ingestor writes a moment later (it polls every 0.5 s by default). Each check
#: is one indexed SQL query and no Redis command; a change triggers a full cycle.
FAILURE_WATCH_EVERY_S = 0.05
FAILURE_WATCH_FOR_S = 2.0
#: The failure-index check covers at most this many streams (the overview's first ones).
MAX_MARKED_STREAMS = 500
#: A surface (or the cycle itself) that keeps failing is logged at most this often.
FAILURE_LOG_EVERY_S = 60.0
#: Characters of an exception's message kept in a failure's log line.
FAILURE_MESSAGE_CHARS = 200


@dataclass(frozen=True, slots=True, order=True)
class Surface:
    """One live page context. ``kind`` is overview, stream, group or entry."""

    kind: str
    stream: str = ""
    group: str = ""
    entry_id: str = ""


class _PermsUser:
    """Stands in for ``request.user`` when one rendering serves everyone with ``perms``."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, perms: Perms) -> None:
        self._perms = perms

    def has_perm(self, perm: str, obj: object = None) -> bool:
        return perm in self._perms

    def has_perms(self, perm_list: Iterable[str], obj: object = None) -> bool:
        return all(p in self._perms for p in perm_list)

    def has_module_perms(self, app_label: str) -> bool:
        return any(p.startswith(app_label + ".") for p in self._perms)

    def get_username(self) -> str:
        return ""


def failure_marks(*, streams: Iterable[str]) -> dict[str, int]:
    """The newest failure-index row id per stream: one indexed SQL query.

    Pages show failures from the index, which the ingestor fills a moment after the
    worker wrote ``{S}:failures``; this is how a cycle notices that moment.
    """
    names = sorted(set(streams))[:MAX_MARKED_STREAMS]
    if not names:
        return {}
    rows = (
        FailureRecord.objects.filter(stream__in=names)
        .values_list("stream")
        .annotate(newest=Max("id"))
        .order_by()
    )
    return dict(rows)


def _signature(
    surface: Surface,
    stamps: LiveStamps,
    marks: dict[str, int],
    overview_streams: tuple[str, ...],
) -> Any:
    stats = stamps.streams
    if surface.kind == "overview":
        return tuple((name, stats.get(name), marks.get(name)) for name in overview_streams)
    s = stats.get(surface.stream)
    mark = marks.get(surface.stream)
    if surface.kind == "entry":
        # A new entry on the stream does not change an older entry's state.
        return None if s is None else (s.groups, s.dlq_length, s.failures_length, mark)
    if surface.kind == "group":
        return (s, stamps.pending.get((surface.stream, surface.group)), mark)
    return (s, mark)


def surface_context(*, surface: Surface, client: redis.Redis) -> dict[str, Any]:
    """The page context of a surface's default view (first page, no filters)."""
    from dashboard.views import pages  # the pages module imports views machinery

    if surface.kind == "overview":
        return pages.overview_context(client=client)
    if surface.kind == "stream":
        return pages.stream_context(client=client, stream=surface.stream)
    if surface.kind == "group":
        return pages.group_context(client=client, stream=surface.stream, group=surface.group)
    return pages.entry_context(client=client, stream=surface.stream, entry_id=surface.entry_id)


def surface_path(surface: Surface) -> str:
    """The page URL path of a surface's default view, decoded like ``request.path``."""
    if surface.kind == "overview":
        url = reverse("dashboard:overview")
    elif surface.kind == "stream":
        url = reverse("dashboard:stream-detail", args=[surface.stream])
    elif surface.kind == "group":
        url = reverse("dashboard:group-detail", args=[surface.stream, surface.group])
    else:
        url = reverse("dashboard:entry-detail", args=[surface.stream, surface.entry_id])
    return unquote(url)


def surface_render(*, surface: Surface, context: dict[str, Any], perms: Perms) -> dict[str, str]:
    """Each partial of ``surface`` rendered for users with ``perms``: {partial name: html}.

    Rendered from a plain dict, not a RequestContext: no context processor runs, so no
    CSRF token is minted (a shared push must not carry one user's token; htmx sends
    the page's own token in the X-CSRFToken header). ``request`` is a stand-in that
    only knows the page's path, for "next" links.
    """
    template, partials = PARTIALS[surface.kind]
    user = _PermsUser(perms)
    request = HttpRequest()
    request.method = "GET"
    request.path = request.path_info = surface_path(surface)
    request.user = user  # type: ignore[assignment]
    # No "csrf_token" key: {% csrf_token %} renders nothing (with a warning under DEBUG).
    ctx = {**context, "user": user, "perms": PermWrapper(user), "request": request}
    return {name: render_to_string(f"{template}#{name}", ctx) for name in partials}


class FailureLog:
    """Logs repeated failures briefly: per key (a surface, or the cycle), at most once per
    ``FAILURE_LOG_EVERY_S``, with the traceback only the first time and, later, how many
    failures were not logged. Thread-safe enough for its two callers (the loop and the
    render thread): a lost count under a race costs one number in a log line."""

    #: Keys remembered; the oldest are forgotten past this (a key is a few hundred bytes).
    MAX_KEYS = 1024

    def __init__(self) -> None:
        self._logged_at: dict[Any, float] = {}
        self._unlogged: Counter[Any] = Counter()
        self._traced: set[Any] = set()

    def report(self, key: Any, what: str, exc: BaseException, *, traced: bool = True) -> None:
        """Log ``what`` failed; ``traced=False`` (a Redis outage: the message says it all)
        logs a warning without a traceback."""
        now = time.monotonic()
        last = self._logged_at.get(key)
        if last is not None and now - last < FAILURE_LOG_EVERY_S:
            self._unlogged[key] += 1
            return
        if len(self._logged_at) >= self.MAX_KEYS:
            oldest = min(self._logged_at, key=self._logged_at.__getitem__)
            self._logged_at.pop(oldest, None)
            self._unlogged.pop(oldest, None)
            self._traced.discard(oldest)
        self._logged_at[key] = now
        unlogged = self._unlogged.pop(key, 0)
        message = str(exc)[:FAILURE_MESSAGE_CHARS]
        line = f"{what} failed ({type(exc).__name__}: {message}); skipped"
        if unlogged:
            line += f", and {unlogged} more time{'s' if unlogged != 1 else ''} since last logged"
        if not traced:
            log.warning("%s", line)
        elif key in self._traced:
            log.error("%s", line)
        else:
            self._traced.add(key)
            log.error("%s; traceback (shown once):", line, exc_info=exc)


def _surface_label(surface: Surface) -> str:
    """A surface in a log line: its kind and names, each cut to a readable length."""
    parts = [surface.kind] + [
        p[:80] for p in (surface.stream, surface.group, surface.entry_id) if p
    ]
    return "live surface " + " ".join(repr(p) if i else p for i, p in enumerate(parts))


def _marks_fresh(streams: set[str]) -> dict[str, int]:
    close_old_connections()
    return failure_marks(streams=streams)


@dataclass
class _Outcome:
    signatures: dict[Surface, Any]
    marks: dict[str, int]
    html: dict[tuple[Surface, Perms], dict[str, str]]
    last_ids: dict[str, str]
    overview_streams: tuple[str, ...] | None
    polled: tuple[str, ...]


@dataclass
class LiveCounters:
    """What the broadcaster did, for tests and benchmarks."""

    cycles: int = 0
    renders: int = 0
    pushes: int = 0
    events: int = 0
    wakes_by_xread: int = 0


@dataclass
class Broadcaster:
    """See the module docstring. Use ``get_broadcaster()``; never one per socket."""

    token: str = field(default_factory=lambda: secrets.token_hex(4))
    counters: LiveCounters = field(default_factory=LiveCounters)
    #: The streams the last cycle polled (tests assert that closed pages are not polled).
    polled: tuple[str, ...] = ()
    _subs: Counter[tuple[Surface, Perms]] = field(default_factory=Counter)
    _html: dict[tuple[Surface, Perms], dict[str, str]] = field(default_factory=dict)
    _signatures: dict[Surface, Any] = field(default_factory=dict)
    _forced: set[tuple[Surface, Perms]] = field(default_factory=set)
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
    _stopping: bool = False
    _watch_failures_until: float = 0.0
    _marks: dict[str, int] = field(default_factory=dict)
    _failures: FailureLog = field(default_factory=FailureLog)

    # --- sockets ----------------------------------------------------------------------

    def group_name(self, surface: Surface, perms: Perms) -> str:
        """The channels group of a surface and permission set, in this process."""
        digest = hashlib.sha256(repr((surface, sorted(perms))).encode()).hexdigest()[:32]
        return f"ackboard.live.{self.token}.{digest}"

    def attach(self, surface: Surface, perms: Perms) -> str:
        """Count a socket on ``surface``; return the last rendered HTML, if any."""
        self._ensure_running()
        key = (surface, perms)
        self._subs[key] += 1
        cached = self._html.get(key)
        if cached is None:
            self._forced.add(key)
            self._poke()
            return ""
        return "".join(cached.values())

    def detach(self, surface: Surface, perms: Perms) -> None:
        key = (surface, perms)
        self._subs[key] -= 1
        if self._subs[key] <= 0:
            del self._subs[key]
            self._html.pop(key, None)
            if not any(s == surface for s, _ in self._subs):
                self._signatures.pop(surface, None)
            if not self._subs:
                self._last_ids = {}  # nothing open: the XREAD watcher goes quiet too

    def open_surfaces(self) -> set[Surface]:
        return {s for s, _ in self._subs}

    def sockets(self) -> int:
        return sum(self._subs.values())

    # --- lifecycle --------------------------------------------------------------------

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop and all(not t.done() for t in self._tasks):
            return
        if self._loop is not loop:
            # A new event loop (a test's, or after a restart): state from the old one is
            # meaningless there.
            self._subs.clear()
            self._html.clear()
            self._signatures.clear()
            self._forced.clear()
            self._dirty_streams.clear()
            self._last_ids.clear()
        for task in self._tasks:
            task.cancel()
        self._loop = loop
        self._tick = float(settings.ACKBOARD_LIVE_TICK)
        self._url = settings.ACKBOARD_REDIS_URL
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
        last_cycle = 0.0
        while True:
            deadline = next_tick
            if self._watch_failures_until > loop.time():
                deadline = min(deadline, loop.time() + FAILURE_WATCH_EVERY_S)
            try:
                await asyncio.wait_for(self._wake.wait(), max(0.0, deadline - loop.time()))
                await asyncio.sleep(COALESCE_S)
            except TimeoutError:
                if loop.time() >= next_tick:
                    next_tick = loop.time() + self._tick
                elif not await self._failures_ingested():
                    continue
            gap = MIN_INTERVAL_S - (loop.time() - last_cycle)
            if gap > 0:
                await asyncio.sleep(gap)
            self._wake.clear()
            if not self._subs:
                continue
            last_cycle = loop.time()
            try:
                await self._cycle()
            except redis.RedisError as exc:
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
        discover = any(s.kind == "overview" for s, _ in keys) and (
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
        layer = get_channel_layer()
        assert layer is not None, "CHANNEL_LAYERS is not configured"
        for key, partials in outcome.html.items():
            if key not in self._subs:
                continue  # every socket left while we rendered
            old = self._html.get(key, {})
            changed = [html for name, html in partials.items() if old.get(name) != html]
            self._html[key] = partials
            if changed:
                self.counters.pushes += 1
                message = {"type": "surface.update", "html": "".join(changed)}
                try:
                    await layer.group_send(self.group_name(*key), message)
                except Exception as exc:  # one group's send must not stop the others'
                    self._failures.report((key[0], "send"), _surface_label(key[0]) + " push", exc)

    async def _failures_ingested(self) -> bool:
        """Whether the failure index has rows for open streams newer than the last cycle's."""
        surfaces = self.open_surfaces()
        streams = {s.stream for s in surfaces if s.stream}
        if any(s.kind == "overview" for s in surfaces):
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

    def _work(
        self,
        keys: list[tuple[Surface, Perms]],
        old_signatures: dict[Surface, Any],
        forced: set[tuple[Surface, Perms]],
        dirty: set[str],
        discover: bool,
    ) -> _Outcome:
        """Poll, compare, render: runs in the broadcaster's thread (sync Redis, templates)."""
        close_old_connections()
        client = get_redis()
        surfaces = sorted({s for s, _ in keys})
        overview_streams = None
        if discover:
            # The overview's own listing (same allowlist, cap and companion rule).
            overview_streams, _, _ = selectors.stream_discover(
                client=client,
                patterns=tuple(settings.ACKBOARD_STREAMS),
                cap=settings.ACKBOARD_MAX_STREAMS,
            )
        shown = overview_streams if overview_streams is not None else self._overview_streams
        has_overview = any(s.kind == "overview" for s in surfaces)
        streams = {s.stream for s in surfaces if s.stream}
        if has_overview:
            streams.update(shown)
        groups = {(s.stream, s.group) for s in surfaces if s.kind == "group"}
        stamps = selectors.stream_stamps(client=client, streams=streams, groups=groups)
        marks = failure_marks(streams=streams)
        signatures = {s: _signature(s, stamps, marks, shown) for s in surfaces}
        html: dict[tuple[Surface, Perms], dict[str, str]] = {}
        for surface in surfaces:
            wanted = [
                perms
                for s, perms in keys
                if s == surface
                and (
                    (s, perms) in forced
                    or signatures[s] != old_signatures.get(s)
                    or s.stream in dirty
                    or (s.kind == "overview" and (dirty or overview_streams is not None))
                )
            ]
            if not wanted:
                continue
            try:
                context = surface_context(surface=surface, client=client)
                self.counters.renders += 1
                rendered = {
                    perms: surface_render(surface=surface, context=context, perms=perms)
                    for perms in wanted
                }
            except Http404:
                continue  # deleted or never existed; the page itself says so on reload
            except (redis.ConnectionError, redis.TimeoutError):
                raise  # Redis is away: every surface would fail; the cycle retries
            except Exception as exc:
                # This surface only: skipped (its sockets keep what they have), the others
                # go on. Its signature is kept, so it is tried again when its stream
                # changes or on the refresh, not on every tick.
                self._failures.report(surface, _surface_label(surface), exc)
                continue
            for perms, partials in rendered.items():
                html[(surface, perms)] = partials
        last_ids = {n: s.last_id for n, s in stamps.streams.items() if s.last_id is not None}
        return _Outcome(signatures, marks, html, last_ids, overview_streams, tuple(sorted(streams)))

    # --- wake-ups -----------------------------------------------------------------------

    def on_event(self, raw: bytes | str) -> None:
        """A pub/sub event: re-render its stream's surfaces now if it is one we react to."""
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if not isinstance(event, dict) or event.get("type") not in REACT_TO:
            return
        stream = event.get("stream")
        if not isinstance(stream, str):
            return
        # Every open surface of the stream, and the overview, which lists every stream.
        if any(s.stream == stream or s.kind == "overview" for s in self.open_surfaces()):
            self.counters.events += 1
            self._dirty_streams.add(stream)
            if event["type"] == "failure" and self._loop is not None:
                self._watch_failures_until = self._loop.time() + FAILURE_WATCH_FOR_S
            self._poke()

    async def _listen_events(self) -> None:
        backoff = 0.5
        while True:
            client = aioredis.Redis.from_url(self._url, socket_connect_timeout=2)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(EVENTS_CHANNEL)
                    backoff = 0.5
                    while True:
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=5.0
                        )
                        if message is not None and message.get("type") == "message":
                            self.on_event(message["data"])
            except redis.RedisError as exc:
                log.warning("live events: %s; resubscribing in %.1fs", exc, backoff)
            finally:
                await client.aclose()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    async def _watch_entries(self) -> None:
        """Wake the cycle as soon as an open stream gets a new entry (blocking XREAD).

        It reads from the last ids the cycle polled, so nothing added in between is
        missed, and after a hit it waits for the next cycle: an XADD storm costs one
        XREAD per cycle, not one per entry.
        """
        # Capped at 1 s so a stream opened meanwhile is watched soon: one idle XREAD a second.
        block_ms = max(100, int(min(self._tick, 1.0) * 1000))
        client = aioredis.Redis.from_url(
            self._url, socket_connect_timeout=2, socket_timeout=block_ms / 1000 + 5
        )
        try:
            while not self._stopping:
                ids = dict(self._last_ids)
                if not ids:
                    # Nothing polled yet: wait for the first cycle to learn the last ids.
                    waiter = self._polled_event
                    if waiter is not None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(waiter.wait(), block_ms / 1000)
                    continue
                try:
                    reply: Any = await client.xread(ids, count=1, block=block_ms)  # type: ignore[arg-type]
                except redis.RedisError as exc:
                    self._failures.report("xread", "live xread", exc, traced=False)
                    await asyncio.sleep(self._tick)
                    continue
                if not reply:
                    continue
                for name, _entries in reply:
                    self._dirty_streams.add(name.decode("utf-8", "surrogateescape"))
                self.counters.wakes_by_xread += 1
                # Taken before yielding to the loop, so it is the cycle this wake starts.
                waiter = self._polled_event
                self._poke()
                if waiter is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(waiter.wait(), self._tick * 2)
        finally:
            await client.aclose()


_broadcaster: Broadcaster | None = None


def get_broadcaster() -> Broadcaster:
    """This process's broadcaster (created on first use; started by the first socket)."""
    global _broadcaster
    if _broadcaster is None:
        _broadcaster = Broadcaster()
    return _broadcaster
