"""A worker's last heartbeat with real ``manage.py queue_worker`` processes.

Right after a clean SIGTERM exit (code 0) the worker's heartbeat says it stopped: it is not
live although it is younger than ``HEARTBEAT_STALE_MS``, and Delete group (the service,
``admin.group_delete``) is no longer refused for running workers: no 10 s wait. A
SIGKILLed worker writes nothing more: its last heartbeat stays live until it is
``HEARTBEAT_STALE_MS`` old (judged at that time by passing ``now_ms``, not by sleeping).
With its Redis gone at shutdown the last write fails: a warning, no traceback, exit 0.

Each worker runs in a session of its own (stopped with SIGTERM; killed with ``os.killpg``
if a test fails). Handler: tests/integration/handlers.py ``quick``. One engine: these
test the worker, not the server.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from queue_core.admin import Refused, group_delete
from queue_core.clock import now_ms
from queue_core.control import HEARTBEAT_STALE_MS, Heartbeat, fleet_state, heartbeats_read
from tests.factories import add_entries, make_group
from tests.integration.worker_process import WorkerProcess
from tests.queue_core.worker.helpers import wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.one_engine

HANDLER = "tests.integration.handlers:quick"


@pytest.fixture
def worker(redis_url: str, stream: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    started = WorkerProcess(redis_url, stream, tmp_path, handler=HANDLER)
    try:
        yield started
    finally:
        started.kill()


def w1(r: redis.Redis, stream: str) -> Heartbeat:
    [beat] = heartbeats_read(client=r, stream=stream, group="g")
    assert beat.consumer == "w1"
    return beat


def beating_since(r: redis.Redis, stream: str) -> Callable[[], bool]:
    """w1 has a heartbeat written since this was called."""
    since = now_ms()

    def check() -> bool:
        beats = heartbeats_read(client=r, stream=stream, group="g")
        return any(b.consumer == "w1" and b.seen_ms >= since for b in beats)

    return check


def live_names(r: redis.Redis, stream: str, at_ms: int) -> list[str]:
    """The live workers as fleet_state counts them at ``at_ms`` (what the banner shows)."""
    beats = heartbeats_read(client=r, stream=stream, group="g")
    state = fleet_state(pause=None, heartbeats=beats, consumers=[], now_ms=at_ms,
                        seen_within_ms=60_000)  # fmt: skip
    return [b.consumer for b in state.live]


def delete(r: redis.Redis, stream: str, at_ms: int) -> Any:
    return group_delete(client=r, stream=stream, group="g", expected_pending=0,
                        acknowledge=False, now_ms=at_ms)  # fmt: skip


def started(r: redis.Redis, stream: str, worker: WorkerProcess) -> None:
    """w1 runs, has handled 3 entries, and beats."""
    make_group(r, stream, "g")
    add_entries(r, stream, 3)
    worker.start()
    wait_until(lambda: len(worker.done()) == 3, timeout=60, what="the 3 entries handled")
    wait_until(beating_since(r, stream), timeout=10, what="w1's heartbeat")
    assert live_names(r, stream, now_ms()) == ["w1"]
    with pytest.raises(Refused, match=r"'g' has running workers \(w1\)"):
        delete(r, stream, now_ms())


class CleanStopTests:
    def test_right_after_a_sigterm_exit_the_worker_is_not_live_and_delete_goes_ahead(
        self, r: redis.Redis, stream: str, worker: WorkerProcess
    ) -> None:
        started(r, stream, worker)

        assert worker.terminate() == 0, worker.err()
        assert "Traceback" not in worker.err()
        now = now_ms()
        last = w1(r, stream)
        # Written moments ago (the old rule would count it live for 10 s more) and says
        # the worker stopped, after handling and acking everything.
        assert now - last.seen_ms < HEARTBEAT_STALE_MS
        assert last.stopped_ms == last.seen_ms
        assert (last.processed, last.running, last.buffered) == (3, 0, 0)
        assert live_names(r, stream, now) == []
        assert r.xpending(stream, "g")["pending"] == 0

        assert delete(r, stream, now).pending_dropped == 0
        assert r.xinfo_groups(stream) == []


class KilledWorkerTests:
    def test_a_sigkilled_worker_stays_live_until_its_heartbeat_ages_out(
        self, r: redis.Redis, stream: str, worker: WorkerProcess
    ) -> None:
        started(r, stream, worker)

        worker.kill()
        assert worker.proc is not None and worker.proc.returncode == -signal.SIGKILL
        now = now_ms()
        last = w1(r, stream)
        assert last.stopped_ms is None  # it could write nothing more
        assert live_names(r, stream, now) == ["w1"]
        with pytest.raises(Refused, match=r"'g' has running workers \(w1\)"):
            delete(r, stream, now)
        # Live up to HEARTBEAT_STALE_MS after its last heartbeat, not a millisecond more.
        edge = last.seen_ms + HEARTBEAT_STALE_MS
        assert live_names(r, stream, edge) == ["w1"]
        assert live_names(r, stream, edge + 1) == []
        with pytest.raises(Refused, match=r"'g' has running workers \(w1\)"):
            delete(r, stream, edge)
        assert delete(r, stream, edge + 1).pending_dropped == 0
        assert r.xinfo_groups(stream) == []


class RedisGoneAtShutdownTests:
    def test_the_last_heartbeat_fails_with_a_warning_and_the_exit_is_still_clean(
        self, own_redis: RedisServer, tmp_path: Path
    ) -> None:
        stream = "orders"
        r = redis.Redis.from_url(own_redis.url, socket_timeout=10)
        worker = WorkerProcess(own_redis.url, stream, tmp_path, handler=HANDLER)
        try:
            started(r, stream, worker)
            r.close()
            own_redis.kill()

            assert worker.terminate() == 0, worker.err()
        finally:
            worker.kill()
        err = worker.err()
        assert "Traceback" not in err
        [warning] = [line for line in err.splitlines() if "last heartbeat of w1" in line]
        assert " WARNING " in warning and "could not be written" in warning
