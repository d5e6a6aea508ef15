"""The production channels-redis layer, as dashboard/settings.py configures it, on real Redis.

channels-redis receives with a 5 s blocking pop (BZPOPMIN). With a bare URL the redis-py
connection inherits a 5 s read timeout, which loses that race: an idle receive raised
``TimeoutError: Timeout reading from …`` every 5-10 s, and each one killed a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from channels_redis.core import RedisChannelLayer

from dashboard import settings as production
from tests.redis_server import RedisServer


def _layer_config(url: str) -> dict[str, Any]:
    """The CONFIG of production's channels-redis layer, pointed at ``url``."""
    (config,) = [
        layer["CONFIG"]
        for layer in production.CHANNEL_LAYERS.values()
        if layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    ]
    hosts = [
        {**host, "address": url} if isinstance(host, dict) else url for host in config["hosts"]
    ]
    return {**config, "hosts": hosts}


@pytest_asyncio.fixture
async def layer(redis_url: str) -> AsyncIterator[RedisChannelLayer]:
    config = _layer_config(redis_url)
    # A unique prefix: nothing is flushed, and the keys expire (60 s) by themselves.
    config["prefix"] = f"{config['prefix']}t{time.monotonic_ns()}:"
    layer = RedisChannelLayer(**config)
    yield layer
    await layer.flush()


class IdleReceiveTests:
    async def test_idle_receive_outlasts_the_blocking_pop(self, layer: RedisChannelLayer) -> None:
        channel = await layer.new_channel()
        receiving = asyncio.ensure_future(layer.receive(channel))
        # Two full blocking pops and then some: each used to end in a read timeout.
        done, _ = await asyncio.wait([receiving], timeout=2 * layer.brpop_timeout + 1.5)
        if done:
            raise AssertionError(f"an idle receive ended by itself: {receiving.exception()!r}")
        await layer.send(channel, {"type": "surface.update", "html": "<p>after</p>"})
        message = await asyncio.wait_for(receiving, 3)
        assert message["html"] == "<p>after</p>"


class RedisRestartTests:
    async def test_layer_works_again_after_a_redis_restart(self) -> None:
        server = RedisServer().start()
        layer = RedisChannelLayer(**_layer_config(server.url))
        try:
            channel = await layer.new_channel()
            await layer.group_add("ackboard.session.test", channel)
            await layer.group_send("ackboard.session.test", {"type": "session.ended"})
            assert (await asyncio.wait_for(layer.receive(channel), 3))["type"] == "session.ended"

            server.kill()
            server.start()  # same port, empty: whatever the layer kept in Redis is gone
            started = time.monotonic()
            # Pooled connections to the old server are stale; the layer reconnects by itself.
            await layer.group_add("ackboard.session.test", channel)
            await layer.group_send("ackboard.session.test", {"type": "session.ended"})
            message = await asyncio.wait_for(layer.receive(channel), 3)
            assert message["type"] == "session.ended"
            assert time.monotonic() - started < 3
        finally:
            with contextlib.suppress(Exception):
                await layer.flush()
            server.cleanup()

    async def test_waiting_receive_survives_a_quick_redis_restart(self) -> None:
        server = RedisServer().start()
        layer = RedisChannelLayer(**_layer_config(server.url))
        try:
            channel = await layer.new_channel()
            receiving = asyncio.ensure_future(layer.receive(channel))
            await asyncio.sleep(0.5)  # blocked in BZPOPMIN
            server.kill()
            server.start()
            await asyncio.sleep(0.5)
            assert not receiving.done(), f"the receive failed: {receiving.exception()!r}"
            await layer.send(channel, {"type": "session.ended"})
            message = await asyncio.wait_for(receiving, layer.brpop_timeout + 3)
            assert message["type"] == "session.ended"
        finally:
            with contextlib.suppress(Exception):
                await layer.flush()
            server.cleanup()
