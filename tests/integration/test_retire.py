"""Retiring a dead consumer that holds entries, with real worker processes.

A worker (``manage.py queue_worker``) takes a batch and is SIGKILLed while its first
handler runs, so the batch stays pending on its consumer. ``admin.consumer_retire`` then
either makes the entries due (a live worker's reclaim sweep takes them) or hands them to
the live worker's consumer. Either way every entry is handled exactly once by the
handler's record (tests/integration/fleet_handlers.py: ``done <id> <deliveries>
<consumer> <pid>``) and the dead consumer is gone. Right after the kill its heartbeat is
still live, so the retire is refused until the heartbeat goes stale (10 s).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from queue_core.admin import PARKING_CONSUMER, Retired, consumer_retire
from queue_core.clock import now_ms
from queue_core.control import HEARTBEAT_STALE_MS
from queue_core.keys import stream_keys
from tests.factories import add_entries, make_group
from tests.integration.test_worker_cli import worker_env
from tests.queue_core.worker.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "tests.integration.fleet_handlers:record"

pytestmark = pytest.mark.one_engine


class Workers:
    """Worker processes sharing one handler log."""

    def __init__(self, redis_url: str, stream: str, tmp_path: Path) -> None:
        self.redis_url, self.stream, self.tmp_path = redis_url, stream, tmp_path
        self.log = tmp_path / "handler.log"
        self.log.touch()
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, consumer: str, *args: str) -> subprocess.Popen[bytes]:
        stderr = (self.tmp_path / f"{consumer}.err").open("wb")
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "queue_worker", "--stream", self.stream,
             "--group", "g", "--handler", HANDLER, "--consumer", consumer, "--block-ms", "100",
             *args],
            cwd=ROOT, env=worker_env(self.redis_url, self.log),
            stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def lines(self, event: str) -> list[list[str]]:
        """Handler log lines of ``event``: [id, delivery count, consumer, pid]."""
        rows = [line.split() for line in self.log.read_text().splitlines()]
        return [row[1:] for row in rows if row[0] == event]

    def stderr(self, consumer: str) -> str:
        return (self.tmp_path / f"{consumer}.err").read_text(errors="replace")


@pytest.fixture
def workers(redis_url: str, stream: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(redis_url, stream, tmp_path)
    yield started
    for proc in started.procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


def consumers(r: redis.Redis, stream: str) -> dict[str, int]:
    return {c["name"].decode(): int(c["pending"]) for c in r.xinfo_consumers(stream, "g")}


def kill_mid_batch(r: redis.Redis, stream: str, workers: Workers) -> tuple[list[str], list[str]]:
    """8 entries; the victim takes the first 5 (60 s handlers, 5 at once) and is SIGKILLed
    while they run. Returns (all ids, the ids pending on the victim)."""
    make_group(r, stream, "g")
    ids = add_entries(r, stream, 5, fields={"sleep": "60"}) + add_entries(r, stream, 3)
    victim = workers.start("victim", "--batch", "5", "--concurrency", "5",
                           "--min-idle-ms", "600000")  # fmt: skip
    wait_until(lambda: len(workers.lines("start")) == 5, timeout=60, what="5 handlers running")
    rows = r.xpending_range(stream, "g", min="-", max="+", count=100, consumername="victim")
    held = [row["message_id"].decode() for row in rows]
    assert set(ids[:5]) <= set(held)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert consumers(r, stream)["victim"] == len(held)
    assert workers.lines("done") == []
    # Just killed, its last heartbeat is still live (if the worker wrote one): refused,
    # and nothing moved.
    early = consumer_retire(client=r, stream=stream, group="g", consumer="victim",
                            to_consumer=None, now_ms=now_ms())  # fmt: skip
    if r.hexists(stream_keys(stream).workers("g"), "victim"):
        assert (early.refused, early.moved, early.deleted) == ("live heartbeat", 0, False)
        assert consumers(r, stream)["victim"] == len(held)
    return ids, held


def retire_as_stale(r: redis.Redis, stream: str, to_consumer: str | None) -> Retired:
    """Retire the killed victim on a clock one heartbeat-staleness ahead, so its last
    heartbeat is judged stale without the test waiting for it (the retire's clock is
    injected: ``now_ms``)."""
    later = now_ms() + HEARTBEAT_STALE_MS + 1
    return consumer_retire(client=r, stream=stream, group="g", consumer="victim",
                           to_consumer=to_consumer, now_ms=later)  # fmt: skip


def all_done_once(
    workers: Workers, r: redis.Redis, stream: str, ids: list[str]
) -> Callable[[], bool]:
    return lambda: (
        sorted(row[0] for row in workers.lines("done")) == sorted(ids)
        and r.xpending(stream, "g")["pending"] == 0
    )


class RetireWithWorkersTests:
    def test_made_due_a_live_workers_reclaim_handles_every_entry_once(
        self, r: redis.Redis, stream: str, workers: Workers
    ) -> None:
        ids, held = kill_mid_batch(r, stream, workers)
        # The live worker reclaims only entries idle 10 minutes: only the retire makes the
        # dead consumer's entries due within the test.
        live = workers.start("survivor", "--min-idle-ms", "600000", "--reclaim-interval-ms", "200")

        result = retire_as_stale(r, stream, to_consumer=None)

        assert (result.refused, result.moved, result.deleted) == (None, len(held), True)
        assert "victim" not in consumers(r, stream)
        wait_until(all_done_once(workers, r, stream, ids), timeout=60, what="every entry handled")
        done = {row[0]: row for row in workers.lines("done")}
        assert len(workers.lines("done")) == len(ids)  # exactly once each
        for entry_id in held:
            assert done[entry_id][1:3] == ["2", "survivor"]  # delivered again, by the sweep
        assert set(consumers(r, stream)) <= {"survivor", PARKING_CONSUMER}
        assert consumers(r, stream).get(PARKING_CONSUMER, 0) == 0
        live.send_signal(signal.SIGTERM)
        assert live.wait(30) == 0, workers.stderr("survivor")
        assert "Traceback" not in workers.stderr("survivor")

    def test_handed_to_a_live_consumer_they_keep_their_due_time_and_are_handled_once(
        self, r: redis.Redis, stream: str, workers: Workers
    ) -> None:
        ids, held = kill_mid_batch(r, stream, workers)
        running_at = time.monotonic()
        # Reclaims what is idle 12 s: well after the hand-over below, which follows the
        # victim's read by the survivor's start-up, a few seconds.
        live = workers.start("survivor", "--min-idle-ms", "12000", "--reclaim-interval-ms", "200")
        wait_until(lambda: "survivor" in consumers(r, stream), timeout=30,
                   what="the survivor to read the undelivered entries")  # fmt: skip
        wait_until(lambda: time.monotonic() - running_at > 1, timeout=5, interval=0.05,
                   what="a second of idle time to keep")  # fmt: skip

        result = retire_as_stale(r, stream, to_consumer="survivor")
        held_for_ms = (time.monotonic() - running_at) * 1000

        assert (result.refused, result.moved, result.to, result.deleted) == (
            None, len(held), "survivor", True,
        )  # fmt: skip
        # The handed-over entries keep the idle time since the victim read them (before
        # ``running_at``): a reset would show them idle a few milliseconds.
        rows = r.xpending_range(stream, "g", min="-", max="+", count=100, consumername="survivor")
        idle = {row["message_id"].decode(): row["time_since_delivered"] for row in rows}
        assert all(idle[entry_id] >= held_for_ms - 100 for entry_id in held), (idle, held_for_ms)
        assert "victim" not in consumers(r, stream)
        wait_until(all_done_once(workers, r, stream, ids), timeout=60, what="every entry handled")
        assert len(workers.lines("done")) == len(ids)
        done = {row[0]: row for row in workers.lines("done")}
        for entry_id in held:
            assert done[entry_id][1:3] == ["2", "survivor"]
        live.send_signal(signal.SIGTERM)
        assert live.wait(30) == 0, workers.stderr("survivor")
