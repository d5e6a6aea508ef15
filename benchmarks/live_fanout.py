"""Does the dashboard's Redis load grow with the number of open live sockets?

Starts a private redis-server and a real daphne web process (default settings: the
channels-redis layer on that same Redis, ``ACKBOARD_LIVE_TICK`` 1 s), logs headless
Chromium in, and opens N WebSockets on one group page's surface from a single page
(N browser tabs cost the server the same as N sockets). A producer runs the same
workload in every phase: an XADD every 100 ms and a worker failure (record + event)
every second on the watched stream.

For each N it counts the commands Redis ran (INFO commandstats, every command but INFO,
including the channel layer's own traffic) over the measuring window, subtracts the
producer's own commands, and prints the dashboard's commands per second beside the
baseline of N = 1, plus the updates each socket received.

    uv run python -m benchmarks.live_fanout [--sockets 1,10,100] [--seconds 15]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

import redis

from tests.browser.server import LiveServer, chromium_launch, login, seed, worker_failure
from tests.redis_server import RedisServer

OPEN_SOCKETS = """([path, n]) => new Promise((resolve) => {
  window.__sockets = [];
  window.__received = [];
  window.__bytes = 0;
  let open = 0;
  for (let i = 0; i < n; i++) {
    const socket = new WebSocket(`ws://${location.host}${path}`);
    window.__received.push(0);
    socket.onmessage = (event) => {
      window.__received[i] += 1;
      if (i === 0) window.__bytes += event.data.length;
    };
    socket.onopen = () => { open += 1; if (open === n) resolve(open); };
    window.__sockets.push(socket);
  }
})"""
CLOSE_SOCKETS = "() => { window.__sockets.forEach((s) => s.close()); window.__sockets = []; }"


def _calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


class Producer:
    """The same workload in every phase; counts the commands it sends itself."""

    def __init__(self, client: redis.Redis, stream: str, entry_id: str) -> None:
        self.client, self.stream, self.entry_id = client, stream, entry_id
        self.commands = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(0.1):
            self.client.xadd(self.stream, {"payload": '{"bench": "fanout"}'})
            self.commands += 1
            tick += 1
            if tick % 10 == 0:
                worker_failure(
                    self.client,
                    stream=self.stream,
                    group="billing",
                    entry_id=self.entry_id,
                    consumer="worker-b",
                    attempt=tick // 10 + 1,
                    error=("RuntimeError", f"fanout failure {tick}"),
                )
                self.commands += 2  # XADD to {S}:failures + PUBLISH


def phase(
    page: Any, client: redis.Redis, producer: Producer, path: str, n: int, seconds: float
) -> tuple[float, float, int, float]:
    """(dashboard commands/s, mean updates per socket, fewest updates, KB per update)."""
    if n:
        page.evaluate(OPEN_SOCKETS, [path, n])
    time.sleep(3.0)  # first renders and group joins are done
    calls, mine, started = _calls(client), producer.commands, time.monotonic()
    if n:
        page.evaluate("() => { window.__received.fill(0); window.__bytes = 0; }")
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    total = _calls(client) - calls - (producer.commands - mine)
    received = page.evaluate("() => window.__received") if n else []
    size = page.evaluate("() => window.__bytes") / max(1, received[0]) / 1000 if n else 0.0
    if n:
        page.evaluate(CLOSE_SOCKETS)
        time.sleep(1.0)
    mean = sum(received) / len(received) if received else 0.0
    return total / elapsed, mean, min(received) if received else 0, size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sockets", default="1,10,100")
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    counts = [int(n) for n in args.sockets.split(",")]
    from playwright.sync_api import sync_playwright

    redis_server = RedisServer().start()
    server = LiveServer(redis_url=redis_server.url)
    results: list[tuple[int, float, float, int, float]] = []
    try:
        client = redis.Redis.from_url(redis_server.url)
        ids = seed(client)
        server.start()
        producer = Producer(redis.Redis.from_url(redis_server.url), ids["orders"], ids["pending"])
        # dashboard.routing.live_path, without importing Django here (plain names).
        path = f"/ws/streams/{ids['orders']}/groups/billing/"
        with sync_playwright() as playwright:
            browser = chromium_launch(playwright)
            page = browser.new_context().new_page()
            login(page, server)
            page.goto(server.url + "/audit/")  # a page without a socket of its own
            producer.thread.start()
            for n in [0, *counts]:
                rate, mean, slowest, size = phase(page, client, producer, path, n, args.seconds)
                results.append((n, rate, mean, slowest, size))
                print(f"  measured {n} sockets: {rate:.1f} commands/s", file=sys.stderr)
            producer.stop.set()
            browser.close()
    finally:
        server.cleanup()
        redis_server.cleanup()

    base = next(r for n, r, *_ in results if n == counts[0])
    print(
        f"Dashboard Redis commands/s by open sockets on one group page "
        f"({args.seconds:.0f} s windows; workload: 10 XADD/s + 1 worker failure/s)"
    )
    print(
        f"{'sockets':>8} {'commands/s':>11} {'vs ' + str(counts[0]):>8} {'updates/socket':>15}"
        f" {'fewest':>7} {'commands/update':>16} {'KB/update':>10}"
    )
    for n, rate, mean, slowest, size in results:
        ratio = f"{rate / base:.2f}x" if n else "idle"
        per_update = f"{rate * args.seconds / mean:.1f}" if mean else "-"
        print(
            f"{n:>8} {rate:>11.1f} {ratio:>8} {mean:>15.1f} {slowest:>7} {per_update:>16}"
            f" {size:>10.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
