"""queue_core on a 3-primary Redis Cluster: the connection, every selector, every action.

One session cluster (``redis_cluster``); each test has its own key prefix and streams
picked by slot so that they live on different primaries. Nothing here kills a node of
the session cluster: the READONLY test uses a private pair of servers of its own.

The cluster is Redis 7 (``redis-server``), so these tests run once, not once per engine:
``tests.redis_server`` is imported as a module (tests/conftest.py runs a module that
holds ``RedisServer`` itself on every engine).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot

from queue_core import bulk, selectors, services
from queue_core.connection import Client, ClusterClient, cluster_enabled, connect
from queue_core.events import event_publish
from queue_core.failures import FailureRecord, failures_record
from queue_core.keys import EVENTS_CHANNEL, CrossSlotName, stream_keys
from queue_core.migrate import legacy_companions_find
from queue_core.results import BulkOutcome
from queue_core.scripts import calls_pipelined
from queue_core.scripts.retry import RETRY
from queue_core.types import ActionRefused
from tests import redis_server
from tests.factories import add_entries, make_pending
from tests.redis_cluster import RedisCluster as LoopbackCluster


def names_on_primaries(cluster: LoopbackCluster, prefix: str, n: int = 3) -> list[str]:
    """``n`` stream names under ``prefix``, each served by a different primary."""
    ranges = cluster.slot_ranges()
    chosen: dict[int, str] = {}
    for i in range(10_000):
        name = f"{prefix}s{i}"
        slot = key_slot(name.encode())
        port = next(p for first, last, p, _ in ranges if first <= slot <= last)
        chosen.setdefault(port, name)
        if len(chosen) == n:
            return list(chosen.values())
    raise AssertionError("could not spread names over the primaries")


@pytest.fixture
def streams(redis_cluster: LoopbackCluster, cprefix: str) -> list[str]:
    return names_on_primaries(redis_cluster, cprefix)


def primary_of(cluster: LoopbackCluster, key: str) -> int:
    return cluster.port_for_slot(key_slot(key.encode()))


class ConnectTests:
    def test_detects_a_cluster_from_the_server(self, cluster_url: str, redis_url: str) -> None:
        assert cluster_enabled(cluster_url)
        assert not cluster_enabled(redis_url)
        cluster_client = connect(cluster_url)
        plain = connect(redis_url)
        try:
            assert isinstance(cluster_client, ClusterClient)
            assert type(plain) is redis.Redis
            assert cluster_client.get_connection_kwargs()["decode_responses"] is False  # type: ignore[no-untyped-call]
        finally:
            cluster_client.close()
            plain.close()

    def test_any_node_url_reaches_every_primary(
        self, redis_cluster: LoopbackCluster, streams: list[str]
    ) -> None:
        # Connect through a replica's URL: the client still writes to each stream's primary.
        replica = redis_cluster.replica_of(primary_of(redis_cluster, streams[0]))
        client = connect(f"redis://127.0.0.1:{replica}/0")
        try:
            for name in streams:
                add_entries(client, name, 2)
            assert {primary_of(redis_cluster, s) for s in streams} == set(
                redis_cluster.primary_ports()
            )
            assert [client.xlen(s) for s in streams] == [2, 2, 2]
        finally:
            client.close()

    def test_unreachable_url_raises(self) -> None:
        with pytest.raises(redis.ConnectionError):
            connect("redis://127.0.0.1:1/0", connect_timeout=0.5)


class RedirectTests:
    def test_moved_after_a_slot_migration_is_followed(
        self, rc: Client, redis_cluster: LoopbackCluster, cprefix: str
    ) -> None:
        assert isinstance(rc, RedisCluster)
        stream = cprefix + "moving"
        make_pending(rc, stream, "g", "c", 3)
        services.entry_dead_letter(
            client=rc, stream=stream, group="g", entry_id=rc.xrange(stream)[0][0].decode(),
            reason="seed",
        )  # fmt: skip
        slot = key_slot(stream.encode())
        source = redis_cluster.port_for_slot(slot)
        target = next(p for p in redis_cluster.primary_ports() if p != source)
        rc.xlen(stream)  # the client's slot map now says "source"
        redis_cluster.migrate_slot(slot, target)
        assert redis_cluster.port_for_slot(slot) == target
        # The client's map is stale: the next commands get MOVED and follow it.
        moved_before = _moved_count(redis_cluster, source)
        detail = selectors.group_detail(client=rc, stream=stream, group="g")
        assert detail is not None and detail.pending == 2
        assert _moved_count(redis_cluster, source) > moved_before
        assert services.entry_acknowledge(
            client=rc, stream=stream, group="g",
            entry_id=rc.xrange(stream)[1][0].decode(), reason="after move",
        ).was_pending  # fmt: skip
        page = selectors.dead_letter_page(client=rc, stream=stream)
        assert page is not None and page.length == 1

    def test_ask_during_a_slot_migration_is_followed(
        self, rc: Client, redis_cluster: LoopbackCluster, cprefix: str
    ) -> None:
        stream = cprefix + "asked"
        ids = make_pending(rc, stream, "g", "c", 2)
        slot = key_slot(stream.encode())
        source = redis_cluster.port_for_slot(slot)
        target = next(p for p in redis_cluster.primary_ports() if p != source)
        keys = stream_keys(stream)
        with redis_cluster.slot_migrating(slot, target, keys=[stream]):
            # The stream moved; its companions did not yet: the client is sent with ASK.
            result = services.entry_retry(client=rc, stream=stream, group="g", entry_id=ids[0])
            assert result.consumer == "c"
            assert rc.xlen(stream) == 2
            assert rc.xlen(keys.dlq) == 0
        assert redis_cluster.port_for_slot(slot) == target


def _moved_count(cluster: LoopbackCluster, port: int) -> int:
    client = cluster.node(port).client()
    try:
        stats = client.info("errorstats")
    finally:
        client.close()
    return int(stats.get("errorstat_MOVED", {}).get("count", 0))


class ReadOnlyTests:
    """A node that answers READONLY for a slot the client maps to it (an old primary
    demoted while the client was not looking): stock redis-py raises it as an ordinary
    error; ``ClusterClient`` re-reads the topology and retries, commands and pipelines.

    The demoted node is a real read-only replica (a standalone pair, so that it answers
    READONLY rather than MOVED) placed into the client's slot map.
    """

    @pytest.fixture
    def pair(self) -> Iterator[tuple[redis.Redis, int]]:
        """(a client of the standalone primary, the port of its read-only replica)."""
        primary = redis_server.RedisServer(extra_args=("--repl-diskless-sync-delay", "0")).start()
        replica = redis_server.RedisServer(
            extra_args=("--replicaof", "127.0.0.1", str(primary.port))
        ).start()
        client = redis.Redis(port=primary.port)
        try:
            yield client, replica.port
        finally:
            client.close()
            replica.cleanup()
            primary.cleanup()

    @pytest.fixture
    def demoted(self, pair: tuple[redis.Redis, int]) -> int:
        return pair[1]

    @staticmethod
    def _mirror(rc: Client, primary: redis.Redis, stream: str) -> None:
        """Copy ``stream`` and its group "g" (all delivered to "c") to the standalone pair,
        so a script on the replica gets past its reads to its first write, as on a
        demoted primary that kept its data."""
        for entry_id, fields in rc.xrange(stream):
            primary.xadd(stream, fields, id=entry_id)
        primary.xgroup_create(stream, "g", id="0")
        primary.xreadgroup("g", "c", {stream: ">"})
        assert primary.wait(1, 10_000) == 1

    @staticmethod
    def _point_slot_at(client: RedisCluster, slot: int, port: int) -> None:
        manager = client.nodes_manager
        node = ClusterNode("127.0.0.1", port, server_type="primary")  # type: ignore[no-untyped-call]
        manager.nodes_cache[node.name] = node
        manager.create_redis_connections([node])  # type: ignore[no-untyped-call]
        manager.slots_cache[slot] = [node]

    def test_stock_redis_py_raises_readonly(
        self, cluster_url: str, cprefix: str, demoted: int
    ) -> None:
        stock = RedisCluster.from_url(cluster_url)
        try:
            key = cprefix + "k"
            self._point_slot_at(stock, key_slot(key.encode()), demoted)
            with pytest.raises(redis.ReadOnlyError):
                stock.set(key, "v")
        finally:
            stock.close()

    def test_command_refreshes_topology_and_retries(
        self, rc: Client, cprefix: str, pair: tuple[redis.Redis, int]
    ) -> None:
        assert isinstance(rc, RedisCluster)
        primary, demoted = pair
        stream = cprefix + "ro"
        ids = make_pending(rc, stream, "g", "c", 1)
        self._mirror(rc, primary, stream)
        slot = key_slot(stream.encode())
        self._point_slot_at(rc, slot, demoted)
        # A script (EVALSHA) and a plain write, each refused once, then retried.
        assert services.entry_acknowledge(
            client=rc, stream=stream, group="g", entry_id=ids[0], reason="r"
        ).was_pending
        self._point_slot_at(rc, slot, demoted)
        assert rc.xadd(stream, {"a": "b"})
        assert rc.nodes_manager.slots_cache[slot][0].port != demoted

    def test_pipeline_refreshes_topology_and_retries(
        self,
        rc: Client,
        cprefix: str,
        pair: tuple[redis.Redis, int],
        redis_cluster: LoopbackCluster,
    ) -> None:
        assert isinstance(rc, RedisCluster)
        primary, demoted = pair
        here, there = names_on_primaries(redis_cluster, cprefix, 2)
        ids = make_pending(rc, here, "g", "c", 2)
        self._mirror(rc, primary, here)
        add_entries(rc, there, 1)
        self._point_slot_at(rc, key_slot(here.encode()), demoted)
        replies = calls_pipelined(
            rc, [RETRY.call(stream=here, group="g", entry_id=i, idle_ms=1000) for i in ids]
        )
        assert [r.consumer for r in replies] == ["c", "c"]
        pipe = rc.pipeline(transaction=False)  # type: ignore[no-untyped-call]
        self._point_slot_at(rc, key_slot(here.encode()), demoted)
        pipe.xadd(here, {"x": "1"})
        pipe.xlen(there)
        added, length = pipe.execute()
        assert isinstance(added, bytes) and length == 1


class SelectorTests:
    def test_overview_lists_streams_from_every_primary(
        self, rc: Client, redis_cluster: LoopbackCluster, streams: list[str], cprefix: str
    ) -> None:
        for i, name in enumerate(streams):
            make_pending(rc, name, "g", "c", i + 1)
            services.entry_dead_letter(
                client=rc, stream=name, group="g",
                entry_id=rc.xrange(name)[0][0].decode(), reason="x",
            )  # fmt: skip
        assert len({primary_of(redis_cluster, s) for s in streams}) == 3
        overview = selectors.stream_overview(client=rc, patterns=[cprefix + "*"], cap=100)
        assert [s.name for s in overview.streams] == sorted(streams)
        assert [s.pending for s in overview.streams] == [
            i for _, i in sorted((n, i) for i, n in enumerate(streams))
        ]
        assert all(s.dlq_length == 1 for s in overview.streams)
        assert not overview.truncated

    def test_discovery_is_merged_deduplicated_and_capped(
        self, rc: Client, redis_cluster: LoopbackCluster, cprefix: str
    ) -> None:
        names = names_on_primaries(redis_cluster, cprefix, 3)
        for name in names:
            add_entries(rc, name, 1)
        found, truncated, _ = selectors.stream_discover(
            client=rc, patterns=[cprefix + "*", cprefix + "s*"], cap=100
        )
        assert found == tuple(sorted(names)) and not truncated
        found, truncated, _ = selectors.stream_discover(client=rc, patterns=[cprefix + "*"], cap=2)
        assert len(found) == 2 and truncated

    def test_every_selector_on_streams_of_different_primaries(
        self, rc: Client, streams: list[str]
    ) -> None:
        for name in streams:
            ids = make_pending(rc, name, "g", "c", 3)
            services.entry_dead_letter(client=rc, stream=name, group="g", entry_id=ids[0],
                                       reason="bad")  # fmt: skip
            failures_record(
                client=rc, stream=name,
                records=[FailureRecord(group="g", entry_id=ids[1], consumer="c", attempt=1,
                                       error_type="E", message="m")],
                publish=False,
            )  # fmt: skip
        summaries = selectors.stream_summaries(client=rc, streams=streams)
        assert [(s.pending, s.dlq_length, s.failures_length) for s in summaries] == [(2, 1, 1)] * 3
        stamps = selectors.stream_stamps(
            client=rc, streams=streams, groups=[(s, "g") for s in streams]
        )
        assert set(stamps.streams) == set(streams) and len(stamps.pending) == 3
        for name in streams:
            ids = [e[0].decode() for e in rc.xrange(name)]
            detail = selectors.stream_detail(client=rc, stream=name)
            assert detail is not None and len(detail.entries.entries) == 3
            group = selectors.group_detail(client=rc, stream=name, group="g")
            assert group is not None and group.pending == 2
            page = selectors.pending_page(client=rc, stream=name, group="g")
            assert [row.id for row in page.rows] == ids[1:]
            idle = selectors.pending_page(client=rc, stream=name, group="g", min_idle_ms=1)
            assert idle.scanned == 2
            entry = selectors.entry_detail(client=rc, stream=name, entry_id=ids[1])
            assert entry is not None and entry.groups[0].pending_row is not None
            assert set(selectors.entries_fetch(client=rc, stream=name, ids=ids)) == set(ids)
            fetched = selectors.pending_entry_fetch(
                client=rc, stream=name, group="g", entry_id=ids[2]
            )
            assert fetched is not None and fetched.row is not None and fetched.row.consumer == "c"
            summary = selectors.pending_summary(client=rc, stream=name, group="g")
            assert summary is not None and summary.pending == 2
            dlq = selectors.dead_letter_page(client=rc, stream=name)
            assert dlq is not None and dlq.length == 1
            row = selectors.dead_letter_fetch(client=rc, stream=name, dlq_id=dlq.rows[0].id)
            assert row is not None and row.origin_id == ids[0]


class ActionTests:
    def test_every_action_on_streams_of_different_primaries(
        self, rc: Client, streams: list[str]
    ) -> None:
        for name in streams:
            ids = make_pending(rc, name, "g", "c", 5)
            retried = services.entry_retry(client=rc, stream=name, group="g", entry_id=ids[0])
            assert retried.consumer == "c"
            claimed = services.entry_claim(
                client=rc, stream=name, group="g", entry_id=ids[1], consumer="op",
                seen_idle_ms=0,
            )  # fmt: skip
            assert claimed.consumer == "op"
            moved = services.entry_dead_letter(
                client=rc, stream=name, group="g", entry_id=ids[2], reason="bad"
            )
            assert moved is not None
            acked = services.entry_acknowledge(
                client=rc, stream=name, group="g", entry_id=ids[3], reason="done"
            )
            assert acked.was_pending
            replayed = services.dlq_replay(client=rc, stream=name, dlq_id=moved.dlq_id)
            assert rc.xlen(name) == 6 and replayed.new_id
            again = services.entry_dead_letter(
                client=rc, stream=name, group="g", entry_id=ids[4], reason="bad"
            )
            assert again is not None
            deleted = services.dlq_delete(client=rc, stream=name, dlq_id=again.dlq_id)
            assert deleted.deleted
            third = services.entry_dead_letter(
                client=rc, stream=name, group="g", entry_id=ids[0], reason="bad"
            )
            assert third is not None
            purged = services.dlq_purge(
                client=rc, stream=name, expected_length=1, newest_id=third.dlq_id
            )
            assert purged.deleted == 1
            assert rc.xlen(stream_keys(name).dlq) == 0
            assert rc.xpending(name, "g")["pending"] == 1  # ids[1], claimed by "op"

    def test_bulk_actions_on_streams_of_different_primaries(
        self, rc: Client, streams: list[str]
    ) -> None:
        for name in streams:
            ids = make_pending(rc, name, "g", "c", 9)
            snapshot = ids[-1]
            scope = bulk.bulk_scope(client=rc, stream=name, group="g", snapshot_id=snapshot)
            assert len(scope.ids) == 9
            checked = bulk.bulk_scope(
                client=rc, stream=name, group="g", snapshot_id=snapshot, ids=ids[:3]
            )
            assert len(checked.ids) == 3
            retried = bulk.bulk_retry(
                client=rc, stream=name, group="g", snapshot_id=snapshot, ids=ids[:3]
            )
            assert [i.outcome for i in retried.items] == [BulkOutcome.DONE] * 3
            dead = bulk.bulk_dead_letter(
                client=rc, stream=name, group="g", snapshot_id=snapshot, ids=ids[3:6],
                reason="bulk", operator="olga", chunk_size=2,
            )  # fmt: skip
            assert [i.outcome for i in dead.items] == [BulkOutcome.DONE] * 3
            acked = bulk.bulk_acknowledge(
                client=rc, stream=name, group="g", snapshot_id=snapshot, reason="bulk"
            )
            assert sum(i.outcome is BulkOutcome.DONE for i in acked.items) == 6
            assert rc.xpending(name, "g")["pending"] == 0
            assert rc.xlen(stream_keys(name).dlq) == 3

    def test_a_name_that_cannot_share_a_slot_is_refused_clearly(
        self, rc: Client, cprefix: str
    ) -> None:
        stream = cprefix + "a}b"
        [entry_id] = make_pending(rc, stream, "g", "c", 1)
        with pytest.raises(CrossSlotName, match="cannot share a cluster slot"):
            services.entry_dead_letter(
                client=rc, stream=stream, group="g", entry_id=entry_id, reason="x"
            )
        # Reads still work: the stream is listed, with no companions.
        summaries = selectors.stream_summaries(client=rc, streams=[stream])
        assert summaries[0].pending == 1 and summaries[0].dlq_length == 0
        with pytest.raises(ActionRefused):
            services.entry_claim(
                client=rc, stream=stream, group="nope", entry_id=entry_id, consumer="x",
                seen_idle_ms=0,
            )  # fmt: skip


class EventTests:
    """PUBLISH reaches a subscriber on any node: classic pub/sub is cluster-wide."""

    @pytest.fixture
    def subscribers(self, redis_cluster: LoopbackCluster) -> Iterator[list[Any]]:
        subs = []
        for port in redis_cluster.primary_ports():
            pubsub = (
                redis_cluster.node(port).client(timeout=5).pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            )
            pubsub.subscribe(EVENTS_CHANNEL)
            pubsub.get_message(timeout=1)
            subs.append(pubsub)
        try:
            yield subs
        finally:
            for pubsub in subs:
                pubsub.close()

    @staticmethod
    def _events(pubsub: Any, stream: str, n: int) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + 3
        while len(got) < n and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.2)
            if message and message["type"] == "message":
                event = json.loads(message["data"])
                if event["stream"] == stream:
                    got.append(event)
        return got

    def test_failures_and_actions_publish_to_every_node(
        self, rc: Client, streams: list[str], subscribers: list[Any]
    ) -> None:
        stream = streams[0]
        ids = make_pending(rc, stream, "g", "c", 2)
        records = [
            FailureRecord(group="g", entry_id=i, consumer="c", attempt=1, error_type="E",
                          message="m")
            for i in ids
        ]  # fmt: skip
        assert failures_record(client=rc, stream=stream, records=records) == 2
        services.entry_acknowledge(client=rc, stream=stream, group="g", entry_id=ids[0],
                                   reason="r")  # fmt: skip
        event_publish(client=rc, type="custom", stream=stream)
        for pubsub in subscribers:
            types = [e["type"] for e in self._events(pubsub, stream, 4)]
            assert types == ["failure", "failure", "action", "custom"]


class MigrateTests:
    def test_legacy_companions_are_found_on_every_primary(
        self, rc: Client, redis_cluster: LoopbackCluster, cprefix: str
    ) -> None:
        tagged = [f"{{{name}}}orders" for name in names_on_primaries(redis_cluster, cprefix)]
        for name in tagged:
            add_entries(rc, name, 1)
            add_entries(rc, name + ":dlq", 1)  # the old layout's companion
        moves = [m for m in legacy_companions_find(client=rc) if m.old.startswith("{" + cprefix)]
        assert sorted(m.old for m in moves) == sorted(n + ":dlq" for n in tagged)
