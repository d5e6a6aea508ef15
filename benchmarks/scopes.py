"""What do permissions by stream cost per request, at 10,000 streams?

A private redis-server holds ``--streams`` streams (default 10,000; one group, 5 entries,
3 pending each, ``benchmarks.serving``'s data set). A temp SQLite database (the project's
migrations) holds two users: one whose role has no stream pattern (every stream: what a
deployment without scopes runs) and one whose role reaches a tenth of the streams
through ``--patterns`` patterns (default 3: a prefix glob, an exact name, one matching
nothing). Through Django's test client, in process, it times as the median of
``--runs`` requests, the two users taking turns so drift hits both:

- the overview's first page (the pattern cut over 10,000 names, cached per index
  generation: the steady state a user meets);
- the same with the cut's cache cleared before each request (the first request after an
  index refresh: the full cost of matching every name);
- a stream page (one pattern check of its name, plus reading the user's grants);
- the Failures page (the patterns as a SQL condition).

Each line prints the scoped user's time beside the unscoped user's, with the ratio.

    uv run python -m benchmarks.scopes [--streams 10000] [--runs 31] [--patterns 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from benchmarks._common import redis_for_benchmark
from benchmarks.serving import seed_streams, stream_prefix


def setup_django(db_path: Path, redis_url: str, prefix: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = str(db_path)
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_MAX_STREAMS = 20_000
    django.setup()


def median_ms(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--patterns", type=int, default=3)
    args = parser.parse_args(argv)
    prefix = stream_prefix(args.streams)
    with redis_for_benchmark() as url, tempfile.TemporaryDirectory() as tmp:
        seed_streams(redis.Redis.from_url(url), args.streams)
        setup_django(Path(tmp) / "bench.sqlite3", url, prefix)
        return run(args, prefix)


def run(args: argparse.Namespace, prefix: str) -> int:
    from django.contrib.auth.models import Group, Permission, User
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    from dashboard.insight import stream_index
    from dashboard.models import StreamScope

    setup_test_environment()
    call_command("migrate", verbosity=0)
    perms = Permission.objects.filter(
        content_type__app_label="dashboard", codename__in=["view_queues", "retry_entry"]
    )
    everywhere = Group.objects.create(name="every stream")
    scoped = Group.objects.create(name="a tenth")
    for g in (everywhere, scoped):
        g.permissions.add(*perms)
    # A tenth of the streams (00000-00999 at 10,000: one prefix glob) and one exact name;
    # the rest of ``--patterns`` match nothing.
    patterns = [f"{prefix}00*", f"{prefix}{args.streams // 2:05d}"]
    patterns += [f"{prefix}nothing-{i}:*" for i in range(max(0, args.patterns - 2))]
    for p in patterns[: args.patterns]:
        StreamScope.objects.create(group=scoped, pattern=p)
    clients = {}
    for name, group in (("unscoped", everywhere), ("scoped", scoped)):
        user = User.objects.create_user(username=name, password="pw")
        user.groups.add(group)
        client = Client()
        client.force_login(user)
        clients[name] = client

    overview = reverse("dashboard:overview")
    stream_page = reverse("dashboard:stream-detail", args=[f"{prefix}00042"])
    failures = reverse("dashboard:failure-search")
    started = time.perf_counter()
    while True:  # the first request builds the index; wait until it lists every stream
        response = clients["unscoped"].get(overview)
        if response.context["page"].total >= args.streams:
            break
        if time.perf_counter() - started > 300:
            print("the stream index did not finish", file=sys.stderr)
            return 1
        time.sleep(0.5)
    seen = clients["scoped"].get(overview).context["page"].total
    print(f"{args.streams:,} streams; the scoped user reads {seen:,} ({len(patterns)} patterns)")

    def cold(path: str, client: Client) -> Callable[[], Any]:
        def once() -> Any:
            stream_index._reached.clear()
            return client.get(path)

        return once

    cases: list[tuple[str, Callable[[Client], Callable[[], Any]]]] = [
        ("overview, first page", lambda c: lambda: c.get(overview)),
        ("overview, cut not cached", lambda c: cold(overview, c)),
        ("stream page", lambda c: lambda: c.get(stream_page)),
        ("Failures page", lambda c: lambda: c.get(failures)),
    ]
    print(f"{'request':<28}{'no patterns':>14}{'patterns':>12}{'ratio':>8}")
    for label, make in cases:
        base, with_scope = [], []
        for _ in range(3):  # take turns, so drift hits both
            base.append(median_ms(make(clients["unscoped"]), args.runs // 3 or 1))
            with_scope.append(median_ms(make(clients["scoped"]), args.runs // 3 or 1))
        b, s = statistics.median(base), statistics.median(with_scope)
        print(f"{label:<28}{b:>11.2f} ms{s:>9.2f} ms{s / b:>7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
