"""The production "shared" channel layer, as dashboard/settings.py configures it, on real Redis.

It is channels-redis's pub/sub layer (PUBLISH/SUBSCRIBE, no keys), so the same settings
work on a standalone server and on a Redis Cluster: a notice published through one node
reaches a web process subscribed on another. An idle subscription must outlast the
connection's read timeout, and a subscriber must hear notices again after a quick Redis
restart (redis-py re-subscribes when it reconnects).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
import redis
from channels_redis.pubsub import RedisPubSubChannelLayer

from dashboard import settings as production
from tests.redis_cluster import RedisCluster
from tests.redis_server import RedisServer
from tests.waiting import wait_until_async

BACKEND = "channels_redis.pubsub.RedisPubSubChannelLayer"


def _layer_config(url: str) -> dict[str, Any]:
    """The CONFIG of production's Redis layer, pointed at ``url``, with a unique prefix."""
    (config,) = [
        layer["CONFIG"]
        for layer in production.CHANNEL_LAYERS.values()
        if layer["BACKEND"] == BACKEND
    ]
    hosts = [
        {**host, "address": url} if isinstance(host, dict) else url for host in config["hosts"]
    ]
    return {**config, "hosts": hosts, "prefix": f"{config['prefix']}t{time.monotonic_ns()}:"}


@contextlib.asynccontextmanager
async def _layer(url: str, prefix: str | None = None) -> AsyncIterator[RedisPubSubChannelLayer]:
    config = _layer_config(url)
    if prefix is not None:
        config["prefix"] = prefix
    layer = RedisPubSubChannelLayer(**config)
    try:
        yield layer
    finally:
        with contextlib.suppress(Exception):
            await layer.flush()


@pytest_asyncio.fixture
async def layer(redis_url: str) -> AsyncIterator[RedisPubSubChannelLayer]:
    async with _layer(redis_url) as layer:
        yield layer


class SettingsTests:
    def test_shared_layer_is_pub_sub_on_the_channels_url(self) -> None:
        shared = production.CHANNEL_LAYERS["shared"]
        assert shared["BACKEND"] == BACKEND
        assert shared["CONFIG"]["hosts"][0]["address"] == production.ACKBOARD_CHANNELS_URL
        # An explicit read timeout, never the bare-URL default.
        assert shared["CONFIG"]["hosts"][0]["socket_timeout"] == production._LAYER_READ_S


class IdleReceiveTests:
    async def test_idle_receive_outlasts_the_read_timeout(
        self, layer: RedisPubSubChannelLayer
    ) -> None:
        channel = await layer.new_channel()
        await layer.group_add("ackboard.session.idle", channel)
        receiving = asyncio.ensure_future(layer.receive(channel))
        done, _ = await asyncio.wait([receiving], timeout=production._LAYER_READ_S + 1.5)
        if done:
            raise AssertionError(f"an idle receive ended by itself: {receiving.exception()!r}")
        await layer.group_send("ackboard.session.idle", {"type": "session.ended"})
        message = await asyncio.wait_for(receiving, 3)
        assert message["type"] == "session.ended"


class RedisRestartTests:
    async def test_waiting_receive_survives_a_quick_redis_restart(self) -> None:
        server = RedisServer().start()
        try:
            prefix = f"ackboard:channels:t{time.monotonic_ns()}:"
            async with _layer(server.url, prefix) as layer, _layer(server.url, prefix) as sender:
                channel = await layer.new_channel()
                await layer.group_add("ackboard.session.test", channel)
                receiving = asyncio.ensure_future(layer.receive(channel))
                # Both subscriptions (the channel's and its group's) reached the server.
                watch = redis.Redis.from_url(server.url)
                await wait_until_async(lambda: len(watch.pubsub_channels(prefix + "*")) == 2,
                                       what="the subscriptions")  # fmt: skip
                watch.close()
                assert not receiving.done()
                server.kill()
                server.start()  # same port, empty: every subscription is gone with it

                async def notice_arrived() -> bool:
                    await sender.group_send("ackboard.session.test", {"type": "session.ended"})
                    return bool(receiving.done())

                await wait_until_async(notice_arrived, timeout=5, interval=0.2,
                                       what="a notice after the restart")  # fmt: skip
                assert receiving.result()["type"] == "session.ended"
        finally:
            server.cleanup()


class ClusterTests:
    async def test_a_notice_published_via_one_node_reaches_a_subscriber_on_another(
        self, redis_cluster: RedisCluster
    ) -> None:
        ports = redis_cluster.primary_ports()
        here, there = (f"redis://127.0.0.1:{p}/0" for p in ports[:2])
        prefix = f"ackboard:channels:t{time.monotonic_ns()}:"
        # Two web processes: one subscribed through one node, one sending through another.
        async with _layer(here, prefix) as listening, _layer(there, prefix) as sending:
            channel = await listening.new_channel()
            await listening.group_add("ackboard.session.abc", channel)
            await sending.group_send("ackboard.session.abc", {"type": "session.ended"})
            message = await asyncio.wait_for(listening.receive(channel), 3)
            assert message["type"] == "session.ended"
            # And the other way round, on a specific channel.
            reply = await sending.new_channel()
            receiving = asyncio.ensure_future(sending.receive(reply))
            # Subscribed on its node before the reply is published through the other.
            node = redis.Redis.from_url(there)
            await wait_until_async(lambda: node.pubsub_numsub(reply)[0][1] == 1,
                                   what="the reply channel subscribed")  # fmt: skip
            node.close()
            await listening.send(reply, {"type": "pong"})
            assert (await asyncio.wait_for(receiving, 3))["type"] == "pong"
