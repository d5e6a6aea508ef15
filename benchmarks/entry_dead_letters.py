"""What does the entry page's dead-letter lookup cost Redis?

Fills a stream's dead-letter stream with N dead letters (default 100,000) of about
``--payload`` bytes each (default 1,000) on a private redis-server (or --url), then
measures, from SLOWLOG with a 0 µs threshold (each command's own execution time):

- the baseline: one ``XRANGE dlq id id`` (what opening one known dead letter costs);
- ``selectors.entry_dead_letters`` in its usual case (the dead letter is among the
  first chunk after the start: the entry page starts just before its last failure);
- its worst case with the entry page's budgets (no match, a DLQ longer than the budget:
  ``ENTRY_DLQ_BUDGET`` dead letters or ``ENTRY_DLQ_BYTES`` read), and with 100 and 500.

It prints Redis time (the sum over the walk's commands, and the longest one: how long
anyone else waits), wall time and round trips, and the ratios to the baseline. A Lua
walk that returned only the matches was measured too and dropped: 3.5 µs of Redis per
1 KB dead letter, 5x what XRANGE costs, all of it in one blocking command.

    uv run python -m benchmarks.entry_dead_letters [--dead 100000] [--payload 1000] [--url …]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import redis

from queue_core import selectors
from queue_core.keys import ORIGIN_GROUP_FIELD, ORIGIN_ID_FIELD, stream_keys
from tests.redis_server import RedisServer

STREAM = "bench:entry-dlq"


def fill(client: redis.Redis, n: int, payload: int) -> str:
    """n dead letters as the dead-letter script writes them; returns the first one's id."""
    dlq = stream_keys(STREAM).dlq
    client.delete(STREAM, dlq)
    client.xadd(STREAM, {"a": "1"})
    body = "x" * payload
    first = ""
    for start in range(0, n, 5_000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + 5_000)):
            pipe.xadd(
                dlq,
                {"payload": body, ORIGIN_ID_FIELD: f"{i + 1}-0", ORIGIN_GROUP_FIELD: "g",
                 "ackboard.reason": "max deliveries"},
            )  # fmt: skip
        ids = pipe.execute()
        first = first or ids[0].decode()
    return first


def measure(
    client: redis.Redis, run: Callable[[], Any], repeat: int = 20
) -> tuple[float, float, float, int]:
    """Medians per run: (Redis µs from SLOWLOG, longest command µs, wall ms, commands)."""
    redis_us, longest, wall, commands = [], [], [], []
    for _ in range(repeat):
        client.slowlog_reset()
        started = time.perf_counter()
        run()
        wall.append((time.perf_counter() - started) * 1000)
        entries = [
            e
            for e in client.slowlog_get(1024)
            if b"slowlog" not in bytes(e.get("command", b"")).lower()
        ]
        redis_us.append(sum(e["duration"] for e in entries))
        longest.append(max((e["duration"] for e in entries), default=0))
        commands.append(len(entries))
    mid = repeat // 2
    return (sorted(redis_us)[mid], sorted(longest)[mid], sorted(wall)[mid], sorted(commands)[mid])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--payload", type=int, default=1_000)
    parser.add_argument("--url")
    args = parser.parse_args()
    server = None if args.url else RedisServer().start()
    url = args.url or (server.url if server is not None else "")
    client = redis.Redis.from_url(url)
    try:
        first = fill(client, args.dead, args.payload)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1024)
        dlq = stream_keys(STREAM).dlq
        since = int(first.partition("-")[0])
        base_us, _, base_ms, _ = measure(client, lambda: client.xrange(dlq, first, first, count=1))
        print(f"{args.dead} dead letters of {args.payload} B")
        print(f"baseline XRANGE id id: {base_us:.0f} µs Redis, {base_ms:.2f} ms wall")

        def report(label: str, run: Callable[[], Any]) -> None:
            us, top, ms, n = measure(client, run)
            print(
                f"{label}: {us:.0f} µs Redis ({us / base_us:.0f}x), longest command "
                f"{top:.0f} µs, {ms:.2f} ms wall, {n} round trips"
            )

        near = f"{args.dead // 2}-0"  # the origin id of a dead letter mid-stream
        mid_ms = int(client.xrange(dlq, "-", "+", count=args.dead // 2)[-1][0].split(b"-")[0])

        def usual() -> Any:
            return selectors.entry_dead_letters(
                client=client, stream=STREAM, entry_id=near, since_ms=mid_ms, groups=["g"]
            )

        got = usual()
        assert got is not None and got.found
        # The fill writes hundreds of dead letters per millisecond: those of the same
        # millisecond before the match are read too.
        report(f"usual case (the move's millisecond; read {got.scanned})", usual)
        for budget in (100, 500, selectors.ENTRY_DLQ_BUDGET):

            def walk(budget: int = budget) -> Any:
                return selectors.entry_dead_letters(
                    client=client, stream=STREAM, entry_id="0-1", since_ms=since, budget=budget
                )

            got = walk()
            assert got is not None and not got.found
            report(f"worst case, budget {budget} (read {got.scanned})", walk)
    finally:
        client.close()
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
