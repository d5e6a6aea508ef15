"""Execution lanes (queue_core.worker.lanes), driven through a Worker on real Redis.

How many handlers run at once, and what a handler's own CancelledError or SystemExit
becomes: a recorded failed attempt, never the end of the chunk or of the worker.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest
import redis

from queue_core import Job
from tests.factories import add_entries
from tests.queue_core.worker.helpers import failures, new_worker


class WorkerConcurrencyTests:
    @pytest.mark.parametrize("kind", ["sync", "async"])
    def test_runs_up_to_concurrency_handlers_at_once(
        self, r: redis.Redis, redis_url: str, stream: str, kind: str
    ) -> None:
        add_entries(r, stream, 24)
        lock = threading.Lock()
        now = peak = 0

        def enter() -> None:
            nonlocal now, peak
            with lock:
                now += 1
                peak = max(peak, now)

        def leave() -> None:
            nonlocal now
            with lock:
                now -= 1

        def sync_handler(job: Job) -> None:
            enter()
            time.sleep(0.05)  # the job's work: overlapping jobs are what is counted
            leave()

        async def async_handler(job: Job) -> None:
            enter()
            await asyncio.sleep(0.05)  # the job's work: overlapping jobs are what is counted
            leave()

        handler = sync_handler if kind == "sync" else async_handler
        stats = new_worker(redis_url, stream, handler, concurrency=8).run(drain=True)

        assert stats.acked == 24
        assert peak == 8


class AsyncHandlerErrorTests:
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

    def test_handler_calling_sys_exit_is_a_failure_not_the_end_of_the_worker(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        bad, good = add_entries(r, stream, 2)

        async def handler(job: Job) -> None:
            if job.id == bad:
                sys.exit(2)  # what argparse does with bad arguments

        stats = new_worker(redis_url, stream, handler).run(drain=True)

        assert stats.failed == 1 and stats.acked == 1
        [row] = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert row["message_id"].decode() == bad
        assert [f["error_type"] for f in failures(r, stream)] == ["SystemExit"]
