"""Rates with real workers: ``manage.py queue_worker --processes 2`` consume while the test
produces at a known rate and the real sampler ticks every half second.

Phase 1 (workers keep up, 40 entries/s for 8 s): the stored produce and consume rates
are within 15% of 40/s and the drain estimate is "drains". Phase 2 (the workers are
stopped with SIGTERM; production goes on for 6 s): the estimate is "growing" by 40/s
(within 15%), and the sampled lag in time is the age of the first entry the test produced
that no worker received, from the test's own clock at XADD (within 0.3 s).

The sampler runs in the test process (``Sampler.tick`` every ``INTERVAL`` seconds) so the
rows land in the test's database; the workers and the producer are what it measures.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from dashboard.insight.rates.models import RateSample
from dashboard.insight.rates.sampler import Sampler
from dashboard.insight.rates.series import drain_estimate, series
from queue_core.keys import RATES_SAMPLER_LEASE_KEY
from tests.factories import make_group
from tests.integration.test_worker_cli import worker_env
from tests.integration.test_worker_fleet import (  # noqa: F401
    ROOT,
    Fleet,
    all_reading,
    fleet_start,
)
from tests.queue_core.worker.helpers import wait_until

pytestmark = [pytest.mark.django_db, pytest.mark.one_engine]

RATE = 40.0  # entries per second the test produces
INTERVAL = 0.5  # the sampler's interval in this test (ACKBOARD_SAMPLER_INTERVAL_S)
RATE_TOLERANCE = 0.15  # stored rates within 15% of RATE
AGE_TOLERANCE_S = 0.3  # lag in time vs the test's clock at XADD


class Producer(threading.Thread):
    """XADDs one entry every 1/RATE s on a fixed schedule; records (id, time.time())."""

    def __init__(self, r: redis.Redis, stream: str) -> None:
        super().__init__(daemon=True)
        self.r, self.stream = r, stream
        self.added: list[tuple[str, float]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        n = 0
        while not self.stopping.is_set():
            due = start + n / RATE
            pause = due - time.monotonic()
            if pause > 0:
                self.stopping.wait(pause)
            at = time.time()
            entry_id = self.r.xadd(self.stream, {"n": str(n)}).decode()
            self.added.append((entry_id, at))
            n += 1


@pytest.fixture
def producer(r: redis.Redis, stream: str) -> Iterator[Producer]:
    p = Producer(r, stream)
    yield p
    p.stopping.set()
    p.join(5)


def sample_for(sampler: Sampler, seconds: float, check: Callable[[], None] | None = None) -> None:
    """Tick every INTERVAL for ``seconds`` (a missed tick fails the test)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.monotonic()
        assert sampler.tick() is not None, "the test's sampler lost its lease"
        if check:
            check()
        time.sleep(max(0.0, INTERVAL - (time.monotonic() - began)))  # the sampler's pace


def test_rates_drains_then_growing_and_the_time_lag(
    settings: Any,
    r: redis.Redis,
    stream: str,
    prefix: str,
    redis_url: str,
    fleet_start: Callable[..., Fleet],  # noqa: F811
    producer: Producer,
) -> None:
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    settings.ACKBOARD_SAMPLER_INTERVAL_S = INTERVAL
    make_group(r, stream, "g", start="$")
    fleet = fleet_start(stream, processes=2)
    wait_until(all_reading(fleet, 2), timeout=60, what="both workers reading")
    sampler = Sampler(client=r, interval_s=INTERVAL, lease_key=prefix + "lease")

    # Phase 1: the workers keep up.
    producer.start()
    sample_for(sampler, 8)
    kept_up = drain_estimate(stream, "g", window_s=6)
    assert kept_up.kind == "drains", kept_up
    assert kept_up.produce_per_s == pytest.approx(RATE, rel=RATE_TOLERANCE)
    assert kept_up.consume_per_s == pytest.approx(RATE, rel=RATE_TOLERANCE)
    chart = series(stream, "g", 3600, markers=False)
    rated = [p for p in chart.points if p.produce_per_s is not None]
    assert len(rated) >= 12
    produce = sum(p.produce_per_s for p in rated) / len(rated)
    consume = sum(p.consume_per_s for p in rated) / len(rated)
    assert produce == pytest.approx(RATE, rel=RATE_TOLERANCE)
    assert consume == pytest.approx(RATE, rel=RATE_TOLERANCE)

    # Phase 2: the workers stop; production goes on.
    fleet.proc.send_signal(signal.SIGTERM)
    assert fleet.wait(30) == 0
    stopped_at = time.monotonic()
    sample_for(sampler, 6)
    behind = drain_estimate(stream, "g", window_s=5)
    assert behind.kind == "growing", behind
    assert behind.net_per_s == pytest.approx(-RATE, rel=RATE_TOLERANCE)
    assert behind.text.endswith("growing by 40/s")
    assert time.monotonic() - stopped_at >= 5

    # Lag in time: the first entry the test produced that no worker received.
    last_delivered = r.xinfo_groups(stream)[0]["last-delivered-id"].decode()
    added = list(producer.added)
    first_waiting = next(
        (entry_id, at)
        for entry_id, at in added
        if tuple(map(int, entry_id.split("-"))) > tuple(map(int, last_delivered.split("-")))
    )
    row = RateSample.objects.filter(tier=0, stream=stream, group="g").latest("at")
    expected_age = row.at - first_waiting[1]
    assert expected_age > 5  # it has waited since the workers stopped
    assert row.oldest_undelivered_age_s == pytest.approx(expected_age, abs=AGE_TOLERANCE_S)
    assert row.lag is not None and row.lag == pytest.approx(RATE * expected_age, rel=0.1)


# --- one sampler per deployment, across processes ------------------------------------------


def _sampler_env(redis_url: str, db: Path, prefix: str, log: Path) -> dict[str, str]:
    env = worker_env(
        redis_url,
        log,
        ACKBOARD_STREAMS=prefix + "*",
        ACKBOARD_SAMPLER_INTERVAL_S="0.5",
        DJANGO_SETTINGS_MODULE="dashboard.settings",
    )
    env["DATABASE_URL"] = f"sqlite:///{db}"
    return env


def _ticks(db: Path, stream: str) -> list[float]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT DISTINCT at FROM dashboard_ratesample WHERE tier = 0 AND stream = ? "
            "ORDER BY at",
            (stream,),
        ).fetchall()
    return [at for (at,) in rows]


def test_two_sampler_processes_one_samples_and_the_other_takes_over(
    r: redis.Redis, stream: str, prefix: str, redis_url: str, tmp_path: Path
) -> None:
    """Two ``manage.py sample_rates`` processes (interval 0.5 s) on one database and one
    Redis: the ticks are never closer than 0.35 s (two free-running samplers would tick
    within 0.25 s of each other every period); SIGKILL the lease holder (named by its pid
    in the lease) and the other samples within three intervals plus one tick."""
    db = tmp_path / "rates.sqlite3"
    env = _sampler_env(redis_url, db, prefix, tmp_path / "unused.log")
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"],
        cwd=ROOT, env=env, check=True, timeout=120,
    )  # fmt: skip
    make_group(r, stream, "g")
    r.xadd(stream, {"n": "1"})
    r.delete(RATES_SAMPLER_LEASE_KEY)
    procs = [
        subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "sample_rates"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / f"sampler-{i}.err").open("wb"),
        )  # fmt: skip
        for i in range(2)
    ]
    try:
        wait_until(lambda: len(_ticks(db, stream)) >= 12, timeout=60, what="12 ticks")
        ticks = _ticks(db, stream)
        gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
        assert min(gaps) >= 0.35, gaps
        holder = r.get(RATES_SAMPLER_LEASE_KEY)
        assert holder is not None
        pid = int(holder.decode().split(":")[1])
        victim = next(p for p in procs if p.pid == pid)
        other = next(p for p in procs if p.pid != pid)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = time.time()
        wait_until(
            lambda: any(at > killed_at for at in _ticks(db, stream)), timeout=10, what="a tick"
        )
        took_over = min(at for at in _ticks(db, stream) if at > killed_at) - killed_at
        assert took_over <= 3 * 0.5 + 0.5 + 0.5, took_over  # lease expiry + a tick + slack
        new_holder = r.get(RATES_SAMPLER_LEASE_KEY)
        assert new_holder is not None and int(new_holder.decode().split(":")[1]) == other.pid
        other.send_signal(signal.SIGTERM)
        assert other.wait(15) == 0
        assert r.get(RATES_SAMPLER_LEASE_KEY) is None  # released on SIGTERM
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
