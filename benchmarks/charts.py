"""How fast are the rate charts: the 7-day chart's data and the pages that carry a chart?

Starts a private redis-server and the production web process (``tests.browser.server``
``LiveServer``: production settings, its own SQLite database, one operator; the sampler
off, so only reads are timed) and fills its database with a full history as the sampler
would have left it: ``--streams`` streams (default 20) with one group each, every series
(the group's and the stream's own) holding all three tiers at their retention (8,640
10-second rows, 10,080 1-minute rows, 12,960 10-minute rows: 31,680 rows a series, 1.27
million rows at 20 streams), plus 200 audit rows over the week on the charted group (its
markers). Redis holds the charted stream (1,000 entries, 100 pending) and its group.

Then, logged in through the form on one keep-alive connection (``benchmarks.serving``'s
client, gzip accepted), it times the median of ``--repeat`` requests of each, every one
just after a ``/healthz`` of the same process (the baseline measured in the same run, so
drift hits both), and prints the ratio:

- the chart's JSON for 7 d (the 10-minute tier: ~1,000 points and the finer tail), 24 h
  (1-minute tier), 6 h and 1 h (10-second tier): computed ("new sample": a sample row is
  written before each request, as each sampler tick does, so the per-process JSON cache
  misses and the series reads the rows written since its kept main-tier columns) and
  cached (the same chart asked again before the next tick); for 7 d also "read afresh"
  (the newest 10-minute row rewritten too, so all ~1,000 rows are read and computed, as on
  a chart's first view in a process);
- the group page (its chart shell, drain estimate and live point), the stream page and
  the overview (each row's lag in time and drain estimate).

The goal: the 7-day chart's data and the page render under 50 ms.

    uv run python -m benchmarks.charts [--streams 20] [--repeat 30]
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import time
import urllib.parse
from collections.abc import Iterator

import redis

from benchmarks.serving import Browser, Figure, measure, print_figures
from tests.browser.server import LiveServer, serving
from tests.redis_server import RedisServer

STREAM = "bench:charts:s000"
GROUP = "billing"
#: (tier, step s, rows): the sampler's tiers at their retention (dashboard.insight.rates.models).
TIERS = ((0, 10, 8_640), (1, 60, 10_080), (2, 600, 12_960))
GOAL_MS = 50.0


def _series_rows(stream: str, group: str, now: float) -> Iterator[tuple[object, ...]]:
    for tier, step, count in TIERS:
        for i in range(count):
            at = now - (count - 1 - i) * step
            added = int(at * 40) - 70_000_000_000  # ~40/s, monotonic
            read = added - 500 - int(400 * math.sin(at / 3600)) if group else None
            lag = added - read if read is not None else 900
            yield (
                tier, stream, group, at, added, read, lag, 25,
                12.5 + 5 * math.sin(at / 900), 8.0 + 4 * math.sin(at / 700), 3, 1,
            )  # fmt: skip


def seed_history(db_path: str, streams: int, now: float) -> int:
    """Every series' rows, in one transaction; the row count."""
    db = sqlite3.connect(db_path)
    columns = [row[1] for row in db.execute("PRAGMA table_info(dashboard_ratesample)")]
    wanted = [
        "tier", "stream", "group", "at", "entries_added", "entries_read", "lag", "pending",
        "oldest_pending_age_s", "oldest_undelivered_age_s", "dead_letters", "failures",
    ]  # fmt: skip
    missing = set(wanted) - set(columns)
    if missing:
        raise SystemExit(f"dashboard_ratesample has no {sorted(missing)}: rerun after migrating")
    sql = (
        "INSERT INTO dashboard_ratesample ("
        + ", ".join(f'"{c}"' for c in wanted)
        + ") VALUES ("
        + ", ".join("?" * len(wanted))
        + ")"
    )
    total = 0
    with db:
        for i in range(streams):
            name = f"bench:charts:s{i:03d}"
            for group in (GROUP, ""):
                rows = list(_series_rows(name, group, now))
                db.executemany(sql, rows)
                total += len(rows)
        audit = [row[1] for row in db.execute("PRAGMA table_info(dashboard_auditevent)")]
        values = {
            "username": "olga", "action": "bulk-retry", "stream": STREAM, "group": GROUP,
            "entry_ids": json.dumps(["1-0", "2-0"]), "reason": "", "result": "ok",
            "detail": "", "state_before": "{}", "new_ids": "[]", "channel": "button",
        }  # fmt: skip
        cols = [c for c in audit if c in values] + ["created_at"]
        insert = (
            "INSERT INTO dashboard_auditevent ("
            + ", ".join('"' + c + '"' for c in cols)
            + ") VALUES ("
            + ", ".join("?" * len(cols))
            + ")"
        )
        for k in range(200):
            at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now - k * 7 * 86_400 / 200 - 30))
            db.execute(insert, [values[c] for c in cols[:-1]] + [at])
    db.close()
    return total


def seed_redis(client: redis.Redis) -> None:
    pipe = client.pipeline(transaction=False)
    for i in range(1_000):
        pipe.xadd(STREAM, {"n": str(i), "payload": json.dumps({"order": i})})
    pipe.execute()
    client.xgroup_create(STREAM, GROUP, id="0")
    client.xreadgroup(GROUP, "w1", {STREAM: ">"}, count=100)


def measure_cold(
    browser: Browser, db: sqlite3.Connection, path: str, *, repeat: int, afresh: int | None = None
) -> Figure:
    """Like ``measure``, but a new sample lands before each request (as every sampler tick
    does), so the chart is computed, not served from the process's cache. With ``afresh``
    (a tier), the newest row of that tier is also rewritten, so the chart's kept main-tier
    columns (``dashboard.insight.rates.series.chart_columns``) no longer match and are read afresh:
    the cost of a chart's first view in a process."""
    pages: list[float] = []
    healths: list[float] = []
    last = None
    for _ in range(repeat):
        with db:
            db.execute(
                'INSERT INTO dashboard_ratesample ("tier", "stream", "group", "at", '
                '"entries_added", "entries_read", "lag") VALUES (0, ?, ?, ?, NULL, NULL, NULL)',
                (STREAM, GROUP, time.time()),
            )
            if afresh is not None:
                db.execute(
                    "UPDATE dashboard_ratesample SET lag = lag + 1 WHERE id = (SELECT id FROM "
                    'dashboard_ratesample WHERE tier = ? AND stream = ? AND "group" = ? '
                    "ORDER BY at DESC LIMIT 1)",
                    (afresh, STREAM, GROUP),
                )
        began = time.perf_counter()
        health = browser.get("/healthz")
        healths.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        last = browser.get(path)
        pages.append((time.perf_counter() - began) * 1000)
        if health.status != 200 or last.status != 200:
            raise SystemExit(f"{path}: HTTP {last.status}, /healthz {health.status}")
    assert last is not None
    return Figure(
        path,
        statistics.median(pages),
        statistics.median(healths),
        last.wire,
        len(last.body),
        last.encoding,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    quote = urllib.parse.quote
    redis_server = RedisServer().start()
    try:
        client = redis.Redis.from_url(redis_server.url)
        seed_redis(client)
        web = LiveServer(
            redis_url=redis_server.url,
            streams="bench:charts:*",
            role="operator",
            extra_env={"ACKBOARD_SAMPLER": "0"},
        )
        with serving(web):
            began = time.perf_counter()
            rows = seed_history(str(web.workdir / "db.sqlite3"), args.streams, time.time())
            print(
                f"history: {rows:,} rows ({args.streams} streams x 2 series x 31,680), "
                f"written in {time.perf_counter() - began:.1f} s"
            )
            browser = Browser("127.0.0.1", web.port)
            browser.login(web.username, web.password)
            group_page = f"/streams/{quote(STREAM, safe='')}/groups/{GROUP}/"
            chart = group_page + "chart/?range="
            figures: list[Figure] = []
            db = sqlite3.connect(str(web.workdir / "db.sqlite3"))
            for name in ("7d", "24h", "6h", "1h"):
                points = len(json.loads(browser.get(chart + name).body)["t"])
                if name == "7d":
                    first = measure_cold(browser, db, chart + name, repeat=args.repeat, afresh=2)
                    first.label = f"chart JSON {name}, read afresh ({points:,} points)"
                    figures.append(first)
                cold = measure_cold(browser, db, chart + name, repeat=args.repeat)
                cold.label = f"chart JSON {name}, new sample ({points:,} points)"
                figures.append(cold)
                warm = measure(
                    browser, f"chart JSON {name}, cached", chart + name, repeat=args.repeat
                )
                figures.append(warm)
            db.close()
            figures.append(measure(browser, "group page", group_page, repeat=args.repeat))
            figures.append(
                measure(
                    browser,
                    "stream page",
                    f"/streams/{quote(STREAM, safe='')}/",
                    repeat=args.repeat,
                )
            )
            figures.append(measure(browser, "overview (drains)", "/", repeat=args.repeat))
            print_figures(figures, f"median of {args.repeat}, each after a /healthz")
            for f in figures:
                if f.label.startswith(("chart JSON 7d", "group page")):  # the 7-day figures
                    met = "ok" if f.page_ms < GOAL_MS else "MISSED"
                    print(f"  goal < {GOAL_MS:g} ms, {f.label}: {f.page_ms:.1f} ms: {met}")
            browser.close()
    finally:
        redis_server.cleanup()


if __name__ == "__main__":
    main()
