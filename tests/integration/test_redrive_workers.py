"""A redrive end to end, with real processes: ``queue_worker`` workers, ``manage.py
run_jobs`` runners and ``manage.py ackboard`` as the operator, on one SQLite file and the
private Redis.

The downstream is broken (the handler raises PermanentFailure) while 60 orders arrive:
all 60 are dead-lettered. The fix ships, and the operator redrives them: a canary of 5,
which the workers process; Continue; the rest at 8 replays/s, measured from the job's
progress (within 25 %); the runner is SIGKILLed mid-way and two new ones race for the
job when the lease expires (one takes it). At the end the DLQ is empty and the handler
ran each order exactly once. Handlers are in tests/integration/redrive_handlers.py.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from queue_core import services
from queue_core.keys import stream_keys
from tests.factories import make_group
from tests.integration.test_worker_cli import worker_env
from tests.queue_core.worker.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "tests.integration.redrive_handlers:handle"
ORDERS = 60
CANARY = 5
RATE = 8.0


class Env:
    def __init__(self, tmp: Path, redis_url: str, prefix: str) -> None:
        self.db = tmp / "redrive.sqlite3"
        self.log = tmp / "handler.log"
        self.broken = tmp / "broken"
        self.log.touch()
        self.env = worker_env(redis_url, self.log, ACKBOARD_STREAMS=prefix + "*",
                              DJANGO_SETTINGS_MODULE="dashboard.settings",
                              ACKBOARD_TEST_BROKEN=str(self.broken))  # fmt: skip
        self.env["DATABASE_URL"] = f"sqlite:///{self.db}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(ROOT / "manage.py"), *args]
        return subprocess.run(argv, cwd=ROOT, env=self.env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip

    def start(self, *args: str, name: str) -> subprocess.Popen[bytes]:
        err = (self.db.parent / f"{name}.err").open("wb")
        proc = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT,
                                env=self.env, stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip
        self.procs.append(proc)
        return proc

    def job(self) -> tuple[str, int, int, int]:
        with contextlib.closing(sqlite3.connect(self.db)) as conn:
            row = conn.execute(
                "SELECT state, replayed, gone, refused FROM dashboard_redrivejob"
            ).fetchone()
        return (str(row[0]), int(row[1]), int(row[2]), int(row[3])) if row else ("", 0, 0, 0)

    def done_lines(self) -> list[list[str]]:
        return [line.split() for line in self.log.read_text().splitlines() if line]


@pytest.fixture
def env(tmp_path: Path, redis_url: str, prefix: str) -> Iterator[Env]:
    e = Env(tmp_path, redis_url, prefix)
    yield e
    for proc in e.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.one_engine
def test_canary_then_throttled_rest_survives_a_runner_sigkill_exactly_once(
    r: redis.Redis, stream: str, env: Env
) -> None:
    assert env.manage("migrate", "-v", "0").returncode == 0
    made = env.manage("shell", "-c", "from django.contrib.auth.models import User; "
                      "User.objects.create_superuser('op', '', 'pw')")  # fmt: skip
    assert made.returncode == 0, made.stderr
    dlq = stream_keys(stream).dlq
    make_group(r, stream, "g")
    env.broken.touch()
    for i in range(2):
        env.start("queue_worker", "--stream", stream, "--group", "g", "--handler", HANDLER,
                  "--block-ms", "100", "--consumer", f"w{i}", name=f"worker{i}")  # fmt: skip
    pipe = r.pipeline(transaction=False)
    for n in range(ORDERS):
        pipe.xadd(stream, {"n": str(n)})
    pipe.execute()
    wait_until(lambda: r.xlen(dlq) == ORDERS, timeout=30, what="every order dead-lettered")
    assert env.done_lines() == []
    env.broken.unlink()  # the fix ships

    # The dry run, then the redrive with a canary of 5, as the operator from a terminal.
    dry = env.manage("ackboard", "redrive", stream, "--user", "op")
    assert dry.returncode == 0, dry.stderr
    assert f"{ORDERS} dead letters would be replayed" in dry.stdout
    started = env.manage("ackboard", "redrive", stream, "--user", "op", "--yes",
                         "--canary", str(CANARY), "--rate", str(RATE))  # fmt: skip
    assert started.returncode == 0, started.stderr
    found = re.search(r"Redrive #(\d+) started", started.stdout)
    assert found, started.stdout
    job_id = found.group(1)

    runner = env.start("run_jobs", "--lease", "2", "--poll", "0.1", name="runner1")
    wait_until(lambda: env.job()[0] == "waiting", timeout=30, what="the canary replayed")
    wait_until(lambda: len(env.done_lines()) == CANARY, timeout=30, what="the canary processed")
    time.sleep(1.0)  # waiting means waiting: nothing more is replayed
    assert env.job()[:2] == ("waiting", CANARY)
    assert r.xlen(dlq) == ORDERS - CANARY

    go = env.manage("ackboard", "redrive-job", job_id, "continue", "--user", "op")
    assert go.returncode == 0, go.stderr

    # The throttled rest: measure the rate from the job's progress, then SIGKILL mid-way.
    wait_until(lambda: env.job()[1] >= CANARY + 4, timeout=30, what="the rest under way")
    t0, c0 = time.monotonic(), env.job()[1]
    wait_until(lambda: env.job()[1] >= c0 + 16, timeout=30, what="16 more replays")
    t1, c1 = time.monotonic(), env.job()[1]
    rate = (c1 - c0) / (t1 - t0)
    assert RATE * 0.75 <= rate <= RATE * 1.25, f"{rate:.2f}/s, configured {RATE}/s"
    runner.send_signal(signal.SIGKILL)
    runner.wait(10)
    killed_at = env.job()[1]
    assert killed_at < ORDERS
    time.sleep(0.5)  # a window in which nobody may work on it: the lease holds
    assert env.job()[1] == killed_at

    # Two new runners race for the job once the lease expires: one takes it.
    env.start("run_jobs", "--lease", "2", "--poll", "0.1", name="runner2")
    env.start("run_jobs", "--lease", "2", "--poll", "0.1", name="runner3")
    wait_until(lambda: env.job()[0] == "done", timeout=60, what="the redrive done")
    wait_until(lambda: len(env.done_lines()) >= ORDERS, timeout=30, what="every replay handled")
    time.sleep(0.5)  # let a (wrong) second run of anything show up

    lines = env.done_lines()
    ran = Counter(line[1] for line in lines)
    assert sorted(ran, key=int) == [str(n) for n in range(ORDERS)]
    assert set(ran.values()) == {1}, [n for n, c in ran.items() if c > 1]
    assert all(line[3] != "-" for line in lines)  # each ran as a replay of its original
    assert r.xlen(dlq) == 0
    state, replayed, gone, refused = env.job()
    assert (state, refused) == ("done", 0)
    # A runner killed between a replay and its progress save may leave one uncounted.
    assert ORDERS - 1 <= replayed + gone <= ORDERS
    logs = [(env.db.parent / f"runner{i}.err").read_text() for i in (2, 3)]
    assert sum("takes it" in log for log in logs) >= 1
    assert not any("Traceback" in log for log in logs), logs


@pytest.mark.one_engine
def test_sigterm_stops_the_runner_cleanly_and_releases_the_job(
    r: redis.Redis, stream: str, env: Env
) -> None:
    """SIGTERM: the runner exits 0 within a second or two, its lease released, the job
    still running; a new runner takes it over at once (not after the 30 s lease)."""
    assert env.manage("migrate", "-v", "0").returncode == 0
    made = env.manage("shell", "-c", "from django.contrib.auth.models import User; "
                      "User.objects.create_superuser('op', '', 'pw')")  # fmt: skip
    assert made.returncode == 0, made.stderr
    make_group(r, stream, "g")
    for n in range(10):
        entry_id = r.xadd(stream, {"n": str(n)}).decode()
        r.xreadgroup("g", "c1", {stream: ">"}, count=1)
        services.entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id,
                                   reason="test")  # fmt: skip
    started = env.manage("ackboard", "redrive", stream, "--user", "op", "--yes", "--rate", "2")
    assert started.returncode == 0, started.stderr
    runner = env.start("run_jobs", "--lease", "30", "--poll", "0.1", name="term1")
    wait_until(lambda: env.job()[1] >= 2, timeout=30, what="replays under way")
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(5) == 0
    with contextlib.closing(sqlite3.connect(env.db)) as conn:
        state, owner = conn.execute(
            "SELECT state, lease_owner FROM dashboard_redrivejob"
        ).fetchone()
    assert (state, owner) == ("running", "")
    stopped_at = env.job()[1]
    assert stopped_at < 10
    env.start("run_jobs", "--lease", "30", "--poll", "0.1", name="term2")
    wait_until(lambda: env.job()[1] > stopped_at, timeout=15, what="the next runner at once")
    wait_until(lambda: env.job()[0] == "done", timeout=30, what="the redrive done")
    assert r.xlen(stream_keys(stream).dlq) == 0
    assert len(r.xrange(stream)) == 20  # 10 originals (still in the stream) + 10 replays
