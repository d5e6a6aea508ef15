"""How soon does a Worker honour a pause, and start again after the resume?

On a private redis-server (or ``--url``), runs one ``Worker`` with the default settings
(XREADGROUP BLOCK 2000, heartbeat every 2000 ms, so a pause check every 500 ms) on a
group that receives an entry every 20 ms, then ``--rounds`` times (at random moments,
seeded): pause
(``control.pause_set``) and time until the worker's heartbeat confirms it, then resume
(``control.pause_clear``) and time until a handler runs again. Asserts nothing was
handled between the confirmation and the resume. Prints p50, p95 and max of both
against the target (within 1 s); exits 1 when a max misses it.

    uv run python -m benchmarks.pause_latency [--rounds 20] [--url redis://...]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import sys
import threading
import time

import redis

from benchmarks._common import redis_for_benchmark, server_version
from queue_core import Job, Worker
from queue_core.clock import now_ms
from queue_core.control import heartbeats_read, pause_clear, pause_set

STREAM, GROUP = "bench:pause", "g"
TARGET_S = 1.0


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95, ordered[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with redis_for_benchmark(args.url) as url:
        client = redis.Redis.from_url(url)
        client.delete(STREAM)
        print(f"Redis {server_version(client)}; {args.rounds} pauses of one Worker "
              "(block 2000 ms, heartbeat 2000 ms)")  # fmt: skip
        handled: list[float] = []

        def handler(job: Job) -> None:
            handled.append(time.monotonic())

        worker = Worker(stream=STREAM, group=GROUP, handler=handler, url=url,
                        consumer="bench", group_start="0")  # fmt: skip
        thread = threading.Thread(target=lambda: asyncio.run(worker.serve()), daemon=True)
        thread.start()
        worker.ready.wait(10)
        stop = threading.Event()

        def feed() -> None:
            feeder = redis.Redis.from_url(url)
            while not stop.is_set():
                feeder.xadd(STREAM, {"n": "1"})
                time.sleep(0.02)

        threading.Thread(target=feed, daemon=True).start()
        confirm_s: list[float] = []
        resume_s: list[float] = []
        leaks = 0
        # Random waits (seeded), so the pause and the resume fall anywhere between two of
        # the worker's 500 ms pause checks rather than always just after one.
        rng = random.Random(12)
        try:
            for _ in range(args.rounds):
                time.sleep(rng.uniform(0.3, 0.8))  # running normally
                started = time.monotonic()
                pause = pause_set(client=client, stream=STREAM, group=GROUP, by="bench",
                                  reason="benchmark", until_ms=None, now_ms=now_ms())  # fmt: skip
                while not any(b.confirms(pause) for b in heartbeats_read(
                        client=client, stream=STREAM, group=GROUP)):  # fmt: skip
                    time.sleep(0.002)
                confirmed = time.monotonic()
                confirm_s.append(confirmed - started)
                time.sleep(rng.uniform(0.5, 1.0))
                leaks += sum(1 for t in handled if t > confirmed + 0.05)
                count = len(handled)
                started = time.monotonic()
                pause_clear(client=client, stream=STREAM, group=GROUP)
                while len(handled) == count:
                    time.sleep(0.002)
                resume_s.append(handled[count] - started)
        finally:
            stop.set()
            worker.stop()
            thread.join(10)
            client.delete(STREAM)
        ok = True
        for label, values in (("pause -> confirmed", confirm_s), ("resume -> handled", resume_s)):
            p50, p95, worst = _quantiles(values)
            met = worst <= TARGET_S
            ok &= met
            print(f"  {label:<20} p50 {p50 * 1000:6.0f} ms  p95 {p95 * 1000:6.0f} ms  "
                  f"max {worst * 1000:6.0f} ms   target <= {TARGET_S * 1000:.0f} ms "
                  f"{'ok' if met else 'MISSED'}")  # fmt: skip
        print(f"  handled after a confirmation: {leaks} (must be 0)")
        return 0 if ok and leaks == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
