"""process_entry and reclaim_stale (queue_core.worker.once) against real Redis.

One entry or one sweep, synchronous: the workshop semantics. The decisions they share
with the Worker are in test_contract.py; the writes they make in test_settle.py.
"""

from __future__ import annotations

import asyncio

import redis

from queue_core import Job, Outcome
from queue_core.worker import process_entry, reclaim_stale
from tests.factories import age_pending, make_pending
from tests.queue_core.worker.helpers import failures, pending_count


class ReclaimStaleTests:
    def test_keeps_its_cursor_between_calls(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "dead", 5)
        seen: list[str] = []
        cursor = "0-0"
        calls = 0
        while True:
            result = reclaim_stale(
                # min_idle 0: a sweep restarted at 0-0 would take the head again.
                client=r, stream=stream, group="g", consumer="c2", min_idle_ms=0,
                count=2, cursor=cursor,
            )  # fmt: skip
            calls += 1
            seen.extend(d.id for d in result.deliveries)
            cursor = result.cursor
            if cursor == "0-0":
                break
            assert cursor != "0-0" and calls < 10
        # Each call went on from the last: every entry once, in order, never the head again.
        assert seen == ids
        assert calls >= 3

    def test_deleted_entries_are_recorded_as_payload_missing(
        self, r: redis.Redis, stream: str
    ) -> None:
        gone, kept = make_pending(r, stream, "g", "dead", 2)
        age_pending(r, stream, "g", 60_000)  # past the sweep's 10 ms min-idle
        r.xdel(stream, gone)

        result = reclaim_stale(client=r, stream=stream, group="g", consumer="c2", min_idle_ms=10)

        assert [d.id for d in result.deliveries] == [kept]
        assert result.deleted == (gone,)
        [record] = failures(r, stream)
        assert record["error_type"] == "PayloadMissing" and record["entry_id"] == gone
        # No longer pending in either Redis version (7+ drops it, 6.2 is dead-lettered).
        rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert [row["message_id"].decode() for row in rows] == [kept]


class ProcessEntryTests:
    def test_async_handler_runs_and_is_acked(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        seen: list[str] = []

        async def handler(job: Job) -> None:
            await asyncio.sleep(0)  # one real suspension, as async work has
            seen.append(job.id)

        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="c1", entry_id=entry_id,
            fields={b"n": b"0"}, handler=handler,
        )  # fmt: skip
        assert outcome == "acked" and seen == [entry_id]
        assert pending_count(r, stream) == 0

    def test_process_entry_records_a_cancelled_error_instead_of_raising(
        self, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "w1", 1)

        async def handler(job: Job) -> None:
            raise asyncio.CancelledError("the upstream call was cancelled")

        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="w1", entry_id=entry_id,
            fields={b"n": b"0"}, handler=handler,
        )  # fmt: skip

        assert outcome is Outcome.FAILED
        assert pending_count(r, stream) == 1
        assert [f["error_type"] for f in failures(r, stream)] == ["CancelledError"]
