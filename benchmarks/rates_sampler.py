"""What does one rates-sampler tick cost Redis at 500 streams?

Starts a private redis-server (or uses ``--url``, touching only ``bench:rates:*``), makes
``--streams`` streams (default 500) each with one group holding pending entries and a
backlog (so every group needs both its XPENDING summary and its first-undelivered read,
the worst case of a tick), and measures, median of ``--repeat`` runs after a warm-up:

- **the sampler's Redis reads** (``Lease.hold`` + ``selectors.stream_counters`` of every
  stream): commands the server ran (``INFO commandstats`` deltas, INFO itself left out),
  round trips (packets this process sent: a pipeline is one), server time (the ``usec``
  deltas) and wall time in this process;
- **a whole tick** (``Sampler.tick``: the same reads, the failure-index query and the bulk
  insert of one row per stream and group into SQLite), wall time;
- baselines measured in the same run: **one PING round trip**, and **the overview's
  summary read of the same 500 streams** (``selectors.stream_summaries``, what /metrics
  reads per collection up to ACKBOARD_METRICS_FRESH_MAX streams).

Then the ratios of the tick's reads to each baseline. The cost per tick is O(streams +
groups): 3 commands per stream (XINFO STREAM, XINFO GROUPS, XLEN of the DLQ) and up to 2
per group, in two pipelined round trips per 1,000 streams, plus the lease's one.

    uv run python -m benchmarks.rates_sampler [--streams 500] [--repeat 7] [--url redis://...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from benchmarks._common import redis_for_benchmark, server_version  # noqa: E402
from dashboard.insight.rates.models import RateSample  # noqa: E402
from dashboard.insight.rates.sampler import Sampler  # noqa: E402
from queue_core import selectors  # noqa: E402

PREFIX = "bench:rates:"


class CountingConnection(redis.Connection):
    """Counts the packets this process sends: one per command, one per pipeline."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def counting_client(url: str) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection)
    return redis.Redis(connection_pool=pool)


def _commandstats(client: redis.Redis) -> tuple[int, int]:
    stats: dict[str, Any] = client.info("commandstats")
    usec = calls = 0
    for name, value in stats.items():
        if name.startswith("cmdstat_") and not name.startswith("cmdstat_info"):
            usec += int(value["usec"])
            calls += int(value["calls"])
    return usec, calls


@dataclass(frozen=True)
class Cost:
    wall_ms: float
    redis_us: int
    commands: int
    round_trips: int


def measure(admin: redis.Redis, run: Callable[[], object], repeat: int) -> Cost:
    run()  # warm-up
    samples = []
    for _ in range(repeat):
        usec0, calls0 = _commandstats(admin)
        sent0 = CountingConnection.sent
        began = time.perf_counter()
        run()
        wall = (time.perf_counter() - began) * 1000
        sent = CountingConnection.sent - sent0
        usec1, calls1 = _commandstats(admin)
        samples.append(Cost(wall, usec1 - usec0, calls1 - calls0, sent))
    return Cost(
        wall_ms=statistics.median(s.wall_ms for s in samples),
        redis_us=int(statistics.median(s.redis_us for s in samples)),
        commands=int(statistics.median(s.commands for s in samples)),
        round_trips=int(statistics.median(s.round_trips for s in samples)),
    )


def fill(client: redis.Redis, n: int) -> list[str]:
    """``n`` streams of 100 entries; group g read 60 (10 pending) and 40 behind."""
    names = [f"{PREFIX}s{i:05d}" for i in range(n)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.delete(name)
        pipe.xgroup_create(name, "g", id="0", mkstream=True)
        for j in range(100):
            pipe.xadd(name, {"n": str(j), "payload": f'{{"order": {j}}}'})
    pipe.execute()
    for name in names:
        got: Any = client.xreadgroup("g", "c", {name: ">"}, count=60)
        ids = [entry_id for entry_id, _ in got[0][1]]
        client.xack(name, "g", *ids[:50])
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--url", default=None)
    args = parser.parse_args(argv)
    call_command("migrate", verbosity=0)
    with redis_for_benchmark(args.url) as url:
        admin = redis.Redis.from_url(url)
        client = counting_client(url)
        names = fill(admin, args.streams)
        settings.ACKBOARD_REDIS_URL = url
        settings.ACKBOARD_STREAMS = (PREFIX + "*",)
        sampler = Sampler(client=client, interval_s=10, lease_key=PREFIX + "lease")
        sampler.names()  # discovery happens once per ACKBOARD_INDEX_REFRESH_S, not per tick
        assert len(sampler.names()) == args.streams

        def reads() -> None:
            assert sampler.lease.hold()
            selectors.stream_counters(client=client, streams=names)

        def whole_tick() -> None:
            sampler.rolled_at = time.time()  # the minute's rollup is measured apart
            assert sampler.tick() is not None

        ping = measure(admin, client.ping, args.repeat * 5)
        overview = measure(
            admin, lambda: selectors.stream_summaries(client=client, streams=names), args.repeat
        )
        tick_reads = measure(admin, reads, args.repeat)
        tick = measure(admin, whole_tick, args.repeat)
        print(f"Redis {server_version(admin)}, {args.streams} streams x 1 group "
              f"(10 pending, 40 behind each), median of {args.repeat}")  # fmt: skip
        print(f"  {'':<44}{'wall ms':>9}{'Redis us':>10}{'commands':>10}{'round trips':>13}")
        for label, cost in (
            ("baseline: one PING round trip", ping),
            (f"baseline: overview summary read ({args.streams})", overview),
            ("sampler tick: Redis reads (lease + counters)", tick_reads),
            ("sampler tick: whole (reads + SQLite insert)", tick),
        ):
            print(
                f"  {label:<44}{cost.wall_ms:>9.2f}{cost.redis_us:>10,}{cost.commands:>10,}"
                f"{cost.round_trips:>13}"
            )
        ratios = (
            ("wall time / one PING round trip", tick_reads.wall_ms / ping.wall_ms),
            ("wall time / overview summary read", tick_reads.wall_ms / overview.wall_ms),
            ("Redis time / overview summary read", tick_reads.redis_us / max(1, overview.redis_us)),
            ("commands / overview summary read", tick_reads.commands / max(1, overview.commands)),
            ("round trips / overview summary read", tick_reads.round_trips / overview.round_trips),
            ("commands per stream", tick_reads.commands / args.streams),
        )
        print("Ratios of the tick's Redis reads:")
        for label, value in ratios:
            print(f"  {label:<40}{value:>9.2f}")
        share = tick.wall_ms / (sampler.interval_s * 1000) * 100
        print(f"Whole tick: {share:.1f}% of a {sampler.interval_s:g} s interval")
        RateSample.objects.filter(stream__startswith=PREFIX).delete()
        keys = list(admin.scan_iter(match=PREFIX + "*", count=1000))
        for i in range(0, len(keys), 500):
            admin.delete(*keys[i : i + 500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
