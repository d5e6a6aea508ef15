"""Failure records kept through an outage (``FailureBacklog``): bounded, oldest dropped
first with one log line, written before new records once Redis takes them again.

"Away" is a port nobody listens on (refused at once) or a replica that refuses writes
(READONLY, as during a failover). The Worker's use of the backlog, with a real outage,
is in tests/integration/test_worker_faults.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from queue_core.failures import FailureBacklog, FailureRecord, failures_record
from queue_core.keys import stream_keys
from tests.redis_server import RedisServer, free_port


def record(n: int) -> FailureRecord:
    return FailureRecord(group="g", entry_id=f"1-{n}", consumer="w1", attempt=1,
                         error_type="ValueError", message=f"boom {n}")  # fmt: skip


def recorded_ids(r: redis.Redis, stream: str) -> list[str]:
    return [f[b"entry_id"].decode() for _, f in r.xrange(stream_keys(stream).failures)]


@pytest.fixture
def unreachable() -> Iterator[redis.Redis]:
    # No retries, as the Worker's own client: refused is refused.
    client = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    try:
        yield client
    finally:
        client.close()


class FailureBacklogTests:
    def test_records_redis_could_not_take_are_written_first_when_it_is_back(
        self, r: redis.Redis, stream: str, unreachable: redis.Redis
    ) -> None:
        backlog = FailureBacklog()

        lost = failures_record(client=unreachable, stream=stream, records=[record(0), record(1)],
                               backlog=backlog)  # fmt: skip
        written = failures_record(client=r, stream=stream, records=[record(2)], backlog=backlog)

        assert lost == 0
        assert written == 3
        assert recorded_ids(r, stream) == ["1-0", "1-1", "1-2"]  # oldest first
        assert len(backlog) == 0

    def test_past_the_cap_the_oldest_go_and_one_line_says_how_many(
        self,
        r: redis.Redis,
        stream: str,
        unreachable: redis.Redis,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        backlog = FailureBacklog(cap=3)
        for n in range(5):  # five failed writes, one record each
            failures_record(client=unreachable, stream=stream, records=[record(n)],
                            backlog=backlog)  # fmt: skip
        assert (len(backlog), backlog.dropped) == (3, 2)

        with caplog.at_level(logging.INFO, logger="queue_core.failures"):
            failures_record(client=r, stream=stream, records=[], backlog=backlog)

        assert recorded_ids(r, stream) == ["1-2", "1-3", "1-4"]
        [line] = [m for m in caplog.messages if "dropped" in m]
        assert "wrote 3 failure records" in line and "2 older ones were dropped" in line
        assert (len(backlog), backlog.dropped) == (0, 0)

    def test_without_a_backlog_a_record_redis_could_not_take_is_only_logged(
        self, unreachable: redis.Redis, stream: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.ERROR, logger="queue_core.failures"):
            written = failures_record(client=unreachable, stream=stream, records=[record(0)])

        assert written == 0
        assert any("could not record 1 failure(s)" in m for m in caplog.messages)

    def test_a_read_only_replica_keeps_records_until_it_is_promoted(self) -> None:
        primary = RedisServer().start()
        replica = RedisServer().start()
        try:
            r = redis.Redis.from_url(replica.url, socket_timeout=5)
            r.replicaof("127.0.0.1", primary.port)
            backlog = FailureBacklog()

            refused = failures_record(client=r, stream="s", records=[record(0)],
                                      backlog=backlog)  # fmt: skip
            assert (refused, len(backlog)) == (0, 1)
            r.replicaof("NO", "ONE")  # the failover: this one is the primary now
            written = failures_record(client=r, stream="s", records=[record(1)],
                                      backlog=backlog)  # fmt: skip

            assert written == 2
            assert recorded_ids(r, "s") == ["1-0", "1-1"]
            r.close()
        finally:
            replica.cleanup()
            primary.cleanup()

    def test_a_refusal_that_would_repeat_is_not_kept(self, r: redis.Redis, stream: str) -> None:
        r.set(stream_keys(stream).failures, "not a stream")
        backlog = FailureBacklog()

        written = failures_record(client=r, stream=stream, records=[record(0)], backlog=backlog)

        assert (written, len(backlog)) == (0, 0)
