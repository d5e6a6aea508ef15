"""How long from a change in Redis to the DOM update in a browser tab?

Starts a private redis-server, a real daphne web process (channels-redis layer on that
Redis, the default settings, ``ACKBOARD_LIVE_TICK`` 1 s) with the failure ingestor, and
headless system Chromium, logged in. Then, in the same run, it measures from the Redis
write to the moment a MutationObserver in the page sees the new text (both clocks are
this machine's wall clock):

- **XADD** to a stream: the overview's length cell changes (blocking-XREAD wake-up);
- **worker failure** (a ``{S}:failures`` record plus its ``failure`` event, written the
  way the worker does): the message appears in the group page's pending table. This
  path includes the failure ingestor's poll (``--ingest-poll``, default 0.5 s as in
  ``manage.py ingest_failures``), because the page shows failures from the index;
- **XACK** (baseline: a change only the 1 s tick poll notices): the pending count in
  the group summary drops;
- **bare Redis round trip** (baseline): PING from this process.

Prints p50/p95/max per path. Target: p95 < 500 ms for XADD and worker failure.

    uv run python -m benchmarks.live_latency [--samples 40] [--ingest-poll 0.5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from tests.browser.server import LiveServer, chromium_launch, login, seed, worker_failure
from tests.redis_server import RedisServer

# Records (epoch ms, text) each time the watched element's text changes.
OBSERVE = """([selector, key]) => {
  window.__seen = window.__seen || {};
  window.__seen[key] = [];
  const read = () => {
    const el = document.querySelector(selector);
    return el ? el.textContent : "";
  };
  let last = read();
  new MutationObserver(() => {
    const text = read();
    if (text !== last) {
      last = text;
      window.__seen[key].push([performance.timeOrigin + performance.now(), text]);
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def _wait_seen(page: Any, key: str, match: Callable[[str], bool], timeout_s: float = 10) -> float:
    """Epoch ms at which the watched text first satisfied ``match``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for at, text in page.evaluate(f"window.__seen[{key!r}]"):
            if match(text):
                return float(at)
        page.wait_for_timeout(5)
    raise TimeoutError(f"the page never showed the change ({key})")


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95, ordered[-1]


def _row(name: str, values: list[float], target: str = "", digits: int = 1) -> str:
    p50, p95, top = _percentiles(values)
    return (
        f"{name:<34} {len(values):>4} {p50:>9.{digits}f} {p95:>9.{digits}f} {top:>9.{digits}f}"
        f"  {target}"
    )


def measure_xadd(page: Any, client: redis.Redis, stream: str, samples: int) -> list[float]:
    cell = f"#stream-table tr:has(a[href$='/streams/{stream}/']) td:nth-child(3)"
    page.wait_for_selector(cell)
    page.evaluate(OBSERVE, [cell, "xadd"])
    length = int(page.inner_text(cell))
    out = []
    for _ in range(samples):
        time.sleep(random.uniform(0.2, 0.6))  # unrelated to the tick's phase
        started = time.time() * 1000
        client.xadd(stream, {"payload": '{"bench": true}'})
        length += 1
        expected = str(length)
        out.append(_wait_seen(page, "xadd", lambda t, e=expected: t.strip() == e) - started)
    return out


def measure_failure(
    page: Any, client: redis.Redis, stream: str, group: str, entry_id: str, samples: int
) -> list[float]:
    row = f"#pending-{entry_id}"
    page.wait_for_selector(row)
    page.evaluate(OBSERVE, ["#pending-table", "failure"])
    out = []
    for attempt in range(samples):
        time.sleep(random.uniform(0.2, 0.6))
        message = f"bench failure {uuid.uuid4().hex[:10]}"
        started = time.time() * 1000
        worker_failure(
            client,
            stream=stream,
            group=group,
            entry_id=entry_id,
            consumer="worker-b",
            attempt=attempt + 2,
            error=("RuntimeError", message),
        )
        out.append(_wait_seen(page, "failure", lambda t, m=message: m in t) - started)
    return out


def measure_ack(
    page: Any, client: redis.Redis, stream: str, group: str, samples: int
) -> list[float]:
    cell = "#group-summary .fact:first-child .value"
    page.evaluate(OBSERVE, [cell, "ack"])
    out = []
    for _ in range(samples):
        time.sleep(random.uniform(0.2, 0.6))
        pending = client.xpending_range(stream, group, "-", "+", 1)
        if not pending:
            break
        expected = str(int(page.inner_text(cell)) - 1)
        started = time.time() * 1000
        client.xack(stream, group, pending[0]["message_id"])
        out.append(_wait_seen(page, "ack", lambda t, e=expected: t.strip() == e) - started)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--ingest-poll", type=float, default=0.5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    redis_server = RedisServer().start()
    server = LiveServer(redis_url=redis_server.url, ingest_poll=args.ingest_poll)
    try:
        client = redis.Redis.from_url(redis_server.url)
        ids = seed(client)
        # Enough pending entries for the XACK samples.
        for _ in range(args.samples):
            client.xadd(ids["emails"], {"to": "bench@example.com"})
        client.xreadgroup("sender", "mailer-1", {ids["emails"]: ">"})
        server.start()
        pings = []
        for _ in range(200):
            started = time.perf_counter()
            client.ping()
            pings.append((time.perf_counter() - started) * 1000)
        with sync_playwright() as playwright:
            browser = chromium_launch(playwright)
            page = browser.new_context(viewport={"width": 1280, "height": 860}).new_page()
            login(page, server)
            page.wait_for_selector("#live-indicator[data-state=live]")
            xadd = measure_xadd(page, client, ids["orders"], args.samples)
            page.goto(f"{server.url}/streams/{ids['orders']}/groups/billing/")
            page.wait_for_selector("#live-indicator[data-state=live]")
            failure = measure_failure(
                page, client, ids["orders"], "billing", ids["pending"], args.samples
            )
            page.goto(f"{server.url}/streams/{ids['emails']}/groups/sender/")
            page.wait_for_selector("#live-indicator[data-state=live]")
            ack = measure_ack(page, client, ids["emails"], "sender", args.samples)
            browser.close()
    finally:
        server.cleanup()
        redis_server.cleanup()

    print(f"Live update latency, Redis write -> DOM (ms); tick 1.0 s, ingest poll "
          f"{args.ingest_poll} s, {sys.platform}")  # fmt: skip
    print(f"{'path':<34} {'n':>4} {'p50':>9} {'p95':>9} {'max':>9}")
    print(_row("XADD -> overview length", xadd, "target p95 < 500"))
    print(_row("worker failure -> pending table", failure, "target p95 < 500"))
    print(_row("XACK -> group summary (tick only)", ack, "baseline: the 1 s tick"))
    print(_row("bare Redis PING round trip", pings, "baseline", digits=3))
    p95_xadd, p95_fail = _percentiles(xadd)[1], _percentiles(failure)[1]
    print(
        f"p95 XADD {p95_xadd:.0f} ms, worker failure {p95_fail:.0f} ms: "
        f"{'PASS' if max(p95_xadd, p95_fail) < 500 else 'MISS'} (target < 500 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
