"""``manage.py queue_worker --processes N`` as real processes against the private Redis.

The parent runs N ``queue_worker`` children (``queue_core.worker.fleet``). These tests
check what an operator relies on: N consumers with distinct names share the group and
lose nothing; one SIGTERM to the parent stops every child gracefully (each with its
whole grace period, a copy within 1 s being the same request, a later one hurrying them);
a SIGKILLed child is restarted and its entry is reclaimed; and the exit status names a
child that did not stop cleanly. Handlers are in tests/integration/fleet_handlers.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.factories import add_entries, make_group
from tests.integration.test_worker_cli import uv_binary, worker_env
from tests.queue_core.worker.helpers import wait_until

#: Process groups and signals, not the server: Redis 7 only (the worker's contract tests
#: under tests/queue_core/ run on every engine).
pytestmark = pytest.mark.one_engine

ROOT = Path(__file__).resolve().parents[2]
HANDLER = "tests.integration.fleet_handlers:record"


class Fleet:
    """The parent process, its stderr file and the handler log."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr: Path, handler_log: Path) -> None:
        self.proc, self.stderr_path, self.handler_log = proc, stderr, handler_log

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def lines(self, event: str) -> list[list[str]]:
        """Handler log lines of ``event``: [id, delivery count, consumer, pid]."""
        rows = [line.split() for line in self.handler_log.read_text().splitlines()]
        return [row[1:] for row in rows if row[0] == event]

    def consuming(self) -> list[str]:
        """The consumer names the children logged as they started reading."""
        return re.findall(r"worker (\S+) consuming ", self.stderr)

    def children(self) -> list[int]:
        """The parent's live child processes (Linux /proc)."""
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)


@pytest.fixture
def fleet_start(tmp_path: Path, redis_url: str) -> Iterator[Callable[..., Fleet]]:
    started: list[Fleet] = []

    def start(stream: str, *args: str, processes: int = 2, uv: bool = False) -> Fleet:
        """``uv=True``: as deployed, ``uv run python manage.py …`` leading its own process
        group (see test_worker_cli.py), so the whole group can be signalled."""
        handler_log = tmp_path / f"handler-{len(started)}.log"
        handler_log.touch()
        stderr = tmp_path / f"fleet-{len(started)}.err"
        python = [uv_binary(), "run", "--no-sync", "python"] if uv else [sys.executable]
        proc = subprocess.Popen(
            [*python, str(ROOT / "manage.py"), "queue_worker", "--stream", stream,
             "--group", "g", "--handler", HANDLER, "--processes", str(processes),
             "--block-ms", "100", *args],
            cwd=ROOT, env=worker_env(redis_url, handler_log),
            stdout=subprocess.DEVNULL, stderr=stderr.open("wb"), start_new_session=uv,
        )  # fmt: skip
        fleet = Fleet(proc, stderr, handler_log)
        started.append(fleet)
        return fleet

    yield start
    for fleet in started:
        if fleet.proc.poll() is None:
            children = fleet.children()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(fleet.proc.pid, signal.SIGKILL)  # under uv: uv and the parent
            fleet.proc.kill()
            fleet.proc.wait()
            for pid in children:  # their parent-death signal is SIGTERM; make sure
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def consumers(r: redis.Redis, stream: str) -> list[dict[str, Any]]:
    try:
        rows: list[dict[str, Any]] = r.xinfo_consumers(stream, "g")
    except redis.ResponseError:  # no stream or group yet
        return []
    return rows


def names(r: redis.Redis, stream: str) -> set[str]:
    return {row["name"].decode() for row in consumers(r, stream)}


def all_reading(fleet: Fleet, n: int) -> Callable[[], bool]:
    """Each child logs "worker NAME consuming …" after installing its signal handlers,
    just before its first read. (XINFO CONSUMERS is no readiness check: Redis 7.0 lists a
    consumer only once it was delivered something.)"""
    return lambda: len(fleet.consuming()) == n


def trickle(r: redis.Redis, stream: str, until: Callable[[], bool]) -> list[str]:
    """Add entries one at a time until ``until()``. Idle children wait in a blocking read
    and Redis serves blocked readers first come, first served, so each gets one in turn
    (a burst could all go to whichever child reads first)."""
    ids: list[str] = []
    deadline = time.monotonic() + 20
    while not until():
        assert time.monotonic() < deadline, f"not every child was delivered an entry: {ids}"
        ids += add_entries(r, stream, 1)
        time.sleep(0.05)  # one at a time: each blocked reader gets its turn
    return ids


class FleetConsumersTests:
    def test_each_process_is_a_consumer_with_its_own_name_and_no_job_is_lost(
        self, r: redis.Redis, stream: str, fleet_start: Callable[..., Fleet]
    ) -> None:
        make_group(r, stream, "g")
        fleet = fleet_start(stream, "--batch", "10", processes=3)
        wait_until(all_reading(fleet, 3), timeout=60, what="3 consumers reading")

        found = set(fleet.consuming())
        children = fleet.children()
        assert len(found) == len(children) == 3
        # host-pid-random, the pid being each child's own
        host = socket.gethostname()
        assert {int(name.removeprefix(host + "-").split("-")[0]) for name in found} == set(children)
        ids = trickle(r, stream, until=lambda: len(names(r, stream)) == 3)
        assert names(r, stream) == found
        ids += add_entries(r, stream, 600)
        wait_until(
            lambda: (
                {row[0] for row in fleet.lines("done")} == set(ids)
                and r.xpending(stream, "g")["pending"] == 0
            ),
            timeout=60,
            what="every entry to be handled and acked",
        )
        assert {row[2] for row in fleet.lines("done")} <= found
        [group] = r.xinfo_groups(stream)
        assert group["lag"] == 0 and group["pending"] == 0

        fleet.proc.send_signal(signal.SIGTERM)
        assert fleet.wait() == 0, fleet.stderr
        assert "Traceback" not in fleet.stderr
        assert names(r, stream) == found  # no restarts, no extra consumers

    def test_a_consumer_name_becomes_name_dash_i(
        self, r: redis.Redis, stream: str, fleet_start: Callable[..., Fleet]
    ) -> None:
        fleet = fleet_start(stream, "--consumer", "billing", processes=3)
        wait_until(all_reading(fleet, 3), timeout=60, what="3 consumers reading")
        assert sorted(fleet.consuming()) == ["billing-1", "billing-2", "billing-3"]
        trickle(r, stream, until=lambda: len(names(r, stream)) == 3)
        assert names(r, stream) == {"billing-1", "billing-2", "billing-3"}
        fleet.proc.send_signal(signal.SIGINT)
        assert fleet.wait() == 0, fleet.stderr

    def test_a_bad_redis_url_is_one_line_and_exit_2_before_any_child_starts(
        self, tmp_path: Path, stream: str
    ) -> None:
        result = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "queue_worker", "--stream", stream,
             "--group", "g", "--handler", HANDLER, "--processes", "3"],
            cwd=ROOT, env=worker_env("redis://127.0.0.1:1/0", tmp_path / "h.log"),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 2
        [line] = result.stderr.strip().splitlines()
        assert "cannot reach Redis" in line
        assert "started" not in result.stderr

    def test_processes_below_1_is_refused(self, tmp_path: Path, redis_url: str) -> None:
        result = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "queue_worker", "--stream", "s",
             "--group", "g", "--handler", HANDLER, "--processes", "0"],
            cwd=ROOT, env=worker_env(redis_url, tmp_path / "h.log"),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 2
        assert "processes must be a whole number >= 1" in result.stderr


def _start_on_each(
    r: redis.Redis, stream: str, fleet: Fleet, sleep: float, n: int = 2
) -> list[list[str]]:
    """Add ``n`` slow entries one at a time, each taken by a different child.

    All children block in XREADGROUP; Redis serves blocked readers first come, first
    served, so the entry added while one child is busy goes to an idle one.
    """
    for i in range(1, n + 1):
        add_entries(r, stream, 1, fields={"sleep": str(sleep)})
        wait_until(lambda i=i: len(fleet.lines("start")) == i, timeout=30, what="a handler")
    started = fleet.lines("start")
    assert len({row[3] for row in started}) == n, f"not one entry per child: {started}"
    return started


class FleetStopTests:
    def test_sigterm_to_the_parent_lets_every_child_finish_within_its_grace(
        self, r: redis.Redis, stream: str, fleet_start: Callable[..., Fleet]
    ) -> None:
        make_group(r, stream, "g")
        fleet = fleet_start(stream, "--consumer", "grace", "--batch", "1",
                            "--grace-seconds", "30")  # fmt: skip
        wait_until(all_reading(fleet, 2), timeout=60, what="2 consumers reading")
        started = _start_on_each(r, stream, fleet, sleep=2.5)

        fleet.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # the copy comes later, as a forwarded one does, yet within 1 s
        fleet.proc.send_signal(signal.SIGTERM)  # a copy within 1 s: the same request
        assert fleet.wait() == 0, fleet.stderr

        assert sorted(row[0] for row in fleet.lines("done")) == sorted(r[0] for r in started)
        assert r.xpending(stream, "g")["pending"] == 0  # both finished and acked
        assert "taken as the same request" in fleet.stderr
        assert "second stop request" not in fleet.stderr
        assert "Traceback" not in fleet.stderr

    def test_sigint_to_the_process_group_under_uv_is_one_stop_request(
        self, r: redis.Redis, stream: str, fleet_start: Callable[..., Fleet]
    ) -> None:
        # A terminal's Ctrl-C: uv and the parent get it at once, and uv forwards its copy
        # to the parent 200 ms later; the children (own session) get the parent's forward.
        make_group(r, stream, "g")
        fleet = fleet_start(stream, "--consumer", "uv", "--batch", "1",
                            "--grace-seconds", "30", uv=True)  # fmt: skip
        wait_until(all_reading(fleet, 2), timeout=60, what="2 consumers reading")
        started = _start_on_each(r, stream, fleet, sleep=2.5)

        os.killpg(fleet.proc.pid, signal.SIGINT)
        assert fleet.wait() == 0, fleet.stderr

        assert sorted(row[0] for row in fleet.lines("done")) == sorted(r[0] for r in started)
        assert r.xpending(stream, "g")["pending"] == 0
        assert "taken as the same request" in fleet.stderr  # uv's copy, 200 ms later
        assert "second stop request" not in fleet.stderr
        assert "Traceback" not in fleet.stderr

    def test_a_second_signal_more_than_1s_later_makes_every_child_stop_waiting(
        self, r: redis.Redis, stream: str, fleet_start: Callable[..., Fleet]
    ) -> None:
        make_group(r, stream, "g")
        fleet = fleet_start(stream, "--consumer", "hurry", "--batch", "1",
                            "--grace-seconds", "60")  # fmt: skip
        wait_until(all_reading(fleet, 2), timeout=60, what="2 consumers reading")
        started = _start_on_each(r, stream, fleet, sleep=60)

        began = time.monotonic()
        fleet.proc.send_signal(signal.SIGINT)
        time.sleep(2.0)  # a window in which one signal must not stop the fleet
        assert fleet.proc.poll() is None, "one signal must wait for the handlers"
        fleet.proc.send_signal(signal.SIGINT)
        assert fleet.wait(30) == 0, fleet.stderr

        assert time.monotonic() - began < 25  # did not wait for the 60 s handlers
        assert fleet.lines("done") == []
        pending = r.xpending_range(stream, "g", min="-", max="+", count=10)
        # Not acked: each stays pending on its own consumer, for a reclaim sweep.
        assert {(p["message_id"].decode(), p["consumer"].decode()) for p in pending} == {
            (row[0], row[2]) for row in started
        }
        assert fleet.stderr.count("second stop request") >= 3  # the parent and each child

    def test_exit_status_names_a_child_that_did_not_stop_cleanly(
        self, r: redis.Redis, stream: str, fleet_start: Callable[..., Fleet]
    ) -> None:
        make_group(r, stream, "g")
        fleet = fleet_start(stream, "--consumer", "bad", "--batch", "1",
                            "--grace-seconds", "60")  # fmt: skip
        wait_until(all_reading(fleet, 2), timeout=60, what="2 consumers reading")
        started = _start_on_each(r, stream, fleet, sleep=60)
        victim = int(started[0][3])

        fleet.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: fleet.stderr.count("stopping: no new reads") >= 2, timeout=20,
                   what="both children in their grace period")  # fmt: skip
        os.kill(victim, signal.SIGKILL)  # dies during its grace period: not restarted
        wait_until(lambda: victim not in fleet.children(), timeout=10, what="the victim reaped")
        time.sleep(1.0)  # a window in which a (wrong) restart would show up
        assert victim not in fleet.children()
        assert len(fleet.children()) == 1
        os.kill(int(started[1][3]), signal.SIGTERM)  # a second request: stop waiting
        status = fleet.wait(30)

        assert status == 1, fleet.stderr
        assert "1 of 2 workers did not stop cleanly: worker " in fleet.stderr
        assert f"(pid {victim}) was killed by SIGKILL" in fleet.stderr
        assert "restarting" not in fleet.stderr


class FleetRestartTests:
    def test_a_sigkilled_child_is_restarted_and_its_entry_reclaimed(
        self, r: redis.Redis, stream: str, fleet_start: Callable[..., Fleet]
    ) -> None:
        make_group(r, stream, "g")
        fleet = fleet_start(stream, "--consumer", "fleet", "--min-idle-ms", "1000",
                            "--reclaim-interval-ms", "200")  # fmt: skip
        wait_until(all_reading(fleet, 2), timeout=60, what="2 consumers reading")
        [entry_id] = add_entries(r, stream, 1, fields={"sleep": "60"})
        [[_, _, consumer, pid]] = wait_until(lambda: fleet.lines("start"), timeout=30,
                                             what="the handler")  # fmt: skip
        before = set(fleet.children())

        os.kill(int(pid), signal.SIGKILL)

        # Delivered again (delivery 2) by a live member's reclaim sweep, handled, acked.
        wait_until(lambda: [row[:2] for row in fleet.lines("done")] == [[entry_id, "2"]],
                   timeout=30, what="the entry to be reclaimed")  # fmt: skip
        wait_until(lambda: r.xpending(stream, "g")["pending"] == 0, what="the ack")
        wait_until(lambda: len(fleet.children()) == 2, timeout=30, what="the restart")
        assert set(fleet.children()) - before, "a new child replaced the killed one"
        assert f"(pid {pid}) was killed by SIGKILL without a stop request; restarting it in" in (
            fleet.stderr
        )
        # The restarted member keeps its name: still two consumers, fleet-1 and fleet-2.
        wait_until(all_reading(fleet, 3), timeout=60, what="the new child to read")
        assert sorted(fleet.consuming()) == sorted(["fleet-1", "fleet-2", consumer])

        fleet.proc.send_signal(signal.SIGTERM)
        assert fleet.wait() == 0, fleet.stderr
