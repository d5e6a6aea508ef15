"""How fast is the Failures page's search over 100,000 failure records, on SQLite or PostgreSQL?

Fills a fresh database (migrated with the project's migrations) with N failure rows
(default 100,000): 20 streams x 3 groups, 8 error types, ~1 KB tracebacks, spread
over 30 days. ``--db sqlite`` (default) uses a temp SQLite file; ``--db postgres`` a
private PostgreSQL started for the run (tests/postgres_server.py: initdb + pg_ctl on a
free loopback port, default durability settings, removed at the end), filled with COPY.
Then times, as the median of several runs:

- the baseline: one bare indexed ``SELECT COUNT(*) ... WHERE stream = ?`` (raw SQL);
- ``failure_search`` pages: newest, by stream, stream + group, error type, last 24 h,
  a deep page (the 200th, reached by keyset cursors), and text searches (a rare word
  within one stream, a rare word over everything, a common word);
- the page helpers ``last_failures`` (50 ids), ``failure_history`` and
  ``failures_count_since`` (20 streams, last hour);
- the whole Failures page (login, view, template) through Django's test client.

Each line prints the time and its ratio to the baseline, measured in the same run.

Then the ingestor's throughput: ``--ingest`` records (default 20,000) XADDed to four
``{S}:failures`` streams on a private redis-server, drained by ``failures_ingest``
(read, parse, write, commit, XACK), beside a bare ``bulk_create`` of the same rows.

    uv run python -m benchmarks.failure_search [--db sqlite|postgres] [--rows 100000]
        [--runs 15] [--ingest 20000]

A search that hits its time budget (``ACKBOARD_FAILURE_SEARCH_MS``, 1.5 s) prints
"too broad" with the time it took to be cut off, as the page would show it.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dashboard.models import IndexedFailure

STREAMS = [f"bench:stream-{i:02d}" for i in range(20)]
GROUPS = ("billing", "shipping", "audit")
ERRORS = (
    "ValueError",
    "KeyError",
    "TimeoutError",
    "ConnectionError",
    "PermissionError",
    "RuntimeError",
    "JSONDecodeError",
    "PayloadMissing",
)
WORDS = [
    "order",
    "payment",
    "gateway",
    "customer",
    "invoice",
    "refund",
    "shipment",
    "timeout",
    "retry",
    "card",
]


def setup_django(*, db_path: Path | None = None, db_url: str | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import dj_database_url
    import django
    from django.conf import settings

    if db_url is not None:
        settings.DATABASES["default"] = dj_database_url.parse(db_url)
    else:
        settings.DATABASES["default"]["NAME"] = str(db_path)
    django.setup()


def rows(n: int, now: datetime) -> Iterator[IndexedFailure]:
    """The N benchmark rows, unsaved, the same for every engine (seeded)."""
    from dashboard.models import IndexedFailure

    rng = random.Random(7)
    span_s = 30 * 86_400
    for i in range(n):
        stream = STREAMS[i % len(STREAMS)]
        error = ERRORS[rng.randrange(len(ERRORS))]
        words = " ".join(rng.choice(WORDS) for _ in range(8))
        frames = "".join(
            f'  File "/app/handlers/{rng.choice(WORDS)}.py", line {rng.randrange(900)}, in run\n'
            f"    {rng.choice(WORDS)}_{rng.choice(WORDS)}(job)\n"
            for _ in range(10)
        )
        yield IndexedFailure(
            failures_key="{" + stream + "}:failures",
            source_id=f"{i}-0",
            stream=stream,
            group=GROUPS[i % 3],
            entry_id=f"{1_700_000_000_000 + i // 3}-0",
            consumer=f"worker-{i % 16}",
            attempt=1 + i % 5,
            error_type=error,
            message=f"{error}: {words} #{i}",
            traceback=f"Traceback (most recent call last):\n{frames}{error}: {words}",
            duration_ms=rng.random() * 500,
            failed_at=now - timedelta(seconds=rng.randrange(span_s)),
        )


def fill(n: int, now: datetime) -> None:
    """Insert the rows: COPY on PostgreSQL, bulk_create batches of 5,000 elsewhere."""
    from django.db import connection, transaction

    from dashboard.models import IndexedFailure

    if connection.vendor == "postgresql":
        fields = [f for f in IndexedFailure._meta.concrete_fields if not f.primary_key]
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        table = connection.ops.quote_name(IndexedFailure._meta.db_table)
        with transaction.atomic(), connection.cursor() as cursor:
            raw: Any = cursor.cursor  # psycopg's own cursor: Django's has no copy()
            with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows(n, now):
                    copy.write_row([getattr(row, f.attname) for f in fields])
        return
    batch: list[IndexedFailure] = []
    for row in rows(n, now):
        batch.append(row)
        if len(batch) == 5_000:
            with transaction.atomic():
                IndexedFailure.objects.bulk_create(batch)
            batch.clear()
    if batch:
        with transaction.atomic():
            IndexedFailure.objects.bulk_create(batch)


def median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, bool]:
    """The median time of ``fn`` and whether it was cut off as too broad."""
    from dashboard.insight.failure_index import SearchTooBroad

    def once() -> bool:
        try:
            fn()
        except SearchTooBroad:
            return True
        return False

    once()  # warm the page cache and statement cache
    samples = []
    broad = False
    for _ in range(runs):
        start = time.perf_counter()
        broad = once() or broad
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), broad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--ingest", type=int, default=20_000)
    args = parser.parse_args(argv)

    tmp = tempfile.TemporaryDirectory(prefix="ackboard-bench-")
    postgres = None
    if args.db == "postgres":
        from tests.postgres_server import PostgresServer

        postgres = PostgresServer(durable=True).start()
        setup_django(db_url=postgres.url)
    else:
        setup_django(db_path=Path(tmp.name) / "bench.sqlite3")
    try:
        return run(args, engine=f"PostgreSQL {postgres.version}" if postgres else None)
    finally:
        from django.db import connections

        connections.close_all()
        if postgres is not None:
            postgres.cleanup()
        tmp.cleanup()


def run(args: argparse.Namespace, *, engine: str | None) -> int:
    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from dashboard.insight.failure_index import (
        FailureFilter,
        failure_history,
        failure_search,
        failures_count_since,
        last_failures,
    )
    from dashboard.models import IndexedFailure

    call_command("migrate", verbosity=0)
    now = datetime.now(UTC)
    started = time.perf_counter()
    fill(args.rows, now)
    print(f"filled {args.rows:,} rows in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    with connection.cursor() as cursor:
        # PostgreSQL: VACUUM too, as autovacuum would after a bulk load; until then its
        # visibility map is empty and every index-only scan (the baseline) reads the heap.
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
            (size,) = cursor.fetchone()
        print(f"database size after ANALYZE: {size}", file=sys.stderr)

    stream = STREAMS[3]

    def baseline() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM dashboard_indexedfailure WHERE stream = %s", [stream]
            )
            cursor.fetchone()

    def page(**filters: Any) -> Callable[[], Any]:
        return lambda: failure_search(filters=FailureFilter(**filters))

    cursor_200: str | None = None
    result = failure_search(filters=FailureFilter())
    for _ in range(199):
        cursor_200 = result.older
        result = failure_search(filters=FailureFilter(), before=cursor_200)
    some_ids = list(
        IndexedFailure.objects.filter(stream=stream, group="billing").values_list(
            "entry_id", flat=True
        )[:50]
    )

    setup_test_environment()
    user = User.objects.create_user(username="bench", password="x")
    user.user_permissions.add(Permission.objects.get(codename="view_queues"))
    client = Client()
    client.force_login(user)

    def view(query: dict[str, str]) -> Callable[[], Any]:
        def get() -> None:
            response = client.get("/failures/", query)
            assert response.status_code == 200, response.status_code

        return get

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("search: newest page, no filter", page()),
        ("search: stream", page(stream=stream)),
        ("search: stream + group", page(stream=stream, group="billing")),
        ("search: error type", page(error_type="TimeoutError")),
        ("search: last 24 h", page(since=now - timedelta(days=1))),
        (
            "search: page 200 (keyset)",
            lambda: failure_search(filters=FailureFilter(), before=cursor_200),
        ),
        ("search: text, rare, in one stream", page(stream=stream, text="no-such-word")),
        ("search: text, rare, everything", page(text="no-such-word")),
        ("search: text, common word", page(text="gateway")),
        (
            "last_failures: 50 ids",
            lambda: last_failures(stream=stream, group="billing", entry_ids=some_ids),
        ),
        (
            "failure_history: one entry",
            lambda: failure_history(stream=stream, entry_id=some_ids[0]),
        ),
        (
            "failures_count_since: 20 streams, 1 h",
            lambda: failures_count_since(streams=STREAMS, since=now - timedelta(hours=1)),
        ),
        ("page: /failures/ (whole view)", view({})),
        ("page: /failures/?stream&q", view({"stream": stream, "q": "refund"})),
    ]

    base, _ = median_ms(baseline, args.runs)
    print(f"{args.rows:,} failure rows, {engine or f'SQLite {sqlite3.sqlite_version}'}")
    print(f"{'query':42} {'median ms':>10} {'x baseline':>11}")
    print(f"{'baseline: indexed COUNT(*) of one stream':42} {base:10.2f} {1.0:11.1f}")
    for name, fn in cases:
        ms, broad = median_ms(fn, args.runs)
        print(f"{name:42} {ms:10.2f} {ms / base:11.1f}" + ("  too broad" if broad else ""))
    if args.ingest:
        ingest_throughput(args.ingest)
    return 0


def ingest_throughput(n: int) -> None:
    from django.db import transaction

    from dashboard.insight.failure_index import failure_record_parse, failures_ingest
    from dashboard.models import IndexedFailure
    from queue_core.connection import connect
    from queue_core.keys import stream_keys
    from tests.redis_server import RedisServer

    server = RedisServer().start()
    try:
        client = connect(server.url)
        streams = [f"ingest:{i}" for i in range(4)]
        pipe = client.pipeline(transaction=False)
        for i in range(n):
            pipe.xadd(
                stream_keys(streams[i % 4]).failures,
                {
                    "group": "billing",
                    "entry_id": f"{1_700_000_000_000 + i}-0",
                    "consumer": "worker-1",
                    "attempt": "1",
                    "error_type": "TimeoutError",
                    "message": f"gateway timed out for order {i}",
                    "traceback": "Traceback (most recent call last):\n" + "  frame\n" * 20,
                    "duration_ms": "30000.5",
                    "failed_at_ms": str(1_767_268_800_000 + i),
                },
            )
        pipe.execute()
        # Baseline: the same rows parsed in advance, written with one bare bulk_create
        # per 500 (the ingestor's batch), no Redis.
        entries = [e for s in streams for e in client.xrange(stream_keys(s).failures)]
        rows = [
            failure_record_parse(
                failures_key="bench", stream="bench", source_id=i.decode(), fields=f
            )
            for i, f in entries
        ]
        start = time.perf_counter()
        for k in range(0, len(rows), 500):
            with transaction.atomic():
                IndexedFailure.objects.bulk_create(rows[k : k + 500], ignore_conflicts=True)
        bare = len(rows) / (time.perf_counter() - start)
        start = time.perf_counter()
        stored = failures_ingest(client=client, once=True)
        rate = stored / (time.perf_counter() - start)
        assert stored == n, (stored, n)
        print(f"ingest: {n:,} records from 4 streams")
        print(f"{'bare bulk_create (500/txn), rows/s':42} {bare:10.0f}")
        print(f"{'failures_ingest --once, records/s':42} {rate:10.0f} {rate / bare:10.2f}x")
    finally:
        server.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
