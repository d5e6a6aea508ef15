"""Regression tests from the correctness review of queue_core's worker.

Each test pins a path where the ack contract was bent: an attempt that left no record,
or an entry run again while its outcome was still being written.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time

import pytest
import redis

from queue_core import Job, PermanentFailure, Worker
from queue_core.connection import connect
from queue_core.keys import stream_keys
from queue_core.types import Outcome
from queue_core.worker import process_entry
from queue_core.worker.contract import Settlement
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


class ReclaimWhileSettlingTests:
    """A sweep must not hand back an entry whose outcome this worker is still writing.

    Driven through the Worker's own sweep with its state set up by hand: the window
    (handler returned, XACK or dead-letter not yet sent) is too short to hit by timing.
    """

    def sweep(self, worker: Worker) -> list[str]:
        worker._client = connect(worker.url)
        try:
            asyncio.run(worker._reclaim())
        finally:
            worker._client.close()
        return [job.id for job in worker._flight.waiting]

    def test_entry_waiting_for_its_ack_is_not_run_again(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        done, waiting = make_pending(r, stream, "g", "w1", 2)
        worker = new_worker(redis_url, stream, lambda job: None, min_idle_ms=0, concurrency=2)
        worker._acks.waiting.append(done)  # its handler returned; the XACK is not sent yet

        assert self.sweep(worker) == [waiting]

    def test_entry_being_dead_lettered_is_not_run_again(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        doomed, waiting = make_pending(r, stream, "g", "w1", 2)
        worker = new_worker(redis_url, stream, lambda job: None, min_idle_ms=0, concurrency=2)
        worker._settles.queued.append(
            Settlement(entry_id=doomed, attempt=1, dead_letter_reason="permanent failure: x")
        )

        assert self.sweep(worker) == [waiting]


class FailureStormTests:
    def test_reads_wait_for_failures_to_be_written(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        """Every handler failing (a downstream outage) must not let the worker read the
        whole stream ahead of its failure log, holding every exception in memory."""
        total = 5000
        for _ in range(0, total, 1000):
            add_entries(r, stream, 1000)
        failures_key = stream_keys(stream).failures

        def handler(job: Job) -> None:
            raise ConnectionError("downstream is down")

        ahead = 0
        with running(new_worker(redis_url, stream, handler, batch=100, concurrency=2)):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                pipe = r.pipeline(transaction=True)
                pipe.xpending(stream, "g")
                pipe.xlen(failures_key)
                summary, recorded = pipe.execute()
                # Delivered to the worker but not yet in the failure log.
                ahead = max(ahead, int(summary["pending"]) - int(recorded))
                if recorded >= total:
                    break
                time.sleep(0.002)
            assert recorded >= total

        assert ahead <= 1000, ahead


class AsyncHandlerSystemExitTests:
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


class DeadLetterRefusedByRedisTests:
    def test_a_dlq_key_of_another_type_is_logged_as_an_error(
        self, r: redis.Redis, stream: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "w1", 1)
        r.set(stream_keys(stream).dlq, "not a stream")

        def handler(job: Job) -> None:
            raise PermanentFailure("never")

        with caplog.at_level(logging.INFO, logger="queue_core.worker"):
            process_entry(
                client=r, stream=stream, group="g", consumer="w1", entry_id=entry_id,
                fields={b"n": b"0"}, handler=handler,
            )  # fmt: skip

        assert pending_count(r, stream) == 1  # not lost: it stays pending
        errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert errors and entry_id in errors[0].getMessage()

    def test_process_entry_says_the_entry_is_still_pending(
        self, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "w1", 1)
        r.set(stream_keys(stream).dlq, "not a stream")

        def handler(job: Job) -> None:
            raise PermanentFailure("never")

        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="w1", entry_id=entry_id,
            fields={b"n": b"0"}, handler=handler,
        )  # fmt: skip

        # Not NOT_PENDING ("someone else took it first"): it is still here, in our name.
        assert outcome is Outcome.DEAD_LETTER_FAILED
        assert pending_count(r, stream) == 1
