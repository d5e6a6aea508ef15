"""What wakes the live broadcaster before its tick: pub/sub events and new entries.

Owns the broadcaster's two listening tasks (``dashboard.live.broadcaster`` runs them):

- the events subscription on ``queue_core.keys.EVENTS_CHANNEL``: ``failure``,
  ``dead_letter`` and ``action`` events mark their stream dirty and wake the cycle; the
  rates sampler's ``rates`` event wakes the open stream and group pages. Anything else,
  or what is not readable JSON, is ignored (warned of at most once a minute). On a
  cluster it subscribes on one node and, when that node fails, on another;
- the new-entries watcher: one blocking XREAD over the open streams from the last ids
  polled (on a cluster, one per hash slot, at most MAX_WATCHED_SLOTS), which marks the
  streams that got entries dirty and wakes the cycle, then waits for that cycle.

A mixin of ``Broadcaster``: it reads and marks the broadcaster's state, never renders,
never pushes and never writes to Redis. Cost: one subscribed connection, and one idle
XREAD a second per watched slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException

from dashboard.live.registry import Surface
from dashboard.runtime.connection import get_redis
from dashboard.runtime.logs import FailureLog, log
from queue_core.backoff import Backoff
from queue_core.bounded_json import json_read
from queue_core.keys import EVENTS_CHANNEL

T = TypeVar("T")


@dataclass
class LiveCounters:
    """What the broadcaster did, for tests and benchmarks."""

    cycles: int = 0
    renders: int = 0
    pushes: int = 0
    events: int = 0
    wakes_by_xread: int = 0


#: Event types that make the broadcaster re-render at once rather than on the next tick.
REACT_TO = frozenset({"failure", "dead_letter", "action"})
#: The rates sampler's one event per tick (``dashboard.insight.rates.sampler.RATES_EVENT``), and
#: the kinds of page whose pushed partials carry the chart's newest point.
RATES_EVENT = "rates"
RATES_KINDS = frozenset({"stream", "group"})
#: After a failure event, the failure index is checked for this long (every
#: ``broadcaster.FAILURE_WATCH_EVERY_S``) to catch the row the ingestor writes a moment later.
FAILURE_WATCH_FOR_S = 2.0
#: On a cluster, blocking XREADs at once (one per hash slot, each holding a connection).
MAX_WATCHED_SLOTS = 16
#: Errors that mean Redis (or the cluster node serving a slot) is away for now.
REDIS_AWAY = (redis.RedisError, RedisClusterException)


def _is_cluster() -> bool:
    return isinstance(get_redis(), RedisCluster)


def _subscribe_node(avoid: tuple[str, int] | None) -> tuple[str, int]:
    """A cluster node to subscribe on: the next one after ``avoid`` (the node that just
    failed; the slot map is read again first), primaries first. Any node will do:
    classic PUBLISH reaches every node of the cluster."""
    client = get_redis()
    assert isinstance(client, RedisCluster)
    if avoid is not None:
        try:
            client.nodes_manager.initialize()
        except REDIS_AWAY as exc:
            log.warning("live events: cannot re-read the cluster's nodes: %s", exc)
    nodes = sorted(
        (node.server_type != "primary", str(node.host), int(node.port))
        for node in client.get_nodes()  # type: ignore[no-untyped-call]
    )
    addresses = [(host, port) for _, host, port in nodes]
    if not addresses:
        raise RedisClusterException("the cluster client knows no node")
    if avoid in addresses:
        at = addresses.index(avoid)
        addresses = addresses[at + 1 :] + addresses[: at + 1]
    return addresses[0]


def _by_slot(ids: dict[str, str], first: set[str]) -> list[dict[str, str]]:
    """``ids`` split into one XREAD per hash slot, the groups holding ``first`` streams
    first, at most MAX_WATCHED_SLOTS of them."""
    groups: dict[int, dict[str, str]] = {}
    for name, last_id in ids.items():
        groups.setdefault(key_slot(name.encode("utf-8", "surrogateescape")), {})[name] = last_id
    ordered = sorted(groups.values(), key=lambda g: (not (first & g.keys()), min(g)))
    return ordered[:MAX_WATCHED_SLOTS]


class WakeUps:
    """The broadcaster's listeners (see the module docstring); ``Broadcaster`` holds the
    state they read and mark, declared here for the type checker."""

    counters: LiveCounters
    subscribed: tuple[str, int] | None
    _dirty_streams: set[str]
    _last_ids: dict[str, str]
    _loop: asyncio.AbstractEventLoop | None
    _polled_event: asyncio.Event | None
    _tick: float
    _url: str
    _cluster: bool | None
    _stopping: bool
    _watch_failures_until: float
    _failures: FailureLog
    _rates_at: float | None

    if TYPE_CHECKING:

        def _poke(self) -> None: ...

        def open_surfaces(self) -> set[Surface]: ...

        async def _in_thread(self, fn: Callable[..., T], *args: Any) -> T: ...

    def on_event(self, raw: bytes | str) -> None:
        """A pub/sub event: re-render its stream's surfaces now if it is one we react to.

        Anyone who can PUBLISH may send anything: what is not readable JSON (malformed,
        nested too deep, too long) is ignored, with a warning at most once a minute."""
        try:
            event = json_read(raw) if isinstance(raw, str | bytes) else None
        except ValueError as exc:
            self._failures.warn(
                "unreadable-event",
                "live: ignored an event on %s that is not readable JSON (%s)",
                EVENTS_CHANNEL,
                str(exc)[:200],
            )
            return
        if isinstance(event, dict) and event.get("type") == RATES_EVENT:
            self._on_rates(event)
            return
        if not isinstance(event, dict) or event.get("type") not in REACT_TO:
            return
        stream = event.get("stream")
        if not isinstance(stream, str):
            return
        if any(s.shows(stream) for s in self.open_surfaces()):
            self.counters.events += 1
            self._dirty_streams.add(stream)
            if event["type"] == "failure" and self._loop is not None:
                self._watch_failures_until = self._loop.time() + FAILURE_WATCH_FOR_S
            self._poke()

    def _event_guarded(self, raw: Any) -> None:
        """``on_event``, whose failure (a bug a hostile event found) costs that event only:
        the subscription, and the live updates of every page, go on."""
        try:
            self.on_event(raw)
        except Exception as exc:
            self._failures.report("event", "live: handling an event", exc)

    def _on_rates(self, event: dict[str, Any]) -> None:
        """The sampler's tick: the stream and group pages' signatures change with it."""
        at = event.get("at")
        if not isinstance(at, int | float) or isinstance(at, bool) or not math.isfinite(at):
            return
        if at == self._rates_at:
            return
        self._rates_at = float(at)
        if any(s.kind in RATES_KINDS for s in self.open_surfaces()):
            self.counters.events += 1
            self._poke()

    async def is_cluster(self) -> bool:
        """Whether the configured Redis is a cluster (asked once per start, in the thread)."""
        if self._cluster is None:
            self._cluster = await self._in_thread(_is_cluster)
        return self._cluster

    async def _listen_events(self) -> None:
        """Subscribe to the events channel; on a failure, back off and subscribe again
        (on a cluster, on another node: ``_subscribe_node``)."""
        backoff = Backoff(base=0.5, cap=10.0)
        failed: tuple[str, int] | None = None
        while True:
            address: tuple[str, int] | None = None
            client: aioredis.Redis | None = None
            try:
                if await self.is_cluster():
                    address = await self._in_thread(_subscribe_node, failed)
                client = self._subscriber(address)
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(EVENTS_CHANNEL)
                    backoff.succeeded()
                    self.subscribed = address
                    if address is not None:
                        log.info("live events: subscribed on cluster node %s:%d", *address)
                    while True:
                        message = await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=5.0
                        )
                        if message is not None and message.get("type") == "message":
                            self._event_guarded(message["data"])
            except REDIS_AWAY as exc:
                failed, self.subscribed = address, None
                wait = backoff.failed()
                log.warning("live events: %s; resubscribing in %.1fs", exc, wait)
            finally:
                if client is not None:
                    await client.aclose()
            await asyncio.sleep(wait)

    def _subscriber(self, address: tuple[str, int] | None) -> aioredis.Redis:
        """A plain client on the URL's server, or on one cluster node (same credentials)."""
        pool = aioredis.ConnectionPool.from_url(self._url, socket_connect_timeout=2)
        if address is not None:
            pool.connection_kwargs.update(host=address[0], port=address[1])
        return aioredis.Redis.from_pool(pool)

    async def _watch_entries(self) -> None:
        """Wake the cycle as soon as an open stream gets a new entry (blocking XREAD).

        It reads from the last ids the cycle polled, so nothing added in between is
        missed, and after a hit it waits for the next cycle: an XADD storm costs one
        XREAD per cycle, not one per entry.
        """
        # Capped at 1 s so a stream opened meanwhile is watched soon: one idle XREAD a second.
        block_ms = max(100, int(min(self._tick, 1.0) * 1000))
        options: dict[str, Any] = {
            "socket_connect_timeout": 2,
            "socket_timeout": block_ms / 1000 + 5,
        }
        client: aioredis.Redis | aiocluster.RedisCluster | None = None
        try:
            while not self._stopping:
                ids = dict(self._last_ids)
                if not ids:
                    # Nothing polled yet: wait for the first cycle to learn the last ids.
                    await self._next_cycle(self._polled_event, block_ms / 1000)
                    continue
                try:
                    if client is None:
                        client = await self._xread_client(options)
                    groups = [ids]
                    if isinstance(client, aiocluster.RedisCluster):
                        focused = {s.stream for s in self.open_surfaces() if s.stream}
                        groups = _by_slot(ids, focused)
                    woken = await self._xread_first(client, groups, block_ms)
                except REDIS_AWAY as exc:
                    self._failures.report("xread", "live xread", exc, traced=False)
                    await asyncio.sleep(self._tick)
                    continue
                if woken is None:
                    continue
                # Taken before yielding to the loop, so it is the cycle this wake starts.
                waiter, rest = woken
                await asyncio.gather(*rest, return_exceptions=True)
                await self._next_cycle(waiter, self._tick * 2)
        finally:
            if client is not None:
                await client.aclose()

    async def _xread_client(
        self, options: dict[str, Any]
    ) -> aioredis.Redis | aiocluster.RedisCluster:
        """The watcher's client: a cluster client on a cluster (asked of the server)."""
        if await self.is_cluster():
            return aiocluster.RedisCluster.from_url(self._url, **options)
        return aioredis.Redis.from_url(self._url, **options)

    async def _xread_first(
        self,
        client: aioredis.Redis | aiocluster.RedisCluster,
        groups: list[dict[str, str]],
        block_ms: int,
    ) -> tuple[asyncio.Event | None, set[asyncio.Task[Any]]] | None:
        """Block on one XREAD per group (one, on a single node); at the first reply with
        entries, mark its streams dirty and wake the cycle. Returns None when every read
        came back empty, else the cycle's event and the reads still blocked (they end
        within ``block_ms`` by themselves: cancelling redis-py's asyncio client inside a
        blocking read can leave the loop hanging). Raises the first read's Redis error.
        """
        pending: set[asyncio.Task[Any]] = {
            asyncio.ensure_future(client.xread(g, count=1, block=block_ms))  # type: ignore[arg-type]
            for g in groups
        }
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                replies = [task.result() for task in done]  # raises a read's error
                hits = [name for reply in replies if reply for name, _entries in reply]
                if hits:
                    for name in hits:
                        self._dirty_streams.add(name.decode("utf-8", "surrogateescape"))
                    self.counters.wakes_by_xread += 1
                    waiter = self._polled_event
                    self._poke()
                    return waiter, pending
            return None
        except BaseException:
            await asyncio.gather(*pending, return_exceptions=True)
            raise

    @staticmethod
    async def _next_cycle(waiter: asyncio.Event | None, timeout: float) -> None:
        """Wait (at most ``timeout``) for the cycle ``waiter`` belongs to to end."""
        if waiter is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), timeout)
