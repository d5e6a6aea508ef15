"""Regression tests from the correctness review of queue_core's worker.

Each test pins a path where the ack contract was bent: an attempt that left no record,
or an entry run again while its outcome was still being written.
"""

from __future__ import annotations

import asyncio
import threading

import redis

from queue_core import Job
from queue_core.types import Outcome
from queue_core.worker import process_entry
from tests.factories import add_entries, make_pending
from tests.queue_core.test_worker import failures, new_worker, pending_count, running


class AsyncHandlerCancelledTests:
    def test_handler_raising_cancelled_error_is_a_recorded_failure(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        bad, good = add_entries(r, stream, 2)

        async def handler(job: Job) -> None:
            if job.id == bad:
                # What awaiting a task that someone else cancelled looks like.
                raise asyncio.CancelledError("the upstream call was cancelled")

        stats = new_worker(redis_url, stream, handler).run(drain=True)

        assert stats.failed == 1 and stats.acked == 1
        [row] = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert row["message_id"].decode() == bad
        [record] = failures(r, stream)
        assert record["entry_id"] == bad and record["error_type"] == "CancelledError"

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

    def test_shutdown_cancelling_an_async_handler_is_not_a_failure(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        started = threading.Event()

        async def handler(job: Job) -> None:
            started.set()
            await asyncio.sleep(30)

        worker = new_worker(redis_url, stream, handler, grace_seconds=0.2)
        with running(worker):
            assert started.wait(5)

        assert worker.stats.failed == 0 and worker.stats.unfinished == 1
        assert pending_count(r, stream) == 1  # past the grace period: stays pending
        assert failures(r, stream) == []
