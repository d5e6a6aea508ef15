"""What open group pages add to each live poll for fleet control.

Each open group page's live signature includes its fleet stamp
(``dashboard.insight.fleet.fleet_stamps``): a GET of the group's pause and an HGETALL of its
workers' heartbeats, pipelined in one round trip for all open groups, then compared as
returned (a regex takes each live worker's ``seen_ms`` out; nothing is parsed). This
writes W heartbeats in each of G groups on a private redis-server (or --url, keys under
``bench:fleet:``) and prints the median time of one poll's fleet stamps, of the pipeline
alone, and of reading and parsing the same keys (``fleets_read``, what a page render
and /metrics pay), for 1 and G open groups.

    uv run python -m benchmarks.fleet_stamps [--groups 50] [--workers 10] [--url redis://...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

import redis  # noqa: E402

from benchmarks._common import redis_for_benchmark, server_version  # noqa: E402
from dashboard.insight.fleet import _replies, fleet_stamps, fleets_read  # noqa: E402
from queue_core import control  # noqa: E402
from queue_core.keys import stream_keys  # noqa: E402

PREFIX = "bench:fleet:"


def _median_ms(fn: Callable[[], object], runs: int = 200) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--url", default=None)
    args = parser.parse_args()
    with redis_for_benchmark(args.url) as url:
        client = redis.Redis.from_url(url)
        now = int(time.time() * 1000)
        groups = [(f"{PREFIX}s{i}", "g") for i in range(args.groups)]
        for stream, group in groups:
            for w in range(args.workers):
                beat = control.Heartbeat(
                    consumer=f"worker-{w}", host="web-1", pid=1000 + w, version="0.9.0",
                    concurrency=8, running=3, buffered=5, processed=123_456, failed=78,
                    started_ms=now - 3_600_000, seen_ms=now, paused=False, pause_at_ms=None,
                )  # fmt: skip
                control.heartbeat_send(client=client, stream=stream, group=group, beat=beat)
        print(f"{server_version(client)}: {args.workers} workers a group, medians of 200")
        try:
            for n in (1, args.groups):
                some = groups[:n]
                stamps = _median_ms(
                    lambda s=some: fleet_stamps(client=client, groups=s, now_ms=now)
                )
                pipe = _median_ms(lambda s=some: _replies(client, s))
                parsed = _median_ms(lambda s=some: fleets_read(client=client, groups=s, now_ms=now))
                print(
                    f"{n:>4} open group(s): fleet stamps {stamps:.2f} ms a poll "
                    f"(pipeline alone {pipe:.2f} ms); parsed as a page or /metrics reads them "
                    f"{parsed:.2f} ms"
                )
        finally:
            for stream, group in groups:
                keys = stream_keys(stream)
                client.delete(keys.pause(group), keys.workers(group))


if __name__ == "__main__":
    main()
