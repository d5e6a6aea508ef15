"""Start and stop a private Redis Cluster on loopback for tests and benchmarks.

Six ``redis-server --cluster-enabled yes`` processes (3 primaries, 3 replicas), each in
its own temp dir on a free port whose cluster bus port (port + 10000) is free too, joined
with ``redis-cli --cluster create … --cluster-replicas 1 --cluster-yes``. ``start()``
returns once every node reports ``cluster_state:ok`` and agrees on the slot map.

Fault tests use ``kill(port)`` (SIGKILL a node) and ``failover_takeover(port)`` (promote
a replica at once, with no agreement from the other primaries), then
``wait_until_ok()``. This module never touches a server it did not start, never flushes
anything, and never imports Django (beyond the shared port helper).

Cost: about 1-2 s to start on a 2-core machine; most of it is the cluster bus gossip
settling after ``--cluster create``.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from dashboard.management.devredis import system_redis_server
from tests.redis_server import HOW_TO_GET_ONE, RedisUnavailable

#: The cluster bus listens on the client port + this offset (fixed by Redis).
BUS_OFFSET = 10000


def _command(client: redis.Redis, *args: str | int) -> Any:
    """A raw command on one node (CLUSTER …, ROLE): redis-py's execute_command is untyped."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def cluster_ports(n: int, *, low: int = 20000, high: int = 65535) -> list[int]:
    """``n`` free ports whose bus port (+10000, below ``high``) is free too.

    Racy by nature, like ``free_port``: a clash shows up as a server that fails to start.
    """
    chosen: list[int] = []
    attempts = 0
    while len(chosen) < n:
        attempts += 1
        if attempts > 10_000:
            raise RedisUnavailable(f"no {n} free cluster ports (with bus ports) in [{low}, {high})")
        port = random.randrange(low, high - BUS_OFFSET)
        if port in chosen or port + BUS_OFFSET in chosen or port - BUS_OFFSET in chosen:
            continue
        if _port_free(port) and _port_free(port + BUS_OFFSET):
            chosen.append(port)
    return chosen


@dataclass
class ClusterNode:
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kwargs: float) -> redis.Redis:
        """A plain (non-cluster) client on this one node."""
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_connect_timeout=kwargs.get("timeout", 1.0),
            socket_timeout=kwargs.get("timeout", 1.0),
        )

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class RedisCluster:
    """A private loopback cluster: ``primaries`` primaries with ``replicas`` replicas each."""

    primaries: int = 3
    replicas: int = 1
    binary: str | None = None
    nodes: list[ClusterNode] = field(default_factory=list)
    root: Path | None = None
    #: How long a node may be silent before the others mark it failed. Short, so a
    #: killed primary is noticed quickly; TAKEOVER does not wait for it anyway.
    node_timeout_ms: int = 2000

    @property
    def url(self) -> str:
        """The URL of one node (the first primary at start): enough for a cluster client."""
        return self.nodes[0].url

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    # -- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> RedisCluster:
        binary = self.binary or system_redis_server() or shutil.which("redis-server")
        cli = shutil.which("redis-cli")
        if binary is None or cli is None:
            raise RedisUnavailable(HOW_TO_GET_ONE + " A cluster also needs redis-cli.")
        self.root = Path(tempfile.mkdtemp(prefix="ackboard-cluster-"))
        count = self.primaries * (1 + self.replicas)
        for port in cluster_ports(count):
            workdir = self.root / str(port)
            workdir.mkdir()
            node = ClusterNode(port=port, workdir=workdir)
            node.proc = self._spawn(binary, node)
            self.nodes.append(node)
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            self._wait_for_ping(node, deadline)
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        create = subprocess.run(
            [cli, "--cluster", "create", *addresses,
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True,
            timeout=max(1.0, deadline - time.monotonic()),
        )  # fmt: skip
        if create.returncode != 0:
            out = (create.stdout + create.stderr).decode(errors="replace")
            self.cleanup()
            raise RedisUnavailable(f"redis-cli --cluster create failed:\n{out}")
        try:
            self.wait_until_ok(
                timeout=max(1.0, deadline - time.monotonic()), replicas=self.replicas
            )
        except RedisUnavailable:
            self.cleanup()
            raise
        return self

    def _spawn(self, binary: str, node: ClusterNode) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                binary,
                "--port", str(node.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(node.workdir),
                "--protected-mode", "yes",
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                # A replica may be promoted however stale it is: the tests decide, not age.
                "--cluster-replica-validity-factor", "0",
                # Keep serving the slots that are still covered while one is down, so a
                # test can watch the rest of the cluster during a failover.
                "--cluster-require-full-coverage", "no",
                # Replicas sync at once (the default waits 5 s for more replicas to join).
                "--repl-diskless-sync-delay", "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    def _wait_for_ping(self, node: ClusterNode, deadline: float) -> None:
        client = node.client(timeout=0.2)
        try:
            while True:
                if node.proc is None or node.proc.poll() is not None:
                    self.cleanup()
                    raise RedisUnavailable(f"cluster node on port {node.port} exited at start")
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                    if client.ping():
                        return
                if time.monotonic() > deadline:
                    self.cleanup()
                    raise RedisUnavailable(f"cluster node on port {node.port} did not answer")
                time.sleep(0.02)  # poll: until it answers or the deadline above
        finally:
            client.close()

    def stop(self) -> None:
        for node in self.nodes:
            if node.alive:
                assert node.proc is not None
                node.proc.terminate()
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()
                node.proc = None

    def cleanup(self) -> None:
        self.stop()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    # -- faults ----------------------------------------------------------------------

    def node(self, port: int) -> ClusterNode:
        for node in self.nodes:
            if node.port == port:
                return node
        raise KeyError(port)

    def kill(self, port: int) -> None:
        """SIGKILL one node. Its data is gone (nothing is persisted)."""
        node = self.node(port)
        if node.proc is not None:
            node.proc.kill()
            node.proc.wait()
            node.proc = None

    def failover_takeover(self, replica_port: int) -> None:
        """Promote a replica now with ``CLUSTER FAILOVER TAKEOVER`` (no vote, no handshake
        with its primary, which may be dead), and wait until it reports itself a primary."""
        client = self.node(replica_port).client()
        try:
            _command(client, "CLUSTER", "FAILOVER", "TAKEOVER")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                role = _command(client, "ROLE")
                if role and role[0] in (b"master", "master"):
                    return
                time.sleep(0.02)  # poll: until it answers or the deadline above
            raise RuntimeError(f"node {replica_port} did not become a primary")
        finally:
            client.close()

    # -- slot migration (for MOVED and ASK) --------------------------------------------

    def _node_id(self, port: int) -> str:
        client = self.node(port).client()
        try:
            return str(_text(_command(client, "CLUSTER", "MYID")))
        finally:
            client.close()

    def _migrate_keys(self, source: int, target: int, keys: list[str]) -> None:
        if not keys:
            return
        client = self.node(source).client(timeout=10)
        try:
            _command(client, "MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
        finally:
            client.close()

    def _slot_keys(self, port: int, slot: int) -> list[str]:
        client = self.node(port).client()
        try:
            return [_text(k) for k in _command(client, "CLUSTER", "GETKEYSINSLOT", slot, 1000)]
        finally:
            client.close()

    @contextlib.contextmanager
    def slot_migrating(self, slot: int, target: int, *, keys: list[str]) -> Iterator[None]:
        """Start moving ``slot`` to the primary on ``target`` and move only ``keys``: inside
        the block, a command for a moved key is answered with ASK by the source. On exit
        the rest of the slot moves and every node is told its new owner."""
        source = self.port_for_slot(slot)
        source_id, target_id = self._node_id(source), self._node_id(target)
        self._setslot(target, slot, "IMPORTING", source_id)
        self._setslot(source, slot, "MIGRATING", target_id)
        self._migrate_keys(source, target, keys)
        try:
            yield
        finally:
            while rest := self._slot_keys(source, slot):
                self._migrate_keys(source, target, rest)
            for port in self.primary_ports():
                self._setslot(port, slot, "NODE", target_id)
            self.wait_until_ok()

    def migrate_slot(self, slot: int, target: int) -> None:
        """Move ``slot`` (and its keys) to the primary on ``target``; clients that cached
        the old owner get MOVED."""
        with self.slot_migrating(slot, target, keys=[]):
            pass

    def _setslot(self, port: int, slot: int, *args: str) -> None:
        client = self.node(port).client()
        try:
            _command(client, "CLUSTER", "SETSLOT", slot, *args)
        finally:
            client.close()

    # -- topology --------------------------------------------------------------------

    def _live_clients(self) -> list[tuple[ClusterNode, redis.Redis]]:
        return [(n, n.client()) for n in self.nodes if n.alive]

    def primary_ports(self) -> list[int]:
        """Ports of the live nodes that currently serve slots, as the first live node sees it."""
        return sorted({port for (_, _, port, _) in self.slot_ranges()})

    def replica_of(self, primary_port: int) -> int:
        """The port of a live replica of ``primary_port``."""
        for node in self.nodes:
            if not node.alive or node.port == primary_port:
                continue
            client = node.client()
            try:
                role = _command(client, "ROLE")
            finally:
                client.close()
            if role[0] in (b"slave", "slave") and int(role[2]) == primary_port:
                return node.port
        raise LookupError(f"no live replica of {primary_port}")

    def slot_ranges(self) -> list[tuple[int, int, int, list[int]]]:
        """``(first_slot, last_slot, primary_port, replica_ports)`` from ``CLUSTER SLOTS``."""
        for _node, client in self._live_clients():
            try:
                rows = _command(client, "CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            finally:
                client.close()
            return [
                (int(row[0]), int(row[1]), int(row[2][1]), [int(r[1]) for r in row[3:]])
                for row in rows
            ]
        raise RedisUnavailable("no cluster node answers CLUSTER SLOTS")

    def port_for_slot(self, slot: int) -> int:
        for first, last, port, _ in self.slot_ranges():
            if first <= slot <= last:
                return port
        raise LookupError(f"slot {slot} is not served")

    @staticmethod
    def _replication_up(client: redis.Redis, replicas: int) -> bool:
        # INFO, not CLUSTER SLOTS: Redis 7.0 lists a replica there only once gossip has
        # spread it (~8 s after create), while the replication link is up in ~10 ms.
        info = client.info("replication")
        if info.get("role") == "slave":
            return bool(info.get("master_link_status") == "up")
        return int(info.get("connected_slaves", 0)) >= replicas

    def wait_until_ok(self, timeout: float = 20.0, *, replicas: int = 0) -> None:
        """Until every live node says ``cluster_state:ok`` and all agree on who serves
        each slot (so a client's first CLUSTER SLOTS is the settled map); with
        ``replicas``, also until every primary has that many replicas in sync (a failover
        test needs them)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            maps: set[tuple[tuple[int, int, int], ...]] = set()
            ok = True
            for node, client in self._live_clients():
                try:
                    info = _command(client, "CLUSTER", "INFO")
                    text = info.decode() if isinstance(info, bytes) else str(info)
                    if "cluster_state:ok" not in text:
                        ok = False
                        last = f"{node.port}: {text.splitlines()[0]}"
                        continue
                    rows = _command(client, "CLUSTER", "SLOTS")
                    maps.add(tuple(sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in rows)))
                    if replicas and not self._replication_up(client, replicas):
                        ok = False
                        last = f"{node.port}: replication not up yet"
                except redis.RedisError as exc:
                    ok = False
                    last = f"{node.port}: {exc}"
                finally:
                    client.close()
            if ok and len(maps) == 1:
                (slots,) = maps
                if sum(last_ - first + 1 for first, last_, _ in slots) == 16384:
                    return
                last = "slots not fully covered"
            elif ok:
                last = f"nodes disagree on the slot map ({len(maps)} versions)"
            time.sleep(0.05)  # poll: until the cluster is ok or the deadline above
        raise RedisUnavailable(f"cluster did not reach cluster_state:ok: {last}")
