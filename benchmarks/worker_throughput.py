"""How fast does the Worker drain a group, against the raw loops it is built from?

On a private redis-server (or ``--url``), fills one stream per loop with small entries
and measures, in the same run, from the first read to the last ack:

- (a) the raw batched loop: XREADGROUP COUNT 100 + one multi-id XACK, redis-py + hiredis.
  The practical limit of one Python consumer.
- (b) the workshop loop: XREADGROUP COUNT 1 + one XACK per message (on fewer entries:
  at its speed 200k would take half a minute, and the rate is what is compared).
- (c) ``Worker`` with a no-op sync handler (the default shape of a handler), batch 100,
  concurrency 1; (c') the same with a no-op async handler, for reference.
- (d) ``Worker`` with an async handler sleeping 10 ms at concurrency 50: the ideal is
  50 / 10 ms = 5,000 msg/s.

Prints msg/s and the ratios (c)/(a), (c)/(b), (d)/ideal against their targets (0.5, 10,
0.8); exits 1 when one is missed.

    uv run python -m benchmarks.worker_throughput [--entries 200000] [--url redis://...]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

import redis

from benchmarks._common import (
    Rate,
    print_rates,
    print_ratio,
    redis_for_benchmark,
    server_version,
    stream_fill,
)
from queue_core import Job, Worker

PREFIX = "bench:worker-throughput:"
SLEEP_S = 0.010
SLEEP_CONCURRENCY = 50


def raw_batched(client: redis.Redis, stream: str, n: int) -> Rate:
    """(a): COUNT 100, one multi-id XACK per batch."""
    stream_fill(client, stream, n)
    import time

    started = time.perf_counter()
    done = 0
    while True:
        reply: Any = client.xreadgroup("g", "raw", {stream: ">"}, count=100)
        entries = _entries(reply, stream)
        if not entries:
            break
        client.xack(stream, "g", *[entry_id for entry_id, _ in entries])
        done += len(entries)
    return Rate("(a) raw COUNT 100 + multi-id XACK", done, time.perf_counter() - started)


def workshop(client: redis.Redis, stream: str, n: int) -> Rate:
    """(b): COUNT 1, one XACK per message."""
    stream_fill(client, stream, n)
    import time

    started = time.perf_counter()
    done = 0
    while True:
        reply: Any = client.xreadgroup("g", "workshop", {stream: ">"}, count=1)
        entries = _entries(reply, stream)
        if not entries:
            break
        for entry_id, _ in entries:
            client.xack(stream, "g", entry_id)
        done += len(entries)
    return Rate("(b) workshop COUNT 1 + XACK each", done, time.perf_counter() - started)


def worker_run(
    client: redis.Redis, url: str, stream: str, n: int, name: str, handler: Any, **options: Any
) -> Rate:
    """Our Worker, from its first read to its last ack (drain mode)."""
    stream_fill(client, stream, n)
    worker = Worker(
        stream=stream, group="g", handler=handler, url=url, consumer="bench",
        group_start="0", block_ms=50, **options,
    )  # fmt: skip
    stats = worker.run(drain=True)
    pending = client.xpending(stream, "g")["pending"]
    if stats.acked != n or pending:
        raise SystemExit(f"{name}: acked {stats.acked} of {n}, {pending} left pending")
    assert stats.first_read_at is not None and stats.last_ack_at is not None
    return Rate(name, stats.acked, stats.last_ack_at - stats.first_read_at)


def noop(job: Job) -> None:
    return None


async def async_noop(job: Job) -> None:
    return None


async def sleep_10ms(job: Job) -> None:
    await asyncio.sleep(SLEEP_S)


def sleep_ceiling(n: int) -> Rate:
    """What asyncio alone does: 50 coroutines looping over ``asyncio.sleep(0.01)``, no Redis.

    Timer overshoot on a busy machine keeps even this below the ideal; (d) is read
    against it as well as against the ideal.
    """
    import time

    async def lanes() -> None:
        left = [n]

        async def lane() -> None:
            while left[0] > 0:
                left[0] -= 1
                await asyncio.sleep(SLEEP_S)

        await asyncio.gather(*(lane() for _ in range(SLEEP_CONCURRENCY)))

    started = time.perf_counter()
    asyncio.run(lanes())
    return Rate("    asyncio alone, 50 x sleep 10 ms (no Redis)", n, time.perf_counter() - started)


def _entries(reply: Any, stream: str) -> list[Any]:
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(reply.get(stream.encode()) or reply.get(stream) or [])
    return list(reply[0][1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=200_000, help="entries for (a) and (c)")
    parser.add_argument("--url", default=None, help="use this Redis instead of a private one")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    n = args.entries
    n_workshop = min(n, 20_000)
    n_sleep = min(n, 10_000)

    with redis_for_benchmark(args.url) as url:
        client = redis.Redis.from_url(url, socket_timeout=30)
        try:
            print(f"Redis {server_version(client)} at {url}; redis-py {redis.__version__}")
            a = raw_batched(client, PREFIX + "a", n)
            b = workshop(client, PREFIX + "b", n_workshop)
            c = worker_run(client, url, PREFIX + "c", n, "(c) Worker, no-op sync handler", noop)
            c2 = worker_run(
                client, url, PREFIX + "c2", n, "(c') Worker, no-op async handler", async_noop
            )
            d = worker_run(
                client, url, PREFIX + "d", n_sleep,
                "(d) Worker, async sleep 10 ms, concurrency 50", sleep_10ms,
                concurrency=SLEEP_CONCURRENCY,
            )  # fmt: skip
            d0 = sleep_ceiling(n_sleep)
        finally:
            for key in client.scan_iter(match=PREFIX + "*"):
                client.delete(key)
            client.close()

    ideal = SLEEP_CONCURRENCY / SLEEP_S
    print_rates([a, b, c, c2, d, d0])
    print()
    results = [
        print_ratio("(c)/(a)  Worker vs raw batched", c.per_second / a.per_second, 0.5),
        print_ratio("(c)/(b)  Worker vs workshop loop", c.per_second / b.per_second, 10),
        print_ratio(f"(d)/ideal ({ideal:,.0f} msg/s)", d.per_second / ideal, 0.8),
    ]
    print(f"  (c')/(a) async no-op vs raw batched  {c2.per_second / a.per_second:8.2f}")
    print(f"  (d)/asyncio alone                    {d.per_second / d0.per_second:8.2f}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
