"""The live broadcaster on a 3-primary Redis Cluster: events from any node, XADDs on any slot.

Real sockets through the ASGI application (``tests/dashboard/live/sockets.py``), settings
pointed at one node of the session cluster, and a long tick (5 s) so that a push in under
half of it proves a wake-up (an event or the XREAD watcher), not the poll. Events and
writes are sent with plain clients straight to the node that owns the stream's slot,
which is never the node the broadcaster subscribed on. The node-death test starts a
cluster of its own, since it kills a node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis.crc import key_slot

from dashboard.live.broadcaster import Broadcaster
from dashboard.routing import live_path
from queue_core.connection import Client, connect
from queue_core.events import event_publish
from tests.dashboard.live.sockets import CookieFor, live_socket, receive_until, xread_blocked
from tests.factories import add_entries, make_pending
from tests.redis_cluster import RedisCluster
from tests.redis_server import RedisUnavailable
from tests.servers import started
from tests.waiting import wait_until_async

pytestmark = pytest.mark.django_db(transaction=True)

TICK_S = 5.0


@pytest.fixture
def on_cluster(live_settings: Any, cluster_url: str, cprefix: str) -> Any:
    live_settings.ACKBOARD_REDIS_URL = cluster_url
    live_settings.ACKBOARD_STREAMS = (cprefix + "*",)
    live_settings.ACKBOARD_LIVE_TICK = TICK_S
    return live_settings


def names_off(cluster: RedisCluster, prefix: str, avoid: int, n: int) -> list[str]:
    """``n`` stream names under ``prefix`` on primaries other than ``avoid``, on
    different primaries when there are enough."""
    chosen: dict[int, str] = {}
    for i in range(100_000):
        name = f"{prefix}s{i}"
        port = cluster.port_for_slot(key_slot(name.encode()))
        if port != avoid and port not in chosen:
            chosen[port] = name
            if len(chosen) == n:
                return list(chosen.values())
    raise AssertionError("could not spread names over the primaries")


async def subscribed(broadcaster: Broadcaster, timeout: float = 10.0) -> tuple[str, int]:
    on: tuple[str, int] = await wait_until_async(lambda: broadcaster.subscribed, timeout,
                                                 "the broadcaster's subscription")  # fmt: skip
    return on


def showing(text: str) -> Any:
    return lambda message: text in message


def first_primary(cluster: RedisCluster) -> int:
    """The node the broadcaster subscribes on first: primaries first, then by address."""
    return min(cluster.primary_ports())


class ClusterEventTests:
    async def test_an_event_published_on_another_primary_is_pushed(
        self,
        on_cluster: Any,
        broadcaster: Broadcaster,
        headers_for: CookieFor,
        redis_cluster: RedisCluster,
        rc: Client,
        cprefix: str,
    ) -> None:
        (stream,) = names_off(redis_cluster, cprefix, first_primary(redis_cluster), 1)
        owner = redis_cluster.port_for_slot(key_slot(stream.encode()))
        first, second = make_pending(rc, stream, "billing", "w1", 2)
        ws = live_socket(live_path("group", stream=stream, group="billing"),
                         await headers_for("view_queues"))  # fmt: skip
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="pending-table"' in m and first in m)
        on_node = await subscribed(broadcaster)
        assert on_node[1] != owner, "subscribed on a node that does not own the stream"
        plain = redis_cluster.node(owner).client()
        await xread_blocked(plain)  # the watcher is blocked on its XREAD
        # An operator's ack, done and announced on the slot owner only: no new entry,
        # so only the event can wake the broadcaster before its 5 s tick.
        plain.xack(stream, "billing", first)
        event_publish(client=plain, type="action", stream=stream, group="billing")
        plain.close()
        started = time.monotonic()
        update = await receive_until(
            ws, lambda m: 'id="pending-table"' in m and first not in m, timeout=TICK_S - 1
        )
        assert time.monotonic() - started < TICK_S / 2, "woken by the event, not the tick"
        assert second in update
        assert broadcaster.counters.events >= 1
        await ws.disconnect()

    async def test_new_entries_on_two_primaries_wake_the_cycle(
        self,
        on_cluster: Any,
        broadcaster: Broadcaster,
        headers_for: CookieFor,
        redis_cluster: RedisCluster,
        rc: Client,
        cprefix: str,
    ) -> None:
        streams = names_off(redis_cluster, cprefix, -1, 2)
        headers = await headers_for("view_queues")
        sockets = []
        for stream in streams:
            add_entries(rc, stream, 1)
            ws = live_socket(live_path("stream", stream=stream), headers)
            assert (await ws.connect())[0]
            await receive_until(ws, lambda m: 'id="stream-facts"' in m)
            sockets.append(ws)
        # One XREAD per slot, each blocked on its last id.
        for port in {redis_cluster.port_for_slot(key_slot(s.encode())) for s in streams}:
            node = redis_cluster.node(port).client()
            await xread_blocked(node)
            node.close()
        for stream, ws in zip(streams, sockets, strict=True):
            wakes = broadcaster.counters.wakes_by_xread
            started = time.monotonic()
            (new_id,) = add_entries(rc, stream, 1)
            await receive_until(ws, showing(new_id), timeout=TICK_S - 1)
            assert time.monotonic() - started < TICK_S / 2, f"{stream}: woken, not ticked"
            assert broadcaster.counters.wakes_by_xread > wakes
            # The watcher blocks again after the cycle. (Not observable per node: the
            # XREAD still blocked on the other primary looks the same as a new one.)
            await asyncio.sleep(0.5)  # a window for the watcher to block again
        for ws in sockets:
            await ws.disconnect()


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    with started(RedisCluster(), RedisUnavailable) as instance:
        yield instance


class SubscriptionFailoverTests:
    async def test_the_subscription_moves_when_its_node_dies(
        self,
        live_settings: Any,
        broadcaster: Broadcaster,
        headers_for: CookieFor,
        own_cluster: RedisCluster,
        prefix: str,
    ) -> None:
        victim = first_primary(own_cluster)
        # The URL names a node that stays up; the stream lives on a third one.
        seed = max(own_cluster.primary_ports())
        live_settings.ACKBOARD_REDIS_URL = own_cluster.node(seed).url
        live_settings.ACKBOARD_STREAMS = (prefix + "*",)
        live_settings.ACKBOARD_LIVE_TICK = TICK_S
        (stream,) = names_off(own_cluster, prefix, victim, 1)
        client = connect(own_cluster.node(seed).url, socket_timeout=10)
        first, second = make_pending(client, stream, "billing", "w1", 2)
        ws = live_socket(live_path("group", stream=stream, group="billing"),
                         await headers_for("view_queues"))  # fmt: skip
        assert (await ws.connect())[0]
        await receive_until(ws, lambda m: 'id="pending-table"' in m and first in m)
        assert (await subscribed(broadcaster))[1] == victim

        replica = own_cluster.replica_of(victim)
        own_cluster.kill(victim)
        own_cluster.failover_takeover(replica)
        moved = await wait_until_async(
            lambda: broadcaster.subscribed is not None and broadcaster.subscribed[1] != victim
            and broadcaster.subscribed, 15, "the subscription to move", interval=0.05,
        )  # fmt: skip
        now_on = moved[1]
        await asyncio.sleep(0.3)  # the cluster settles after the takeover (checked next)
        own_cluster.wait_until_ok(timeout=15)
        client.xack(stream, "billing", first)
        # Announced on a live node other than the new subscription's (a replica will do).
        publisher = next(n for n in own_cluster.nodes if n.alive and n.port != now_on)
        plain = publisher.client()
        event_publish(client=plain, type="action", stream=stream, group="billing")
        plain.close()
        started = time.monotonic()
        update = await receive_until(
            ws, lambda m: 'id="pending-table"' in m and first not in m, timeout=TICK_S - 1
        )
        assert time.monotonic() - started < TICK_S / 2, "woken by the event, not the tick"
        assert second in update
        await ws.disconnect()
        client.close()
