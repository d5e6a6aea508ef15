"""What does the overview cost on a 3-primary Redis Cluster, against one server?

Starts a private ``redis-server`` and a private loopback cluster (3 primaries + 3
replicas, ``tests/redis_cluster.py``), seeds the same N streams in each (``q:0`` …, one
group, one pending entry each), and times ``selectors.stream_overview`` (SCAN discovery
plus the two pipelined summary rounds) with ``cap=N``: the median of 5 runs, and the
cluster's ratio to the one server (the baseline).

    uv run python -m benchmarks.cluster_overview [--streams 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from queue_core import selectors
from queue_core.connection import Client, connect
from tests.redis_cluster import RedisCluster
from tests.redis_server import RedisServer

BATCH = 500


def seed(client: Client, n: int) -> None:
    for start in range(0, n, BATCH):
        names = [f"q:{i}" for i in range(start, min(n, start + BATCH))]
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.xadd(name, {"n": "1"})
            pipe.xgroup_create(name, "g", id="0")
        pipe.execute()
        pipe = client.pipeline(transaction=False)
        for name in names:
            pipe.xreadgroup("g", "c", {name: ">"}, count=1)
        pipe.execute()


def overview_ms(client: Client, n: int, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        overview = selectors.stream_overview(client=client, patterns=["q:*"], cap=n)
        times.append(time.perf_counter() - started)
        assert len(overview.streams) == n, len(overview.streams)
        assert sum(s.pending for s in overview.streams) == n
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    n = parser.parse_args().streams
    server = RedisServer().start()
    cluster = RedisCluster().start()
    try:
        one = connect(server.url, socket_timeout=60)
        many = connect(cluster.url, socket_timeout=60)
        seed(one, n)
        seed(many, n)
        base = overview_ms(one, n)
        spread = overview_ms(many, n)
        print(f"overview of {n} streams (median of 5)")
        print(f"  one redis-server     {base:8.0f} ms   1.00")
        print(f"  3-primary cluster    {spread:8.0f} ms   {spread / base:.2f}")
    finally:
        server.cleanup()
        cluster.cleanup()


if __name__ == "__main__":
    main()
