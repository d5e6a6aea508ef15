"""What does ``queue_core.failure_recorded`` cost a worker loop that Ackboard did not write?

A workshop-style loop (XREADGROUP COUNT 1, the handler, one XACK per message) consumes
``--n`` entries with a no-op handler, once with the bare handler (the baseline) and once
with it wrapped; then ``--failures`` entries whose handler always raises, wrapped, with
``max_deliveries`` high enough that none is moved (each failure: XPENDING, the record, its
event). Prints msg/s, the worker process's CPU per message, and both as ratios to the
baseline. Sync redis-py, on a private redis-server unless ``--url`` is given (then only
keys under ``bench:recording:`` are touched).

    uv run python -m benchmarks.recording_overhead [--n 20000] [--failures 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any

import redis

from benchmarks._common import (
    Rate,
    print_rates,
    redis_for_benchmark,
    server_version,
    stream_fill,
    timed,
)
from queue_core import failure_recorded
from queue_core.keys import stream_keys

STREAM = "bench:recording:reviews"
GROUP = "g"
CONSUMER = "bench"


def workshop_loop(client: redis.Redis, n: int, handle: Callable[[str], Any]) -> None:
    """COUNT 1, the handler, XACK when it returns; an error leaves the entry pending."""
    done = 0
    while done < n:
        reply: Any = client.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=1)
        for raw_id, _fields in reply[0][1]:
            entry_id = raw_id.decode()
            done += 1
            try:
                handle(entry_id)
            except Exception:  # noqa: S112 - the workshop's loop logs and goes on
                continue
            client.xack(STREAM, GROUP, entry_id)


def run(client: redis.Redis, n: int, failures: int, runs: int) -> list[tuple[Rate, float]]:
    """Each case ``runs`` times, interleaved (the machine is shared); the best of each, and
    the worker's own CPU time per message in that run (wall time also waits on Redis)."""

    def noop() -> None:
        return None

    def boom() -> None:
        raise RuntimeError("review service said 503")

    wrap: dict[str, Any] = {"client": client, "stream": STREAM, "group": GROUP,
                            "consumer": CONSUMER, "max_deliveries": 1_000}  # fmt: skip
    cases: list[tuple[str, int, Callable[[str], Any]]] = [
        ("bare handler (baseline)", n, lambda entry_id: noop()),
        ("failure_recorded, success", n, failure_recorded(noop, **wrap)),
        ("failure_recorded, every one fails", failures, failure_recorded(boom, **wrap)),
    ]
    best: dict[str, tuple[Rate, float]] = {}
    for _ in range(runs):
        for name, count, handle in cases:
            stream_fill(client, STREAM, count, group=GROUP)
            client.delete(stream_keys(STREAM).failures)
            cpu = time.process_time()
            rate = timed(name, count, functools.partial(workshop_loop, client, count, handle))
            cpu_us = (time.process_time() - cpu) / count * 1e6
            if name not in best or rate.seconds < best[name][0].seconds:
                best[name] = (rate, cpu_us)
    return [best[name] for name, _, _ in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--failures", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--url", default=None, help="Use this Redis instead of a private one.")
    args = parser.parse_args()
    with redis_for_benchmark(args.url) as url:
        client = redis.Redis.from_url(url)
        try:
            print(f"Redis {server_version(client)}; workshop-style loop, COUNT 1, XACK each")
            rates = run(client, args.n, args.failures, args.runs)
        finally:
            with contextlib.suppress(redis.RedisError):
                client.delete(STREAM, stream_keys(STREAM).failures)
            client.close()
    print_rates([rate for rate, _ in rates])
    base, base_cpu = rates[0][0].per_second, rates[0][1]
    for rate, cpu_us in rates:
        print(f"  {rate.name:<34} {rate.per_second / base:5.2f} x the baseline's msg/s; "
              f"worker CPU {cpu_us:6.1f} us/msg ({cpu_us / base_cpu:4.2f} x)")  # fmt: skip


if __name__ == "__main__":
    main()
