"""The long-running commands stop when their whole process group is signalled.

A service manager signals every process of the service (systemd's default
``KillMode=control-group``), and so does ``timeout``: under ``uv run`` the command then
gets the signal twice, from the group and from uv forwarding it. A handler that sets a
``threading.Event`` itself can hang there: the second signal, landing inside the first
handler's ``Event.set``, blocks on the event's own lock, and every later SIGTERM is
ignored until the command is killed. The long-running commands (``run_jobs``,
``ingest_failures``, ``sample_rates``, ``send_alerts``) use
``dashboard.runtime.stop_signals``' handlers, which never do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.waiting import wait_until

pytestmark = [pytest.mark.production, pytest.mark.one_engine]

ROOT = Path(__file__).resolve().parents[2]

#: Each command, its arguments, and the line it prints once it runs its loop.
COMMANDS = {
    "run_jobs": (("run_jobs", "--poll", "0.05"), "Ctrl-C stops"),
    "ingest_failures": (("ingest_failures", "--poll", "0.05"), "Ctrl-C to stop"),
    "sample_rates": (("sample_rates",), "Ctrl-C stops"),
    "send_alerts": (("send_alerts", "--interval", "1"), "Ctrl-C stops"),
}


#: Start-and-signal rounds per command.
TRIES = 2


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "ACKBOARD_"))}
    env.pop("VALKEY_URL", None)
    env.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        DJANGO_SECRET_KEY="signals-test-" + "k7Qx2" * 10,
        DATABASE_URL=f"sqlite:///{tmp / 'db.sqlite3'}",
        ACKBOARD_HOME=str(tmp),
    )
    return env


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated database for the three commands (each only reads it)."""
    tmp = tmp_path_factory.mktemp("signals")
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT, env=_env(tmp), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tmp


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_under_uv_stops_when_its_process_group_is_signalled(
    command: str, redis_url: str, prefix: str, tmp_path: Path, migrated: Path
) -> None:
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH (the README's test command runs under it)"
    env = _env(migrated)
    env.update(
        REDIS_URL=redis_url,
        ACKBOARD_STREAMS=prefix + "*",
        ACKBOARD_SAMPLER_LEASE_KEY=prefix + "sampler",
        ACKBOARD_SAMPLER_INTERVAL_S="0.1",
        ACKBOARD_ALERTS_KEY=prefix + "alerts",
    )
    args, ready = COMMANDS[command]
    # The race needs the second signal inside the first handler: more than one try, so a
    # handler that can block is caught on most runs (the helper's own test is exact).
    for attempt in range(TRIES):
        _start_and_signal(uv, args, ready, env, tmp_path / f"out-{attempt}.log", command)


def _start_and_signal(
    uv: str, args: tuple[str, ...], ready: str, env: dict[str, str], out: Path, command: str
) -> None:
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [uv, "run", "--no-sync", "python", "manage.py", *args],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:

        def started() -> bool:
            assert proc.poll() is None, out.read_text(errors="replace")
            return ready in out.read_text(errors="replace")

        wait_until(started, timeout=60, interval=0.05, what=f"{command} to start")
        time.sleep(0.3)  # past its "ready" line, into its loop (which prints nothing)
        # As ``timeout`` does: uv first (it forwards the signal), then the whole group.
        proc.send_signal(signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command} did not stop on SIGTERM:\n{out.read_text()}")
        # Nothing of the group is left (the command itself, not only uv, has exited).

        def group_gone() -> bool:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_until(group_gone, timeout=5, interval=0.05, what=f"{command}'s group to exit")
        assert "Traceback" not in out.read_text(errors="replace")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
