"""How fast is the Failures page's "by cause" view over 1,000,000 stored attempts?

Fills a fresh database (the project's migrations) with N failure rows (default
1,000,000): 20 streams x 3 groups, 40 causes (error type, message template, handler
frame) drawn with a skew (a few causes hold most attempts, as in an outage), values in
the messages varying per row, spread over 30 days. The fingerprint is computed once per
cause (the rows of a cause differ only in values, which the normalization removes: see
tests/queue_core/test_fingerprint.py's property test), so the fill is a bulk insert:
one executemany in one transaction on SQLite, COPY on PostgreSQL. ``--db postgres``
starts a private PostgreSQL for the run (tests/postgres_server.py), as
benchmarks/failure_search.py does. A private redis-server holds a pending list of 1,000
entries in each stream's "billing" group whose ids are the rows' entry ids, so "pending
now" has real work (capped at ``causes.PENDING_SCAN`` ids).

Then times, as the median of several runs, each with its ratio to the baselines measured
in the same run:

- baseline 1: the existing failure search's newest page, no filter (``failure_search``);
- baseline 2: the existing failure search, one stream, rare text (a LIKE over its rows);
- ``causes``: every row, no pending count; every row with "pending now"; one stream;
  one stream + group; the last 24 hours;
- the whole page ``/failures/?view=causes`` through Django's test client.

    uv run python -m benchmarks.fingerprints [--db sqlite|postgres] [--rows 1000000]
        [--runs 5]

A query that hits the search's budget (``ACKBOARD_FAILURE_SEARCH_MS``, 1.5 s) prints
"too broad" with the time it took to be cut off, as the page would say it.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.failure_search import GROUPS, STREAMS, median_ms, setup_django

#: (error type, message template with {n} values, handler file, function)
_TEMPLATES = (
    ("TimeoutError", "payment gateway timed out after {n} ms for order {n}", "pay", "charge"),
    ("ConnectionError", "could not connect to 10.0.{n}.7:5432 (attempt {n})", "db", "query"),
    ("KeyError", "'customer_{n}'", "orders", "load"),
    ("ValueError", "card ending {n} declined (request {h})", "pay", "charge"),
    ("JSONDecodeError", "Expecting value: line 1 column {n} (char {n})", "webhook", "parse"),
    ("PermissionError", "token {h} may not write to bucket 'exports-{n}'", "export", "put"),
    ("RuntimeError", "inventory for sku {n} went negative", "stock", "reserve"),
    ("PayloadMissing", "entry {n}-0 has no field 'order_id'", "orders", "parse"),
)
CAUSES = [
    (error, template, f"/app/handlers/{module}_{k}.py", function)
    for k in range(5)
    for error, template, module, function in _TEMPLATES
]


def _message(template: str, rng: random.Random) -> str:
    return template.replace("{n}", str(rng.randrange(10**6))).replace(
        "{h}", f"{rng.getrandbits(64):016x}"
    )


def rows(n: int, now: datetime) -> Iterator[tuple[Any, ...]]:
    """The N rows as column tuples (``COLUMNS``' order), the same for every engine."""
    from queue_core.fingerprint import fingerprint

    rng = random.Random(14)
    weights = [1 / (k + 1) ** 1.2 for k in range(len(CAUSES))]
    tracebacks = [
        f'Traceback (most recent call last):\n  File "{path}", line 40, in {function}\n'
        f"    raise {error}(...)\n{error}: ...\n"
        for error, _, path, function in CAUSES
    ]
    fps = [
        fingerprint(error, _message(template, rng), tb)
        for (error, template, _, _), tb in zip(CAUSES, tracebacks, strict=True)
    ]
    picks = rng.choices(range(len(CAUSES)), weights=weights, k=n)
    span_s = 30 * 86_400
    for i, c in enumerate(picks):
        error, template, _, _ = CAUSES[c]
        stream = STREAMS[i % len(STREAMS)]
        group = GROUPS[(i // len(STREAMS)) % 3]
        entry = 1_700_000_000_000 + (i // (len(STREAMS) * 3)) % 5_000
        yield (
            "{" + stream + "}:failures",
            f"{i}-0",
            stream,
            group,
            f"{entry}-0",
            f"worker-{i % 16}",
            1 + i % 5,
            error,
            _message(template, rng),
            tracebacks[c],
            rng.random() * 500,
            now - timedelta(seconds=rng.randrange(span_s)),
            fps[c],
        )


COLUMNS = (
    "failures_key",
    "source_id",
    "stream",
    "group",
    "entry_id",
    "consumer",
    "attempt",
    "error_type",
    "message",
    "traceback",
    "duration_ms",
    "failed_at",
    "fingerprint",
)


def fill(n: int, now: datetime) -> None:
    """COPY on PostgreSQL; one executemany INSERT in one transaction on SQLite."""
    from django.db import connection, transaction

    from dashboard.models import IndexedFailure

    q = connection.ops.quote_name
    table = q(IndexedFailure._meta.db_table)
    columns = ", ".join(q(c) for c in COLUMNS)
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            raw: Any = cursor.cursor
            with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows(n, now):
                    copy.write_row(row)
            return
        marks = ", ".join(["%s"] * len(COLUMNS))
        sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
        chunk: list[tuple[Any, ...]] = []
        for row in rows(n, now):
            chunk.append((*row[:11], row[11].isoformat(sep=" "), row[12]))
            if len(chunk) == 20_000:
                cursor.executemany(sql, chunk)
                chunk.clear()
        if chunk:
            cursor.executemany(sql, chunk)


def pending_lists(client: Any) -> int:
    """1,000 pending entries in each stream's "billing" group, ids as the rows' entry ids."""
    for stream in STREAMS:
        pipe = client.pipeline(transaction=False)
        for k in range(1_000):
            pipe.xadd(stream, {"n": str(k)}, id=f"{1_700_000_000_000 + k}-0")
        pipe.xgroup_create(stream, "billing", id="0")
        pipe.execute()
        while client.xreadgroup("billing", "worker-1", {stream: ">"}, count=1_000):
            pass
    return len(STREAMS) * 1_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)

    tmp = tempfile.TemporaryDirectory(prefix="ackboard-bench-")
    postgres = None
    if args.db == "postgres":
        from tests.postgres_server import PostgresServer

        postgres = PostgresServer(durable=True).start()
        setup_django(db_url=postgres.url)
    else:
        setup_django(db_path=Path(tmp.name) / "bench.sqlite3")
    from tests.redis_server import RedisServer

    server = RedisServer().start()
    try:
        engine = f"PostgreSQL {postgres.version}" if postgres else None
        return run(args, engine=engine, redis_url=server.url)
    finally:
        from django.db import connections

        connections.close_all()
        server.cleanup()
        if postgres is not None:
            postgres.cleanup()
        tmp.cleanup()


def run(args: argparse.Namespace, *, engine: str | None, redis_url: str) -> int:
    from django.conf import settings
    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from dashboard.insight.failure_index import FailureFilter, causes, failure_search
    from queue_core.connection import connect

    call_command("migrate", verbosity=0)
    now = datetime.now(UTC)
    started = time.perf_counter()
    fill(args.rows, now)
    print(f"filled {args.rows:,} rows in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
    client = connect(redis_url)
    pending = pending_lists(client)
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = ("bench:*",)

    stream = STREAMS[3]
    setup_test_environment()
    user = User.objects.create_user(username="bench", password="x")
    user.user_permissions.add(Permission.objects.get(codename="view_queues"))
    web = Client()
    web.force_login(user)

    def view(query: dict[str, str]) -> Callable[[], Any]:
        def get() -> None:
            response = web.get("/failures/", query)
            assert response.status_code == 200, response.status_code

        return get

    def by_cause(
        with_pending: bool = False, budget_ms: int | None = None, **filters: Any
    ) -> Callable[[], Any]:
        redis_client = client if with_pending else None
        return lambda: causes(
            filters=FailureFilter(**filters), client=redis_client, budget_ms=budget_ms
        )

    # Once without a budget: how long grouping every row takes, and what the view finds.
    started = time.perf_counter()
    sample = causes(filters=FailureFilter(), client=client, budget_ms=10**7)
    unbudgeted = (time.perf_counter() - started) * 1000
    print(
        f"{args.rows:,} failure rows, {engine or f'SQLite {sqlite3.sqlite_version}'}; "
        f"{len(sample.causes)} causes; {pending:,} pending entries "
        f"(pending now read {sample.pending_scanned:,}, capped: {sample.pending_capped})"
    )
    base1, _ = median_ms(lambda: failure_search(filters=FailureFilter()), args.runs)
    base2, broad2 = median_ms(
        lambda: failure_search(filters=FailureFilter(stream=stream, text="no-such-word")),
        args.runs,
    )
    print(f"{'query':44} {'median ms':>10} {'x base 1':>9} {'x base 2':>9}")
    name1 = "base 1: search, newest page, no filter"
    print(f"{name1:44} {base1:10.1f} {1.0:9.2f} {base1 / base2:9.2f}")
    print(
        f"{'base 2: search, one stream, rare text':44} {base2:10.1f} {base2 / base1:9.2f} "
        f"{1.0:9.2f}" + ("  too broad" if broad2 else "")
    )
    print(f"{'causes: every row, once, no budget':44} {unbudgeted:10.1f} "
          f"{unbudgeted / base1:9.2f} {unbudgeted / base2:9.2f}")  # fmt: skip
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("causes: last 24 h (the tab's default)", by_cause(since=now - timedelta(days=1))),
        ("causes: every row, no budget", by_cause(budget_ms=10**7)),
        ("causes: every row (1.5 s budget)", by_cause()),
        ("causes: every row + pending now", by_cause(True)),
        ("causes: one stream + pending now", by_cause(True, stream=stream)),
        ("causes: stream + group + pending now", by_cause(True, stream=stream, group="billing")),
        ("causes: last 24 h + pending now", by_cause(True, since=now - timedelta(days=1))),
        ("page: /failures/?view=causes&window=24h", view({"view": "causes", "window": "24h"})),
        ("page: /failures/?view=causes (every row)", view({"view": "causes"})),
        ("page: /failures/?view=causes&stream", view({"view": "causes", "stream": stream})),
    ]
    for name, fn in cases:
        ms, broad = median_ms(fn, args.runs)
        print(
            f"{name:44} {ms:10.1f} {ms / base1:9.2f} {ms / base2:9.2f}"
            + ("  too broad" if broad else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
