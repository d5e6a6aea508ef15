"""A primary of a Redis Cluster dies under two running ``manage.py queue_worker`` processes.

The test starts its own 3-primary, 3-replica cluster on loopback (it kills a node, so
never the session one), fills a stream that lives on a primary other than the node the
workers are pointed at, and kills that primary once a quarter of the jobs are done. Its
replica is promoted with ``CLUSTER FAILOVER TAKEOVER``. The workers must follow the slot
to the new primary by themselves and finish: every job handled or dead-lettered, nothing
pending, nothing lost, and both exit 0 on SIGTERM.

Redis replicates asynchronously, so what the killed primary acknowledged but had not yet
sent to its replica is gone. The producer therefore waits (``WAIT 1``) until the replica
holds every job before the workers start: without it a job could be lost by Redis, not by
the worker. The workers' own writes are not waited for: an ack or a delivery the replica
never saw makes the entry pending (or new) again on the promoted replica, and it is
handled a second time. That is at-least-once, and the test counts those repeats rather
than forbidding them. A dead-letter is one script, replicated whole, so each failing job
is in the DLQ exactly once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from queue_core.connection import Client, connect
from queue_core.keys import stream_keys
from tests.queue_core.worker.helpers import wait_until
from tests.redis_cluster import RedisCluster
from tests.redis_server import RedisUnavailable
from tests.servers import started

ROOT = Path(__file__).resolve().parents[2]
#: Jobs; every FAIL_EVERY-th always fails, so it is dead-lettered (after 2 deliveries).
N = 1200
FAIL_EVERY = 40
WORKERS = 2


@pytest.fixture
def cluster() -> Iterator[RedisCluster]:
    with started(RedisCluster(), RedisUnavailable) as instance:
        yield instance


def _stream_on(cluster: RedisCluster, port: int) -> str:
    for i in range(100_000):
        name = f"failover:jobs{i}"
        if cluster.port_for_slot(key_slot(name.encode())) == port:
            return name
    raise AssertionError(f"no stream name lands on {port}")


def _start_worker(url: str, stream: str, log: Path, stderr: Path, name: str) -> Any:
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.update(
        VALKEY_URL=url,
        DJANGO_SECRET_KEY="test-only",
        DJANGO_DEBUG="0",
        DATABASE_URL="sqlite:////nonexistent-dir/ackboard-no-db.sqlite3",
        ACKBOARD_TEST_HANDLER_LOG=str(log),
        ACKBOARD_TEST_SLEEP_S="0.004",
    )
    return subprocess.Popen(
        [
            sys.executable, str(ROOT / "manage.py"), "queue_worker",
            "--stream", stream, "--group", "g", "--consumer", name,
            "--handler", "tests.integration.cluster_handlers:job",
            "--batch", "20", "--block-ms", "200", "--max-deliveries", "2",
            "--min-idle-ms", "1000", "--reclaim-interval-ms", "200", "--grace-seconds", "10",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("w"),
        text=True,
    )  # fmt: skip


def _handled(log: Path) -> list[tuple[int, str, int, int]]:
    """(pid, entry id, n, delivery count) per handler call."""
    rows = []
    for line in log.read_text().splitlines():
        pid, entry_id, n, count = line.split()
        rows.append((int(pid), entry_id, int(n), int(count)))
    return rows


class ClusterFailoverTests:
    def test_primary_killed_mid_run_replica_takes_over_and_nothing_is_lost(
        self, cluster: RedisCluster, tmp_path: Path
    ) -> None:
        primaries = cluster.primary_ports()
        seed = primaries[0]
        victim = primaries[1]
        replica = cluster.replica_of(victim)
        stream = _stream_on(cluster, victim)
        url = cluster.node(seed).url
        client: Client = connect(url, socket_timeout=10)
        client.xgroup_create(stream, "g", id="0", mkstream=True)
        failing = {n for n in range(N) if n % FAIL_EVERY == FAIL_EVERY - 1}
        pipe = client.pipeline(transaction=False)
        for n in range(N):
            pipe.xadd(stream, {"n": str(n), "fail": "1" if n in failing else "0"})
        pipe.execute()
        on_victim = cluster.node(victim).client(timeout=10)
        synced = on_victim.execute_command("WAIT", 1, 5000)  # type: ignore[no-untyped-call]
        on_victim.close()
        assert synced >= 1, "the replica holds every job before the primary is killed"

        log = tmp_path / "handled.log"
        log.touch()
        workers = [
            _start_worker(url, stream, log, tmp_path / f"w{i}.stderr", f"w{i}")
            for i in range(WORKERS)
        ]
        try:
            wait_until(lambda: len(_handled(log)) >= N // 4, 60, "a quarter of the jobs")
            killed_at = len(_handled(log))
            cluster.kill(victim)
            cluster.failover_takeover(replica)
            cluster.wait_until_ok(timeout=30)
            assert cluster.port_for_slot(key_slot(stream.encode())) == replica

            client.close()
            client = connect(url, socket_timeout=10)
            keys = stream_keys(stream)

            def done() -> bool:
                dead = {int(f[b"n"]) for _, f in client.xrange(keys.dlq)}
                handled_ok = {n for _, _, n, _ in _handled(log) if n not in failing}
                pending = int(client.xpending(stream, "g")["pending"])
                return dead == failing and handled_ok == set(range(N)) - failing and not pending

            wait_until(done, 60, "every job handled or dead-lettered, none pending")
        finally:
            for proc in workers:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            codes = []
            for proc in workers:
                try:
                    codes.append(proc.wait(30))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    codes.append(proc.wait())

        stderr = "\n".join((tmp_path / f"w{i}.stderr").read_text() for i in range(WORKERS))
        assert codes == [0] * WORKERS, stderr
        assert "Traceback" not in stderr
        rows = _handled(log)
        assert len(rows) > killed_at, "the workers went on after the failover"
        assert "retrying in" in stderr, "the primary's death was an outage, backed off"
        # Nothing lost: the stream is whole on the new primary, nothing pending, each
        # failing job dead-lettered exactly once, each other job handled at least once.
        assert client.xlen(stream) == N
        assert int(client.xpending(stream, "g")["pending"]) == 0
        dead = [int(f[b"n"]) for _, f in client.xrange(stream_keys(stream).dlq)]
        assert sorted(dead) == sorted(failing)
        repeats = len([r for r in rows if r[2] not in failing]) - (N - len(failing))
        print(f"failover: {N} jobs, killed after {killed_at} handler calls, {repeats} repeats")
        assert repeats >= 0
        client.close()
