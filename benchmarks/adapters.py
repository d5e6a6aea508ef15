"""What does each framework adapter cost per message, against the same framework without it?

For FastStream (a ``RedisBroker`` with one ``StreamSub`` group subscriber) and taskiq (a
``RedisStreamBroker`` under taskiq's own ``Receiver``), ``--n`` messages are put in the
stream first (through the framework's own publisher), then the framework's consumer loop
handles them with a no-op handler: once bare (the baseline), once with
its Ackboard middleware. Timed from the start of consumption to the last handler call; each
case ``--runs`` times, interleaved, the best kept. Prints msg/s, the per-message time and
the adapter's ratio to its framework's baseline, measured in the same run. Successes only:
a failure's cost is ``recording``'s (``benchmarks/recording_overhead.py``). On a private
redis-server unless ``--url`` is given (then only keys under ``bench:adapters:`` are
touched).

    uv run python -m benchmarks.adapters [--n 5000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import redis
from faststream.redis import RedisBroker, StreamSub
from taskiq.receiver import Receiver
from taskiq_redis import RedisStreamBroker

from benchmarks._common import Rate, print_rates, redis_for_benchmark, server_version
from queue_core.adapters.faststream import AckboardFastStreamMiddleware
from queue_core.adapters.taskiq import AckboardTaskiqMiddleware

PREFIX = "bench:adapters:"
GROUP = "g"


async def until(count: Callable[[], int], n: int) -> None:
    while count() < n:
        await asyncio.sleep(0.001)


async def faststream_case(url: str, n: int, *, ackboard: bool) -> float:
    stream = f"{PREFIX}faststream"
    redis.Redis.from_url(url).delete(stream)
    broker = RedisBroker(url, logger=None)  # no access log: its cost is not the question
    middleware = AckboardFastStreamMiddleware(broker) if ackboard else None
    done = 0

    async def handle(body: dict[str, int]) -> None:
        nonlocal done
        done += 1

    broker.subscriber(stream=StreamSub(stream, group=GROUP, consumer="bench"))(handle)
    async with broker:
        for i in range(n):
            await broker.publish({"n": i}, stream=stream)
        await broker.connect()
        plain = redis.Redis.from_url(url)
        plain.xgroup_create(stream, GROUP, id="0")  # read what was published before the start
        started = time.perf_counter()
        await broker.start()
        if middleware is not None:
            await middleware.start()
        await until(lambda: done, n)
        seconds = time.perf_counter() - started
        if middleware is not None:
            await middleware.stop()
    return seconds


async def taskiq_case(url: str, n: int, *, ackboard: bool) -> float:
    stream = f"{PREFIX}taskiq"
    redis.Redis.from_url(url).delete(stream)
    broker = RedisStreamBroker(url, queue_name=stream, consumer_group_name=GROUP,
                               consumer_name="bench", consumer_id="0")  # fmt: skip
    if ackboard:
        broker.add_middlewares(AckboardTaskiqMiddleware())
    done = 0

    @broker.task(task_name="noop")
    async def noop(i: int) -> None:
        nonlocal done
        done += 1

    await broker.startup()  # the client side: creates the group at 0
    for i in range(n):
        await noop.kiq(i)
    broker.is_worker_process = True
    await broker.startup()
    # taskiq's Receiver, as ``taskiq worker`` runs it; it stops by itself after n messages
    # (cancelling it can hang: taskiq-redis's listen sometimes loses the cancel).
    receiver = Receiver(broker, run_startup=False, max_async_tasks=100, max_tasks_to_execute=n)
    started = time.perf_counter()
    listening = asyncio.create_task(receiver.listen(asyncio.Event()))
    await until(lambda: done, n)
    seconds = time.perf_counter() - started
    await listening
    await broker.shutdown()
    return seconds


Case = Callable[..., Coroutine[Any, Any, float]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--url", default=None, help="Use this Redis instead of a private one.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("taskiq").setLevel(logging.ERROR)
    cases: list[tuple[str, Case, bool]] = [
        ("FastStream (baseline)", faststream_case, False),
        ("FastStream + AckboardFastStreamMiddleware", faststream_case, True),
        ("taskiq (baseline)", taskiq_case, False),
        ("taskiq + AckboardTaskiqMiddleware", taskiq_case, True),
    ]
    with redis_for_benchmark(args.url) as url:
        client = redis.Redis.from_url(url)
        print(f"Redis {server_version(client)}; {args.n:,} no-op messages a case, "
              f"best of {args.runs}")  # fmt: skip
        best: dict[str, float] = {}
        try:
            for _ in range(args.runs):
                for name, case, ackboard in cases:
                    seconds = asyncio.run(case(url, args.n, ackboard=ackboard))
                    best[name] = min(best.get(name, seconds), seconds)
        finally:
            for key in client.scan_iter(match=PREFIX + "*"):
                client.delete(key)
            client.close()
    rates = [Rate(name, args.n, best[name]) for name, _, _ in cases]
    print_rates(rates)
    for base, adapted in ((rates[0], rates[1]), (rates[2], rates[3])):
        extra_us = (adapted.seconds - base.seconds) / args.n * 1e6
        print(f"  {adapted.name:<34} {adapted.per_second / base.per_second:5.2f} x the "
              f"framework's msg/s; {extra_us:+6.1f} us/msg")  # fmt: skip


if __name__ == "__main__":
    main()
