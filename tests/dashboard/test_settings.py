"""Production settings: refuse to start without a secret key, and pass check --deploy."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "ACKBOARD_"))}
    base.update(env)
    base["DJANGO_SETTINGS_MODULE"] = "dashboard.settings"
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """The names dashboard/settings.py defines when read with ``env`` (and no other
    DJANGO_/ACKBOARD_ variable), evaluated in this process: for settings that are plain
    values, a ``manage.py`` process each would only add its start-up."""
    for name in list(os.environ):
        if name.startswith(("DJANGO_", "ACKBOARD_")) or name == "DATABASE_URL":
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "dashboard" / "settings.py"))


class ProductionSettingsTests:
    def test_refuses_to_start_without_secret_key(self) -> None:
        out = _manage("check")
        assert out.returncode != 0
        assert "DJANGO_SECRET_KEY is required" in out.stderr

    def test_passes_check_deploy(self, tmp_path: Path) -> None:
        out = _manage(
            "check",
            "--deploy",
            "--fail-level",
            "WARNING",
            DJANGO_SECRET_KEY="a-production-key-" + "q7Zx9" * 12,
            DJANGO_ALLOWED_HOSTS="ackboard.example.com",
            ACKBOARD_HOME=str(tmp_path),
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "no issues" in out.stdout

    def test_worker_commands_need_no_secret_key(self, tmp_path: Path) -> None:
        out = _manage("queue_worker", "--help", ACKBOARD_HOME=str(tmp_path))
        assert out.returncode == 0, out.stderr
        assert "--max-deliveries" in out.stdout

    def test_debug_runs_without_secret_key(self, tmp_path: Path) -> None:
        out = _manage("check", DJANGO_DEBUG="1", ACKBOARD_HOME=str(tmp_path))
        assert out.returncode == 0, out.stderr

    def test_production_sends_the_policy_and_throttles_logins(self, tmp_path: Path) -> None:
        show = (
            "import json; from django.conf import settings; from csp.utils import build_policy;"
            "print(json.dumps([build_policy(), settings.AXES_ENABLED, settings.AXES_FAILURE_LIMIT,"
            " settings.AXES_COOLOFF_TIME.total_seconds(), settings.ACKBOARD_TRUSTED_PROXIES,"
            " settings.MIDDLEWARE[-1], settings.AUTHENTICATION_BACKENDS[0]]))"
        )
        key = "a-production-key-" + "q7Zx9" * 12
        out = _manage(
            "shell", "--no-imports", "-c", show, DJANGO_SECRET_KEY=key, ACKBOARD_HOME=str(tmp_path)
        )
        assert out.returncode == 0, out.stderr
        policy, enabled, limit, cooloff, proxies, last, first = json.loads(out.stdout)
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
        assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
        assert directives["object-src"] == directives["frame-ancestors"] == "'none'"
        assert "unsafe" not in policy
        assert (enabled, limit, cooloff, proxies) == (True, 5, 900.0, 0)
        assert (last, first) == (
            "axes.middleware.AxesMiddleware",
            "axes.backends.AxesStandaloneBackend",
        )
        tuned = _manage(
            "shell", "--no-imports", "-c", show, DJANGO_SECRET_KEY=key, ACKBOARD_HOME=str(tmp_path),
            ACKBOARD_LOGIN_FAILURE_LIMIT="7", ACKBOARD_LOGIN_COOLOFF_MINUTES="30",
            DJANGO_BEHIND_PROXY="1", DJANGO_PROXY_COUNT="2",
        )  # fmt: skip
        assert tuned.returncode == 0, tuned.stderr
        assert json.loads(tuned.stdout)[2:5] == [7, 1800.0, 2]

    def test_migrate_creates_the_throttle_tables(self, tmp_path: Path) -> None:
        env = {"DJANGO_DEBUG": "1", "ACKBOARD_HOME": str(tmp_path)}
        assert _manage("migrate", "--noinput", **env).returncode == 0
        out = _manage("showmigrations", "axes", **env)
        assert out.returncode == 0, out.stderr
        applied = [line for line in out.stdout.splitlines() if line.strip().startswith("[")]
        assert applied and all(line.strip().startswith("[X]") for line in applied), out.stdout

    def test_database_connections_are_pooled_or_closed_at_the_request_end(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """PostgreSQL: psycopg's pool, which a request's end (CONN_MAX_AGE 0) hands its
        connection back to; SQLite: Django's own engine, closed at each request's end."""

        def db(**more: str) -> list[Any]:
            key = "a-production-key-" + "q7Zx9" * 12
            found = _settings(
                monkeypatch, DJANGO_SECRET_KEY=key, ACKBOARD_HOME=str(tmp_path), **more
            )["DATABASES"]["default"]
            return [found["CONN_MAX_AGE"], found.get("OPTIONS", {}).get("pool"), found["ENGINE"]]

        # Settings only: nothing connects to this address.
        url = "postgres://ackboard:secret@127.0.0.1:1/ackboard"
        assert db(DATABASE_URL=url) == [
            0,
            {"min_size": 1, "max_size": 20, "timeout": 3},
            "django.db.backends.postgresql",
        ]
        assert db(DATABASE_URL=url, ACKBOARD_DB_POOL_SIZE="6")[1]["max_size"] == 6
        assert db(DATABASE_URL=url, ACKBOARD_DB_POOL_SIZE="0") == [
            0, None, "django.db.backends.postgresql"
        ]  # fmt: skip
        assert db() == [0, None, "django.db.backends.sqlite3"]
