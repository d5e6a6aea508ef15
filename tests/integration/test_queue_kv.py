"""The workshop's three focused checks of the ack contract, against a live Redis or Valkey.

``VALKEY_URL=redis://127.0.0.1:6379 uv run pytest tests/integration/test_queue_kv.py``
runs them against that server; without the variable they run against the private one.
Either way the run must report 3 passed: 0 tests or skips would mean Redis was never
reached (the workshop suite's trap).
"""

from __future__ import annotations

from typing import Any

import redis

from queue_core import Job, Outcome, process_entry, reclaim_stale
from queue_core.keys import stream_keys
from tests.factories import add_entries, age_pending, make_group


def deliver(
    r: redis.Redis, stream: str, group: str, consumer: str
) -> tuple[str, dict[bytes, bytes]]:
    """Read one new entry for ``consumer`` (it is now pending in ``group``)."""
    reply: Any = r.xreadgroup(group, consumer, {stream: ">"}, count=1)
    entries = reply[stream.encode()] if isinstance(reply, dict) else reply[0][1]
    entry_id, fields = entries[0]
    return entry_id.decode(), fields


def pending_rows(r: redis.Redis, stream: str, group: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = r.xpending_range(stream, group, min="-", max="+", count=10)
    return rows


class QueueKvTests:
    def test_success_is_acked(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        [added] = add_entries(r, stream, 1)
        entry_id, fields = deliver(r, stream, "g", "worker-1")
        seen: list[Job] = []

        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="worker-1",
            entry_id=entry_id, fields=fields, handler=seen.append,
        )  # fmt: skip

        assert outcome is Outcome.ACKED
        assert [job.id for job in seen] == [added]
        assert seen[0].fields["n"] == "0"
        assert r.xpending(stream, "g")["pending"] == 0

    def test_failure_is_left_pending(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        add_entries(r, stream, 1)
        entry_id, fields = deliver(r, stream, "g", "worker-1")

        def fail(job: Job) -> None:
            raise RuntimeError("the model timed out")

        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="worker-1",
            entry_id=entry_id, fields=fields, handler=fail,
        )  # fmt: skip

        assert outcome is Outcome.FAILED
        [row] = pending_rows(r, stream, "g")
        assert row["message_id"].decode() == entry_id
        assert row["consumer"] == b"worker-1"
        [(_, record)] = r.xrange(stream_keys(stream).failures)
        assert record[b"entry_id"] == entry_id.encode()
        assert record[b"error_type"] == b"RuntimeError"
        assert record[b"message"] == b"the model timed out"

    def test_stale_entry_is_reclaimed(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        add_entries(r, stream, 1)
        entry_id, _ = deliver(r, stream, "g", "crashed-worker")  # never acked: it died
        age_pending(r, stream, "g", 60_000)  # it died a minute ago: past the 10 ms min-idle

        reclaimed = reclaim_stale(
            client=r, stream=stream, group="g", consumer="worker-2", min_idle_ms=10
        )
        [delivery] = reclaimed.deliveries
        assert delivery.id == entry_id
        assert delivery.delivery_count == 2
        [row] = pending_rows(r, stream, "g")
        assert row["consumer"] == b"worker-2"

        seen: list[Job] = []
        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="worker-2", entry_id=delivery.id,
            fields=delivery.fields, delivery_count=delivery.delivery_count, handler=seen.append,
        )  # fmt: skip
        assert outcome is Outcome.ACKED
        assert seen[0].delivery_count == 2
        assert r.xpending(stream, "g")["pending"] == 0
