"""What does the overview cost on a 3-primary Redis Cluster, against one server?

Starts a private ``redis-server`` and a private loopback cluster (3 primaries + 3
replicas, ``tests/redis_cluster.py``), seeds the same N streams in each (``q:0`` …, one
group, one pending entry each), and times ``selectors.stream_overview`` (SCAN discovery
plus the two pipelined summary rounds) with ``cap=N``: the median of 5 runs, and the
cluster's ratio to the one server (the baseline). Then what the paged overview pays on
each: a stream index's whole names pass (bounded SCAN steps on every primary, as the
web process's background refresher runs it) and one page's rows (``stream_summaries``
of 25 streams: what a request reads).

    uv run python -m benchmarks.cluster_overview [--streams 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from queue_core import selectors
from queue_core.connection import Client, connect
from queue_core.stream_index import StreamIndex
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


def index_pass_ms(client: Client, n: int) -> float:
    """One whole names pass of a new stream index (no figures), in bounded steps."""
    index = StreamIndex(patterns=["q:*"], cap=10 * n)
    started = time.perf_counter()
    assert index.build(client=client, budget_s=600, figures=False)
    elapsed = time.perf_counter() - started
    assert len(index.snapshot().names) == n, len(index.snapshot().names)
    return elapsed * 1000


def page_ms(client: Client, n: int, page: int = 25, runs: int = 15) -> float:
    """One overview page's rows (what a request reads), median over pages spread out."""
    times = []
    for run in range(runs):
        first = (run * (n // runs)) % max(1, n - page)
        names = [f"q:{i}" for i in range(first, first + page)]
        started = time.perf_counter()
        rows = selectors.stream_summaries(client=client, streams=names)
        times.append(time.perf_counter() - started)
        assert len(rows) == page
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
        print(f"overview of {n} streams, every stream's figures at once (median of 5)")
        print(f"  one redis-server     {base:8.0f} ms   1.00")
        print(f"  3-primary cluster    {spread:8.0f} ms   {spread / base:.2f}")
        base_pass, spread_pass = index_pass_ms(one, n), index_pass_ms(many, n)
        print(f"stream index: one whole names pass of {n} streams (background, bounded steps)")
        print(f"  one redis-server     {base_pass:8.0f} ms   1.00")
        print(f"  3-primary cluster    {spread_pass:8.0f} ms   {spread_pass / base_pass:.2f}")
        base_page, spread_page = page_ms(one, n), page_ms(many, n)
        print("one overview page: 25 streams' rows, what a request reads (median of 15)")
        print(f"  one redis-server     {base_page:8.1f} ms   1.00")
        print(f"  3-primary cluster    {spread_page:8.1f} ms   {spread_page / base_page:.2f}")
    finally:
        server.cleanup()
        cluster.cleanup()


if __name__ == "__main__":
    main()
