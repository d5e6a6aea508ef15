"""How long does one capped bulk request block Redis on a 1,000,000-entry PEL?

Fills one group's pending list with N entries (default 1,000,000) on a private
redis-server (or --url), then measures, from SLOWLOG with a 0 µs threshold (every
command's own execution time):

- the baseline: one bare ``XPENDING key group <start> + 1000`` at mid depth;
- ``pending_ids_matching`` (the dry run) without a filter, with a rare idle filter
  (10,000 rows scanned, a handful of matches), and with consumer + idle filters;
- ``XPENDING ... IDLE`` with the same rare filter, the unbounded scan this avoids;
- ``bulk_scope`` over 1,000 explicit ids, and ``bulk_retry`` of 1,000 ids (the apply).

For each it prints the Redis time in total and of the longest single command, the
round trips, and both as ratios to the baseline. Redis serves other clients between
commands, so "longest single command" is how long anyone else can be kept waiting.

    uv run python -m benchmarks.bulk_scope [--entries 1000000] [--url redis://...]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from queue_core.bulk import bulk_retry, bulk_scope, pending_ids_matching
from tests.redis_server import RedisServer

STREAM = "bench:bulk-scope"
GROUP = "g"
CONSUMERS = ("c0", "c1", "c2", "c3")
RARE_IDLE_MS = 3_600_000  # an hour: only the entries made that idle below match


@dataclass
class Sample:
    commands: int
    total_us: int
    max_us: int
    wall_ms: float


def fill(client: redis.Redis, n: int) -> list[str]:
    """XADD n small entries and deliver them all (pending, round-robin over 4 consumers)."""
    ids: list[str] = []
    batch = 10_000
    for start in range(0, n, batch):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + batch)):
            pipe.xadd(STREAM, {"n": str(i), "payload": f'{{"order": {i}}}'})
        ids.extend(i.decode() for i in pipe.execute())
    client.xgroup_create(STREAM, GROUP, id="0")
    delivered = 0
    turn = 0
    while delivered < n:
        pipe = client.pipeline(transaction=False)
        for _ in range(20):
            pipe.xreadgroup(GROUP, CONSUMERS[turn % len(CONSUMERS)], {STREAM: ">"}, count=1000)
            turn += 1
        for reply in pipe.execute():
            if reply:
                delivered += len(reply[0][1])
    return ids


def measure(client: redis.Redis, run: Callable[[], Any], repeat: int) -> Sample:
    """Median over ``repeat`` runs of the SLOWLOG-reported time of the commands ``run`` sent."""
    samples: list[Sample] = []
    for _ in range(repeat):
        client.slowlog_reset()
        began = time.perf_counter()
        run()
        wall = (time.perf_counter() - began) * 1000
        log: Any = client.slowlog_get(10_000)
        # Skip SLOWLOG RESET itself and the commands a script runs inside (logged with the
        # address "?:0"): the EVALSHA's own duration already includes them.
        durations = [
            entry["duration"]
            for entry in log
            if entry["client_address"] != b"?:0"
            and not entry["command"].upper().startswith(b"SLOWLOG")
        ]
        samples.append(Sample(len(durations), sum(durations), max(durations or [0]), wall))
    samples.sort(key=lambda s: s.total_us)
    return samples[len(samples) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--url", help="an existing Redis to use (the key is deleted after)")
    args = parser.parse_args(argv)

    server = None if args.url else RedisServer().start()
    url = args.url or server.url
    client = redis.Redis.from_url(url, socket_timeout=300)
    old_threshold = client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    old_len = client.config_get("slowlog-max-len")["slowlog-max-len"]
    try:
        client.delete(STREAM)
        began = time.perf_counter()
        ids = fill(client, args.entries)
        info: Any = client.info("server")
        print(
            f"redis {info['redis_version']}: {len(ids):,} pending entries in one group, "
            f"filled in {time.perf_counter() - began:.1f} s"
        )
        # A few rare matches near the end, so an idle-filtered scan finds almost nothing.
        rare = ids[-10:]
        for entry_id in rare:
            owner: Any = client.xpending_range(STREAM, GROUP, min=entry_id, max=entry_id, count=1)
            client.xclaim(
                STREAM,
                GROUP,
                owner[0]["consumer"],
                0,
                [entry_id],
                idle=2 * RARE_IDLE_MS,
                justid=True,
            )
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 10_000)

        mid = ids[len(ids) // 2]
        snapshot = ids[-1]
        explicit = ids[len(ids) // 2 : len(ids) // 2 + 1000]
        cases: list[tuple[str, Callable[[], Any]]] = [
            (
                "baseline: bare XPENDING 1000 rows (mid depth)",
                lambda: client.xpending_range(STREAM, GROUP, min=mid, max="+", count=1000),
            ),
            (
                "dry run, no filter, 1000 ids (mid depth)",
                lambda: pending_ids_matching(
                    client=client, stream=STREAM, group=GROUP, snapshot_id=snapshot, start_id=mid
                ),
            ),
            (
                "dry run, rare idle filter (10,000 rows scanned)",
                lambda: pending_ids_matching(
                    client=client,
                    stream=STREAM,
                    group=GROUP,
                    snapshot_id=snapshot,
                    start_id=mid,
                    min_idle_ms=RARE_IDLE_MS,
                ),
            ),
            (
                "dry run, consumer + rare idle filter",
                lambda: pending_ids_matching(
                    client=client,
                    stream=STREAM,
                    group=GROUP,
                    snapshot_id=snapshot,
                    start_id=mid,
                    consumer="c1",
                    min_idle_ms=RARE_IDLE_MS,
                ),
            ),
            (
                "avoided: XPENDING IDLE, rare matches (whole PEL)",
                lambda: client.xpending_range(
                    STREAM, GROUP, min="-", max=snapshot, count=1000, idle=RARE_IDLE_MS
                ),
            ),
            (
                "dry run, 1000 explicit ids (pipelined)",
                lambda: bulk_scope(
                    client=client, stream=STREAM, group=GROUP, snapshot_id=snapshot, ids=explicit
                ),
            ),
            (
                "apply: bulk_retry 1000 ids (4 chunks of 250)",
                lambda: bulk_retry(
                    client=client,
                    stream=STREAM,
                    group=GROUP,
                    snapshot_id=snapshot,
                    ids=explicit,
                    idle_ms=1000,
                ),
            ),
        ]
        results = [(name, measure(client, run, args.repeat)) for name, run in cases]
        base = results[0][1]
        print(
            f"\n{'case':<50} {'cmds':>5} {'redis total':>12} {'x base':>7} "
            f"{'longest cmd':>12} {'x base':>7} {'wall':>9}"
        )
        for name, s in results:
            print(
                f"{name:<50} {s.commands:>5} {s.total_us / 1000:>9.3f} ms "
                f"{s.total_us / base.total_us:>7.1f} {s.max_us / 1000:>9.3f} ms "
                f"{s.max_us / base.max_us:>7.1f} {s.wall_ms:>6.1f} ms"
            )
        print(
            "\nmedian of",
            args.repeat,
            "runs; redis times are SLOWLOG durations "
            "(command execution, excluding network and client parsing)",
        )
    finally:
        client.config_set("slowlog-log-slower-than", old_threshold)
        client.config_set("slowlog-max-len", old_len)
        client.delete(STREAM)
        client.close()
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
