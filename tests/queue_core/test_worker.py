"""The Worker's ack contract against real Redis: behaviours 1-5 and 8 of the issue.

Each test runs a Worker in a thread (its own event loop) with small idle and interval
values, and asserts Redis state: pending lists, the failures stream and the DLQ.
Signals, SIGKILL, outages and the CLI are in tests/integration.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from queue_core import Job, PermanentFailure, UnparseableEntry, Worker
from queue_core.keys import EVENTS_CHANNEL, REPLAY_GROUP_FIELD, stream_keys
from queue_core.worker import WorkerConfigError, handler_load, process_entry, reclaim_stale
from tests.factories import add_entries, make_group, make_pending


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    """Run ``worker`` in a thread; stop it (graceful) and require a clean exit afterwards."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(worker.serve())
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert worker.ready.wait(5), "worker did not start"
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(10)
        assert not thread.is_alive(), "worker did not stop"
        assert not errors, errors


def new_worker(redis_url: str, stream: str, handler: Any, **options: Any) -> Worker:
    defaults: dict[str, Any] = {
        "group": "g",
        "consumer": "w1",
        "block_ms": 50,
        "group_start": "0",
        "min_idle_ms": 60_000,
        "grace_seconds": 5,
    }
    return Worker(stream=stream, handler=handler, url=redis_url, **(defaults | options))


def pending_count(r: redis.Redis, stream: str, group: str = "g") -> int:
    return int(r.xpending(stream, group)["pending"])


def failures(r: redis.Redis, stream: str) -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in r.xrange(stream_keys(stream).failures)
    ]


def dead_letters(r: redis.Redis, stream: str) -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
        for _, fields in r.xrange(stream_keys(stream).dlq)
    ]


def xack_calls(r: redis.Redis) -> int:
    stats: Any = r.info("commandstats")
    return int(stats.get("cmdstat_xack", {}).get("calls", 0))


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
            await asyncio.sleep(0)
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
        self, r: redis.Redis, redis_url: str, stream: str
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
        assert abs(int(record["failed_at_ms"]) - time.time() * 1000) < 60_000
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
        r.xdel(stream, gone)
        time.sleep(0.02)

        result = reclaim_stale(client=r, stream=stream, group="g", consumer="c2", min_idle_ms=10)

        assert [d.id for d in result.deliveries] == [kept]
        assert result.deleted == (gone,)
        [record] = failures(r, stream)
        assert record["error_type"] == "PayloadMissing" and record["entry_id"] == gone
        # No longer pending in either Redis version (7+ drops it, 6.2 is dead-lettered).
        rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert [row["message_id"].decode() for row in rows] == [kept]


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
            time.sleep(0.05)
            leave()

        async def async_handler(job: Job) -> None:
            enter()
            await asyncio.sleep(0.05)
            leave()

        handler = sync_handler if kind == "sync" else async_handler
        stats = new_worker(redis_url, stream, handler, concurrency=8).run(drain=True)

        assert stats.acked == 24
        assert peak == 8


class WorkerConfigTests:
    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"stream": "a}b"}, "cannot share a cluster slot"),
            ({"batch": 0}, "batch must be"),
            ({"max_deliveries": 0}, "max-deliveries must be"),
            ({"group_start": "yesterday"}, "group-start must be"),
            ({"handler": "not callable"}, "is not callable"),
        ],
    )
    def test_bad_configuration_is_refused(
        self, redis_url: str, options: dict[str, Any], message: str
    ) -> None:
        kwargs: dict[str, Any] = {"stream": "s", "group": "g", "handler": print} | options
        with pytest.raises(WorkerConfigError, match=message):
            Worker(url=redis_url, **kwargs)

    @pytest.mark.parametrize(
        ("path", "message"),
        [
            ("tests.integration.handlers", "must look like package.module:function"),
            ("tests.integration.no_such_module:f", "cannot import handler module"),
            ("tests.integration.handlers:nope", "has no attribute 'nope'"),
            ("tests.integration.handlers:NOT_CALLABLE", "is not callable"),
        ],
    )
    def test_bad_handler_paths_are_refused(self, path: str, message: str) -> None:
        with pytest.raises(WorkerConfigError, match=message):
            handler_load(path)

    def test_handler_path_loads_the_function(self) -> None:
        assert handler_load("tests.integration.handlers:quick").__name__ == "quick"

    def test_unreachable_redis_is_a_config_error(self) -> None:
        worker = Worker(stream="s", group="g", handler=print, url="redis://127.0.0.1:1/0")
        with pytest.raises(WorkerConfigError, match="cannot reach Redis"):
            worker.run(drain=True)


class ProcessEntryTests:
    def test_async_handler_runs_and_is_acked(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        seen: list[str] = []

        async def handler(job: Job) -> None:
            await asyncio.sleep(0)
            seen.append(job.id)

        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="c1", entry_id=entry_id,
            fields={b"n": b"0"}, handler=handler,
        )  # fmt: skip
        assert outcome == "acked" and seen == [entry_id]
        assert pending_count(r, stream) == 0
