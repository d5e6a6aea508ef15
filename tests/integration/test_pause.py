"""Pause and resume with real ``manage.py queue_worker`` processes.

Three worker processes on one group: a paused group processes nothing while new entries
arrive, and their heartbeats show 3 of 3 confirmed within 2 s although each has a
blocking read of 10 s in flight; after resume everything drains. A worker (re)started
while paused starts paused; a pause with an auto-resume time resumes by itself; the
pause survives a Redis restart (a server of this module's own, with an append-only
file); reclaim sweeps do not run while paused. Handlers are tests/integration/handlers.py
(``quick`` logs "done <id> <delivery count>").

Waits poll with a timeout; the only fixed sleeps assert that nothing happened for
``QUIET_S``. One engine: these test the worker, not the server.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from queue_core.clock import now_ms
from queue_core.control import (
    Pause,
    fleet_state,
    heartbeats_read,
    pause_clear,
    pause_read,
    pause_set,
)
from queue_core.selectors import group_detail
from tests.factories import add_entries, make_group, make_pending
from tests.integration.test_worker_cli import worker_env
from tests.queue_core.worker.helpers import wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.one_engine

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "tests.integration.handlers:quick"
#: How long "nothing happened" is watched.
QUIET_S = 1.5


class Workers:
    """``queue_worker`` processes on group ``g`` of one stream, sharing one handler log."""

    def __init__(self, url: str, stream: str, tmp_path: Path) -> None:
        self.url, self.stream, self.tmp_path = url, stream, tmp_path
        self.handler_log = tmp_path / "handler.log"
        self.handler_log.touch()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stderr: dict[str, Path] = {}

    def start(self, consumer: str, *args: str) -> subprocess.Popen[bytes]:
        stderr = self.tmp_path / f"{consumer}-{len(self.stderr)}.err"
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "queue_worker", "--stream", self.stream,
             "--group", "g", "--handler", HANDLER, "--consumer", consumer,
             "--group-start", "0", *args],
            cwd=ROOT, env=worker_env(self.url, self.handler_log),
            stdout=subprocess.DEVNULL, stderr=stderr.open("wb"),
        )  # fmt: skip
        self.procs[consumer], self.stderr[consumer] = proc, stderr
        return proc

    def stop(self, consumer: str) -> None:
        proc = self.procs[consumer]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, self.err(consumer)
        assert "Traceback" not in self.err(consumer)

    def err(self, consumer: str) -> str:
        return self.stderr[consumer].read_text(errors="replace")

    def done(self) -> list[list[str]]:
        """Handler log lines: [id, delivery count]."""
        rows = [line.split() for line in self.handler_log.read_text().splitlines()]
        return [row[1:] for row in rows if row and row[0] == "done"]

    def done_ids(self) -> set[str]:
        return {row[0] for row in self.done()}

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def workers(redis_url: str, stream: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(redis_url, stream, tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def beats(r: redis.Redis, stream: str) -> dict[str, Any]:
    return {b.consumer: b for b in heartbeats_read(client=r, stream=stream, group="g")}


def live_workers(r: redis.Redis, stream: str, names: set[str]) -> Callable[[], bool]:
    """Every named worker has a heartbeat written since this was called (a worker writes
    its first one before its first read)."""
    since = now_ms()

    def check() -> bool:
        found = beats(r, stream)
        return all(name in found and found[name].seen_ms >= since for name in names)

    return check


def confirmed(r: redis.Redis, stream: str, pause: Pause, names: set[str]) -> Callable[[], bool]:
    def check() -> bool:
        found = beats(r, stream)
        return all(name in found and found[name].confirms(pause) for name in names)

    return check


def group_row(r: redis.Redis, stream: str) -> dict[str, Any]:
    [row] = [g for g in r.xinfo_groups(stream) if g["name"] == b"g"]
    return dict(row)


def pause(r: redis.Redis, stream: str, *, until_ms: int | None = None) -> Pause:
    return pause_set(client=r, stream=stream, group="g", by="ops-oncall", reason="deploy",
                     until_ms=until_ms, now_ms=now_ms())  # fmt: skip


def quiet(r: redis.Redis, stream: str, workers: Workers, seconds: float = QUIET_S) -> None:
    """Nothing is delivered or handled for ``seconds``, while entries are waiting."""
    before, done_before = group_row(r, stream), len(workers.done())
    time.sleep(seconds)  # the window in which nothing may happen
    after = group_row(r, stream)
    assert after["last-delivered-id"] == before["last-delivered-id"]
    assert after["pending"] == before["pending"]
    assert len(workers.done()) == done_before


def drained(r: redis.Redis, stream: str, workers: Workers, ids: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        row = group_row(r, stream)
        return workers.done_ids() >= set(ids) and row["pending"] == 0 and row["lag"] == 0

    return check


class PauseTests:
    def test_a_paused_fleet_reads_nothing_confirms_within_2s_and_drains_on_resume(
        self, r: redis.Redis, stream: str, workers: Workers
    ) -> None:
        make_group(r, stream, "g")
        names = {"w1", "w2", "w3"}
        for name in sorted(names):
            # A 10 s blocking read: the pause must cut it short, not wait for it.
            workers.start(name, "--block-ms", "10000")
        wait_until(live_workers(r, stream, names), timeout=60, what="3 workers' heartbeats")
        first = add_entries(r, stream, 30)
        wait_until(drained(r, stream, workers, first), timeout=20, what="the first 30 handled")

        paused_at = time.monotonic()
        paused = pause(r, stream)
        wait_until(confirmed(r, stream, paused, names), timeout=5, what="3 of 3 confirmed")
        assert time.monotonic() - paused_at < 2.0
        consumers = group_detail(client=r, stream=stream, group="g")
        assert consumers is not None
        fleet = fleet_state(pause=pause_read(client=r, stream=stream, group="g"),
                            heartbeats=list(beats(r, stream).values()),
                            consumers=consumers.consumers, now_ms=now_ms(),
                            seen_within_ms=60_000)  # fmt: skip
        assert (fleet.confirmed, len(fleet.live), fleet.finishing) == (3, 3, 0)
        assert fleet.not_pausable == ()

        # New entries arrive while paused: none is delivered, none is handled.
        waiting = []
        for _ in range(3):
            waiting += add_entries(r, stream, 10)
            time.sleep(0.2)  # arrivals spread over time, as traffic comes
        quiet(r, stream, workers)
        assert group_row(r, stream)["lag"] == 30
        assert all(b.paused for b in beats(r, stream).values())

        resumed_at = time.monotonic()
        assert pause_clear(client=r, stream=stream, group="g") == paused
        wait_until(drained(r, stream, workers, waiting), timeout=10, what="a drain after resume")
        assert time.monotonic() - resumed_at < 3.0
        wait_until(lambda: not any(b.paused for b in beats(r, stream).values()), timeout=5,
                   what="heartbeats to show the resume")  # fmt: skip
        assert sorted(row[0] for row in workers.done()) == sorted(first + waiting)  # once each
        for name in sorted(names):
            workers.stop(name)

    def test_a_worker_restarted_while_paused_starts_paused(
        self, r: redis.Redis, stream: str, workers: Workers
    ) -> None:
        make_group(r, stream, "g")
        workers.start("w1", "--block-ms", "200")
        wait_until(live_workers(r, stream, {"w1"}), timeout=60, what="w1's heartbeat")
        paused = pause(r, stream)
        wait_until(confirmed(r, stream, paused, {"w1"}), timeout=5, what="w1 confirmed")
        workers.stop("w1")
        ids = add_entries(r, stream, 5)

        # The same worker again, and one that never ran: both start paused.
        workers.start("w1", "--block-ms", "200")
        workers.start("w2", "--block-ms", "200")
        wait_until(live_workers(r, stream, {"w1", "w2"}), timeout=60, what="heartbeats")
        wait_until(confirmed(r, stream, paused, {"w1", "w2"}), timeout=5, what="2 confirmed")
        quiet(r, stream, workers)
        assert workers.done() == []
        assert "paused by ops-oncall (deploy)" in workers.err("w2")

        pause_clear(client=r, stream=stream, group="g")
        wait_until(drained(r, stream, workers, ids), timeout=10, what="a drain after resume")
        workers.stop("w1")
        workers.stop("w2")

    def test_an_auto_resume_time_resumes_by_itself(
        self, r: redis.Redis, stream: str, workers: Workers
    ) -> None:
        make_group(r, stream, "g")
        workers.start("w1", "--block-ms", "5000")
        wait_until(live_workers(r, stream, {"w1"}), timeout=60, what="w1's heartbeat")
        until_ms = now_ms() + 2_500
        paused = pause(r, stream, until_ms=until_ms)
        wait_until(confirmed(r, stream, paused, {"w1"}), timeout=5, what="w1 confirmed")
        ids = add_entries(r, stream, 5)
        quiet(r, stream, workers, seconds=max(0.0, (until_ms - now_ms()) / 1000 - 0.3))
        wait_until(drained(r, stream, workers, ids), timeout=5, what="a drain after auto-resume")
        assert now_ms() - until_ms < 1_500  # resumed within a second or so of until_ms
        assert pause_read(client=r, stream=stream, group="g") is None  # PXAT dropped the key
        workers.stop("w1")

    def test_reclaim_sweeps_wait_for_the_resume(
        self, r: redis.Redis, stream: str, workers: Workers
    ) -> None:
        [stale] = make_pending(r, stream, "g", "dead-worker", 1)
        paused = pause(r, stream)
        workers.start("w1", "--block-ms", "200", "--min-idle-ms", "200",
                      "--reclaim-interval-ms", "100")  # fmt: skip
        wait_until(confirmed(r, stream, paused, {"w1"}), timeout=60, what="w1 confirmed")
        time.sleep(QUIET_S)  # many sweep intervals; the entry is long past min-idle
        [row] = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert (row["consumer"], row["times_delivered"]) == (b"dead-worker", 1)
        assert workers.done() == []

        pause_clear(client=r, stream=stream, group="g")
        wait_until(lambda: workers.done() == [[stale, "2"]], timeout=10, what="the reclaim")
        wait_until(lambda: r.xpending(stream, "g")["pending"] == 0, timeout=5, what="its ack")
        workers.stop("w1")


class PauseAcrossRedisRestartTests:
    def test_the_pause_survives_a_redis_restart_and_the_worker_stays_paused(
        self, aof_server: RedisServer, tmp_path: Path
    ) -> None:
        stream = "orders"
        r = redis.Redis.from_url(aof_server.url, socket_timeout=10)
        workers = Workers(aof_server.url, stream, tmp_path)
        try:
            make_group(r, stream, "g")
            workers.start("w1", "--block-ms", "500", "--heartbeat-ms", "200")
            wait_until(live_workers(r, stream, {"w1"}), timeout=60, what="w1's heartbeat")
            paused = pause(r, stream)
            wait_until(confirmed(r, stream, paused, {"w1"}), timeout=5, what="w1 confirmed")

            r.close()
            aof_server.kill()  # SIGKILL: only what the append-only file holds comes back
            time.sleep(0.5)  # the worker's heartbeats fail meanwhile; it must not crash
            aof_server.start()
            assert workers.procs["w1"].poll() is None, workers.err("w1")
            assert pause_read(client=r, stream=stream, group="g") == paused

            ids = add_entries(r, stream, 5)
            wait_until(live_workers(r, stream, {"w1"}), timeout=15, what="heartbeats again")
            assert beats(r, stream)["w1"].confirms(paused)
            quiet(r, stream, workers)

            pause_clear(client=r, stream=stream, group="g")
            wait_until(drained(r, stream, workers, ids), timeout=15, what="a drain")
            workers.stop("w1")
            assert "Traceback" not in workers.err("w1")
        finally:
            workers.kill_all()
            with contextlib.suppress(redis.RedisError):
                r.close()
