"""Bulk scoping and bulk actions against real Redis: snapshots, caps, cursors, outcomes."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from queue_core.bulk import (
    bulk_acknowledge,
    bulk_dead_letter,
    bulk_retry,
    bulk_scope,
    pending_ids_matching,
)
from queue_core.keys import stream_keys
from queue_core.results import BulkOutcome
from queue_core.scripts import RETRY, Refusal, calls_pipelined
from queue_core.types import ActionRefused
from tests.factories import make_group, make_pending


def pending_ids(r: redis.Redis, stream: str, group: str) -> list[str]:
    rows: Any = r.xpending_range(stream, group, min="-", max="+", count=100_000)
    return [row["message_id"].decode() for row in rows]


def make_idle(r: redis.Redis, stream: str, group: str, ids: list[str], idle_ms: int) -> None:
    for entry_id in ids:
        owner = r.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)[0]
        r.xclaim(stream, group, owner["consumer"], 0, [entry_id], idle=idle_ms, justid=True)


class BulkScopeTests:
    def test_filter_scope_excludes_entries_after_the_snapshot(
        self, r: redis.Redis, stream: str
    ) -> None:
        seen = make_pending(r, stream, "g", "c1", 5)
        snapshot = seen[-1]
        later = make_pending(r, stream, "g", "c1", 3)  # arrived after the page loaded
        scope = bulk_scope(client=r, stream=stream, group="g", snapshot_id=snapshot)
        assert scope.ids == tuple(seen) and scope.complete
        assert not set(later) & set(scope.ids)

    def test_explicit_ids_keep_only_pending_ones_up_to_the_snapshot(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 4)
        r.xack(stream, "g", ids[1])
        scope = bulk_scope(client=r, stream=stream, group="g", snapshot_id=ids[2], ids=ids)
        assert scope.ids == (ids[0], ids[2])
        assert scope.count == 2

    def test_cursor_pages_through_without_gaps_or_repeats(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 10)
        seen: list[str] = []
        cursor = None
        for _ in range(10):
            scope = bulk_scope(
                client=r, stream=stream, group="g", snapshot_id=ids[-1], cursor=cursor, limit=3
            )
            seen.extend(scope.ids)
            cursor = scope.next_cursor
            if cursor is None:
                break
        assert seen == ids

    def test_consumer_and_idle_filters(self, r: redis.Redis, stream: str) -> None:
        mine = make_pending(r, stream, "g", "c1", 4)
        theirs = make_pending(r, stream, "g", "c2", 4)
        make_idle(r, stream, "g", [mine[1], mine[3], theirs[0]], 120_000)
        snapshot = theirs[-1]
        by_consumer = bulk_scope(
            client=r, stream=stream, group="g", snapshot_id=snapshot, consumer="c2"
        )
        assert by_consumer.ids == tuple(theirs)
        by_idle = bulk_scope(
            client=r, stream=stream, group="g", snapshot_id=snapshot, min_idle_ms=60_000
        )
        assert by_idle.ids == (mine[1], mine[3], theirs[0])
        both = bulk_scope(
            client=r,
            stream=stream,
            group="g",
            snapshot_id=snapshot,
            consumer="c1",
            min_idle_ms=60_000,
        )
        assert both.ids == (mine[1], mine[3])

    def test_rare_matches_stop_at_the_scan_bound_with_a_cursor(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 50)
        make_idle(r, stream, "g", [ids[45]], 120_000)
        first = pending_ids_matching(
            client=r,
            stream=stream,
            group="g",
            snapshot_id=ids[-1],
            min_idle_ms=60_000,
            window=10,
            max_scan=20,
        )
        assert first.ids == () and first.scanned == 20
        assert first.next_cursor is not None and not first.complete
        cursor: str | None = first.next_cursor
        found: list[str] = []
        while cursor is not None:
            page = pending_ids_matching(
                client=r,
                stream=stream,
                group="g",
                snapshot_id=ids[-1],
                start_id=cursor,
                min_idle_ms=60_000,
                window=10,
                max_scan=20,
            )
            assert page.scanned <= 20
            found.extend(page.ids)
            cursor = page.next_cursor
        assert found == [ids[45]]

    def test_cursor_past_the_snapshot_is_empty(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        scope = bulk_scope(client=r, stream=stream, group="g", snapshot_id=ids[0], cursor=ids[2])
        assert scope.ids == () and scope.complete


class BulkApplyTests:
    def test_retry_reports_done_and_skipped(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 4)
        r.xack(stream, "g", ids[0])
        later = make_pending(r, stream, "g", "c1", 1)
        result = bulk_retry(
            client=r,
            stream=stream,
            group="g",
            snapshot_id=ids[-1],
            ids=[*ids, *later],
            idle_ms=60_000,
        )
        outcomes = {i.entry_id: i.outcome for i in result.items}
        assert outcomes == {
            ids[0]: BulkOutcome.NOT_PENDING,
            ids[1]: BulkOutcome.DONE,
            ids[2]: BulkOutcome.DONE,
            ids[3]: BulkOutcome.DONE,
            later[0]: BulkOutcome.NEWER_THAN_SNAPSHOT,
        }
        rows: Any = r.xpending_range(stream, "g", min="-", max="+", count=10)
        idle = {row["message_id"].decode(): row["time_since_delivered"] for row in rows}
        assert all(idle[i] >= 60_000 for i in ids[1:])
        assert idle[later[0]] < 60_000  # the newer entry was not touched
        assert all(row["times_delivered"] == 1 for row in rows)
        assert r.xlen(stream) == 5

    def test_dead_letter_by_filter_moves_only_the_snapshot(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 6)
        later = make_pending(r, stream, "g", "c1", 2)
        result = bulk_dead_letter(
            client=r,
            stream=stream,
            group="g",
            snapshot_id=ids[-1],
            consumer="c1",
            reason="bad batch",
            operator="ann",
            chunk_size=4,
        )
        assert result.done == tuple(ids) and result.complete
        dlq: Any = r.xrange(stream_keys(stream).dlq)
        assert [f[b"ackboard.origin-id"].decode() for _, f in dlq] == ids
        assert [i.new_id for i in result.items] == [d[0].decode() for d in dlq]
        assert all(f[b"ackboard.operator"] == b"ann" for _, f in dlq)
        assert pending_ids(r, stream, "g") == later

    def test_dead_letter_of_an_entry_too_wide_to_copy_is_that_entrys_refusal(
        self, r: redis.Redis, stream: str
    ) -> None:
        [narrow] = make_pending(r, stream, "g", "c1", 1)
        wide = r.xadd(stream, {f"f{i}": "v" for i in range(4_000)}).decode()
        r.xreadgroup("g", "c1", {stream: ">"}, count=1)
        result = bulk_dead_letter(
            client=r,
            stream=stream,
            group="g",
            snapshot_id=wide,
            ids=[narrow, wide],
            reason="bad batch",
            operator="ann",
        )
        assert result.done == (narrow,)
        [skipped] = result.skipped
        assert skipped.entry_id == wide and skipped.outcome is BulkOutcome.REFUSED
        assert f"entry {wide} has 4000 fields" in skipped.detail
        assert pending_ids(r, stream, "g") == [wide]
        assert r.xlen(stream_keys(stream).dlq) == 1

    def test_acknowledge_works_through_a_large_set_with_progress(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 23)
        later = make_pending(r, stream, "g", "c1", 2)
        cursor = None
        done: list[str] = []
        requests = 0
        while True:
            result = bulk_acknowledge(
                client=r,
                stream=stream,
                group="g",
                snapshot_id=ids[-1],
                reason="cleanup",
                cursor=cursor,
                limit=5,
            )
            requests += 1
            assert len(result.items) <= 5
            done.extend(result.done)
            cursor = result.next_cursor
            if cursor is None:
                break
        assert done == ids and requests == 5
        assert pending_ids(r, stream, "g") == later

    def test_acknowledge_requires_a_reason(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        with pytest.raises(ValueError, match="reason is required"):
            bulk_acknowledge(client=r, stream=stream, group="g", snapshot_id=ids[-1], reason=" ")
        assert len(pending_ids(r, stream, "g")) == 2

    def test_payload_missing_retry_is_refused_per_id(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        r.xdel(stream, ids[0])
        result = bulk_retry(client=r, stream=stream, group="g", snapshot_id=ids[-1], ids=ids)
        assert [i.outcome for i in result.items] == [BulkOutcome.REFUSED, BulkOutcome.DONE]
        assert "payload missing" in result.items[0].detail
        assert pending_ids(r, stream, "g") == ids

    def test_guards_inside_the_script_skip_changed_entries(
        self, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c2", 1)
        # What a bulk retry filtered on consumer c1 would send if c2 took the entry meanwhile.
        call = RETRY.call(
            stream=stream, group="g", entry_id=entry_id, idle_ms=60_000, expected_consumer="c1"
        )
        [reply] = calls_pipelined(r, [call])
        assert isinstance(reply, Refusal) and reply.kind == "owner-changed"
        row: Any = r.xpending_range(stream, "g", min=entry_id, max=entry_id, count=1)
        assert row[0]["time_since_delivered"] < 60_000

    def test_one_event_per_request(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        pubsub = r.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        pubsub.subscribe("ackboard:events")
        pubsub.get_message(timeout=1)
        try:
            bulk_retry(client=r, stream=stream, group="g", snapshot_id=ids[-1])
            messages = [pubsub.get_message(timeout=0.5) for _ in range(3)]
        finally:
            pubsub.close()
        events = [m for m in messages if m and stream.encode() in m["data"]]
        assert len(events) == 1 and b'"bulk": true' in events[0]["data"]


class BulkBadInputTests:
    def test_malformed_ids_and_snapshot(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ValueError, match="not a stream id"):
            bulk_retry(client=r, stream=stream, group="g", snapshot_id=ids[0], ids=["x"])
        with pytest.raises(ValueError, match="snapshot id"):
            bulk_scope(client=r, stream=stream, group="g", snapshot_id="+")
        with pytest.raises(ValueError, match="cursor"):
            bulk_scope(client=r, stream=stream, group="g", snapshot_id=ids[0], cursor="(1-0")

    def test_ids_and_filter_together_are_refused(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ValueError, match="not both"):
            bulk_scope(
                client=r, stream=stream, group="g", snapshot_id=ids[0], ids=ids, consumer="c1"
            )

    def test_cap_is_enforced(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ValueError, match="limit"):
            bulk_scope(client=r, stream=stream, group="g", snapshot_id=ids[0], limit=1001)
        many = [f"1-{i}" for i in range(1001)]
        with pytest.raises(ValueError, match="at most 1000 ids"):
            bulk_acknowledge(
                client=r, stream=stream, group="g", snapshot_id=ids[0], ids=many, reason="x"
            )
        assert pending_ids(r, stream, "g") == ids

    def test_unknown_group_is_refused(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 1)
        with pytest.raises(ActionRefused, match="no consumer group 'nope'"):
            bulk_scope(client=r, stream=stream, group="nope", snapshot_id=ids[0])
        with pytest.raises(ActionRefused, match="no consumer group 'nope'"):
            bulk_retry(client=r, stream=stream, group="nope", snapshot_id=ids[0], ids=ids)


class BulkPartialErrorTests:
    """A bulk request that has already changed entries must report them, whatever happens
    to the rest (from the correctness review)."""

    def test_a_script_error_on_one_entry_still_reports_the_ones_moved(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "g")
        first = r.xadd(stream, {"n": "1"}).decode()
        # More fields than one Lua call can pass on (unpack's limit): its move is refused.
        huge = r.xadd(stream, {f"f{i}": "v" for i in range(5000)}).decode()
        last = r.xadd(stream, {"n": "3"}).decode()
        r.xreadgroup("g", "w1", {stream: ">"})

        result = bulk_dead_letter(
            client=r, stream=stream, group="g", snapshot_id=last,
            reason="cleanup", operator="alice", ids=[first, huge, last],
        )  # fmt: skip

        assert result.done == (first, last)  # moved, so the audit must name them
        [refused] = result.skipped
        assert refused.entry_id == huge and refused.outcome is BulkOutcome.REFUSED
        assert f"entry {huge} has 5000 fields" in refused.detail
        rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert [row["message_id"].decode() for row in rows] == [huge]  # not lost
        assert r.xlen(stream_keys(stream).dlq) == 2
