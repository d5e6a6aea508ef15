"""FastStream's own consumer loop with ``AckboardFastStreamMiddleware``, on a private Redis.

A ``RedisBroker`` runs two ``StreamSub`` subscribers of one group, as FastStream's docs
set up retries: one reads new entries, one reclaims idle ones (``min_idle_time``,
XAUTOCLAIM). They handle successes, a transient failure that succeeds on its second
delivery and a poison message that fails every time. Redis then holds no ack of a
failed delivery, the failure log exactly those attempts with their tracebacks, and the
poison entry in the dead-letter stream; Ackboard's pages show the same, and the
consumers as workers. A pause stops new handlers until the resume.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
import redis
from django.test import Client
from faststream import FastStream
from faststream.redis import RedisBroker, StreamSub

from queue_core.adapters.faststream import AckboardFastStreamMiddleware
from queue_core.clock import now_ms
from queue_core.control import heartbeats_read, pause_clear, pause_set
from queue_core.keys import stream_keys
from tests.adapters.pages import pages_check, settled_check
from tests.waiting import wait_until_async

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("page_settings")]

GROUP = "billing"
MAX_DELIVERIES = 3


class CardDeclined(Exception):
    pass


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    await wait_until_async(predicate, timeout, interval=0.02)


def make_broker(
    redis_url: str, stream: str, handle: Any
) -> tuple[RedisBroker, AckboardFastStreamMiddleware]:
    broker = RedisBroker(redis_url)
    ackboard = AckboardFastStreamMiddleware(broker, max_deliveries=MAX_DELIVERIES, heartbeat_ms=200)
    broker.subscriber(stream=StreamSub(stream, group=GROUP, consumer="fs-new"))(handle)
    broker.subscriber(
        stream=StreamSub(
            stream, group=GROUP, consumer="fs-retry", min_idle_time=300, polling_interval=20
        )  # fmt: skip
    )(handle)
    return broker, ackboard


class FastStreamAdapterTests:
    def test_failures_recorded_poison_dead_lettered_pages_show_them(
        self, viewer: Client, r: redis.Redis, redis_url: str, prefix: str
    ) -> None:
        stream = prefix + "orders"
        seen: Counter[str] = Counter()

        async def charge(body: dict[str, Any]) -> None:
            order = body["order"]
            seen[order] += 1
            if order == "poison":
                raise CardDeclined(f"card declined for {order}")
            if order == "flaky" and seen[order] == 1:
                raise TimeoutError("payment gateway timed out")

        orders = ["ok-1", "flaky", "ok-2", "poison", "ok-3"]
        ids: dict[str, str] = {}

        async def run() -> None:
            broker, ackboard = make_broker(redis_url, stream, charge)
            # Wired as docs/adapters-faststream.md says.
            app = FastStream(broker, after_startup=[ackboard.start],
                             after_shutdown=[ackboard.stop])  # fmt: skip
            async with app:
                for order in orders:
                    await broker.publish({"order": order}, stream=stream)
                    ids[order] = r.xrevrange(stream, count=1)[0][0].decode()
                # Every entry's first delivery is over: the two that failed stay pending.
                await wait_for(lambda: all(seen[o] for o in orders))
                held = r.xpending_range(stream, GROUP, min="-", max="+", count=10)
                assert {row["message_id"].decode() for row in held} >= {ids["flaky"], ids["poison"]}
                await wait_for(lambda: r.xlen(stream_keys(stream).dlq) == 1)
                await wait_for(lambda: not r.xpending(stream, GROUP)["pending"])
                beats = heartbeats_read(client=r, stream=stream, group=GROUP)
                assert {b.consumer for b in beats if b.live(now_ms())} == {"fs-new", "fs-retry"}

        asyncio.run(run())
        assert seen == {"ok-1": 1, "ok-2": 1, "ok-3": 1, "flaky": 2, "poison": MAX_DELIVERIES}
        failures = [(ids["flaky"], 1, "TimeoutError")] + [
            (ids["poison"], n, "CardDeclined") for n in range(1, MAX_DELIVERIES + 1)
        ]
        settled_check(r, stream, GROUP, failures=failures, poison=ids["poison"], pending=set())
        tracebacks = [f[b"traceback"].decode() for _, f in r.xrange(stream_keys(stream).failures)]
        assert all("in charge" in tb for tb in tracebacks)
        beats = heartbeats_read(client=r, stream=stream, group=GROUP)
        assert all(b.stopped for b in beats)
        pages_check(viewer, redis_url, stream, GROUP, failures=failures, poison=ids["poison"],
                    pending=set(), consumers={"fs-new", "fs-retry"},
                    max_deliveries=MAX_DELIVERIES)  # fmt: skip

    async def test_pause_holds_new_handlers_until_resumed(
        self, r: redis.Redis, redis_url: str, prefix: str
    ) -> None:
        stream = prefix + "orders"
        done: list[str] = []

        async def charge(body: dict[str, Any]) -> None:
            done.append(body["order"])

        broker, ackboard = make_broker(redis_url, stream, charge)
        async with broker:
            await broker.start()
            pause = pause_set(client=r, stream=stream, group=GROUP, by="ops", reason="deploy",
                              until_ms=None, now_ms=now_ms())  # fmt: skip
            await ackboard.start()
            await broker.publish({"order": "held"}, stream=stream)
            # A window in which the paused handler must not run, past the retry subscriber's
            # min_idle_time (its reclaim of the waiting entry is part of what is checked).
            await asyncio.sleep(0.6)
            assert done == []  # read, but waiting: pending in the consumer's name
            assert r.xpending(stream, GROUP)["pending"] == 1

            def confirmed() -> bool:
                beats = heartbeats_read(client=r, stream=stream, group=GROUP)
                return len(beats) == 2 and all(b.confirms(pause) for b in beats)

            await wait_for(confirmed)
            pause_clear(client=r, stream=stream, group=GROUP)
            await wait_for(lambda: not r.xpending(stream, GROUP)["pending"])
            await asyncio.sleep(0.3)  # a window for a (wrong) second run of the reclaimed copy
            await ackboard.stop()
        # The retry subscriber reclaimed the waiting entry during the pause (it was idle
        # past min_idle_time): only the holder's copy ran.
        assert done == ["held"]

    async def test_an_acking_policy_is_refused(self, redis_url: str, prefix: str) -> None:
        from faststream.middlewares import AckPolicy

        broker = RedisBroker(redis_url)
        ackboard = AckboardFastStreamMiddleware(broker)
        sub = StreamSub(prefix + "orders", group=GROUP, consumer="c")
        broker.subscriber(stream=sub, ack_policy=AckPolicy.ACK)(lambda body: None)
        async with broker:
            with pytest.raises(ValueError, match="acks failed messages"):
                await ackboard.start()
