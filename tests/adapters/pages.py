"""What both adapters' tests check in Redis and on Ackboard's pages after a framework ran.

``settled_check`` reads Redis: nothing pending but the entries expected, the failure log
holding exactly the expected attempts, the poison entry in the dead-letter stream.
``pages_check`` renders the group, entry, Failures and dead-letter pages with the Django
test client and matches their rows and ids, never a whole-page substring.
"""

from __future__ import annotations

import redis
from django.test import Client
from django.urls import reverse

from dashboard.insight.failure_index import failures_ingest
from queue_core.keys import ORIGIN_ID_FIELD, stream_keys
from tests.html import element_text, table_rows


def failure_log(r: redis.Redis, stream: str) -> list[tuple[str, int, str]]:
    """(entry id, attempt, error type) of every record in ``{S}:failures``, sorted."""
    rows = r.xrange(stream_keys(stream).failures)
    return sorted(
        (f[b"entry_id"].decode(), int(f[b"attempt"]), f[b"error_type"].decode()) for _, f in rows
    )


def settled_check(
    r: redis.Redis, stream: str, group: str, *, failures: list[tuple[str, int, str]],
    poison: str, pending: set[str],
) -> None:  # fmt: skip
    held = r.xpending_range(stream, group, min="-", max="+", count=100)
    assert {row["message_id"].decode() for row in held} == pending
    assert failure_log(r, stream) == sorted(failures)
    (moved,) = r.xrange(stream_keys(stream).dlq)
    assert moved[1][ORIGIN_ID_FIELD.encode()] == poison.encode()


def pages_check(
    viewer: Client, redis_url: str, stream: str, group: str, *,
    failures: list[tuple[str, int, str]], poison: str, pending: set[str],
    consumers: set[str], max_deliveries: int,
) -> None:  # fmt: skip
    stored = failures_ingest(client=redis.Redis.from_url(redis_url), once=True)
    assert stored == len(failures)

    group_page = viewer.get(reverse("dashboard:group-detail", args=[stream, group]))
    assert group_page.status_code == 200
    html = group_page.content.decode()
    assert set(table_rows(html, "pending-")) == {f"pending-{entry}" for entry in pending}
    workers = table_rows(html, "worker-")
    assert {cells[0] for cells in workers.values()} == consumers
    assert sum(int(cells[9]) for cells in workers.values()) == len(failures)  # "Failed"

    entry_page = viewer.get(reverse("dashboard:entry-detail", args=[stream, poison]))
    assert entry_page.status_code == 200
    assert [f.attempt for f in entry_page.context["failures"]] == list(range(1, max_deliveries + 1))
    history = element_text(entry_page.content.decode(), "failure-history")
    poison_type = next(kind for entry, _, kind in failures if entry == poison)
    assert f"Attempt {max_deliveries} {poison_type}" in history

    search = viewer.get(reverse("dashboard:failure-search"), {"stream": stream})
    found = table_rows(search.content.decode(), "failure-")
    assert sorted((cells[2], int(cells[4])) for cells in found.values()) == sorted(
        (entry, attempt) for entry, attempt, _ in failures
    )

    dlq_page = viewer.get(reverse("dashboard:dlq", args=[stream]))
    rows = table_rows(dlq_page.content.decode(), "dlq-")
    assert [cells[0].split()[0] for cells in rows.values()] == [poison]
    ((_, group_cell, deliveries, *_),) = rows.values()
    assert group_cell == group and deliveries == str(max_deliveries)
