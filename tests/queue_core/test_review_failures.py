"""Regression tests from the correctness review: the failure log's cost per batch."""

from __future__ import annotations

from typing import Any

import redis

from queue_core.failures import FailureRecord, failures_record
from queue_core.keys import EVENTS_CHANNEL, stream_keys


class CountingRedis(redis.Redis):
    """A real client that counts its round trips: one per command outside a pipeline,
    one per pipeline execution."""

    round_trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.round_trips += 1
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        execute = pipe.execute

        def counted(raise_on_error: bool = True) -> Any:
            self.round_trips += 1
            return execute(raise_on_error=raise_on_error)

        pipe.execute = counted  # type: ignore[method-assign]
        return pipe


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
