"""The Worker's loop (queue_core.worker.loop) against real Redis: steps 1-7 of the ack
contract (DESIGN.md section 2) as the long-running loop carries them out.

Each test runs a Worker in a thread (its own event loop) with small idle and interval
values, and asserts Redis state: pending lists, the failures stream and the DLQ.
Lanes are in test_lanes.py; outages, signals, SIGKILL and the CLI in tests/integration.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
import redis

from queue_core import Job, PermanentFailure, UnparseableEntry, Worker
from queue_core.connection import connect
from queue_core.keys import EVENTS_CHANNEL, REPLAY_GROUP_FIELD, stream_keys
from queue_core.worker import WorkerConfigError
from queue_core.worker.contract import Settlement
from tests.clock import FrozenClock
from tests.factories import add_entries, make_group, make_pending
from tests.queue_core.worker.helpers import (
    dead_letters,
    failures,
    new_worker,
    pending_count,
    running,
    wait_until,
    xack_calls,
)


class WorkerSuccessTests:
    def test_drains_the_group_and_acks_everything(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        ids = add_entries(r, stream, 500)
        seen: list[str] = []
        before = xack_calls(r)

        stats = new_worker(redis_url, stream, lambda job: seen.append(job.id)).run(drain=True)

        assert sorted(seen) == sorted(ids)
        assert stats.acked == 500
        assert pending_count(r, stream) == 0
        # Batched: far fewer XACK commands than entries (one multi-id XACK per chunk).
        assert xack_calls(r) - before < 100

    def test_async_handler_gets_job_with_fields(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        [entry_id] = add_entries(r, stream, 1, fields={"payload": '{"to": "a@example.com"}'})
        jobs: list[Job] = []

        async def handler(job: Job) -> None:
            await asyncio.sleep(0)  # one real suspension, as async work has
            jobs.append(job)

        new_worker(redis_url, stream, handler).run(drain=True)

        [job] = jobs
        assert (job.stream, job.group, job.id, job.consumer) == (stream, "g", entry_id, "w1")
        assert job.delivery_count == 1
        assert job.json() == {"to": "a@example.com"}
        assert job.raw == {b"payload": b'{"to": "a@example.com"}'}
        assert pending_count(r, stream) == 0

    def test_never_acks_before_the_handler_returned(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        started, release = threading.Event(), threading.Event()

        def handler(job: Job) -> None:
            started.set()
            release.wait(5)

        with running(new_worker(redis_url, stream, handler)):
            assert started.wait(5)
            time.sleep(0.2)  # several loop turns while the handler is still running
            assert pending_count(r, stream) == 1
            release.set()
            wait_until(lambda: pending_count(r, stream) == 0, what="the ack")


class WorkerFailureTests:
    def test_failure_stays_pending_is_recorded_and_loop_goes_on(
        self, r: redis.Redis, redis_url: str, stream: str, clock: FrozenClock
    ) -> None:
        bad, good = add_entries(r, stream, 2)
        pubsub = r.pubsub()  # type: ignore[no-untyped-call]
        pubsub.subscribe(EVENTS_CHANNEL)
        wait_until(lambda: pubsub.get_message(timeout=0.1), what="subscription")

        def handler(job: Job) -> None:
            if job.id == bad:
                raise ValueError("card declined " + "x" * 3000)

        stats = new_worker(redis_url, stream, handler).run(drain=True)

        assert stats.failed == 1 and stats.acked == 1
        [row] = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert row["message_id"].decode() == bad  # the good one was acked, the bad one not
        [record] = failures(r, stream)
        assert record["group"] == "g" and record["entry_id"] == bad
        assert record["consumer"] == "w1" and record["attempt"] == "1"
        assert record["error_type"] == "ValueError"
        assert record["message"].startswith("card declined") and len(record["message"]) == 2000
        assert "Traceback" in record["traceback"] and "card declined" in record["traceback"]
        assert float(record["duration_ms"]) >= 0
        assert int(record["failed_at_ms"]) == clock.ms  # the worker's clock, not Redis's
        event = wait_until(lambda: pubsub.get_message(timeout=0.1), what="failure event")
        assert json.loads(event["data"]) == {
            "type": "failure", "stream": stream, "group": "g", "entry_id": bad,
        }  # fmt: skip
        pubsub.close()

    def test_permanent_failure_is_dead_lettered_at_once(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        [entry_id] = add_entries(r, stream, 1)

        def handler(job: Job) -> None:
            raise PermanentFailure("550 mailbox unavailable")

        stats = new_worker(redis_url, stream, handler, max_deliveries=5).run(drain=True)

        assert stats.dead_lettered == 1
        assert pending_count(r, stream) == 0
        [dead] = dead_letters(r, stream)
        assert dead["ackboard.origin-id"] == entry_id
        assert dead["ackboard.deliveries"] == "1"
        assert "550 mailbox unavailable" in dead["ackboard.reason"]
        assert dead["n"] == "0"  # original fields kept
        assert [f["error_type"] for f in failures(r, stream)] == ["PermanentFailure"]

    def test_unparseable_entry_is_dead_lettered_without_running(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        make_group(r, stream, "g")
        bad = r.xadd(stream, {b"payload": b"\xff\xfe not utf-8"}).decode()
        calls: list[Job] = []

        stats = new_worker(redis_url, stream, calls.append).run(drain=True)

        assert calls == [] and stats.dead_lettered == 1
        assert pending_count(r, stream) == 0
        [dead] = dead_letters(r, stream)
        assert dead["ackboard.origin-id"] == bad
        assert "not UTF-8" in dead["ackboard.reason"]
        assert r.xrange(stream_keys(stream).dlq)[0][1][b"payload"] == b"\xff\xfe not utf-8"

    def test_custom_parser_rejects_or_fails_without_losing_entries(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        make_group(r, stream, "g")
        rejected = r.xadd(stream, {"kind": "reject"}).decode()
        buggy = r.xadd(stream, {"kind": "bug"}).decode()
        good = r.xadd(stream, {"kind": "ok"}).decode()

        def parser(raw: Any) -> dict[str, str]:
            kind = raw[b"kind"]
            if kind == b"reject":
                raise UnparseableEntry("kind reject is not a job")
            if kind == b"bug":
                raise KeyError("the parser has a bug")
            return {"kind": kind.decode()}

        calls: list[str] = []
        stats = new_worker(redis_url, stream, lambda j: calls.append(j.id), parser=parser).run(
            drain=True
        )

        assert calls == [good] and stats.dead_lettered == 1
        assert [d["ackboard.origin-id"] for d in dead_letters(r, stream)] == [rejected]
        # A parser bug is not the entry's fault: it stays pending, never acked or moved.
        rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert [row["message_id"].decode() for row in rows] == [buggy]

    def test_replay_for_another_group_is_acked_without_running(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        make_group(r, stream, "g")
        make_group(r, stream, "other")
        theirs = r.xadd(stream, {"n": "1", REPLAY_GROUP_FIELD: "other"}).decode()
        ours = r.xadd(stream, {"n": "2", REPLAY_GROUP_FIELD: "g"}).decode()
        calls: list[str] = []

        stats = new_worker(redis_url, stream, lambda job: calls.append(job.id)).run(drain=True)

        assert calls == [ours]
        assert stats.skipped == 1
        assert pending_count(r, stream) == 0
        # The other group still gets its replay.
        reply: Any = r.xreadgroup("other", "o1", {stream: ">"}, count=10)
        entries = reply[stream.encode()] if isinstance(reply, dict) else reply[0][1]
        assert theirs.encode() in [e[0] for e in entries]


class WorkerReclaimTests:
    def test_stale_entry_of_a_dead_consumer_is_reclaimed_with_its_count(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "dead-worker", 1)
        jobs: list[Job] = []
        worker = new_worker(redis_url, stream, jobs.append, min_idle_ms=50, reclaim_interval_ms=20)

        with running(worker):
            wait_until(lambda: pending_count(r, stream) == 0, what="reclaim and ack")

        [job] = jobs
        assert job.id == entry_id and job.delivery_count == 2
        assert worker.stats.reclaimed == 1

    def test_failing_entry_is_dead_lettered_on_its_last_delivery(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        [entry_id] = add_entries(r, stream, 1)
        attempts: list[int] = []

        def handler(job: Job) -> None:
            attempts.append(job.delivery_count)
            raise RuntimeError(f"attempt {job.delivery_count}")

        worker = new_worker(
            redis_url, stream, handler, max_deliveries=3, min_idle_ms=30, reclaim_interval_ms=10
        )
        with running(worker):
            wait_until(lambda: r.xlen(stream_keys(stream).dlq) == 1, what="dead-letter")

        assert attempts == [1, 2, 3]
        assert [f["attempt"] for f in failures(r, stream)] == ["1", "2", "3"]
        assert pending_count(r, stream) == 0
        [dead] = dead_letters(r, stream)
        assert dead["ackboard.origin-id"] == entry_id
        assert dead["ackboard.deliveries"] == "3"
        assert dead["ackboard.last-error"] == "RuntimeError: attempt 3"
        assert worker.stats.dead_lettered == 1

    def test_entry_over_max_deliveries_is_dead_lettered_without_running(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        # A poison entry that crashed its workers: delivered 7 times, never settled.
        [entry_id] = make_pending(r, stream, "g", "crashed", 1)
        # Already idle 10 s; a min-idle of 1 s then lets exactly one sweep claim it (with
        # min-idle 0 every 10 ms sweep would claim it again while it is being moved).
        r.xclaim(stream, "g", "crashed", 0, [entry_id], idle=10_000, retrycount=7, justid=True)
        calls: list[Job] = []
        worker = new_worker(
            redis_url, stream, calls.append, max_deliveries=5, min_idle_ms=1_000,
            reclaim_interval_ms=10,
        )  # fmt: skip

        with running(worker):
            wait_until(lambda: r.xlen(stream_keys(stream).dlq) == 1, what="dead-letter")

        assert calls == []
        [dead] = dead_letters(r, stream)
        assert dead["ackboard.deliveries"] == "8"
        assert "without an outcome" in dead["ackboard.reason"]
        assert pending_count(r, stream) == 0


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

    def test_sweep_taking_a_held_entry_does_not_count_a_delivery(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        # A handler slower than min_idle_ms: the worker's own sweep claims the entry it is
        # running. That is not a delivery: counted, it would dead-letter the entry before
        # its handler had run max_deliveries times (1 in 6 runs of the test above did).
        running_id, waiting = make_pending(r, stream, "g", "w1", 2)
        worker = new_worker(redis_url, stream, lambda job: None, min_idle_ms=0, concurrency=2)
        worker._settles.queued.append(Settlement(entry_id=running_id, attempt=1))

        assert self.sweep(worker) == [waiting]
        counts = {
            row["message_id"].decode(): row["times_delivered"]
            for row in r.xpending_range(stream, "g", min="-", max="+", count=10)
        }
        assert counts == {running_id: 1, waiting: 2}


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

        def all_recorded() -> bool:
            nonlocal ahead
            pipe = r.pipeline(transaction=True)
            pipe.xpending(stream, "g")
            pipe.xlen(failures_key)
            summary, recorded = pipe.execute()
            # Delivered to the worker but not yet in the failure log.
            ahead = max(ahead, int(summary["pending"]) - int(recorded))
            return bool(recorded >= total)

        with running(new_worker(redis_url, stream, handler, batch=100, concurrency=2)):
            # Sampled often, so the most the worker ever read ahead is seen.
            wait_until(all_recorded, timeout=30, interval=0.002, what="every failure recorded")

        assert ahead <= 1000, ahead


class WorkerShutdownTests:
    def test_shutdown_cancelling_an_async_handler_is_not_a_failure(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        add_entries(r, stream, 1)
        started = threading.Event()

        async def handler(job: Job) -> None:
            started.set()
            await asyncio.Event().wait()  # never set: it runs until it is cancelled

        worker = new_worker(redis_url, stream, handler, grace_seconds=0.2)
        with running(worker):
            assert started.wait(5)

        assert worker.stats.failed == 0 and worker.stats.unfinished == 1
        assert pending_count(r, stream) == 1  # past the grace period: stays pending
        assert failures(r, stream) == []


class WorkerConnectTests:
    def test_unreachable_redis_is_a_config_error(self) -> None:
        worker = Worker(stream="s", group="g", handler=print, url="redis://127.0.0.1:1/0")
        with pytest.raises(WorkerConfigError, match="cannot reach Redis"):
            worker.run(drain=True)

    def test_a_group_deleted_while_it_runs_is_created_again(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        [first] = add_entries(r, stream, 1)
        seen: list[str] = []

        with running(new_worker(redis_url, stream, lambda job: seen.append(job.id))):
            wait_until(lambda: seen == [first], what="the first entry")
            r.xgroup_destroy(stream, "g")
            [second] = add_entries(r, stream, 1)
            # Re-created at group-start (0 here): the first entry is delivered again.
            wait_until(lambda: second in seen, what="the entry after the group was deleted")

        assert seen == [first, first, second]
        assert [g["name"] for g in r.xinfo_groups(stream)] == [b"g"]
        assert pending_count(r, stream) == 0
