"""One ``manage.py queue_worker`` process for a test: consumer ``w1`` of group ``g``, in a
session of its own (so ``os.killpg`` can end it and what it started), with short block and
heartbeat intervals. Its handler writes ``done <id> …`` lines to ``log``
(tests/integration/handlers.py and cause_handlers.py), its stderr goes to a file.

Used by the process tests of a worker's stopped heartbeat and of the admin refusals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.test_worker_cli import worker_env

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """Start with ``start()``; ``stop()`` asserts a clean SIGTERM exit, ``terminate()``
    returns the exit code, ``kill()`` (SIGKILL to its session) is safe to call always."""

    def __init__(
        self,
        redis_url: str,
        stream: str,
        tmp_path: Path,
        *,
        handler: str,
        args: tuple[str, ...] = (),
        **env: str,
    ) -> None:
        self.stream, self.handler, self.args = stream, handler, args
        self.log = tmp_path / "handler.log"
        self.log.touch()
        self.env = worker_env(redis_url, self.log, **env)
        self.stderr = tmp_path / "w1.err"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "queue_worker", "--stream", self.stream,
             "--group", "g", "--handler", self.handler, "--consumer", "w1", "--block-ms", "100",
             "--heartbeat-ms", "200", "--grace-seconds", "5", *self.args],
            cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=self.stderr.open("wb"),
            start_new_session=True,
        )  # fmt: skip

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> int:
        """SIGTERM to the worker; its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM, a clean exit (0, no traceback)."""
        assert self.terminate() == 0, self.err()
        assert "Traceback" not in self.err()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def err(self) -> str:
        return self.stderr.read_text(errors="replace")

    def done(self) -> list[str]:
        """The ids the handler completed, in order (an id once per delivery it completed)."""
        rows = [line.split() for line in self.log.read_text().splitlines()]
        return [row[1] for row in rows if len(row) > 1 and row[0] == "done"]
