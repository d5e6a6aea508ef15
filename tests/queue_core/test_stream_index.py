"""The stream index (queue_core.stream_index): bounded refresh steps, complete passes,
new and deleted streams, the allowlist and cap, figures by round, and every primary of a
cluster. Real Redis (and the session cluster); commands are counted, never mocked."""

from __future__ import annotations

import uuid

import redis
from redis.crc import key_slot

from queue_core.connection import Client, connect
from queue_core.keys import stream_keys
from queue_core.stream_index import StreamIndex
from tests.factories import RecordingRedis, add_entries, make_pending
from tests.redis_cluster import RedisCluster as LoopbackCluster


def seed(r: redis.Redis, names: list[str]) -> None:
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.xadd(name, {"a": "1"})
    pipe.execute()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class StepTests:
    def test_a_pass_is_many_bounded_steps_and_finds_every_stream(
        self, r: redis.Redis, rec: RecordingRedis, prefix: str
    ) -> None:
        names = [f"{prefix}s{i:05d}" for i in range(2_500)]
        seed(r, names)
        index = StreamIndex(patterns=(prefix + "*",), cap=100_000, scan_count=200, batch=100)
        report = index.step(client=rec)
        assert report.busy and report.scans == 1
        assert index.snapshot().refreshed_at is None, "one step is not a whole pass"
        steps = 1
        while index.step(client=rec).busy:
            steps += 1
            assert steps < 10_000
        scans = rec.scans()
        # Every SCAN examined a bounded number of keys: COUNT 200, TYPE stream.
        assert all(c[c.index(b"COUNT") + 1] == 200 for c in scans)
        assert all(c[c.index(b"TYPE") + 1] == "stream" for c in scans)
        assert len(scans) >= 2_500 // 200, "the keyspace took many steps, not one"
        # The figures: 25 steps of 100 streams, two round trips each.
        assert steps >= 25
        snap = index.snapshot()
        assert snap.names == tuple(names) and snap.refreshed_at is not None
        assert index.summarized() == 2_500 and index.summaries_age() is not None
        assert not snap.truncated

    def test_each_step_costs_the_same_whatever_the_number_of_streams(
        self, r: redis.Redis, rec: RecordingRedis, prefix: str
    ) -> None:
        seed(r, [f"{prefix}s{i:05d}" for i in range(1_500)])
        index = StreamIndex(patterns=(prefix + "*",), cap=100_000, scan_count=500, batch=50)
        costs = []
        while True:
            before = rec.round_trips
            report = index.step(client=rec)
            costs.append(rec.round_trips - before)
            if not report.busy:
                break
        # One SCAN plus the two pipelined rounds of one batch, at most, every step.
        assert max(costs) <= 3

    def test_nothing_is_read_until_the_next_pass_is_due(
        self, r: redis.Redis, rec: RecordingRedis, prefix: str
    ) -> None:
        add_entries(r, prefix + "a", 1)
        clock = Clock()
        index = StreamIndex(patterns=(prefix + "*",), cap=10, refresh_s=10.0, clock=clock)
        index.build(client=rec, budget_s=5.0)
        before = rec.round_trips
        assert not index.step(client=rec).busy
        assert rec.round_trips == before, "a step with nothing due sends nothing"
        assert not index.due()
        clock.now += 10.0
        assert index.due()
        index.step(client=rec)
        assert rec.round_trips > before

    def test_without_figures_only_names_are_refreshed(
        self, r: redis.Redis, rec: RecordingRedis, prefix: str
    ) -> None:
        seed(r, [f"{prefix}s{i}" for i in range(30)])
        index = StreamIndex(patterns=(prefix + "*",), cap=100, scan_count=10_000, batch=10)
        assert index.build(client=rec, budget_s=5.0, figures=False)
        assert len(index.snapshot().names) == 30
        assert index.summarized() == 0 and rec.round_trips == len(rec.scans())
        assert not index.due(figures=False) and index.due(figures=True)
        assert index.build(client=rec, budget_s=5.0, figures=True)
        assert index.summarized() == 30

    def test_names_found_after_a_round_went_by_are_summarized_before_the_build_ends(
        self, r: redis.Redis, prefix: str
    ) -> None:
        seed(r, [f"{prefix}s{i:03d}" for i in range(300)])
        # Rounds run beside the first pass: names it finds behind a round's cursor, or
        # after a round ended, are summarized by one more round before the build ends.
        for batch in (20, 500):
            index = StreamIndex(patterns=(prefix + "*",), cap=1_000, scan_count=50, batch=batch)
            assert index.build(client=r, budget_s=10.0, figures=True)
            assert index.summarized() == 300, batch


class PassTests:
    def test_new_streams_join_and_deleted_ones_leave(self, r: redis.Redis, prefix: str) -> None:
        add_entries(r, prefix + "b", 1)
        add_entries(r, prefix + "c", 1)
        clock = Clock()
        index = StreamIndex(patterns=(prefix + "*",), cap=10, refresh_s=5.0, clock=clock)
        assert index.build(client=r, budget_s=5.0)
        first = index.snapshot()
        assert first.names == (prefix + "b", prefix + "c")
        add_entries(r, prefix + "a", 1)
        r.delete(prefix + "c")
        clock.now += 5.0
        assert index.build(client=r, budget_s=5.0)
        second = index.snapshot()
        assert second.names == (prefix + "a", prefix + "b")
        assert second.generation != first.generation
        assert second.refreshed_at == clock.now
        assert index.summary(prefix + "c") is None

    def test_allowlist_companions_and_odd_names(self, r: redis.Redis, prefix: str) -> None:
        add_entries(r, prefix + "jobs", 1)
        r.xadd(stream_keys(prefix + "jobs").dlq, {"a": "1"})
        add_entries(r, prefix + "other:x", 1)
        r.set(prefix + "plain", "1")  # not a stream
        r.xadd((prefix + "bad\xff").encode("latin-1"), {"a": "1"})  # not UTF-8
        index = StreamIndex(patterns=(prefix + "j*", prefix + "{*", "{" + prefix + "*"), cap=10)
        index.build(client=r, budget_s=5.0)
        snap = index.snapshot()
        assert snap.names == (prefix + "jobs",)
        assert snap.companions == 1

    def test_the_cap_stops_the_index_and_says_so(self, r: redis.Redis, prefix: str) -> None:
        seed(r, [f"{prefix}s{i}" for i in range(5)])
        index = StreamIndex(patterns=(prefix + "*",), cap=3, scan_count=2)
        index.build(client=r, budget_s=5.0)
        snap = index.snapshot()
        assert len(snap.names) == 3 and snap.truncated and snap.cap == 3

    def test_learned_names_are_listed_before_the_next_pass(
        self, r: redis.Redis, prefix: str
    ) -> None:
        add_entries(r, prefix + "a", 1)
        index = StreamIndex(patterns=(prefix + "*",), cap=10)
        index.build(client=r, budget_s=5.0)
        index.learn(prefix + "z")
        index.learn("elsewhere")  # outside the allowlist: ignored
        assert index.snapshot().names == (prefix + "a", prefix + "z")


class FigureTests:
    def test_figures_are_the_overview_rows_and_fresh_reads_are_kept(
        self, r: redis.Redis, prefix: str
    ) -> None:
        make_pending(r, prefix + "a", "g", "c", 3)
        add_entries(r, prefix + "b", 2)
        index = StreamIndex(patterns=(prefix + "*",), cap=10)
        index.build(client=r, budget_s=5.0)
        a = index.summary(prefix + "a")
        assert a is not None and a.pending == 3
        version = index.summaries_version
        index.remember([a])
        assert index.summaries_version > version
        figures = index.summaries()
        assert set(figures) == {prefix + "a", prefix + "b"}
        assert figures[prefix + "b"].length == 2


class ClusterIndexTests:
    def test_every_primary_is_scanned_with_its_own_cursor(
        self, cluster_url: str, redis_cluster: LoopbackCluster
    ) -> None:
        client: Client = connect(cluster_url, socket_timeout=10)
        cprefix = f"t{uuid.uuid4().hex[:10]}:"
        try:
            ranges = redis_cluster.slot_ranges()
            names = [f"{cprefix}s{i:03d}" for i in range(60)]
            for name in names:
                add_entries(client, name, 1)
            ports = {
                next(p for first, last, p, _ in ranges if first <= key_slot(n.encode()) <= last)
                for n in names
            }
            assert len(ports) == 3, "the names are spread over every primary"
            index = StreamIndex(patterns=(cprefix + "*",), cap=1_000, scan_count=10)
            report = index.step(client=client)
            assert report.scans == 3, "one SCAN per primary per step"
            index.build(client=client, budget_s=10.0)
            assert index.snapshot().names == tuple(names)
            assert index.summarized() == 60
        finally:
            for key in list(client.scan_iter(match=cprefix + "*", count=1000)):
                client.delete(key)
            client.close()
