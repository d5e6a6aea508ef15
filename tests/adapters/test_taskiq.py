"""taskiq's own receiver with ``AckboardTaskiqMiddleware`` on a ``RedisStreamBroker``, on a
private Redis.

taskiq's ``Receiver`` (``run_receiver_task``, what ``taskiq worker`` runs) takes
successes, a transient failure that succeeds on its second delivery and a poison task
that fails every time. taskiq acks failed tasks by itself; with the middleware nothing
failed is acked (under taskiq's default ``when_saved`` and under ``when_received``, which
acks before the task runs), the failure log holds exactly those attempts with their
tracebacks and the poison entry is in the dead-letter stream; Ackboard's pages show the
same, and the consumer as a worker. A pause stops new tasks until the resume.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio
from django.test import Client
from taskiq.acks import AcknowledgeType
from taskiq.api import run_receiver_task
from taskiq_redis import RedisStreamBroker

from queue_core.adapters.taskiq import AckboardTaskiqMiddleware
from queue_core.clock import now_ms
from queue_core.control import heartbeats_read, pause_clear, pause_set
from queue_core.keys import stream_keys
from tests.adapters.pages import pages_check, settled_check
from tests.waiting import wait_until_async

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("page_settings")]

GROUP = "billing"
CONSUMER = "tq-worker-1"
MAX_DELIVERIES = 3


class CardDeclined(Exception):
    pass


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    await wait_until_async(predicate, timeout, interval=0.02)


def make_broker(redis_url: str, stream: str) -> RedisStreamBroker:
    # idle_timeout: taskiq-redis reclaims entries idle this long (ms), after a read.
    broker = RedisStreamBroker(
        redis_url, queue_name=stream, consumer_group_name=GROUP, consumer_name=CONSUMER,
        idle_timeout=300, xread_block=50,
    )  # fmt: skip
    broker.add_middlewares(
        AckboardTaskiqMiddleware(max_deliveries=MAX_DELIVERIES, heartbeat_ms=200)
    )
    return broker


@contextlib.asynccontextmanager
async def worker(
    broker: RedisStreamBroker, ack_time: AcknowledgeType | None
) -> AsyncIterator[None]:
    """taskiq's receiver on ``broker`` in this event loop, as ``taskiq worker`` runs it."""
    broker.is_worker_process = True
    await broker.startup()
    task = asyncio.create_task(run_receiver_task(broker, ack_time=ack_time, max_async_tasks=4))
    try:
        yield
    finally:
        task.cancel()
        if not (await asyncio.wait({task}, timeout=2))[0]:
            # Now and then taskiq-redis's listen loses the cancel while it blocks in
            # XREADGROUP and reads on; the receiver waits for it. One entry wakes it: the
            # stopped receiver discards it, and it is taken out again here.
            client = redis.asyncio.Redis(connection_pool=broker.connection_pool)
            wake = await client.xadd(broker.queue_name, {"data": b"{}"})
            await asyncio.wait({task}, timeout=5)
            await client.xack(broker.queue_name, GROUP, wake)
            await client.xdel(broker.queue_name, wake)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await broker.shutdown()


class TaskiqAdapterTests:
    @pytest.mark.parametrize("ack_time", [None, AcknowledgeType.WHEN_RECEIVED])
    def test_failures_recorded_poison_dead_lettered_pages_show_them(
        self, viewer: Client, r: redis.Redis, redis_url: str, prefix: str,
        ack_time: AcknowledgeType | None,
    ) -> None:  # fmt: skip
        stream = prefix + "orders"
        seen: Counter[str] = Counter()
        broker = make_broker(redis_url, stream)

        @broker.task(task_name="charge")
        async def charge(order: str) -> None:
            seen[order] += 1
            if order == "poison":
                raise CardDeclined(f"card declined for {order}")
            if order == "flaky" and seen[order] == 1:
                raise TimeoutError("payment gateway timed out")

        orders = ["ok-1", "flaky", "ok-2", "poison", "ok-3"]
        ids: dict[str, str] = {}

        async def run() -> None:
            async with worker(broker, ack_time):
                for order in orders:
                    await charge.kiq(order)
                    ids[order] = r.xrevrange(stream, count=1)[0][0].decode()
                await wait_for(lambda: all(seen[o] for o in orders))

                def held() -> set[str]:
                    return {row["message_id"].decode() for row in r.xpending_range(
                        stream, GROUP, min="-", max="+", count=10)}  # fmt: skip

                # taskiq acks after the task returns: then only failed entries are pending
                # (flaky may be retried already); the retries below prove the failures were
                # never acked: XAUTOCLAIM takes pending ones.
                await wait_for(lambda: held() <= {ids["flaky"], ids["poison"]})
                assert ids["poison"] in held()
                # taskiq-redis reclaims only after a read that returned something: new
                # work keeps arriving, as on a busy queue.
                ticks = 0
                while r.xlen(stream_keys(stream).dlq) == 0 or r.xpending(stream, GROUP)["pending"]:
                    await charge.kiq(f"tick-{ticks}")
                    ticks += 1
                    assert ticks < 200, "the poison entry was never dead-lettered"
                    await asyncio.sleep(0.05)  # the pace of new work, as on a busy queue
                beats = heartbeats_read(client=r, stream=stream, group=GROUP)
                assert [b.consumer for b in beats if b.live(now_ms())] == [CONSUMER]

        asyncio.run(run())
        assert seen["flaky"] == 2 and seen["poison"] == MAX_DELIVERIES
        assert all(n == 1 for order, n in seen.items() if order not in ("flaky", "poison"))
        failures = [(ids["flaky"], 1, "TimeoutError")] + [
            (ids["poison"], n, "CardDeclined") for n in range(1, MAX_DELIVERIES + 1)
        ]
        settled_check(r, stream, GROUP, failures=failures, poison=ids["poison"], pending=set())
        tracebacks = [f[b"traceback"].decode() for _, f in r.xrange(stream_keys(stream).failures)]
        assert all("in charge" in tb for tb in tracebacks)
        assert all(b.stopped for b in heartbeats_read(client=r, stream=stream, group=GROUP))
        pages_check(viewer, redis_url, stream, GROUP, failures=failures, poison=ids["poison"],
                    pending=set(), consumers={CONSUMER},
                    max_deliveries=MAX_DELIVERIES)  # fmt: skip

    def test_pause_holds_new_tasks_until_resumed(
        self, r: redis.Redis, redis_url: str, prefix: str
    ) -> None:
        stream = prefix + "orders"
        done: list[str] = []
        broker = make_broker(redis_url, stream)

        @broker.task(task_name="charge")
        async def charge(order: str) -> None:
            done.append(order)

        pause = pause_set(client=r, stream=stream, group=GROUP, by="ops", reason="deploy",
                          until_ms=None, now_ms=now_ms())  # fmt: skip

        def confirmed() -> bool:
            beats = heartbeats_read(client=r, stream=stream, group=GROUP)
            return len(beats) == 1 and beats[0].confirms(pause)

        async def run() -> None:
            async with worker(broker, None):
                await charge.kiq("held")
                await wait_for(confirmed)
                await asyncio.sleep(0.5)  # a window in which the paused worker runs nothing
                assert done == []
                assert r.xinfo_groups(stream)[0]["lag"] == 1  # not even read
                pause_clear(client=r, stream=stream, group=GROUP)
                await wait_for(lambda: done == ["held"])
                await wait_for(lambda: not r.xpending(stream, GROUP)["pending"])

        asyncio.run(run())
