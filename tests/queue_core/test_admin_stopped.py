"""The group-administration guards (``queue_core.admin`` and its Lua scripts) and a worker's
last heartbeat: one with ``stopped_ms`` is not live at once, so Delete group, Retire,
Retire idle and Reset position go ahead right after a clean stop, and the stopped
worker's consumer is not taken for a live consumer without a heartbeat either. A
heartbeat without the field (a worker older than it) refuses them while fresh, as before.

Heartbeats are written as JSON into the hash, the way a worker writes them; the same
``now`` is passed to every call, so a heartbeat's age is exact.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from queue_core.admin import (
    Refused,
    consumer_retire,
    group_delete,
    idle_consumers_find,
    idle_consumers_retire,
    position_parse,
    position_preview,
    position_reset,
)
from queue_core.keys import stream_keys
from tests.factories import add_entries, make_group, make_pending
from tests.queue_core.test_admin import heartbeat, now_ms


def consumer_names(r: redis.Redis, stream: str) -> set[str]:
    return {c["name"].decode() for c in r.xinfo_consumers(stream, "g")}


class GroupDeleteTests:
    def test_a_stopped_worker_does_not_hold_the_group(self, r: redis.Redis, stream: str) -> None:
        add_entries(r, stream, 2)
        make_group(r, stream, "g")
        now = now_ms()
        kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g",
                              "expected_pending": 0, "acknowledge": False}  # fmt: skip
        heartbeat(r, stream, "g", "w1", seen_ms=now - 100)  # running (or an older worker)
        with pytest.raises(Refused, match=r"'g' has running workers \(w1\)"):
            group_delete(now_ms=now, **kw)
        heartbeat(r, stream, "g", "w1", seen_ms=now - 100, stopped_ms=now - 100)
        assert group_delete(now_ms=now, **kw).pending_dropped == 0
        assert r.xinfo_groups(stream) == []


class RetireTests:
    def test_a_stopped_workers_consumer_is_retired_at_once(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        r.xgroup_createconsumer(stream, "g", "w2")
        now = now_ms()
        kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g", "consumer": "w1",
                              "to_consumer": "w2", "now_ms": now}  # fmt: skip
        heartbeat(r, stream, "g", "w1", seen_ms=now - 100)
        refused = consumer_retire(**kw)
        assert (refused.refused, refused.moved, refused.deleted) == ("live heartbeat", 0, False)
        heartbeat(r, stream, "g", "w1", seen_ms=now - 100, stopped_ms=now - 100)
        done = consumer_retire(**kw)
        assert (done.refused, done.moved, done.deleted) == (None, 2, True)
        assert consumer_names(r, stream) == {"w2"}

    def test_a_stopped_worker_that_received_nothing_is_no_target(
        self, r: redis.Redis, stream: str
    ) -> None:
        # A live worker that has received nothing is a valid target by its heartbeat alone
        # (it is not in XINFO CONSUMERS yet); once it said it stopped, it is not.
        make_pending(r, stream, "g", "w1", 1)
        now = now_ms()
        kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g", "consumer": "w1",
                              "to_consumer": "fresh", "now_ms": now}  # fmt: skip
        heartbeat(r, stream, "g", "fresh", seen_ms=now - 100, stopped_ms=now - 100)
        assert consumer_retire(**kw).refused == "no such target"
        heartbeat(r, stream, "g", "fresh", seen_ms=now - 100)
        assert consumer_retire(**kw).deleted


class RetireIdleTests:
    def test_a_stopped_worker_is_found_and_retired_a_running_one_is_not(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "g")
        for name in ("stopped", "running"):
            r.xgroup_createconsumer(stream, "g", name)
        now = now_ms()
        heartbeat(r, stream, "g", "stopped", seen_ms=now - 100, stopped_ms=now - 100)
        heartbeat(r, stream, "g", "running", seen_ms=now - 100)
        found = idle_consumers_find(client=r, stream=stream, group="g", idle_ms=0, now_ms=now)
        assert [c.name for c in found] == ["stopped"]
        # Both names go to the script, which re-checks each heartbeat itself.
        deleted = idle_consumers_retire(client=r, stream=stream, group="g",
                                        names=["running", "stopped"], idle_ms=0,
                                        now_ms=now)  # fmt: skip
        assert deleted == ["stopped"]
        assert consumer_names(r, stream) == {"running"}


class PositionResetTests:
    def test_a_consumer_whose_worker_stopped_does_not_refuse_the_reset(
        self, r: redis.Redis, stream: str
    ) -> None:
        # w1 read a moment ago (XINFO CONSUMERS idle is small), then stopped cleanly.
        ids = add_entries(r, stream, 4)
        make_group(r, stream, "g")
        got = r.xreadgroup("g", "w1", {stream: ">"}, count=4)
        r.xack(stream, "g", *[e[0] for e in got[0][1]])
        now = now_ms()
        preview_kw: dict[str, Any] = {"client": r, "stream": stream, "group": "g",
                                      "position": position_parse("start"), "now_ms": now,
                                      "seen_within_ms": 60_000}  # fmt: skip
        reset_kw = {**preview_kw, "expected_before_id": ids[3]}

        # An old-format heartbeat, fresh: a live worker.
        heartbeat(r, stream, "g", "w1", seen_ms=now - 100)
        assert position_preview(**preview_kw).live_consumers == ("w1",)
        with pytest.raises(Refused, match=r"live consumers \(w1\)"):
            position_reset(**reset_kw)
        # A consumer seen recently without any heartbeat: live too (not pausable).
        r.hdel(stream_keys(stream).workers("g"), "w1")
        assert position_preview(**preview_kw).live_consumers == ("w1",)
        with pytest.raises(Refused, match=r"live consumers \(w1\)"):
            position_reset(**reset_kw)

        heartbeat(r, stream, "g", "w1", seen_ms=now - 100, stopped_ms=now - 100)
        assert position_preview(**preview_kw).live_consumers == ()
        assert position_reset(**reset_kw).after_id == "0-0"
