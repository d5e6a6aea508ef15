"""Running at scale: more worker processes, more web processes, more tabs.

One command, three questions, each against a private redis-server started here:

1. **Worker throughput with 1, 2 and 4 processes on one group**, as a ratio to 1 process
   measured in the same run. Each run is the real command, ``manage.py queue_worker
   --processes N`` (concurrency 1, batch 10), on a fresh stream: once every child logged
   that it is reading, ``--jobs`` entries are added in one pipeline, and the clock runs
   from the first XADD until the group has read them all and none is pending (best of
   ``--rounds`` interleaved runs per N, against other load on the machine). Two
   handler costs, each 1 ms per job: ``sleep`` (``time.sleep(0.001)``: I/O-bound work,
   such as waiting on an API) and ``cpu`` (1 ms of the handler thread's CPU time, spun:
   bound by the machine's cores).
2. **Dashboard Redis commands/s with 1 vs 2 web processes and 1 vs 10 tabs each**
   (INFO commandstats deltas, every command but INFO, channel layer included, minus the
   producer's own). Each "tab" is a WebSocket on one group page's surface, opened from a
   page of that web process (the server cannot tell N tabs from N sockets); the producer
   of ``benchmarks.live_fanout`` runs throughout (10 XADD/s + 1 worker failure/s).
3. **Live-update latency across two web processes:** an operator action POSTed to web
   process A (Dead-letter of one pending entry, from a page of A, as htmx does) until
   the push without that row arrives on a socket of web process B, and, as the baseline
   in the same run, on a socket of A itself. Both clocks are the browser's.

    uv run python -m benchmarks.scale_out [--jobs 4000] [--rounds 2] [--seconds 10]
                                          [--samples 30] [--parts workers,web]

Prints the figures and the ratios; it has no pass/fail target of its own, except that
the commands/s must not grow with tabs (exit 1 if 10 tabs cost over 1.5x one tab).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from benchmarks._common import server_version
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
HANDLERS = {"sleep": "benchmarks.scale_out:sleep_1ms", "cpu": "benchmarks.scale_out:cpu_1ms"}
PROCESSES = (1, 2, 4)


# --- the handlers (imported by the worker processes) ----------------------------------------


def sleep_1ms(job: object) -> None:
    """I/O-bound: waits 1 ms, using no CPU."""
    time.sleep(0.001)


def cpu_1ms(job: object) -> None:
    """CPU-bound: spins until this thread has used 1 ms of CPU."""
    until = time.thread_time() + 0.001
    while time.thread_time() < until:
        pass


# --- 1. worker throughput ---------------------------------------------------------------------


def _fleet_start(url: str, stream: str, handler: str, processes: int, err: Path) -> Any:
    env = {k: v for k, v in os.environ.items() if k not in ("VALKEY_URL", "REDIS_URL")}
    env.update(
        VALKEY_URL=url,
        DJANGO_SECRET_KEY="benchmark-only",
        DJANGO_DEBUG="0",
        DATABASE_URL="sqlite:////nonexistent-dir/ackboard-no-db.sqlite3",
    )
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "queue_worker", "--stream", stream,
         "--group", "g", "--handler", handler, "--processes", str(processes),
         "--batch", "10", "--block-ms", "200"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err.open("wb"),
    )  # fmt: skip


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)


def fleet_rate(client: redis.Redis, url: str, cost: str, processes: int, jobs: int) -> float:
    """Jobs/s of ``queue_worker --processes N`` draining ``jobs`` fresh entries."""
    stream = f"bench:scale:{cost}:{processes}"
    client.delete(stream)
    client.xgroup_create(stream, "g", id="$", mkstream=True)
    with tempfile.TemporaryDirectory() as tmp:
        err = Path(tmp) / "fleet.err"
        proc = _fleet_start(url, stream, HANDLERS[cost], processes, err)
        try:
            _wait(lambda: len(re.findall(r" consuming ", err.read_text())) == processes,
                  120, f"{processes} workers to read")  # fmt: skip
            time.sleep(0.3)  # every child is in its blocking read
            started = time.perf_counter()
            pipe = client.pipeline(transaction=False)
            for i in range(jobs):
                pipe.xadd(stream, {"n": str(i)})
            pipe.execute()

            def drained() -> bool:
                [group] = client.xinfo_groups(stream)
                return bool(group["entries-read"] == jobs and group["pending"] == 0)

            _wait(drained, 600, "the group to drain")
            seconds = time.perf_counter() - started
            proc.send_signal(signal.SIGTERM)
            if proc.wait(60) != 0:
                raise RuntimeError(f"the fleet did not stop cleanly:\n{err.read_text()}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    client.delete(stream)
    return jobs / seconds


def workers_section(url: str, jobs: int, rounds: int) -> list[str]:
    """Each handler cost: 1, 2, 4 processes in turn, ``rounds`` times (interleaved, so a
    burst of other load on the machine hits every N alike); the best run of each N."""
    client = redis.Redis.from_url(url)
    out = [
        f"1. Worker throughput, {jobs:,} jobs per run, manage.py queue_worker --processes N "
        f"(concurrency 1, batch 10); best of {rounds} interleaved rounds; {os.cpu_count()} CPUs",
        f"{'handler (1 ms per job)':<26} {'processes':>9} {'jobs/s':>9} {'vs 1 process':>13}",
    ]
    for cost in HANDLERS:
        best = dict.fromkeys(PROCESSES, 0.0)
        for _ in range(rounds):
            for n in PROCESSES:
                rate = fleet_rate(client, url, cost, n, jobs)
                best[n] = max(best[n], rate)
                print(f"  measured {cost} x{n}: {rate:,.0f} jobs/s", file=sys.stderr)
        label = {"sleep": "sleep (I/O-bound)", "cpu": "CPU spin (CPU-bound)"}[cost]
        for n, rate in best.items():
            out.append(f"{label:<26} {n:>9} {rate:>9,.0f} {rate / best[1]:>12.2f}x")
    client.close()
    return out


# --- 2. Redis load by web processes and tabs -------------------------------------------------


def load_section(
    client: redis.Redis, pages: list[Any], producer: Any, path: str, seconds: float
) -> tuple[list[str], bool]:
    """``pages``: one page per web process (A's, B's), each on a page without its own socket."""
    from benchmarks.live_fanout import CLOSE_SOCKETS, OPEN_SOCKETS, _calls

    def measure(on: list[tuple[Any, int]]) -> tuple[float, float]:
        on = [(page, n) for page, n in on if n]
        for page, n in on:
            page.evaluate(OPEN_SOCKETS, [path, n])
        time.sleep(3.0)  # first renders and group joins are done
        for page, _ in on:
            page.evaluate("() => { window.__received.fill(0); }")
        calls, mine, started = _calls(client), producer.commands, time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        total = _calls(client) - calls - (producer.commands - mine)
        received = [c for page, _ in on for c in page.evaluate("() => window.__received")]
        for page, _ in on:
            page.evaluate(CLOSE_SOCKETS)
        time.sleep(1.0)
        return total / elapsed, sum(received) / len(received) if received else 0.0

    rows: list[tuple[str, int, int, float, float]] = []
    for processes in (1, 2):
        for tabs in (0, 1, 10):
            rate, updates = measure([(page, tabs) for page in pages[:processes]])
            rows.append((f"{processes} web x {tabs} tabs", processes, tabs, rate, updates))
            print(f"  measured {rows[-1][0]}: {rate:.1f} commands/s", file=sys.stderr)
    idle1, one1, ten1, idle2, one2, ten2 = (row[3] for row in rows)
    out = [
        f"2. Dashboard Redis commands/s ({seconds:.0f} s windows; 10 XADD/s + 1 worker "
        "failure/s on the watched stream; tabs = sockets on one group page, per process)",
        f"{'web processes x tabs each':<26} {'commands/s':>10} {'vs 1x1':>8} {'updates/tab':>12}",
    ]
    for label, _, tabs, rate, updates in rows:
        if tabs:
            out.append(f"{label:<26} {rate:>10.1f} {rate / one1:>7.2f}x {updates:>12.1f}")
        else:
            out.append(f"{label:<26} {rate:>10.1f} {'-':>8} {'(idle)':>12}")
    flat = ten1 <= 1.5 * one1 and ten2 <= 1.5 * one2
    out.append(
        f"10 tabs vs 1 tab: {ten1 / one1:.2f}x (1 process), {ten2 / one2:.2f}x (2 processes); "
        f"2 processes vs 1: {one2 / one1:.2f}x with 1 tab each (idle, no socket open: "
        f"{idle1:.1f} and {idle2:.1f} commands/s). {'PASS' if flat else 'MISS'}: load does "
        "not grow with tabs (target <= 1.5x)"
    )
    return out, flat


# --- 3. latency across web processes ---------------------------------------------------------

#: A socket on the group surface; records when a pending-table push lacks a watched row.
WATCH_SOCKET = """([path]) => new Promise((resolve) => {
  window.__gone = {};
  window.__watch = new Set();
  const socket = new WebSocket(`ws://${location.host}${path}`);
  socket.onmessage = (event) => {
    const at = performance.timeOrigin + performance.now();
    if (!event.data.includes('id="pending-table"')) return;
    for (const id of Array.from(window.__watch)) {
      if (!event.data.includes(`id="pending-${id}"`)) {
        window.__gone[id] = at;
        window.__watch.delete(id);
      }
    }
  };
  socket.onopen = () => resolve(true);
  window.__watchSocket = socket;
})"""
#: POST Dead-letter of one entry as htmx does (CSRF header from the page); returns when sent.
DEAD_LETTER = """async ([url, consumer]) => {
  const token = JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"];
  const body = new URLSearchParams({reason: "scale-out benchmark", seen_consumer: consumer});
  const sent = performance.timeOrigin + performance.now();
  const response = await fetch(url, {method: "POST", body, headers: {"X-CSRFToken": token}});
  return [sent, response.status];
}"""


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95, ordered[-1]


def latency_section(
    client: redis.Redis, actor: Any, watcher: Any, stream: str, samples: int
) -> list[str]:
    """``actor``: A's group page of ``stream``; ``watcher``: a page of B."""
    ids = [
        e[0].decode() for e in client.xreadgroup("g", "bench-w", {stream: ">"}, count=samples)[0][1]
    ]
    path = f"/ws/streams/{stream}/groups/g/"
    actor.evaluate(WATCH_SOCKET, [path])
    watcher.evaluate(WATCH_SOCKET, [path])
    time.sleep(2.0)
    same: list[float] = []
    across: list[float] = []
    for entry_id in ids:
        time.sleep(random.uniform(0.3, 0.7))  # unrelated to the tick's phase
        for page in (actor, watcher):
            page.evaluate("(id) => window.__watch.add(id)", entry_id)
        url = f"/streams/{stream}/groups/g/entries/{entry_id}/dead-letter/"
        sent, status = actor.evaluate(DEAD_LETTER, [url, "bench-w"])
        if status >= 400:
            raise RuntimeError(f"the dead-letter POST answered {status}")
        for page, into in ((actor, same), (watcher, across)):
            deadline = time.monotonic() + 10
            while (gone := page.evaluate("(id) => window.__gone[id]", entry_id)) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no push without {entry_id} arrived")
                time.sleep(0.005)
            into.append(float(gone) - float(sent))
    out = [
        f"3. Live-update latency across web processes (ms): Dead-letter POSTed to A -> the "
        f"push without that row on a socket; {samples} samples",
        f"{'socket on':<34} {'p50':>7} {'p95':>7} {'max':>7}",
    ]
    for label, values in (("A (the process that acted)", same), ("B (the other process)", across)):
        p50, p95, top = _percentiles(values)
        out.append(f"{label:<34} {p50:>7.0f} {p95:>7.0f} {top:>7.0f}")
    return out


def web_sections(url: str, seconds: float, samples: int) -> tuple[list[str], bool]:
    from playwright.sync_api import sync_playwright

    from benchmarks.live_fanout import Producer
    from tests.browser.peers import peer_of
    from tests.browser.server import LiveServer, chromium_launch, login, seed

    client = redis.Redis.from_url(url)
    ids = seed(client)
    latency_stream = "bench-latency"
    client.delete(latency_stream)
    client.xgroup_create(latency_stream, "g", id="0", mkstream=True)
    for i in range(samples):
        client.xadd(latency_stream, {"payload": f'{{"n": {i}}}'})
    server = LiveServer(redis_url=url)
    try:
        server.start()
        producer = Producer(redis.Redis.from_url(url), ids["orders"], ids["pending"])
        path = f"/ws/streams/{ids['orders']}/groups/billing/"
        with peer_of(server) as peer, sync_playwright() as playwright:
            browser = chromium_launch(playwright)
            context = browser.new_context()
            page_a = context.new_page()
            login(page_a, server)  # the session cookie is per host: it serves B too
            page_a.goto(server.url + "/audit/")
            page_b = context.new_page()
            page_b.goto(peer.url + "/audit/")
            producer.thread.start()
            load, flat = load_section(client, [page_a, page_b], producer, path, seconds)
            producer.stop.set()
            page_a.goto(f"{server.url}/streams/{latency_stream}/groups/g/")
            page_a.wait_for_selector("#live-indicator[data-state=live]")
            latency = latency_section(client, page_a, page_b, latency_stream, samples)
            browser.close()
    finally:
        server.cleanup()
        client.close()
    return [*load, "", *latency], flat


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2, help="worker runs per N (best kept)")
    parser.add_argument("--parts", default="workers,web", help="workers, web, or both")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    load = os.getloadavg()  # other work on the machine skews the CPU-bound figures
    redis_server = RedisServer().start()
    try:
        version = server_version(redis.Redis.from_url(redis_server.url))
        workers = (
            workers_section(redis_server.url, args.jobs, args.rounds) if "workers" in parts else []
        )
        web, flat = (
            web_sections(redis_server.url, args.seconds, args.samples)
            if "web" in parts
            else ([], True)
        )
    finally:
        redis_server.cleanup()
    print(f"Scale-out on Redis {version}, {sys.platform}, {os.cpu_count()} CPUs; load average "
          f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    print("\n".join([*workers, "", *web]))
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
