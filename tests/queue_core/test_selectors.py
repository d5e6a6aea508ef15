"""Selectors on real Redis: what they return, and that their round trips stay fixed."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import redis

from queue_core import selectors, services
from queue_core.keys import stream_keys
from queue_core.types import GroupDetail
from tests.factories import CountingRedis, add_entries, make_group, make_pending


class StreamDiscoverTests:
    def test_finds_allowed_streams_and_hides_companions(self, r: redis.Redis, prefix: str) -> None:
        a, b = prefix + "a", prefix + "b"
        make_pending(r, a, "g", "c", 1)
        add_entries(r, b, 1)
        r.xadd(stream_keys(a).dlq, {"x": "1"})
        r.xadd(stream_keys(a).failures, {"x": "1"})
        r.set(prefix + "not-a-stream", "1")
        names, truncated, companions = selectors.stream_discover(
            client=r, patterns=(prefix + "*", "{" + prefix + "*"), cap=100
        )
        assert names == (a, b)
        assert truncated is False
        assert companions == 2

    def test_cap_truncates(self, r: redis.Redis, prefix: str) -> None:
        for i in range(5):
            add_entries(r, f"{prefix}s{i}", 1)
        names, truncated, _ = selectors.stream_discover(client=r, patterns=(prefix + "*",), cap=3)
        assert len(names) == 3
        assert truncated is True

    def test_allowlist_limits_discovery(self, r: redis.Redis, prefix: str) -> None:
        add_entries(r, prefix + "billing", 1)
        add_entries(r, prefix + "secret", 1)
        names, _, _ = selectors.stream_discover(client=r, patterns=(prefix + "bill*",), cap=10)
        assert names == (prefix + "billing",)


class StreamSummariesTests:
    def test_figures_per_stream(self, r: redis.Redis, stream: str) -> None:
        make_group(r, stream, "g2")  # before any entry, so the server knows its lag
        ids = make_pending(r, stream, "g1", "c1", 3)
        add_entries(r, stream, 2)
        services.entry_dead_letter(
            client=r, stream=stream, group="g1", entry_id=ids[2], reason="x", operator="op"
        )
        (summary,) = selectors.stream_summaries(client=r, streams=[stream])
        assert summary.length == 5
        assert summary.groups == 2
        assert summary.pending == 2
        # g2 has read nothing; Redis 6.2 does not report lag at all.
        major = int(r.info("server")["redis_version"].split(".")[0])
        assert summary.max_lag == (5 if major >= 7 else None)
        assert summary.oldest_pending_id == ids[0]
        assert summary.dlq_length == 1
        assert {g.name: g.pending for g in summary.group_stats} == {"g1": 2, "g2": 0}

    def test_deleted_stream_is_left_out(self, r: redis.Redis, prefix: str) -> None:
        add_entries(r, prefix + "here", 1)
        found = selectors.stream_summaries(client=r, streams=[prefix + "gone", prefix + "here"])
        assert [s.name for s in found] == [prefix + "here"]

    def test_round_trips_do_not_grow_with_streams(
        self, r: redis.Redis, prefix: str, counting: CountingRedis
    ) -> None:
        names = [f"{prefix}s{i}" for i in range(40)]
        for name in names:
            make_pending(r, name, "g", "c", 2)
        counting.round_trips = 0
        selectors.stream_summaries(client=counting, streams=names[:2])
        few = counting.round_trips
        counting.round_trips = 0
        found = selectors.stream_summaries(client=counting, streams=names)
        assert len(found) == 40 and all(s.pending == 2 for s in found)
        assert counting.round_trips == few == 2


class StreamDetailTests:
    def test_facts_groups_and_newest_entries(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 25)
        detail = selectors.stream_detail(client=r, stream=stream)
        assert detail is not None
        assert detail.info.length == 25
        assert detail.info.last_generated_id == ids[-1]
        assert [g.name for g in detail.groups] == ["g"]
        assert [e.id for e in detail.entries.entries] == ids[::-1][:20]
        assert detail.entries.next_before == ids[5]
        older = selectors.stream_detail(client=r, stream=stream, before=ids[5])
        assert older is not None
        assert [e.id for e in older.entries.entries] == ids[4::-1]
        assert older.entries.next_before is None

    def test_missing_stream_is_none(self, r: redis.Redis, stream: str) -> None:
        assert selectors.stream_detail(client=r, stream=stream) is None
        r.set(stream, "not a stream")
        assert selectors.stream_detail(client=r, stream=stream) is None


class GroupDetailTests:
    def test_consumers_and_summary(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        make_pending(r, stream, "g", "c2", 2, create=False)
        detail = selectors.group_detail(client=r, stream=stream, group="g")
        assert detail is not None
        assert detail.pending == 5
        assert detail.oldest_pending_id == ids[0]
        assert {c.name: c.pending for c in detail.consumers} == {"c1": 3, "c2": 2}
        assert all(c.idle_ms >= 0 for c in detail.consumers)

    def test_unknown_group_or_stream_is_none(self, r: redis.Redis, stream: str) -> None:
        assert selectors.group_detail(client=r, stream=stream, group="g") is None
        make_group(r, stream, "g")
        assert selectors.group_detail(client=r, stream=stream, group="other") is None


class PendingPageTests:
    def test_pages_by_start_id_with_payloads(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 120)
        first = selectors.pending_page(client=r, stream=stream, group="g")
        assert first is not None
        assert [row.id for row in first.rows] == ids[:50]
        assert first.rows[0].entry is not None
        assert dict(first.rows[0].entry.fields)[b"n"] == b"0"
        assert first.next_start == ids[49]
        third = selectors.pending_page(client=r, stream=stream, group="g", start=ids[99])
        assert third is not None
        assert [row.id for row in third.rows] == ids[100:]
        assert third.next_start is None

    def test_filter_by_consumer(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "c1", 3)
        mine = make_pending(r, stream, "g", "c2", 2, create=False)
        page = selectors.pending_page(client=r, stream=stream, group="g", consumer="c2")
        assert page is not None
        assert [row.id for row in page.rows] == mine
        assert {row.consumer for row in page.rows} == {"c2"}

    def test_idle_filter_is_bounded_and_continues(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 30)
        # Make every tenth entry look idle for an hour (XCLAIM IDLE keeps the owner).
        old = ids[::10]
        r.xclaim(stream, "g", "c", 0, old, idle=3_600_000, justid=True)
        page = selectors.pending_page(
            client=r, stream=stream, group="g", min_idle_ms=60_000, budget=12, window=5
        )
        assert page is not None
        assert [row.id for row in page.rows] == old[:2]
        assert page.budget_hit is True
        assert page.scanned == 12
        assert page.scanned_to == ids[11]
        assert page.next_start == ids[11]
        rest = selectors.pending_page(
            client=r, stream=stream, group="g", min_idle_ms=60_000, start=page.next_start
        )
        assert rest is not None
        assert [row.id for row in rest.rows] == old[2:]
        assert rest.next_start is None and rest.budget_hit is False

    def test_deleted_entry_has_no_payload(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 2)
        r.xdel(stream, ids[0])
        page = selectors.pending_page(client=r, stream=stream, group="g")
        assert page is not None
        assert page.rows[0].payload_missing and not page.rows[1].payload_missing

    def test_unknown_group_is_none(self, r: redis.Redis, stream: str) -> None:
        add_entries(r, stream, 1)
        assert selectors.pending_page(client=r, stream=stream, group="nope") is None


def _expected_page(
    r: redis.Redis, stream: str, start: str | None, consumer: str | None
) -> list[tuple[str, str, dict[bytes, bytes] | None]]:
    """A page as the slow way reads it: XPENDING, then ``XRANGE id id`` per row."""
    rows = r.xpending_range(
        stream, "g", min="(" + start if start else "-", max="+", count=50,
        consumername=consumer,
    )  # fmt: skip
    page: list[tuple[str, str, dict[bytes, bytes] | None]] = []
    for row in rows:
        entry_id = row["message_id"].decode()
        found = r.xrange(stream, min=entry_id, max=entry_id)
        page.append((entry_id, row["consumer"].decode(), found[0][1] if found else None))
    return page


def _read_page(
    client: redis.Redis, stream: str, start: str | None, consumer: str | None
) -> tuple[list[tuple[str, str, dict[bytes, bytes] | None]], str | None]:
    page = selectors.pending_page(client=client, stream=stream, group="g", start=start,
                                  consumer=consumer)  # fmt: skip
    assert page is not None
    rows = [
        (row.id, row.consumer, dict(row.entry.fields) if row.entry is not None else None)
        for row in page.rows
    ]
    return rows, page.next_start


class PendingPayloadReadTests:
    """The page reads ``XRANGE`` from its start beside XPENDING: when the pending entries
    are dense that is every payload in one round trip; when they are sparse (acked,
    deleted or another consumer's entries between them) the rest are fetched after, and
    the rows are the same as read one by one."""

    def test_a_dense_backlog_costs_one_round_trip_a_page(
        self, r: redis.Redis, stream: str, counting: CountingRedis
    ) -> None:
        ids = make_pending(r, stream, "g", "c", 120)
        start = None
        for _ in range(3):
            counting.round_trips = 0
            rows, start = _read_page(counting, stream, start, None)
            assert counting.round_trips == 1
            assert rows == _expected_page(r, stream, None if not rows else
                                          _before(ids, rows[0][0]), None)  # fmt: skip
        assert start is None

    def test_sparse_pending_entries_are_fetched_after(
        self, r: redis.Redis, stream: str, counting: CountingRedis
    ) -> None:
        ids = make_pending(r, stream, "g", "c", 300)
        r.xack(stream, "g", *[i for n, i in enumerate(ids) if n % 7])  # every 7th stays
        counting.round_trips = 0
        rows, _ = _read_page(counting, stream, None, None)
        assert counting.round_trips == 2
        assert [row[0] for row in rows] == ids[::7][:50]
        assert rows == _expected_page(r, stream, None, None)
        assert all(payload is not None for _, _, payload in rows)

    def test_every_page_matches_the_slow_read_whatever_the_gaps(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 150)
        ids += make_pending(r, stream, "g", "c2", 150, create=False)
        r.xack(stream, "g", *ids[40:95], *ids[200:203])  # a gap, and a small one
        r.xdel(stream, ids[10], ids[99], ids[149], ids[299])  # pending, payload gone
        for consumer in (None, "c1", "c2"):
            start = None
            pages = 0
            while True:
                rows, next_start = _read_page(r, stream, start, consumer)
                assert rows == _expected_page(r, stream, start, consumer)
                pages += 1
                if next_start is None:
                    break
                start = next_start
            assert pages >= 2
        rows, _ = _read_page(r, stream, None, None)
        assert rows[10][2] is None  # deleted within the range read beside XPENDING

    def test_an_entry_deleted_at_the_streams_end_costs_no_second_round_trip(
        self, r: redis.Redis, stream: str, counting: CountingRedis
    ) -> None:
        ids = make_pending(r, stream, "g", "c", 5)
        r.xdel(stream, ids[-1])
        counting.round_trips = 0
        rows, _ = _read_page(counting, stream, None, None)
        assert counting.round_trips == 1
        assert [row[2] is None for row in rows] == [False] * 4 + [True]


class GroupPageTests:
    """``group_page`` reads the header and a pending page in one round trip; what it returns
    is exactly what ``group_detail`` and ``pending_page`` return with their own reads."""

    def test_the_same_answers_as_the_separate_reads_whatever_the_gaps(
        self, r: redis.Redis, stream: str
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 80)
        ids += make_pending(r, stream, "g", "c2", 80, create=False)
        r.xack(stream, "g", *ids[20:45])  # a gap: rows fetched after
        r.xdel(stream, ids[5], ids[70])  # pending, payload gone
        binary = r.xadd(stream, {b"\xff\x00name": b"\x80value", "json": '{"a": 1}'})
        r.xreadgroup("g", "c3", {stream: ">"})
        for consumer in (None, "c1", "c3"):
            start = None
            while True:
                got = selectors.group_page(client=r, stream=stream, group="g", start=start,
                                           consumer=consumer)  # fmt: skip
                detail = selectors.group_detail(client=r, stream=stream, group="g")
                page = selectors.pending_page(client=r, stream=stream, group="g", start=start,
                                              consumer=consumer)  # fmt: skip
                assert detail is not None and got.detail is not None
                assert _still(got.detail) == _still(detail)
                assert page is not None and got.page is not None
                assert _still(got.page) == _still(page)
                if page.next_start is None:
                    break
                start = page.next_start
        [row] = selectors.group_page(client=r, stream=stream, group="g", consumer="c3").page.rows
        assert row.id == binary.decode() and row.entry is not None
        assert row.entry.fields == ((b"\xff\x00name", b"\x80value"), (b"json", b'{"a": 1}'))
        first = selectors.group_page(client=r, stream=stream, group="g").page
        assert first is not None and first.rows[5].entry is None  # deleted: payload missing
        assert first.rows[0].entry is not None and first.rows[0].entry.id == ids[0]

    def test_the_clients_own_parsing_is_left_as_it_was(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "c1", 2)
        selectors.group_page(client=r, stream=stream, group="g")
        assert isinstance(r.xpending(stream, "g"), dict)
        assert isinstance(r.xpending_range(stream, "g", "-", "+", 1)[0], dict)
        assert isinstance(r.xrange(stream, count=1)[0][1], dict)


def _still(read: Any) -> Any:
    """``read`` with the times that grow between two reads (idle, inactive) set to 0."""
    if isinstance(read, GroupDetail):
        return replace(read, consumers=tuple(
            replace(c, idle_ms=0, inactive_ms=None if c.inactive_ms is None else 0)
            for c in read.consumers
        ))  # fmt: skip
    return replace(read, rows=tuple(replace(row, idle_ms=0) for row in read.rows))


def _before(ids: list[str], entry_id: str) -> str | None:
    """The start (exclusive) a page beginning at ``entry_id`` was read from."""
    at = ids.index(entry_id)
    return ids[at - 1] if at else None


class EntryDetailTests:
    def test_state_in_each_group(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "pending", "c", 2)
        make_group(r, stream, "acked")
        r.xreadgroup("acked", "c", {stream: ">"}, count=10)
        r.xack(stream, "acked", *ids)
        make_group(r, stream, "waiting", start="$")
        r.xgroup_setid(stream, "waiting", id="0")
        detail = selectors.entry_detail(client=r, stream=stream, entry_id=ids[0])
        assert detail is not None and detail.entry is not None
        states = {s.group: s for s in detail.groups}
        assert states["pending"].state == "pending"
        assert states["pending"].pending_row is not None
        assert states["pending"].pending_row.consumer == "c"
        assert states["acked"].state == "acked"
        assert states["waiting"].state == "waiting"

    def test_trimmed_but_pending_entry_is_shown(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 1)
        r.xdel(stream, ids[0])
        detail = selectors.entry_detail(client=r, stream=stream, entry_id=ids[0])
        assert detail is not None and detail.entry is None
        assert detail.groups[0].state == "pending"

    def test_unknown_entry_is_none(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "c", 1)
        assert selectors.entry_detail(client=r, stream=stream, entry_id="1-1") is None
        assert selectors.entry_detail(client=r, stream=stream + "x", entry_id="1-1") is None


class DeadLetterPageTests:
    def test_rows_carry_origin_metadata(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c", 3)
        for entry_id in ids:
            services.entry_dead_letter(
                client=r, stream=stream, group="g", entry_id=entry_id, reason="bad", operator="op"
            )
        page = selectors.dead_letter_page(client=r, stream=stream, count=2)
        assert page is not None
        assert page.length == 3
        assert [row.origin_id for row in page.rows] == [ids[2], ids[1]]
        row = page.rows[0]
        assert (row.group, row.reason, row.operator, row.deliveries) == ("g", "bad", "op", 1)
        assert row.dead_lettered_at_ms is not None
        assert abs(row.dead_lettered_at_ms - time.time() * 1000) < 60_000
        assert dict(row.entry.fields) == {b"n": b"2", b"payload": b'{"n": 2}'}
        older = selectors.dead_letter_page(client=r, stream=stream, before=page.next_before)
        assert older is not None
        assert [row.origin_id for row in older.rows] == [ids[0]]

    def test_missing_stream_and_dlq_is_none(self, r: redis.Redis, stream: str) -> None:
        assert selectors.dead_letter_page(client=r, stream=stream) is None
        add_entries(r, stream, 1)
        page = selectors.dead_letter_page(client=r, stream=stream)
        assert page is not None and page.length == 0 and page.rows == ()


class StreamStampsTests:
    def test_one_round_trip_for_any_number_of_streams_and_groups(
        self, counting: Any, r: redis.Redis, prefix: str
    ) -> None:
        names = [f"{prefix}s{i}" for i in range(5)]
        for name in names:
            make_pending(r, name, "g", "c1", 2)
        counting.round_trips = 0
        stamps = selectors.stream_stamps(
            client=counting, streams=names, groups=[(n, "g") for n in names]
        )
        assert counting.round_trips == 1
        assert set(stamps.streams) == set(names) and len(stamps.pending) == 5

    def test_stamp_moves_with_what_the_pages_show(self, r: redis.Redis, stream: str) -> None:
        make_pending(r, stream, "g", "c1", 2)

        def poll() -> Any:
            stamps = selectors.stream_stamps(client=r, streams=[stream], groups=[(stream, "g")])
            return stamps.streams[stream], stamps.pending[(stream, "g")]

        first, pending = poll()
        assert poll() == (first, pending), "nothing changed, nothing moves"
        # Length stays 2, but the last id and entries-added move.
        r.xdel(stream, r.xrange(stream, count=1)[0][0])
        r.xadd(stream, {"n": "x"})
        second, _ = poll()
        assert second.stream != first.stream
        assert second.last_id == r.xinfo_stream(stream)["last-generated-id"].decode()
        r.xadd(stream_keys(stream).dlq, {"x": "1"})
        third, _ = poll()
        assert third.dlq_length != second.dlq_length and third.groups == second.groups
        r.xack(stream, "g", r.xpending_range(stream, "g", "-", "+", 1)[0]["message_id"])
        fourth, after_ack = poll()
        assert after_ack != pending and fourth.groups != third.groups

    def test_missing_stream_and_group_are_markers_not_errors(
        self, r: redis.Redis, stream: str
    ) -> None:
        stamps = selectors.stream_stamps(client=r, streams=[stream], groups=[(stream, "none")])
        stamp = stamps.streams[stream]
        assert stamp.stream == ("error", "ResponseError") and stamp.last_id is None
        assert stamps.pending[(stream, "none")] == ("error", "ResponseError")
        hash(stamps.streams[stream])  # comparable and hashable


class PendingEntryFetchTests:
    def test_pending_row_and_payload_in_one_round_trip(
        self, counting: Any, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        counting.round_trips = 0
        found = selectors.pending_entry_fetch(
            client=counting, stream=stream, group="g", entry_id=entry_id
        )
        assert counting.round_trips == 1
        assert found is not None and found.in_stream and found.row is not None
        assert (found.row.id, found.row.consumer, found.row.deliveries) == (entry_id, "c1", 1)
        assert found.row.entry is not None and dict(found.row.entry.fields)[b"n"] == b"0"

    def test_acked_trimmed_and_unknown_entries(self, r: redis.Redis, stream: str) -> None:
        acked, trimmed = make_pending(r, stream, "g", "c1", 2)
        r.xack(stream, "g", acked)
        r.xdel(stream, trimmed)
        was_acked = selectors.pending_entry_fetch(
            client=r, stream=stream, group="g", entry_id=acked
        )
        assert was_acked is not None and was_acked.row is None and was_acked.in_stream
        gone = selectors.pending_entry_fetch(client=r, stream=stream, group="g", entry_id=trimmed)
        assert gone is not None and gone.row is not None and not gone.in_stream
        assert gone.row.payload_missing
        never = selectors.pending_entry_fetch(client=r, stream=stream, group="g", entry_id="1-1")
        assert never is not None and never.row is None and not never.in_stream

    def test_unknown_group_stream_or_key_type_is_none(
        self, r: redis.Redis, stream: str, prefix: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        r.set(prefix + "plain", "x")
        for name, group in ((stream, "nope"), (stream + "x", "g"), (prefix + "plain", "g")):
            assert (
                selectors.pending_entry_fetch(client=r, stream=name, group=group, entry_id=entry_id)
                is None
            )


class PendingSummaryTests:
    def test_counts_and_id_range(self, r: redis.Redis, stream: str) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        summary = selectors.pending_summary(client=r, stream=stream, group="g")
        assert summary is not None
        assert (summary.pending, summary.oldest_id, summary.newest_id) == (3, ids[0], ids[2])
        r.xack(stream, "g", *ids)
        empty = selectors.pending_summary(client=r, stream=stream, group="g")
        assert empty is not None and (empty.pending, empty.oldest_id) == (0, None)

    def test_unknown_group_or_stream_is_none(self, r: redis.Redis, stream: str) -> None:
        assert selectors.pending_summary(client=r, stream=stream, group="g") is None
        make_group(r, stream, "g")
        assert selectors.pending_summary(client=r, stream=stream, group="other") is None


class DeadLetterFetchTests:
    def test_one_dead_letter_with_its_origin(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        moved = services.entry_dead_letter(
            client=r, stream=stream, group="g", entry_id=entry_id, reason="bad", operator="op"
        )
        assert moved is not None
        row = selectors.dead_letter_fetch(client=r, stream=stream, dlq_id=moved.dlq_id)
        assert row is not None
        assert (row.id, row.origin_id, row.group, row.reason) == (
            moved.dlq_id,
            entry_id,
            "g",
            "bad",
        )
        assert (row.operator, row.deliveries, row.consumer) == ("op", 1, "c1")

    def test_missing_entry_or_key_of_another_type_is_none(
        self, r: redis.Redis, stream: str
    ) -> None:
        assert selectors.dead_letter_fetch(client=r, stream=stream, dlq_id="1-1") is None
        r.set(stream_keys(stream).dlq, "not a stream")
        assert selectors.dead_letter_fetch(client=r, stream=stream, dlq_id="1-1") is None
