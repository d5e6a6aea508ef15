"""A worker Ackboard did not write, seen by the dashboard.

A plain redis-py loop (XREADGROUP, the handler, XACK when it returns: not
``queue_core.Worker``) records its failures through the public API
(``queue_core.failure_recorded``). After ``ingest_failures`` the group page's pending row
shows the last failure, the entry page its failure history, the Failures page its
attempts and the overview its "Failures 1 h"; the group's health, read from Redis alone,
turns "no live consumer" once that worker stops while holding an entry.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from django.test import Client
from django.urls import reverse

from dashboard.insight.failure_index import failures_ingest
from queue_core import Outcome, failure_recorded
from queue_core.keys import ORIGIN_ID_FIELD, stream_keys
from tests.factories import add_entries, make_group
from tests.html import element_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("page_settings")]

GROUP = "reviewers"
CONSUMER = "review-worker-7"


class DiffUnavailable(Exception):
    pass


def foreign_loop_pass(r: redis.Redis, stream: str, handle: Any) -> dict[str, Any]:
    """One pass of a workshop-style loop: take back what it left pending, read what is new,
    XACK whatever the handler returned for; an error is logged and the entry left pending."""
    claimed = r.xautoclaim(stream, GROUP, CONSUMER, min_idle_time=0, start_id="0-0")
    fresh = r.xreadgroup(GROUP, CONSUMER, {stream: ">"}) or [[stream, []]]
    seen: dict[str, Any] = {}
    for raw_id, fields in [*claimed[1], *fresh[0][1]]:
        entry_id = raw_id.decode()
        try:
            seen[entry_id] = handle(entry_id, fields)
        except Exception as exc:
            seen[entry_id] = exc
            continue
        r.xack(stream, GROUP, entry_id)
    return seen


class ForeignWorkerPagesTests:
    def test_group_entry_failures_and_overview_show_its_failures(
        self, viewer: Client, r: redis.Redis, redis_url: str, prefix: str, settings: Any
    ) -> None:
        settings.ACKBOARD_STUCK_AFTER_MS = 60_000
        stream = prefix + "reviews:queue"
        make_group(r, stream, GROUP)
        review_fields = [
            {"reviewId": f"r{n}", "prUrl": f"https://github.com/acme/app/pull/{n}"}
            for n in (1, 410, 404)
        ]
        good, doomed = (add_entries(r, stream, 1, fields=f)[0] for f in review_fields[:2])

        def review(fields: dict[bytes, bytes]) -> None:
            url = fields[b"prUrl"].decode()
            if not url.endswith("/1"):
                raise DiffUnavailable(f"GitHub answered 404 for {url}")

        handle = failure_recorded(review, client=r, stream=stream, group=GROUP,
                                  consumer=CONSUMER, max_deliveries=3)  # fmt: skip
        first = foreign_loop_pass(r, stream, handle)
        (flaky,) = add_entries(r, stream, 1, fields=review_fields[2])  # arrives later
        second = foreign_loop_pass(r, stream, handle)
        third = foreign_loop_pass(r, stream, handle)

        assert first == {good: None, doomed: first[doomed]}
        assert isinstance(first[doomed], DiffUnavailable)
        assert isinstance(second[doomed], DiffUnavailable)
        assert isinstance(second[flaky], DiffUnavailable)
        assert third[doomed] is Outcome.DEAD_LETTERED  # its third delivery
        assert isinstance(third[flaky], DiffUnavailable)  # its second: still pending
        (moved,) = r.xrange(stream_keys(stream).dlq)
        assert moved[1][ORIGIN_ID_FIELD.encode()] == doomed.encode()
        stored = failures_ingest(client=redis.Redis.from_url(redis_url), once=True)
        assert stored == 5  # flaky twice, doomed three times

        group_page = viewer.get(reverse("dashboard:group-detail", args=[stream, GROUP]))
        assert group_page.status_code == 200
        rows = table_rows(group_page.content.decode(), "pending-")
        assert list(rows) == [f"pending-{flaky}"]  # good acked, doomed dead-lettered
        _, row_id, consumer, _idle, deliveries, _payload, last_failure, _ = rows[f"pending-{flaky}"]
        assert row_id.startswith(flaky) and consumer == CONSUMER and deliveries == "2"
        assert last_failure == "GitHub answered 404 for https://github.com/acme/app/pull/404"
        # The loop just read: its consumer is seen, so nothing is stuck; its failures and
        # dead letter ask for attention (the overview's verdict for the same group).
        assert element_text(group_page.content.decode(), "group-health").startswith(
            "Health attention 5 failures in the last hour"
        )

        entry_page = viewer.get(reverse("dashboard:entry-detail", args=[stream, doomed]))
        assert [(f.attempt, f.consumer, f.error_type) for f in entry_page.context["failures"]] == [
            (n, CONSUMER, "DiffUnavailable") for n in (1, 2, 3)
        ]
        history = element_text(entry_page.content.decode(), "failure-history")
        assert "Attempt 3 DiffUnavailable" in history
        assert "GitHub answered 404 for https://github.com/acme/app/pull/410" in history

        search = viewer.get(reverse("dashboard:failure-search"), {"stream": stream})
        found = table_rows(search.content.decode(), "failure-")
        assert sorted((cells[2], cells[4]) for cells in found.values()) == sorted(
            [(flaky, "1"), (flaky, "2"), (doomed, "1"), (doomed, "2"), (doomed, "3")]
        )

        overview = viewer.get(reverse("dashboard:overview"))
        (row,) = [row for row in overview.context["rows"] if row.summary.name == stream]
        assert row.failures_last_hour == 5
        assert row.summary.dlq_length == 1

        # The foreign worker stops while it still holds `flaky`: past the threshold nobody
        # is reading while an entry waits, and the page names the consumer that holds it.
        # (The threshold is read per request: lowering it stands in for a long wait.)
        settings.ACKBOARD_STUCK_AFTER_MS = 50
        time.sleep(0.1)  # idle time: past the 50 ms threshold
        stopped = viewer.get(reverse("dashboard:group-detail", args=[stream, GROUP])).content
        health = element_text(stopped.decode(), "group-health")
        assert health.startswith("Health no live consumer")
        assert "1 entry held by 1 consumer not seen in" in health
        consumers = table_rows(stopped.decode(), "consumer-row-")
        assert [(cells[0], cells[-1]) for cells in consumers.values()] == [
            (CONSUMER, "dead, holds 1")
        ]
