"""The Worker on a 3-primary Redis Cluster, and its hot path through a changing topology.

One session cluster (``redis_cluster``), the URL of one node (``cluster_url``), and
streams picked by slot so that most of them live on another primary than that node: the
hot path must go to the slot's owner. The slot-migration test moves one slot (its own
stream's) to another primary and back, so the session cluster ends as it began. READONLY
is produced by real replicas: a plain replica placed where the route expects the slot's
owner, and a single-node primary demoted with REPLICAOF under a running worker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from queue_core import Job
from queue_core.connection import Client
from queue_core.errors import error_code, redirect, topology_changed
from queue_core.keys import stream_keys
from queue_core.worker import wire
from tests.queue_core.worker.helpers import new_worker, running, wait_until
from tests.redis_cluster import RedisCluster
from tests.redis_server import RedisServer

#: A primary starts a replica's full sync at once (Redis 7 waits 5 s by default).
QUICK_SYNC = ("--repl-diskless-sync-delay", "0")


def owner(cluster: RedisCluster, name: str) -> int:
    return cluster.port_for_slot(key_slot(name.encode()))


def name_on(cluster: RedisCluster, prefix: str, port: int, *, other_than: int = -1) -> str:
    """A stream name under ``prefix`` served by primary ``port`` (or by any primary but
    ``other_than`` when ``port`` is -1)."""
    for i in range(100_000):
        name = f"{prefix}s{i}"
        at = owner(cluster, name)
        if at == port or (port == -1 and at != other_than):
            return name
    raise AssertionError(f"no name under {prefix!r} lands on {port}")


def seed_port(cluster_url: str) -> int:
    return int(cluster_url.rsplit(":", 1)[1].split("/")[0])


def add(client: Client, stream: str, n: int, start: int = 0) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for i in range(start, start + n):
        pipe.xadd(stream, {"n": str(i)})
    return [i.decode() for i in pipe.execute()]


def pending(client: Client, stream: str, group: str = "g") -> int:
    return int(client.xpending(stream, group)["pending"])


def _into(handled: list[str]) -> Any:
    return lambda job: handled.append(job.id)


def _drained(handled: list[str], worker: Any, n: int) -> Any:
    return lambda: len(handled) == n and worker.stats.acked == n


class ClusterWorkerTests:
    def test_drains_a_stream_on_every_primary_from_one_node_url(
        self, redis_cluster: RedisCluster, cluster_url: str, rc: Client, cprefix: str
    ) -> None:
        for port in redis_cluster.primary_ports():
            stream = name_on(redis_cluster, cprefix, port)
            ids = add(rc, stream, 300)
            handled: list[str] = []
            worker = new_worker(cluster_url, stream, _into(handled), batch=50)
            with running(worker):
                wait_until(_drained(handled, worker, 300), 10, "drain")
                assert worker._route is not None
                assert worker._route.address == ("127.0.0.1", port), "hot path on the slot owner"
            assert sorted(handled) == sorted(ids)
            assert pending(rc, stream) == 0

    def test_failures_and_dead_letters_stay_in_the_streams_slot(
        self, redis_cluster: RedisCluster, cluster_url: str, rc: Client, cprefix: str
    ) -> None:
        stream = name_on(redis_cluster, cprefix, -1, other_than=seed_port(cluster_url))
        ids = add(rc, stream, 5)

        def fail(job: Job) -> None:
            raise RuntimeError(f"boom {job.id}")

        worker = new_worker(
            cluster_url, stream, fail, max_deliveries=2, min_idle_ms=100, reclaim_interval_ms=50
        )
        with running(worker):
            wait_until(lambda: worker.stats.dead_lettered == 5, 10, "dead-letters")
        keys = stream_keys(stream)
        dead = [f[b"n"].decode() for _, f in rc.xrange(keys.dlq)]
        assert sorted(dead) == [str(i) for i in range(5)]
        records = rc.xrange(keys.failures)
        assert len(records) == 10, "one record per failed attempt, two attempts each"
        assert {f[b"entry_id"].decode() for _, f in records} == set(ids)
        assert pending(rc, stream) == 0
        assert owner(redis_cluster, keys.dlq) == owner(redis_cluster, stream)

    def test_worker_follows_a_slot_migration_through_ask_then_moved(
        self, redis_cluster: RedisCluster, cluster_url: str, rc: Client, cprefix: str
    ) -> None:
        stream = name_on(redis_cluster, cprefix, -1, other_than=seed_port(cluster_url))
        slot = key_slot(stream.encode())
        source = owner(redis_cluster, stream)
        target = next(p for p in redis_cluster.primary_ports() if p != source)
        handled: set[str] = set()
        worker = new_worker(
            cluster_url, stream, lambda job: handled.add(job.id), batch=20, block_ms=100
        )
        ids = add(rc, stream, 50)
        try:
            with running(worker):
                wait_until(lambda: len(handled) == 50, 10, "first entries")
                # Keys moved, slot not yet handed over: the old owner answers ASK.
                slot_migrate(redis_cluster, slot, source, target, finish=False)
                ids += add(rc, stream, 50, start=50)
                wait_until(lambda: len(handled) == 100, 10, "entries during the migration")
                # Slot handed over: the old owner answers MOVED.
                slot_finish(redis_cluster, slot, target)
                ids += add(rc, stream, 50, start=100)
                wait_until(lambda: len(handled) == 150, 10, "entries after the migration")
                assert worker._route is not None
                wait_until(lambda: worker._route.address == ("127.0.0.1", target), 5, "moved")
                wait_until(lambda: worker.stats.acked == 150, 5, "acks")
                followed = worker._route.followed
                assert followed["ASK"] >= 1 and followed["MOVED"] >= 1, followed
            assert handled == set(ids)
            assert pending(rc, stream) == 0
            assert worker.stats.ack_errors == 0
        finally:
            if owner(redis_cluster, stream) != source:
                slot_migrate(redis_cluster, slot, target, source, finish=True)


class LineTests:
    """The hot path's connection on its own: MOVED followed, READONLY refreshed."""

    def test_moved_is_followed_and_moves_the_route(
        self, redis_cluster: RedisCluster, rc: Client, cprefix: str
    ) -> None:
        stream = cprefix + "line"
        right = owner(redis_cluster, stream)
        wrong = next(p for p in redis_cluster.primary_ports() if p != right)
        rc.xgroup_create(stream, "g", id="0", mkstream=True)
        add(rc, stream, 3)
        asked: list[bool] = []

        def slot_owner(refresh: bool) -> tuple[str, int]:
            asked.append(refresh)
            return ("127.0.0.1", wrong)  # a stale slot map

        entries = asyncio.run(
            self._read(
                redis_cluster.url,
                stream,
                wire.Route(
                    redis_cluster.url,
                    consumer="c",
                    block_ms=50,
                    owner=slot_owner,
                ),
            )  # fmt: skip
        )
        assert len(entries) == 3
        assert asked == [False], "a MOVED needs no slot-map lookup: it names the owner"

    def test_readonly_refreshes_the_slot_map_and_reconnects(self, redis_url: str) -> None:
        primary = RedisServer().start()
        replica = RedisServer(extra_args=("--replicaof", "127.0.0.1", str(primary.port))).start()
        try:
            client = redis.Redis.from_url(primary.url)
            client.xgroup_create("s", "g", id="0", mkstream=True)
            client.xadd("s", {"n": "1"})
            asked: list[bool] = []

            def slot_owner(refresh: bool) -> tuple[str, int]:
                asked.append(refresh)
                # First the replica (the old primary, demoted), then the new owner.
                return ("127.0.0.1", primary.port if refresh else replica.port)

            route = wire.Route(primary.url, consumer="c", block_ms=50, owner=slot_owner)
            line = wire.Line(route)

            async def go() -> tuple[BaseException | None, list[list[Any]]]:
                try:
                    refused: BaseException | None = None
                    try:
                        await wire.new_entries_read(
                            line, stream="s", group="g", consumer="c", count=10, block_ms=50
                        )
                    except wire.TopologyChanged as exc:
                        refused = exc
                    again = await wire.new_entries_read(
                        line, stream="s", group="g", consumer="c", count=10, block_ms=50
                    )
                    return refused, again
                finally:
                    await line.close()
                    await route.aclose()

            refused, again = asyncio.run(go())
            assert isinstance(refused, redis.ConnectionError), "an outage: back off, reconnect"
            assert "READONLY" in str(refused)
            assert asked == [False, True], "the second connection asked a fresh slot map"
            assert len(again) == 1
            client.close()
        finally:
            replica.cleanup()
            primary.cleanup()

    @staticmethod
    async def _read(url: str, stream: str, route: wire.Route) -> list[list[Any]]:
        line = wire.Line(route)
        try:
            return await wire.new_entries_read(
                line, stream=stream, group="g", consumer="c", count=10, block_ms=50
            )
        finally:
            await line.close()
            await route.aclose()


class ReadOnlyWorkerTests:
    def test_a_demoted_primary_is_waited_out_and_nothing_is_lost(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A single-node URL whose server becomes a replica mid-run (a failover behind one
        address): READONLY and UNBLOCKED are topology changes, not errors; the worker backs
        off, keeps running, and drains everything once the server is a primary again."""
        caplog.set_level(logging.WARNING, logger="queue_core.worker")
        main = RedisServer(extra_args=QUICK_SYNC).start()
        other = RedisServer(extra_args=QUICK_SYNC).start()
        try:
            r = redis.Redis.from_url(main.url)
            o = redis.Redis.from_url(other.url)
            r.xgroup_create("s", "g", id="0", mkstream=True)
            handled: set[str] = set()
            worker = new_worker(
                main.url, "s", lambda job: handled.add(job.id), block_ms=200, backoff_cap_s=0.3
            )
            with running(worker):
                first = [r.xadd("s", {"n": str(i)}).decode() for i in range(20)]
                wait_until(lambda: len(handled) == 20 and pending(r, "s") == 0, 5, "first")
                # Demote: `other` takes over main's data, main follows it as a replica.
                o.replicaof("127.0.0.1", main.port)
                wait_until(lambda: o.info("replication")["master_link_status"] == "up", 10)
                o.replicaof("no", "one")
                r.replicaof("127.0.0.1", other.port)
                wait_until(lambda: r.info("replication")["master_link_status"] == "up", 10)
                later = [o.xadd("s", {"n": str(i)}).decode() for i in range(20, 40)]
                wait_until(lambda: worker.stats.outages >= 2, 10, "the worker noticing")
                assert worker.ready.is_set()
                # Promote main again (with other's data); the worker goes on where it was.
                r.replicaof("no", "one")
                wait_until(lambda: len(handled) == 40, 10, "entries added while demoted")
                wait_until(lambda: pending(r, "s") == 0, 5, "acks")
            assert handled == set(first + later)
            messages = " ".join(rec.getMessage() for rec in caplog.records)
            assert "READONLY" in messages or "UNBLOCKED" in messages
            assert "Traceback" not in caplog.text
            r.close()
            o.close()
        finally:
            other.cleanup()
            main.cleanup()


class TopologyErrorTests:
    """queue_core.errors reads real cluster replies."""

    def test_moved_from_a_node_that_does_not_serve_the_slot(
        self, redis_cluster: RedisCluster, cprefix: str
    ) -> None:
        stream = cprefix + "moved"
        right = owner(redis_cluster, stream)
        wrong = next(p for p in redis_cluster.primary_ports() if p != right)
        plain = redis_cluster.node(wrong).client()
        try:
            with pytest.raises(redis.ResponseError) as refused:
                plain.xlen(stream)
        finally:
            plain.close()
        exc = refused.value
        assert topology_changed(exc) and error_code(exc) == "MOVED"
        where = redirect(exc)
        assert where is not None and not where.ask
        assert (where.slot, where.port) == (key_slot(stream.encode()), right)

    def test_readonly_from_a_replica(self) -> None:
        primary = RedisServer().start()
        replica = RedisServer(extra_args=("--replicaof", "127.0.0.1", str(primary.port))).start()
        try:
            plain = redis.Redis.from_url(replica.url)
            with pytest.raises(redis.ResponseError) as refused:
                plain.xadd("s", {"a": "1"})
            plain.close()
        finally:
            replica.cleanup()
            primary.cleanup()
        assert topology_changed(refused.value) and error_code(refused.value) == "READONLY"
        assert redirect(refused.value) is None

    def test_raw_text_and_ordinary_errors(self) -> None:
        ask = redis.ResponseError("ASK 3999 127.0.0.1:6381")  # as a parser without codes has it
        where = redirect(ask)
        assert where is not None and where.ask and (where.host, where.port) == ("127.0.0.1", 6381)
        unblocked = redis.ResponseError(
            "UNBLOCKED force unblock from blocking operation, instance state changed"
        )
        assert topology_changed(unblocked) and redirect(unblocked) is None
        assert not topology_changed(redis.ResponseError("NOGROUP No such key 's'"))


# -- slot moves on the session cluster ----------------------------------------------------


def _raw(client: redis.Redis, *args: Any) -> Any:
    """A raw command on one node (CLUSTER …, MIGRATE): redis-py's execute_command is untyped."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _id(cluster: RedisCluster, port: int) -> str:
    client = cluster.node(port).client()
    try:
        raw = _raw(client, "CLUSTER", "MYID")
    finally:
        client.close()
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def slot_migrate(
    cluster: RedisCluster, slot: int, source: int, target: int, *, finish: bool
) -> None:
    """Move ``slot``'s keys from ``source`` to ``target`` (IMPORTING/MIGRATING + MIGRATE);
    with ``finish``, hand the slot over too (SETSLOT NODE everywhere)."""
    src, dst = cluster.node(source).client(timeout=5), cluster.node(target).client(timeout=5)
    try:
        _raw(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", _id(cluster, source))
        _raw(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", _id(cluster, target))
        while keys := _raw(src, "CLUSTER", "GETKEYSINSLOT", slot, 100):
            _raw(src, "MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
    finally:
        src.close()
        dst.close()
    if finish:
        slot_finish(cluster, slot, target)


def slot_finish(cluster: RedisCluster, slot: int, target: int) -> None:
    """SETSLOT ``slot`` NODE ``target`` on the target, then on every other primary."""
    target_id = _id(cluster, target)
    ports = [target] + [p for p in cluster.primary_ports() if p != target]
    for port in ports:
        client = cluster.node(port).client(timeout=5)
        try:
            _raw(client, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        finally:
            client.close()
    wait_until(lambda: cluster.port_for_slot(slot) == target, 10, f"slot {slot} on {target}")
