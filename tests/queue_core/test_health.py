"""Group health from Redis alone: the pure rule, and the selectors that feed it, on real
Redis 7.0, Redis 6.2 and Valkey (7.2+ ``XINFO CONSUMERS``), with consumers that are plain
redis-py ``XREADGROUP`` calls."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from queue_core import selectors
from queue_core.health import (
    GroupHealth,
    GroupState,
    StreamHealth,
    detail_health,
    group_health,
    summary_health,
)
from queue_core.types import ConsumerInfo
from tests.factories import CountingRedis
from tests.health_scenario import ENGINES, STUCK_AFTER_MS, engine, seed

T = 1_000
NOW = 10_000_000


def _consumer(name: str, pending: int, idle_ms: int) -> ConsumerInfo:
    return ConsumerInfo(name=name, pending=pending, idle_ms=idle_ms, inactive_ms=None)


def _health(
    consumers: list[ConsumerInfo], pending: int, waiting_id: str | None = None
) -> GroupHealth:
    return group_health(
        stream="s",
        group="g",
        consumers=consumers,
        pending=pending,
        waiting_id=waiting_id,
        stuck_after_ms=T,
        now_ms=NOW,
    )


class GroupHealthRuleTests:
    def test_dead_consumer_holding_entries_is_stuck(self) -> None:
        h = _health([_consumer("dead", 4, T), _consumer("live", 1, T - 1)], pending=5)
        assert (h.state, h.stuck, h.no_live_consumer) == (GroupState.STUCK, True, False)
        assert [c.info.name for c in h.dead_holders] == ["dead"]
        assert (h.stuck_entries, h.live_consumers) == (4, 1)

    def test_nobody_seen_while_entries_are_pending(self) -> None:
        h = _health([_consumer("a", 3, T + 5), _consumer("b", 0, 10 * T)], pending=3)
        assert h.state is GroupState.NO_LIVE_CONSUMER
        assert (h.stuck, h.no_live_consumer, h.live_consumers) == (True, True, 0)

    def test_undelivered_entry_counts_once_it_has_waited(self) -> None:
        young = f"{NOW - T + 1}-0"
        old = f"{NOW - T}-0"
        assert _health([], pending=0, waiting_id=young).state is GroupState.OK
        assert _health([], pending=0, waiting_id=old).state is GroupState.NO_LIVE_CONSUMER
        idle = [_consumer("a", 0, 5 * T)]
        assert _health(idle, pending=0, waiting_id=old).state is GroupState.NO_LIVE_CONSUMER
        assert _health(idle, pending=0, waiting_id=None).state is GroupState.OK

    def test_a_live_consumer_keeps_a_backlog_ok(self) -> None:
        h = _health([_consumer("a", 0, 5 * T), _consumer("b", 0, 0)], 0, f"{NOW - 9 * T}-0")
        assert (h.state, h.live_consumers) == (GroupState.OK, 1)

    def test_a_dead_consumer_holding_nothing_is_not_stuck(self) -> None:
        h = _health([_consumer("gone", 0, 100 * T), _consumer("b", 2, 0)], pending=2)
        assert (h.state, h.stuck, h.dead_holders) == (GroupState.OK, False, ())

    def test_the_stream_rolls_up_to_its_worst_group(self) -> None:
        ok = _health([_consumer("a", 0, 0)], pending=0)
        stuck = _health([_consumer("d", 1, T), _consumer("a", 0, 0)], pending=1)
        none = _health([], pending=0, waiting_id="1-0")
        assert StreamHealth("s", (ok, stuck)).state is GroupState.STUCK
        assert StreamHealth("s", (stuck, ok, none)).flagged == (none, stuck)
        assert StreamHealth("s", ()).state is GroupState.OK


@pytest.fixture(scope="module", params=ENGINES)
def engine_client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    with engine(request.param) as url:
        client = redis.Redis.from_url(url)
        yield client
        client.close()


class SelectorHealthTests:
    """The overview's and the group page's reads give the same health on every engine."""

    def test_states_from_plain_redis_py_consumers(
        self, engine_client: redis.Redis, prefix: str
    ) -> None:
        s = seed(engine_client, prefix)
        summaries = selectors.stream_summaries(client=engine_client, streams=[s.troubled, s.fine])
        summary, fine = summaries
        now_ms = int(time.time() * 1000)
        rolled = summary_health(summary=summary, stuck_after_ms=STUCK_AFTER_MS, now_ms=now_ms)
        by_group = {g.group: g for g in rolled.groups}
        expected = {
            s.stuck: GroupState.STUCK,
            s.abandoned: GroupState.NO_LIVE_CONSUMER,
            s.unread: GroupState.NO_LIVE_CONSUMER,
            s.healthy: GroupState.OK,
        }
        assert {g: h.state for g, h in by_group.items()} == expected
        assert rolled.state is GroupState.NO_LIVE_CONSUMER
        quiet = summary_health(summary=fine, stuck_after_ms=STUCK_AFTER_MS, now_ms=now_ms)
        assert [(g.group, g.state) for g in quiet.groups] == [(s.quiet, GroupState.OK)]
        stuck = by_group[s.stuck]
        assert [(c.info.name, c.info.pending) for c in stuck.dead_holders] == [("w-dead", 4)]
        assert stuck.live_consumers == 1
        abandoned = by_group[s.abandoned]
        assert (abandoned.stuck, abandoned.stuck_entries) == (True, 3)
        assert by_group[s.unread].consumers == ()
        # The group page reads the same state from its own round trip.
        expected[s.quiet] = GroupState.OK
        for group, state in expected.items():
            stream = s.fine if group == s.quiet else s.troubled
            s.keep_alive(engine_client)
            detail = selectors.group_detail(client=engine_client, stream=stream, group=group)
            assert detail is not None
            now_ms = int(time.time() * 1000)
            got = detail_health(detail=detail, stuck_after_ms=STUCK_AFTER_MS, now_ms=now_ms)
            assert (group, got.state) == (group, state)

    def test_inactive_only_where_the_server_reports_it(
        self, engine_client: redis.Redis, stream: str
    ) -> None:
        engine_client.xgroup_create(stream, "g", id="0", mkstream=True)
        engine_client.xadd(stream, {"a": "1"})
        engine_client.xreadgroup("g", "c", {stream: ">"})
        detail = selectors.group_detail(client=engine_client, stream=stream, group="g")
        assert detail is not None
        (consumer,) = detail.consumers
        info = engine_client.info("server")
        modern = "valkey_version" in info or tuple(
            int(p) for p in str(info["redis_version"]).split(".")[:2]
        ) >= (7, 2)
        assert (consumer.inactive_ms is not None) == modern


class RoundTripTests:
    """Health costs no extra round trip on the overview, and O(groups + consumers)."""

    def test_overview_stays_two_round_trips(
        self, r: redis.Redis, counting: CountingRedis, prefix: str
    ) -> None:
        names = [f"{prefix}s{i}" for i in range(20)]
        for name in names:
            seed_groups = ("busy", "idle")
            for group in seed_groups:
                r.xgroup_create(name, group, id="0", mkstream=True)
            r.xadd(name, {"a": "1"})
            r.xreadgroup("busy", "c", {name: ">"})  # pending; "idle" has a waiting entry
        counting.round_trips = 0
        found = selectors.stream_summaries(client=counting, streams=names)
        assert counting.round_trips == 2
        for summary in found:
            stats = {g.name: g for g in summary.group_stats}
            assert [c.name for c in stats["busy"].consumer_list] == ["c"]
            assert stats["busy"].waiting_id is None  # pending: not read
            assert stats["idle"].waiting_id is not None

    def test_group_page_reads_the_waiting_entry_only_when_nothing_is_pending(
        self, r: redis.Redis, counting: CountingRedis, stream: str
    ) -> None:
        r.xgroup_create(stream, "g", id="0", mkstream=True)
        first = r.xadd(stream, {"a": "1"}).decode()
        counting.round_trips = 0
        detail = selectors.group_detail(client=counting, stream=stream, group="g")
        assert detail is not None and detail.waiting_id == first
        assert counting.round_trips == 2
        r.xreadgroup("g", "c", {stream: ">"})
        counting.round_trips = 0
        detail = selectors.group_detail(client=counting, stream=stream, group="g")
        assert detail is not None and detail.waiting_id is None
        assert counting.round_trips == 1
