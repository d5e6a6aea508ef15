"""Operator actions against real Redis: each action's effect, its guards and bad input."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from queue_core.keys import stream_keys
from queue_core.services import (
    entry_acknowledge,
    entry_claim,
    entry_dead_letter,
    entry_retry,
)
from queue_core.types import ActionRefused
from tests.factories import age_pending, make_pending


def pending_row(r: redis.Redis, stream: str, group: str, entry_id: str) -> dict[str, Any] | None:
    rows: list[dict[str, Any]] = r.xpending_range(
        stream, group, min=entry_id, max=entry_id, count=1
    )
    return rows[0] if rows else None


def next_event(pubsub: redis.client.PubSub, stream: str) -> dict[str, Any]:
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.2)
        if message and message["type"] == "message":
            event: dict[str, Any] = json.loads(message["data"])
            if event["stream"] == stream:
                return event
    raise AssertionError("no event published")


class EntryRetryTests:
    def test_makes_entry_idle_without_bumping_deliveries_or_copying(
        self, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        r.xgroup_create(stream, "other", id="0")
        result = entry_retry(client=r, stream=stream, group="g", entry_id=entry_id, idle_ms=60_000)
        assert result.consumer == "c1" and result.deliveries == 1
        assert result.idle_before_ms < 1000 and result.idle_ms == 60_000
        row = pending_row(r, stream, "g", entry_id)
        assert row["consumer"] == b"c1"
        assert row["times_delivered"] == 1
        assert row["time_since_delivered"] >= 60_000
        assert r.xlen(stream) == 1  # no copy: the other group sees it once
        assert len(r.xreadgroup("other", "x", {stream: ">"})[0][1]) == 1

    def test_live_worker_sweep_takes_retried_entry(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "dead-worker", 1)
        sweep = r.xautoclaim(stream, "g", "live", min_idle_time=30_000, start_id="0-0")
        assert sweep[1] == []  # not stale yet
        entry_retry(client=r, stream=stream, group="g", entry_id=entry_id, idle_ms=30_000)
        claimed = r.xautoclaim(stream, "g", "live", min_idle_time=30_000, start_id="0-0")[1]
        assert [c[0].decode() for c in claimed] == [entry_id]
        assert pending_row(r, stream, "g", entry_id)["times_delivered"] == 2

    def test_keeps_a_larger_current_idle(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        entry_retry(client=r, stream=stream, group="g", entry_id=entry_id, idle_ms=90_000)
        again = entry_retry(client=r, stream=stream, group="g", entry_id=entry_id, idle_ms=1_000)
        assert again.idle_ms >= 90_000
        assert pending_row(r, stream, "g", entry_id)["time_since_delivered"] >= 90_000

    def test_not_pending_is_refused(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        r.xack(stream, "g", entry_id)
        with pytest.raises(ActionRefused, match="not pending"):
            entry_retry(client=r, stream=stream, group="g", entry_id=entry_id)

    def test_payload_missing_is_refused_and_stays_pending(
        self, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        r.xdel(stream, entry_id)
        with pytest.raises(ActionRefused, match="payload missing"):
            entry_retry(client=r, stream=stream, group="g", entry_id=entry_id)
        assert pending_row(r, stream, "g", entry_id) is not None

    def test_publishes_an_action_event(
        self, r: redis.Redis, stream: str, events: redis.client.PubSub
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        entry_retry(client=r, stream=stream, group="g", entry_id=entry_id)
        event = next_event(events, stream)
        assert event == {
            "type": "action",
            "stream": stream,
            "group": "g",
            "action": "retry",
            "ids": [entry_id],
        }


class EntryClaimTests:
    def test_claims_to_consumer_when_unchanged(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        age_pending(r, stream, "g", 60_000)  # a non-zero idle for the operator's look
        seen = pending_row(r, stream, "g", entry_id)
        result = entry_claim(
            client=r,
            stream=stream,
            group="g",
            entry_id=entry_id,
            consumer="ops",
            seen_idle_ms=seen["time_since_delivered"],
            seen_deliveries=seen["times_delivered"],
        )
        assert result.consumer == "ops" and result.previous_consumer == "c1"
        assert result.deliveries == 2
        row = pending_row(r, stream, "g", entry_id)
        assert row["consumer"] == b"ops" and row["times_delivered"] == 2

    def test_refused_when_worker_reclaimed_since(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        age_pending(r, stream, "g", 60_000)  # past the sweep's 10 ms min-idle
        seen = pending_row(r, stream, "g", entry_id)
        r.xautoclaim(stream, "g", "worker", min_idle_time=10, start_id="0-0")
        with pytest.raises(ActionRefused, match="^changed since you looked"):
            entry_claim(
                client=r,
                stream=stream,
                group="g",
                entry_id=entry_id,
                consumer="ops",
                seen_idle_ms=seen["time_since_delivered"],
            )
        assert pending_row(r, stream, "g", entry_id)["consumer"] == b"worker"

    def test_refused_when_deliveries_changed(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(
            ActionRefused, match="^changed since you looked.*delivery count of 1 now"
        ):
            entry_claim(
                client=r,
                stream=stream,
                group="g",
                entry_id=entry_id,
                seen_idle_ms=0,
                seen_deliveries=2,
            )
        assert pending_row(r, stream, "g", entry_id)["consumer"] == b"c1"

    def test_refused_when_owner_changed_by_a_justid_reclaim(
        self, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        seen = pending_row(r, stream, "g", entry_id)
        # A JUSTID reclaim leaves the count alone; its idle time can grow back past "seen".
        r.xclaim(stream, "g", "c2", 0, [entry_id], idle=60_000, justid=True)
        with pytest.raises(ActionRefused, match="^changed since you looked.*owned by c2"):
            entry_claim(
                client=r,
                stream=stream,
                group="g",
                entry_id=entry_id,
                seen_idle_ms=seen["time_since_delivered"],
                seen_deliveries=seen["times_delivered"],
                seen_consumer="c1",
            )
        assert pending_row(r, stream, "g", entry_id)["consumer"] == b"c2"

    def test_refused_when_no_longer_pending(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        r.xack(stream, "g", entry_id)
        with pytest.raises(ActionRefused, match="^changed since you looked.*not pending"):
            entry_claim(client=r, stream=stream, group="g", entry_id=entry_id, seen_idle_ms=0)
        assert r.xpending(stream, "g")["pending"] == 0


class EntryDeadLetterOperatorTests:
    def test_operator_and_reason_are_recorded(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        moved = entry_dead_letter(
            client=r, stream=stream, group="g", entry_id=entry_id, reason="bad", operator="ann"
        )
        assert moved is not None
        [(_, fields)] = r.xrange(stream_keys(stream).dlq)
        assert fields[b"ackboard.operator"] == b"ann"
        assert fields[b"ackboard.consumer"] == b"c1"
        assert fields[b"ackboard.origin-group"] == b"g"

    def test_owner_changed_is_refused_not_none(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ActionRefused, match="now owned by c1"):
            entry_dead_letter(
                client=r,
                stream=stream,
                group="g",
                entry_id=entry_id,
                reason="x",
                expected_consumer="c2",
            )
        assert r.xlen(stream_keys(stream).dlq) == 0
        assert r.xpending(stream, "g")["pending"] == 1

    def test_seen_idle_guard_refuses_a_redelivered_entry(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ActionRefused, match="^changed since you looked"):
            entry_dead_letter(
                client=r,
                stream=stream,
                group="g",
                entry_id=entry_id,
                reason="x",
                seen_idle_ms=60_000,
            )
        assert r.exists(stream_keys(stream).dlq) == 0

    def test_payload_missing_entry_is_moved_with_the_flag(
        self, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        r.xdel(stream, entry_id)
        moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
        assert moved is not None and moved.payload_missing
        [(_, fields)] = r.xrange(stream_keys(stream).dlq)
        assert fields[b"ackboard.payload-missing"] == b"1"


class EntryAcknowledgeTests:
    def test_acks_and_reports_state_before(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        result = entry_acknowledge(
            client=r, stream=stream, group="g", entry_id=entry_id, reason="duplicate order"
        )
        assert result.was_pending and result.consumer == "c1" and result.deliveries == 1
        assert r.xpending(stream, "g")["pending"] == 0
        assert r.xlen(stream) == 1  # discarded from the group, not deleted from the stream

    def test_twice_reports_not_pending(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        entry_acknowledge(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
        again = entry_acknowledge(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
        assert again.was_pending is False and again.consumer == ""

    @pytest.mark.parametrize("reason", ["", "   "])
    def test_reason_is_required(self, r: redis.Redis, stream: str, reason: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ValueError, match="reason is required"):
            entry_acknowledge(client=r, stream=stream, group="g", entry_id=entry_id, reason=reason)
        assert r.xpending(stream, "g")["pending"] == 1


class BadInputTests:
    @pytest.mark.parametrize(
        "bad_id", ["", "abc", "1-", "-1", "1-2-3", "1.5-0", "18446744073709551616-0", " 1-0"]
    )
    def test_malformed_ids_raise_value_error_before_redis(
        self, r: redis.Redis, stream: str, bad_id: str
    ) -> None:
        make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ValueError, match="is not a stream id"):
            entry_retry(client=r, stream=stream, group="g", entry_id=bad_id)
        with pytest.raises(ValueError, match="is not a stream id"):
            entry_claim(client=r, stream=stream, group="g", entry_id=bad_id, seen_idle_ms=0)
        with pytest.raises(ValueError, match="is not a stream id"):
            entry_dead_letter(client=r, stream=stream, group="g", entry_id=bad_id, reason="x")
        with pytest.raises(ValueError, match="is not a stream id"):
            entry_acknowledge(client=r, stream=stream, group="g", entry_id=bad_id, reason="x")
        assert r.xpending(stream, "g")["pending"] == 1

    def test_unknown_id_is_refused_or_reported(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "c1", 1)
        unknown = "1-1"
        with pytest.raises(ActionRefused, match="not pending"):
            entry_retry(client=r, stream=stream, group="g", entry_id=unknown)
        with pytest.raises(ActionRefused, match="changed since you looked"):
            entry_claim(client=r, stream=stream, group="g", entry_id=unknown, seen_idle_ms=0)
        assert (
            entry_dead_letter(client=r, stream=stream, group="g", entry_id=unknown, reason="x")
            is None
        )
        acked = entry_acknowledge(client=r, stream=stream, group="g", entry_id=unknown, reason="x")
        assert not acked.was_pending
        assert r.xpending(stream, "g")["pending"] == 1

    def test_unknown_group_or_stream_is_refused_clearly(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        for s, g in ((stream, "nope"), (stream + "-missing", "g")):
            with pytest.raises(ActionRefused, match="no consumer group"):
                entry_retry(client=r, stream=s, group=g, entry_id=entry_id)
            with pytest.raises(ActionRefused, match="no consumer group"):
                entry_claim(client=r, stream=s, group=g, entry_id=entry_id, seen_idle_ms=0)
            with pytest.raises(ActionRefused, match="no consumer group"):
                entry_dead_letter(client=r, stream=s, group=g, entry_id=entry_id, reason="x")
            with pytest.raises(ActionRefused, match="no consumer group"):
                entry_acknowledge(client=r, stream=s, group=g, entry_id=entry_id, reason="x")

    def test_key_of_another_type_is_refused(self, r: redis.Redis, prefix: str) -> None:
        r.set(prefix + "plain", "x")
        with pytest.raises(ActionRefused, match="is not a stream"):
            entry_retry(client=r, stream=prefix + "plain", group="g", entry_id="1-0")

    @pytest.mark.parametrize("idle", [-1, 10**15, True])
    def test_bad_idle_is_a_value_error(self, r: redis.Redis, stream: str, idle: int) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ValueError, match="idle_ms"):
            entry_retry(client=r, stream=stream, group="g", entry_id=entry_id, idle_ms=idle)
