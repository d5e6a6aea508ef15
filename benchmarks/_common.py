"""Shared benchmark plumbing: a private redis-server, filling streams, timing, ratios.

Generic on purpose (any benchmark may import it). Never touches a server it did not
start unless given ``--url``, and then only keys under its own prefix.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis

from tests.redis_server import RedisServer


@contextlib.contextmanager
def redis_for_benchmark(url: str | None = None) -> Iterator[str]:
    """Yield a Redis URL: ``url`` if given, else a private redis-server stopped afterwards."""
    if url:
        yield url
        return
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.cleanup()


def server_version(client: redis.Redis) -> str:
    info = client.info("server")
    return str(info.get("redis_version", "?"))


def stream_fill(
    client: redis.Redis,
    stream: str,
    n: int,
    *,
    group: str | None = "g",
    make_fields: Callable[[int], dict[str, str]] | None = None,
    chunk: int = 10_000,
) -> None:
    """XADD ``n`` small entries in pipelined chunks; create ``group`` at 0 first."""
    client.delete(stream)
    if group is not None:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    fields = make_fields or (lambda i: {"n": str(i), "payload": f'{{"n": {i}}}'})
    for start in range(0, n, chunk):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + chunk)):
            pipe.xadd(stream, fields(i))
        pipe.execute()


@dataclass
class Rate:
    """``count`` items in ``seconds``."""

    name: str
    count: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("inf")


def timed(name: str, count: int, fn: Callable[[], object]) -> Rate:
    started = time.perf_counter()
    fn()
    return Rate(name, count, time.perf_counter() - started)


def print_rates(rates: list[Rate]) -> None:
    width = max(len(r.name) for r in rates)
    for rate in rates:
        print(
            f"  {rate.name:<{width}}  {rate.count:>9,} msgs  {rate.seconds:8.3f} s  "
            f"{rate.per_second:>12,.0f} msg/s"
        )


def print_ratio(label: str, value: float, target: float) -> bool:
    ok = value >= target
    print(f"  {label:<34} {value:8.2f}   target >= {target:<6g} {'ok' if ok else 'MISSED'}")
    return ok
