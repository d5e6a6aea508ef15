"""``manage.py queue_worker`` as a process: bad configuration, SIGTERM/SIGINT, SIGKILL.

The worker runs with a DATABASE_URL that cannot be opened, which proves it needs no
database. Handlers are in tests/integration/handlers.py. The process-group tests run it
as it is deployed, ``uv run python manage.py queue_worker`` in its own session, and
signal the whole group, as systemd (KillMode=control-group), supervisors and terminals
do: the worker then gets each signal twice, once directly and once forwarded by uv.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from queue_core import Job
from tests.factories import add_entries, make_group
from tests.queue_core.worker.helpers import new_worker, running, wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def handler_log(tmp_path: Path) -> Path:
    path = tmp_path / "handler.log"
    path.touch()
    return path


def worker_env(redis_url: str, handler_log: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    env.update(
        VALKEY_URL=redis_url,
        DJANGO_SECRET_KEY="test-only",
        DJANGO_DEBUG="0",
        DATABASE_URL="sqlite:////nonexistent-dir/ackboard-no-db.sqlite3",
        ACKBOARD_TEST_HANDLER_LOG=str(handler_log),
        **extra,
    )
    return env


def start_worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "queue_worker", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def uv_binary() -> str:
    """The uv that runs the project: ``uv run`` names itself in $UV, else uv on PATH."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.fail(
            "uv is needed to test the worker as it is deployed (uv run python manage.py "
            "queue_worker), and it is neither in $UV nor on PATH. Install it "
            "(https://docs.astral.sh/uv/) or put ~/.local/bin on PATH, and run the suite "
            "with `uv run pytest`.",
            pytrace=False,
        )
    return found


def start_worker_uv(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``uv run python manage.py queue_worker`` as the leader of its own process group.

    ``--no-sync``: the test must not change the environment other runs use; it changes
    nothing about how uv runs the command or forwards signals.
    """
    return subprocess.Popen(
        [uv_binary(), "run", "--no-sync", "python", "manage.py", "queue_worker", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def run_worker(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "queue_worker", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def pending_rows(r: redis.Redis, stream: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = r.xpending_range(stream, "g", min="-", max="+", count=10)
    return rows


@pytest.fixture
def proc_cleanup() -> Iterator[Callable[[subprocess.Popen[str]], subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def track(proc: subprocess.Popen[str]) -> subprocess.Popen[str]:
        started.append(proc)
        return proc

    yield track
    for proc in started:
        if proc.poll() is None:
            # The whole group: under uv the worker is a child of the process we started.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
            proc.wait()


class QueueWorkerConfigTests:
    @pytest.mark.parametrize(
        ("stream", "handler", "url", "message"),
        [
            ("s", "tests.integration.no_such_module:f", None, "cannot import handler module"),
            ("s", "tests.integration.handlers:NOT_CALLABLE", None, "is not callable"),
            (
                "s",
                "tests.integration.handlers:quick",
                "redis://127.0.0.1:1/0",
                "cannot reach Redis",
            ),
            ("a}b", "tests.integration.handlers:quick", None, "cannot share a cluster slot"),
        ],
    )
    @pytest.mark.one_engine  # refused before the worker reads anything: not about the server
    def test_bad_configuration_is_one_line_and_exit_2(
        self,
        redis_url: str,
        handler_log: Path,
        stream: str,
        handler: str,
        url: str | None,
        message: str,
    ) -> None:
        env = worker_env(url or redis_url, handler_log)
        result = run_worker(env, "--stream", stream, "--group", "g", "--handler", handler)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert message in lines[0]
        assert "Traceback" not in result.stderr


class QueueWorkerSignalTests:
    @pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
    def test_stop_signal_lets_in_flight_handler_finish_then_acks_and_exits_0(
        self,
        r: redis.Redis,
        redis_url: str,
        stream: str,
        handler_log: Path,
        proc_cleanup: Callable[[subprocess.Popen[str]], subprocess.Popen[str]],
        sig: signal.Signals,
    ) -> None:
        make_group(r, stream, "g")
        [entry_id] = add_entries(r, stream, 1)
        env = worker_env(redis_url, handler_log, ACKBOARD_TEST_SLEEP_S="0.8")
        proc = proc_cleanup(start_worker(
            env, "--stream", stream, "--group", "g", "--handler", "tests.integration.handlers:slow",
            "--consumer", "w-signal", "--block-ms", "100", "--grace-seconds", "10",
        ))  # fmt: skip
        wait_until(lambda: log_lines(handler_log), timeout=20, what="the handler to start")
        add_entries(r, stream, 3)  # arrives after the stop request: must not be run

        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=20)

        assert proc.returncode == 0, stderr
        assert log_lines(handler_log) == [f"start {entry_id} 1", f"done {entry_id} 1"]
        # Acked: nothing of this consumer is pending; the later entries were never read.
        assert [row["consumer"] for row in pending_rows(r, stream)] == []
        assert "Traceback" not in stderr

    def test_handler_past_the_grace_period_stays_pending(
        self,
        r: redis.Redis,
        redis_url: str,
        stream: str,
        handler_log: Path,
        proc_cleanup: Callable[[subprocess.Popen[str]], subprocess.Popen[str]],
    ) -> None:
        make_group(r, stream, "g")
        [entry_id] = add_entries(r, stream, 1)
        env = worker_env(redis_url, handler_log, ACKBOARD_TEST_SLEEP_S="30")
        proc = proc_cleanup(start_worker(
            env, "--stream", stream, "--group", "g", "--handler", "tests.integration.handlers:slow",
            "--consumer", "w-grace", "--block-ms", "100", "--grace-seconds", "0.3",
        ))  # fmt: skip
        wait_until(lambda: log_lines(handler_log), timeout=20, what="the handler to start")

        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)

        assert proc.returncode == 0, stderr
        assert time.monotonic() - started < 10  # did not wait for the 30 s handler
        [row] = pending_rows(r, stream)
        assert row["message_id"].decode() == entry_id and row["consumer"] == b"w-grace"

    def test_after_sigkill_the_entry_stays_pending_and_another_worker_takes_it(
        self,
        r: redis.Redis,
        redis_url: str,
        stream: str,
        handler_log: Path,
        proc_cleanup: Callable[[subprocess.Popen[str]], subprocess.Popen[str]],
    ) -> None:
        make_group(r, stream, "g")
        [entry_id] = add_entries(r, stream, 1)
        env = worker_env(redis_url, handler_log, ACKBOARD_TEST_SLEEP_S="30")
        proc = proc_cleanup(start_worker(
            env, "--stream", stream, "--group", "g", "--handler", "tests.integration.handlers:slow",
            "--consumer", "doomed", "--block-ms", "100",
        ))  # fmt: skip
        wait_until(lambda: log_lines(handler_log), timeout=20, what="the handler to start")

        proc.kill()
        proc.wait(10)

        [row] = pending_rows(r, stream)
        assert row["message_id"].decode() == entry_id and row["consumer"] == b"doomed"
        jobs: list[Job] = []
        survivor = new_worker(
            redis_url, stream, jobs.append, consumer="survivor", min_idle_ms=100,
            reclaim_interval_ms=20,
        )  # fmt: skip
        with running(survivor):
            wait_until(lambda: not pending_rows(r, stream), what="the survivor's ack")
        assert [(j.id, j.delivery_count) for j in jobs] == [(entry_id, 2)]


@pytest.mark.one_engine  # signals to a process group under uv: not about the server
class QueueWorkerProcessGroupTests:
    """The worker under ``uv run``, its whole process group signalled."""

    def test_sigterm_to_the_group_is_one_stop_request_with_the_full_grace(
        self,
        r: redis.Redis,
        redis_url: str,
        stream: str,
        handler_log: Path,
        proc_cleanup: Callable[[subprocess.Popen[str]], subprocess.Popen[str]],
    ) -> None:
        make_group(r, stream, "g")
        [entry_id] = add_entries(r, stream, 1)
        env = worker_env(redis_url, handler_log, ACKBOARD_TEST_SLEEP_S="2")
        proc = proc_cleanup(start_worker_uv(
            env, "--stream", stream, "--group", "g", "--handler", "tests.integration.handlers:slow",
            "--consumer", "w-group", "--block-ms", "100", "--grace-seconds", "20",
        ))  # fmt: skip
        wait_until(lambda: log_lines(handler_log), timeout=30, what="the handler to start")

        os.killpg(proc.pid, signal.SIGTERM)  # uv and the worker both get it
        _, stderr = proc.communicate(timeout=30)

        assert proc.returncode == 0, stderr
        assert log_lines(handler_log) == [f"start {entry_id} 1", f"done {entry_id} 1"]
        assert r.xpending(stream, "g")["pending"] == 0  # acked
        assert "second stop request" not in stderr
        assert "Traceback" not in stderr

    def test_sigint_to_the_group_of_an_idle_worker_exits_0(
        self,
        r: redis.Redis,
        redis_url: str,
        stream: str,
        handler_log: Path,
        proc_cleanup: Callable[[subprocess.Popen[str]], subprocess.Popen[str]],
    ) -> None:
        # Nothing in flight: the worker stops at once, and uv's copy of the SIGINT
        # (forwarded 200 ms later) lands while the process is already exiting.
        make_group(r, stream, "g")
        proc = proc_cleanup(start_worker_uv(
            worker_env(redis_url, handler_log), "--stream", stream, "--group", "g",
            "--handler", "tests.integration.handlers:quick", "--consumer", "w-idle",
            "--block-ms", "100",
        ))  # fmt: skip
        # Its second connection is the first read's, opened after the signal handlers.
        wait_until(
            lambda: sum(c["name"] == "w-idle" for c in r.client_list()) >= 2,
            timeout=30,
            what="the worker to read",
        )

        os.killpg(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)

        assert proc.returncode == 0, stderr
        assert "second stop request" not in stderr
        assert "Traceback" not in stderr

    def test_a_second_sigint_well_after_the_first_stops_waiting(
        self,
        r: redis.Redis,
        redis_url: str,
        stream: str,
        handler_log: Path,
        proc_cleanup: Callable[[subprocess.Popen[str]], subprocess.Popen[str]],
    ) -> None:
        make_group(r, stream, "g")
        [entry_id] = add_entries(r, stream, 1)
        env = worker_env(redis_url, handler_log, ACKBOARD_TEST_SLEEP_S="60")
        proc = proc_cleanup(start_worker_uv(
            env, "--stream", stream, "--group", "g", "--handler", "tests.integration.handlers:slow",
            "--consumer", "w-twice", "--block-ms", "100", "--grace-seconds", "60",
        ))  # fmt: skip
        wait_until(lambda: log_lines(handler_log), timeout=30, what="the handler to start")

        started = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # a Ctrl-C: uv forwards it 200 ms later
        time.sleep(2.0)  # a window in which one Ctrl-C must not stop the worker
        assert proc.poll() is None, "one Ctrl-C must wait for the handler"
        os.killpg(proc.pid, signal.SIGINT)  # the second, deliberate one
        _, stderr = proc.communicate(timeout=30)

        assert proc.returncode == 0, stderr
        assert time.monotonic() - started < 20  # did not wait for the 60 s handler
        assert log_lines(handler_log) == [f"start {entry_id} 1"]
        [row] = pending_rows(r, stream)  # not acked: it stays pending for another worker
        assert row["message_id"].decode() == entry_id and row["consumer"] == b"w-twice"
        assert "second stop request" in stderr
