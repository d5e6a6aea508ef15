"""``queue_core.worker.fleet`` with tiny Python children: the supervisor's own rules.

The real ``queue_worker`` fleet is tested in tests/integration/test_worker_fleet.py; here
the children are one-line scripts, so restarts, the stop rule and the exit status can be
checked quickly and exactly. The fleet runs in a thread (so it installs no signal
handlers) and is stopped with ``Fleet.stop()``, the same request a signal makes.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from queue_core.worker.config import WorkerConfigError, processes_check, worker_argv
from queue_core.worker.fleet import Fleet, exit_describe, fleet_consumer_names
from tests.queue_core.worker.helpers import wait_until

#: Exits ``code`` on SIGTERM, after appending "stop" to the file in argv[1].
ON_TERM_EXIT = """
import signal, sys, time
def stop(signum, frame):
    open(sys.argv[1], "a").write("stop\\n")
    sys.exit(int(sys.argv[2]))
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1], "a").write("up\\n")
while True:
    time.sleep(0.05)  # the child idles until a signal stops it
"""


def child(log: Path, code: int = 0) -> list[str]:
    return [sys.executable, "-c", ON_TERM_EXIT, str(log), str(code)]


@contextmanager
def running(fleet: Fleet) -> Iterator[list[int]]:
    """Run ``fleet`` in a thread; yields a list that receives its exit status."""
    status: list[int] = []
    thread = threading.Thread(target=lambda: status.append(fleet.run()), daemon=True)
    thread.start()
    try:
        yield status
    finally:
        if thread.is_alive():
            fleet.stop()
            thread.join(20)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class FleetNamesTests:
    def test_a_name_becomes_name_dash_i_and_no_name_leaves_the_default(self) -> None:
        assert fleet_consumer_names("billing", 3) == ["billing-1", "billing-2", "billing-3"]
        assert fleet_consumer_names("", 2) == ["", ""]

    def test_processes_flag(self) -> None:
        assert worker_argv(processes=4, stream="s")[:4] == ["--processes", "4", "--stream", "s"]
        assert worker_argv(stream="s", reclaim_interval_ms=None) == ["--stream", "s"]
        assert processes_check(3) == 3
        for bad in (0, -1, True, "2"):
            with pytest.raises(WorkerConfigError, match="processes must be a whole number"):
                processes_check(bad)

    def test_exit_describe(self) -> None:
        assert exit_describe(3) == "exited with status 3"
        assert exit_describe(-signal.SIGKILL) == "was killed by SIGKILL"


class FleetSupervisionTests:
    def test_one_stop_reaches_every_child_once_and_exit_0(self, tmp_path: Path) -> None:
        logs = [tmp_path / f"{i}.log" for i in range(3)]
        fleet = Fleet([child(log) for log in logs])
        with running(fleet) as status:
            wait_until(lambda: all(lines(log) == ["up"] for log in logs), timeout=20)
            fleet.stop()
            fleet.stop()  # within 1 s: the same request, not forwarded again
            wait_until(lambda: status, timeout=20, what="the fleet to exit")
        assert status == [0]
        assert [lines(log) for log in logs] == [["up", "stop"]] * 3
        assert fleet.failures() == []

    def test_a_later_second_stop_is_forwarded(self, tmp_path: Path) -> None:
        # This child ignores its first SIGTERM and exits on the second one.
        script = (
            "import signal, sys, time\n"
            "seen = []\n"
            "def stop(s, f):\n"
            "    seen.append(s)\n"
            f"    open({str(tmp_path / 'log')!r}, 'a').write('stop\\n')\n"
            "    if len(seen) == 2: sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, stop)\n"
            f"open({str(tmp_path / 'log')!r}, 'a').write('up\\n')\n"
            "while True: time.sleep(0.05)  # idles until signalled\n"
        )
        fleet = Fleet([[sys.executable, "-c", script]])
        with running(fleet) as status:
            wait_until(lambda: lines(tmp_path / "log") == ["up"], timeout=20)
            fleet.stop()
            time.sleep(1.3)  # a window in which the fleet must not exit on one request
            assert not status, "the child waits for a second request"
            fleet.stop()
            wait_until(lambda: status, timeout=20, what="the fleet to exit")
        assert status == [0]
        assert lines(tmp_path / "log") == ["up", "stop", "stop"]

    def test_a_child_that_does_not_stop_cleanly_is_named_and_the_status_is_1(
        self, tmp_path: Path
    ) -> None:
        fleet = Fleet([child(tmp_path / "a.log"), child(tmp_path / "b.log", code=3)])
        with running(fleet) as status:
            wait_until(lambda: lines(tmp_path / "a.log") and lines(tmp_path / "b.log"), 20)
            pids = fleet.pids()
            fleet.stop()
            wait_until(lambda: status, timeout=20, what="the fleet to exit")
        assert status == [1]
        assert fleet.failures() == [f"worker 2 (pid {pids[1]}) exited with status 3"]

    def test_a_child_that_dies_is_restarted_with_backoff(self, tmp_path: Path) -> None:
        log = tmp_path / "crash.log"
        crash = [sys.executable, "-c", f"open({str(log)!r}, 'a').write('up\\n')"]  # exits 0
        fleet = Fleet([crash], restart_base_s=0.2, restart_cap_s=0.4)
        with running(fleet) as status:
            wait_until(lambda: len(lines(log)) >= 4, timeout=20, what="3 restarts")
            fleet.stop()
            wait_until(lambda: status, timeout=20, what="the fleet to exit")
        [member] = fleet.members
        assert member.restarts >= 3
        # Its last exit (0) was not a stop it was asked for, but it is a clean status.
        assert status == [0]

    def test_no_restart_after_the_stop_request(self, tmp_path: Path) -> None:
        fleet = Fleet([child(tmp_path / "a.log")], restart_base_s=0.05, restart_cap_s=0.05)
        with running(fleet) as status:
            wait_until(lambda: lines(tmp_path / "a.log") == ["up"], timeout=20)
            fleet.stop()
            wait_until(lambda: status, timeout=20, what="the fleet to exit")
            time.sleep(0.3)  # a window in which a (wrong) restart would show up
        assert lines(tmp_path / "a.log") == ["up", "stop"]
        assert fleet.members[0].restarts == 0
