"""The failure log (``queue_core.failures``) against real Redis: the cost of a batch."""

from __future__ import annotations

import redis

from queue_core.failures import FailureRecord, failures_record
from queue_core.keys import EVENTS_CHANNEL, stream_keys
from tests.factories import CountingRedis


class FailuresRecordTests:
    def test_a_batch_costs_two_round_trips_whatever_its_size(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        records = [
            FailureRecord(group="g", entry_id=f"1-{i}", consumer="w1", attempt=1,
                          error_type="ValueError", message="boom")
            for i in range(50)
        ]  # fmt: skip
        pubsub = r.pubsub()  # type: ignore[no-untyped-call]
        pubsub.subscribe(EVENTS_CHANNEL)
        assert pubsub.get_message(timeout=1)  # the subscription
        client = CountingRedis(connection_pool=redis.ConnectionPool.from_url(redis_url))

        written = failures_record(client=client, stream=stream, records=records)

        assert written == 50
        assert r.xlen(stream_keys(stream).failures) == 50
        assert client.round_trips == 2  # the XADDs, then the events: not one PUBLISH each
        events = []
        while (message := pubsub.get_message(timeout=0.5)) is not None:
            events.append(message)
        assert len(events) == 50
        pubsub.close()
        client.connection_pool.disconnect()
