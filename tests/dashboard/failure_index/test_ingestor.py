"""dashboard.insight.failure_index.ingestor on real Redis and the test database: the ack contract,
end to end, the long-running loop and ``manage.py ingest_failures``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError

from dashboard.insight.failure_index import (
    INGEST_GROUP,
    FailureFilter,
    failure_history,
    failure_search,
    failure_sources_discover,
    failures_ingest,
    failures_ingest_loop,
)
from dashboard.models import IndexedFailure
from queue_core.failures import failure_from_exception, failures_record
from queue_core.keys import stream_keys
from tests.factories import add_failure, age_pending, ingest_pending
from tests.waiting import wait_until

# The ingestor scans the whole server; the allowlist keeps it to this test's keys.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("ingest_allowlist")]


def fail_bulk_create(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("database is locked")

    monkeypatch.setattr(IndexedFailure.objects, "bulk_create", broken)


class IngestTests:
    def test_ingests_every_failures_stream_and_acks(self, r: redis.Redis, prefix: str) -> None:
        orders, payments = prefix + "orders", prefix + "{tenant}payments"
        add_failure(r, orders, "1-0", attempt="1")
        add_failure(r, orders, "1-0", attempt="2", consumer="worker-2")
        source = add_failure(r, payments, "7-0", group="refunds", error_type="KeyError")
        r.xadd(prefix + "plain", {"n": "1"})  # a queue stream, not a failures stream

        assert failures_ingest(client=r, once=True) == 3

        rows = IndexedFailure.objects.order_by("stream", "attempt")
        assert [(f.stream, f.entry_id, f.attempt, f.consumer) for f in rows] == [
            (orders, "1-0", 1, "worker-1"),
            (orders, "1-0", 2, "worker-2"),
            (payments, "7-0", 1, "worker-1"),
        ]
        pay = rows.get(stream=payments)
        assert pay.failures_key == prefix + "{tenant}payments:ackboard:failures"
        assert pay.source_id == source and pay.group == "refunds"
        assert pay.error_type == "KeyError" and pay.message == "bad total"
        assert pay.duration_ms == 12.5 and int(pay.failed_at.timestamp()) == 1767268800
        assert "ValueError: bad total" in pay.traceback
        assert ingest_pending(r, orders) == 0 and ingest_pending(r, payments) == 0
        # Nothing new: a second run stores nothing.
        assert failures_ingest(client=r, once=True) == 0

    def test_round_trips_what_the_worker_writes(self, r: redis.Redis, stream: str) -> None:
        try:
            raise TimeoutError("gateway <b>slow</b> " + "m" * 3000)
        except TimeoutError as exc:
            written = failure_from_exception(
                exc,
                group="billing",
                entry_id="1767268800000-7",
                consumer="host-1-abc",
                attempt=3,
                duration_ms=30001.25,
                failed_at_ms=1767268800123,
            )
        assert failures_record(client=r, stream=stream, records=[written], publish=False) == 1
        assert failures_ingest(client=r, once=True) == 1
        row = IndexedFailure.objects.get()
        assert (row.stream, row.group, row.entry_id, row.consumer, row.attempt) == (
            stream,
            "billing",
            "1767268800000-7",
            "host-1-abc",
            3,
        )
        assert row.error_type == "TimeoutError" and row.message == written.message
        assert len(row.message) == 2000 and row.traceback == written.traceback
        assert row.duration_ms == 30001.25
        assert row.failed_at.timestamp() == 1767268800.123

    def test_records_written_before_the_group_existed_are_taken(
        self, r: redis.Redis, stream: str
    ) -> None:
        for i in range(3):
            add_failure(r, stream, f"{i}-0")
        assert failures_ingest(client=r, once=True, batch=2) == 3
        assert IndexedFailure.objects.count() == 3

    def test_redelivery_is_idempotent(self, r: redis.Redis, stream: str) -> None:
        for i in range(4):
            add_failure(r, stream, f"{i}-1")
        assert failures_ingest(client=r, once=True) == 4
        # Deliver the same records again: as if acks were lost after the commit.
        r.xgroup_setid(stream_keys(stream).failures, INGEST_GROUP, id="0")
        assert failures_ingest(client=r, once=True) == 4
        assert IndexedFailure.objects.count() == 4
        assert ingest_pending(r, stream) == 0

    def test_database_failure_leaves_records_pending(
        self, r: redis.Redis, stream: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for i in range(3):
            add_failure(r, stream, f"{i}-0")
        with monkeypatch.context() as m:
            fail_bulk_create(m)
            with pytest.raises(OperationalError):
                failures_ingest(client=r, once=True)
        assert IndexedFailure.objects.count() == 0
        assert ingest_pending(r, stream) == 3  # read, not acked
        # The next run (another process: another consumer) reclaims and stores them.
        assert failures_ingest(client=r, once=True, reclaim_idle_ms=0) == 3
        assert IndexedFailure.objects.count() == 3
        assert ingest_pending(r, stream) == 0

    def test_ack_comes_after_the_rows_are_written(
        self, r: redis.Redis, stream: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        for i in range(5):
            add_failure(r, stream, f"{i}-0")
        seen: list[int] = []
        real = IndexedFailure.objects.bulk_create

        def spy(*args: Any, **kwargs: Any) -> Any:
            seen.append(ingest_pending(r, stream))
            return real(*args, **kwargs)

        monkeypatch.setattr(IndexedFailure.objects, "bulk_create", spy)
        assert failures_ingest(client=r, once=True) == 5
        assert seen == [5]  # all five still pending while their rows were being written
        assert ingest_pending(r, stream) == 0

    def test_reclaims_a_dead_ingestors_pending_records(self, r: redis.Redis, stream: str) -> None:
        key = stream_keys(stream).failures
        for i in range(3):
            add_failure(r, stream, f"{i}-0")
        r.xgroup_create(key, INGEST_GROUP, id="0")
        r.xreadgroup(INGEST_GROUP, "crashed-ingestor", {key: ">"}, count=10)
        assert ingest_pending(r, stream) == 3
        # Not yet idle long enough: left alone.
        assert failures_ingest(client=r, once=True, reclaim_idle_ms=60_000) == 0
        age_pending(r, key, INGEST_GROUP, 60_000)  # the crashed ingestor's reads, a minute old
        assert failures_ingest(client=r, once=True, reclaim_idle_ms=1) == 3
        assert IndexedFailure.objects.count() == 3 and ingest_pending(r, stream) == 0

    def test_destroyed_group_is_recreated_without_duplicates(
        self, r: redis.Redis, stream: str
    ) -> None:
        add_failure(r, stream, "1-0")
        assert failures_ingest(client=r, once=True) == 1
        r.xgroup_destroy(stream_keys(stream).failures, INGEST_GROUP)
        add_failure(r, stream, "2-0")
        assert failures_ingest(client=r, once=True) == 2
        assert sorted(IndexedFailure.objects.values_list("entry_id", flat=True)) == ["1-0", "2-0"]

    def test_history_outlives_the_streams_cap(self, r: redis.Redis, stream: str) -> None:
        for attempt in (1, 2, 3):
            add_failure(r, stream, "5-0", attempt=str(attempt), message=f"try {attempt}")
        assert failures_ingest(client=r, once=True) == 3
        r.xtrim(stream_keys(stream).failures, maxlen=0)
        assert r.xlen(stream_keys(stream).failures) == 0
        assert [f.attempt for f in failure_history(stream=stream, entry_id="5-0")] == [1, 2, 3]
        page = failure_search(filters=FailureFilter(stream=stream, text="try 2"))
        assert [f.message for f in page.rows] == ["try 2"]

    def test_retired_consumer_leaves_the_group(self, r: redis.Redis, stream: str) -> None:
        add_failure(r, stream)
        failures_ingest(client=r, once=True, consumer="ingest-test")
        consumers = r.xinfo_consumers(stream_keys(stream).failures, INGEST_GROUP)
        assert [c["name"] for c in consumers] == []


class DiscoveryTests:
    def test_finds_companions_in_the_allowlist_only(self, r: redis.Redis, prefix: str) -> None:
        add_failure(r, prefix + "a")
        add_failure(r, prefix + "b")
        add_failure(r, prefix + "hidden-c")
        r.xadd(prefix + "x:failures-not", {"n": "1"})
        r.set(prefix + "{d}:failures", "a string, not a stream")
        found = failure_sources_discover(client=r, patterns=(prefix + "[ab]",))
        assert found == sorted(
            (stream_keys(s).failures.encode(), s) for s in (prefix + "a", prefix + "b")
        )
        assert len(failure_sources_discover(client=r, patterns=(prefix + "*",), cap=2)) == 2


@pytest.mark.django_db(transaction=True)
class IngestLoopTests:
    def test_thread_ingests_until_stopped_and_recovers_from_db_errors(
        self, r: redis.Redis, stream: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        stop = threading.Event()
        result: list[int] = []
        broken = threading.Event()
        real = IndexedFailure.objects.bulk_create

        def flaky(*args: Any, **kwargs: Any) -> Any:
            if broken.is_set():
                raise OperationalError("database is locked")
            return real(*args, **kwargs)

        monkeypatch.setattr(IndexedFailure.objects, "bulk_create", flaky)
        thread = threading.Thread(
            target=lambda: result.append(
                failures_ingest_loop(client=r, stop=stop, poll_s=0.02, rediscover_s=0.05)
            )
        )
        thread.start()
        try:
            add_failure(r, stream, "1-0")
            wait_until(lambda: IndexedFailure.objects.count() == 1, 10, "the first row")
            broken.set()
            add_failure(r, stream, "2-0")
            # Read, but the write failed: still pending.
            wait_until(lambda: ingest_pending(r, stream) == 1, 10, "one pending")
            assert IndexedFailure.objects.count() == 1
            broken.clear()
            wait_until(
                lambda: IndexedFailure.objects.count() == 2 and ingest_pending(r, stream) == 0, 10
            )
        finally:
            stop.set()
            thread.join(timeout=10)
        assert not thread.is_alive()
        assert result == [2]

    def test_a_published_failure_wakes_the_loop_long_before_its_poll(
        self, r: redis.Redis, stream: str
    ) -> None:
        from queue_core.failures import FailureRecord as Attempt

        add_failure(r, stream, "1-0")  # makes the stream discoverable when the loop starts
        stop = threading.Event()
        thread = threading.Thread(
            target=failures_ingest_loop,
            kwargs={"client": r, "stop": stop, "poll_s": 30.0, "rediscover_s": 60.0},
        )
        thread.start()
        try:
            wait_until(lambda: IndexedFailure.objects.count() == 1, 10, "the first row")
            time.sleep(0.2)  # the loop is now idle, waiting for an event or its 30 s poll
            attempt = Attempt(
                group="billing", entry_id="2-0", consumer="w", attempt=1,
                error_type="ValueError", message="late",
            )  # fmt: skip
            started = time.monotonic()
            assert failures_record(client=r, stream=stream, records=[attempt]) == 1
            wait_until(lambda: IndexedFailure.objects.count() == 2, 5, "the second row")
            assert time.monotonic() - started < 5.0
        finally:
            stop.set()
            thread.join(timeout=40)
        assert not thread.is_alive()


class IngestCommandTests:
    def test_once_drains_and_reports(
        self, r: redis.Redis, stream: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        add_failure(r, stream, "1-0")
        add_failure(r, stream, "2-0")
        call_command("ingest_failures", "--once")
        assert "Ingested 2 failure records." in capsys.readouterr().out
        assert IndexedFailure.objects.count() == 2 and ingest_pending(r, stream) == 0

    def test_once_reports_a_database_error_as_a_command_error(
        self, r: redis.Redis, stream: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        add_failure(r, stream)
        fail_bulk_create(monkeypatch)
        with pytest.raises(CommandError, match="database is locked"):
            call_command("ingest_failures", "--once")
        assert ingest_pending(r, stream) == 1

    def test_command_runs_until_sigterm_and_exits_cleanly(
        self, r: redis.Redis, stream: str, prefix: str, redis_url: str, tmp_path: Path
    ) -> None:
        db = tmp_path / "db.sqlite3"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "dashboard.settings",
            "DJANGO_SECRET_KEY": "ingest-test-" + "x" * 50,
            "DJANGO_HTTPS": "0",
            "DATABASE_URL": f"sqlite:///{db}",
            "ACKBOARD_HOME": str(tmp_path),
            "VALKEY_URL": redis_url,
            "ACKBOARD_STREAMS": prefix + "*",
        }
        manage = [sys.executable, str(Path(__file__).resolve().parents[3] / "manage.py")]
        subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, timeout=60)
        add_failure(r, stream, "1-0")
        proc = subprocess.Popen(
            [*manage, "ingest_failures", "--poll", "0.05"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def rows() -> int:
                with sqlite3.connect(db) as conn:
                    return int(
                        conn.execute("SELECT COUNT(*) FROM dashboard_indexedfailure").fetchone()[0]
                    )

            wait_until(lambda: rows() == 1, 30, "the first row")
            add_failure(r, stream, "2-0")  # picked up by the running loop
            wait_until(lambda: rows() == 2 and ingest_pending(r, stream) == 0, 30)
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Stopped after 2 failure records." in out
