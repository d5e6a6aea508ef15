"""Retry later against real Redis: parking, the release step, the sweepers' index, and
the other actions dropping a parked entry's due time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from queue_core import bulk, later
from queue_core.keys import LATER_INDEX_KEY, stream_keys
from queue_core.services import (
    LATER_CONSUMER,
    entry_acknowledge,
    entry_claim,
    entry_dead_letter,
    entry_retry,
)
from queue_core.types import ActionRefused
from queue_core.worker.sweep import sweep_once
from tests.clock import FrozenClock
from tests.factories import age_pending, make_pending


def row(r: redis.Redis, stream: str, entry_id: str, group: str = "g") -> dict[str, Any] | None:
    rows: list[dict[str, Any]] = r.xpending_range(stream, group, entry_id, entry_id, 1)
    return rows[0] if rows else None


def due_times(r: redis.Redis, stream: str, group: str = "g") -> dict[str, float]:
    pairs: Any = r.zrange(stream_keys(stream).later(group), 0, -1, withscores=True)
    return {k.decode(): v for k, v in pairs}


def claimed_ids(r: redis.Redis, stream: str, min_idle_ms: int) -> list[str]:
    """What a worker "w" of group "g" takes with one XAUTOCLAIM from 0-0."""
    reply: Any = r.xautoclaim(stream, "g", "w", min_idle_time=min_idle_ms, start_id="0-0")
    return [i.decode() for i, _ in reply[1]]


@pytest.fixture
def index(r: redis.Redis, stream: str) -> Iterator[str]:
    """The index member of (stream, "g"), removed afterwards (the index is shared)."""
    member = json.dumps([stream, "g"])
    yield member
    r.srem(LATER_INDEX_KEY, member)


class RetryLaterTests:
    def test_parks_entry_with_its_due_time_and_count(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str
    ) -> None:
        [entry_id, other] = make_pending(r, stream, "g", "c1", 2)
        due = clock.ms + 60_000
        result = later.entry_retry_later(
            client=r, stream=stream, group="g", entry_id=entry_id, due_ms=due
        )
        assert (result.previous_consumer, result.deliveries, result.due_ms) == ("c1", 1, due)
        parked = row(r, stream, entry_id)
        assert parked is not None
        assert parked["consumer"].decode() == LATER_CONSUMER and parked["times_delivered"] == 1
        assert due_times(r, stream) == {entry_id: due}
        assert r.sismember(LATER_INDEX_KEY, index)
        assert later.later_due(client=r, stream=stream, group="g", ids=[entry_id, other]) == {
            entry_id: due
        }
        assert r.xlen(stream) == 2  # nothing copied

    def test_refuses_past_far_and_not_pending(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        for due in (clock.ms, clock.ms - 1, clock.ms + later.MAX_DELAY_MS + 1):
            with pytest.raises(ValueError):
                later.entry_retry_later(
                    client=r, stream=stream, group="g", entry_id=entry_id, due_ms=due
                )
        with pytest.raises(ValueError):
            later.entry_retry_later(
                client=r, stream=stream, group="g", entry_id="nope", due_ms=clock.ms + 1
            )
        r.xack(stream, "g", entry_id)
        with pytest.raises(ActionRefused, match="not pending"):
            later.entry_retry_later(
                client=r, stream=stream, group="g", entry_id=entry_id, due_ms=clock.ms + 1000
            )
        assert due_times(r, stream) == {}

    def test_refuses_owner_changed_and_payload_missing(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str
    ) -> None:
        [a, b] = make_pending(r, stream, "g", "c1", 2)
        with pytest.raises(ActionRefused, match="now owned by c1"):
            later.entry_retry_later(client=r, stream=stream, group="g", entry_id=a,
                                    due_ms=clock.ms + 1000, expected_consumer="c2")  # fmt: skip
        r.xdel(stream, b)
        with pytest.raises(ActionRefused, match="payload missing"):
            later.entry_retry_later(
                client=r, stream=stream, group="g", entry_id=b, due_ms=clock.ms + 1000
            )
        assert due_times(r, stream) == {}

    def test_group_cap(self, r: redis.Redis, stream: str, clock: FrozenClock, index: str,
                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
        monkeypatch.setattr(later, "MAX_PARKED", 1)
        [a, b] = make_pending(r, stream, "g", "c1", 2)
        later.entry_retry_later(
            client=r, stream=stream, group="g", entry_id=a, due_ms=clock.ms + 1000
        )
        with pytest.raises(ActionRefused, match="already has 1 entries"):
            later.entry_retry_later(
                client=r, stream=stream, group="g", entry_id=b, due_ms=clock.ms + 1000
            )
        # Moving the due time of one already parked is not a new one.
        later.entry_retry_later(
            client=r, stream=stream, group="g", entry_id=a, due_ms=clock.ms + 5000
        )
        assert due_times(r, stream) == {a: clock.ms + 5000}


class LaterReleaseTests:
    def test_keeps_parked_entry_from_xautoclaim_until_due(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        later.entry_retry_later(
            client=r, stream=stream, group="g", entry_id=entry_id, due_ms=clock.ms + 60_000
        )
        age_pending(r, stream, "g", 10_000)  # as if 10 s went by: past a 1 s min-idle
        window = later.later_release(client=r, stream=stream, group="g")
        assert (window.kept, window.released, window.dropped) == (1, 0, 0)
        assert claimed_ids(r, stream, 1000) == []
        clock.advance(60_000)
        window = later.later_release(client=r, stream=stream, group="g")
        assert window.released == 1 and due_times(r, stream) == {}
        released = row(r, stream, entry_id)
        assert released is not None and released["times_delivered"] == 1  # JUSTID all along
        assert claimed_ids(r, stream, 30_000) == [entry_id]

    def test_drops_acked_deleted_and_taken_entries(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 4)
        for entry_id in ids:
            later.entry_retry_later(
                client=r, stream=stream, group="g", entry_id=entry_id, due_ms=clock.ms + 1000
            )
        acked, deleted, taken, kept = ids
        r.xack(stream, "g", acked)  # a plain XACK, as a worker sends it
        r.xdel(stream, deleted)
        r.xclaim(stream, "g", "early-worker", 0, [taken], justid=True)
        window = later.later_release(client=r, stream=stream, group="g")
        assert (window.looked, window.kept, window.dropped) == (4, 1, 3)
        assert due_times(r, stream) == {kept: clock.ms + 1000}
        # Left as they were: the taken one stays with its worker, the deleted one pending.
        taken_row, deleted_row = row(r, stream, taken), row(r, stream, deleted)
        assert taken_row is not None and taken_row["consumer"] == b"early-worker"
        assert deleted_row is not None and deleted_row["consumer"].decode() == LATER_CONSUMER

    def test_windows_cover_the_whole_set(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:  # fmt: skip
        monkeypatch.setattr(later, "WINDOW", 3)
        ids = make_pending(r, stream, "g", "c1", 8)
        for n, entry_id in enumerate(ids):
            later.entry_retry_later(client=r, stream=stream, group="g", entry_id=entry_id,
                                    due_ms=clock.ms + 1000 * (n + 1))  # fmt: skip
        clock.advance(3500)  # the first three are due
        age_pending(r, stream, "g", 50_000)
        window = later.later_release(client=r, stream=stream, group="g")
        assert (window.looked, window.released, window.kept) == (8, 3, 5)
        idle = {r_["message_id"].decode(): r_["time_since_delivered"]
                for r_ in r.xpending_range(stream, "g", "-", "+", 100)}  # fmt: skip
        assert all(idle[i] < 5000 for i in ids[3:])  # every one kept parked, refreshed
        assert all(idle[i] >= later.DUE_IDLE_MS for i in ids[:3])

    def test_group_deleted_drops_due_times_and_index(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        later.entry_retry_later(
            client=r, stream=stream, group="g", entry_id=entry_id, due_ms=clock.ms + 1000
        )
        r.xgroup_destroy(stream, "g")
        assert later.later_release(client=r, stream=stream, group="g").group_gone
        assert not r.exists(stream_keys(stream).later("g"))

    def test_sweep_releases_and_prunes_the_index(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        later.entry_retry_later(
            client=r, stream=stream, group="g", entry_id=entry_id, due_ms=clock.ms + 1000
        )
        r.sadd(LATER_INDEX_KEY, "not json", json.dumps([stream + "x", "g"]))
        try:
            later.later_sweep(r)
            assert r.sismember(LATER_INDEX_KEY, index)  # still parked: still indexed
            clock.advance(1000)
            assert later.later_sweep(r) >= 1
            assert not r.sismember(LATER_INDEX_KEY, index)
            assert not r.sismember(LATER_INDEX_KEY, "not json")
            assert not r.sismember(LATER_INDEX_KEY, json.dumps([stream + "x", "g"]))
        finally:
            r.srem(LATER_INDEX_KEY, "not json", json.dumps([stream + "x", "g"]))


class OtherActionsDropDueTimeTests:
    """Dead-letter and Retry drop the due time at once, Claim and Acknowledge at the next
    release step; none is parked again."""

    @pytest.mark.parametrize("action", ["retry", "claim", "dead-letter", "acknowledge"])
    def test_action_on_parked_entry_drops_its_due_time(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str, action: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        later.entry_retry_later(
            client=r, stream=stream, group="g", entry_id=entry_id, due_ms=clock.ms + 60_000
        )
        common: dict[str, Any] = {"client": r, "stream": stream, "group": "g", "entry_id": entry_id}
        if action == "retry":
            entry_retry(**common)
        elif action == "claim":
            entry_claim(**common, consumer="op", seen_idle_ms=0)
        elif action == "dead-letter":
            entry_dead_letter(**common, reason="x", operator="op")
        else:
            entry_acknowledge(**common, reason="x")
        if action in ("retry", "dead-letter"):  # at once; the others at the next release
            assert due_times(r, stream) == {}
        later.later_release(client=r, stream=stream, group="g")
        assert due_times(r, stream) == {}
        after = row(r, stream, entry_id)
        if action == "claim":
            assert after is not None and after["consumer"] == b"op"  # not parked again
        if action == "retry":  # not parked again: still due for the next sweep
            retried = row(r, stream, entry_id)
            assert retried is not None and retried["time_since_delivered"] >= 30_000


class WorkerSweepTests:
    def test_sweep_keeps_parked_past_min_idle_then_takes_it_when_due(
        self, r: redis.Redis, stream: str, index: str
    ) -> None:
        """Real time, small numbers: min-idle 100 ms, due in 600 ms, a sweep every 50 ms."""
        [entry_id, plain] = make_pending(r, stream, "g", "c1", 2)
        due = int(time.time() * 1000) + 600
        later.entry_retry_later(client=r, stream=stream, group="g", entry_id=entry_id, due_ms=due)
        taken: dict[str, float] = {}
        deadline = time.monotonic() + 5
        while entry_id not in taken and time.monotonic() < deadline:
            result = sweep_once(client=r, stream=stream, group="g", consumer="w", min_idle_ms=100)
            for d in result.deliveries:
                taken.setdefault(d.id, time.time() * 1000)
            time.sleep(0.05)  # the worker's sweep interval, not a wait for an event
        assert plain in taken and taken[plain] < due  # a plain stale entry goes at min-idle
        assert taken[entry_id] >= due  # the parked one only once due
        after = row(r, stream, entry_id)
        assert after is not None and after["consumer"] == b"w"
        assert after["times_delivered"] == 2  # the worker's reclaim: one delivery, ours none


class BulkRetryLaterTests:
    def test_parks_the_selection_and_skips_newer_than_snapshot(
        self, r: redis.Redis, stream: str, clock: FrozenClock, index: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        due = clock.ms + 10_000
        result = bulk.bulk_retry_later(
            client=r, stream=stream, group="g", snapshot_id=ids[1], ids=ids, due_ms=due
        )
        assert sorted(result.done) == sorted(ids[:2])
        assert due_times(r, stream) == {ids[0]: due, ids[1]: due}
        assert r.sismember(LATER_INDEX_KEY, index)
        with pytest.raises(ValueError):
            bulk.bulk_retry_later(client=r, stream=stream, group="g", snapshot_id=ids[2],
                                  ids=ids, due_ms=clock.ms)  # fmt: skip
