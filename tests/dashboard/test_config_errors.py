"""A configuration error is one clear line on stderr and exit code 2, never a traceback.

For ``manage.py`` (every command) and for the ASGI server (``daphne dashboard.asgi:
application``), each case in a subprocess with a clean environment, as an operator
would meet it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
KEY = "a-production-key-" + "q7Zx9" * 12


def _env(home: Path, **env: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "ACKBOARD_")) and k not in ("REDIS_URL", "VALKEY_URL")
    }
    base.update(DJANGO_SETTINGS_MODULE="dashboard.settings", ACKBOARD_HOME=str(home))
    base.update(env)
    return base


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def _one_line(out: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    assert lines[0].startswith("Error: ")
    return lines[0]


#: (environment, texts the one line must hold). The secret key is set unless the case
#: is about it.
CASES: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {
    "no secret key": ({}, ("DJANGO_SECRET_KEY is required",)),
    "database url scheme": (
        {"DJANGO_SECRET_KEY": KEY, "DATABASE_URL": "mongodb://db/ackboard"},
        ("DATABASE_URL must start with postgres://",),
    ),
    "database url malformed": (
        {"DJANGO_SECRET_KEY": KEY, "DATABASE_URL": "postgres://u:p@h:notaport/db"},
        ("DATABASE_URL is not a valid URL",),
    ),
    "number": (
        {"DJANGO_SECRET_KEY": KEY, "ACKBOARD_BULK_CAP": "1k"},
        ("ACKBOARD_BULK_CAP must be a whole number", "'1k'"),
    ),
    "negative number": (
        {"DJANGO_SECRET_KEY": KEY, "ACKBOARD_RETRY_IDLE_MS": "-5"},
        ("ACKBOARD_RETRY_IDLE_MS must be a whole number of at least 0",),
    ),
    "seconds": (
        {"DJANGO_SECRET_KEY": KEY, "ACKBOARD_LIVE_TICK": "fast"},
        ("ACKBOARD_LIVE_TICK must be a number",),
    ),
    "flag": (
        {"DJANGO_SECRET_KEY": KEY, "DJANGO_HTTPS": "flase"},
        ("DJANGO_HTTPS must be 1 or 0",),
    ),
    "redis url scheme": (
        {"DJANGO_SECRET_KEY": KEY, "REDIS_URL": "http://127.0.0.1:6379"},
        ("REDIS_URL must start with redis://",),
    ),
    "valkey url port": (
        {"DJANGO_SECRET_KEY": KEY, "VALKEY_URL": "redis://127.0.0.1:port/0"},
        ("VALKEY_URL is not a valid URL",),
    ),
    "log level": (
        {"DJANGO_SECRET_KEY": KEY, "ACKBOARD_LOG_LEVEL": "loud"},
        ("ACKBOARD_LOG_LEVEL must be",),
    ),
}


class ManageConfigErrorTests:
    @pytest.mark.parametrize("case", sorted(CASES))
    def test_migrate_says_what_is_wrong_in_one_line(self, case: str, tmp_path: Path) -> None:
        env, expected = CASES[case]
        out = _run([sys.executable, "manage.py", "migrate", "--noinput"], _env(tmp_path, **env))
        _one_line(out, *expected)

    def test_a_database_url_password_is_never_printed(self, tmp_path: Path) -> None:
        env = _env(tmp_path, DJANGO_SECRET_KEY=KEY, DATABASE_URL="postgres://u:hunter2@h:x/db")
        out = _run([sys.executable, "manage.py", "check"], env)
        assert "hunter2" not in _one_line(out, "DATABASE_URL")

    def test_every_command_not_only_migrate(self, tmp_path: Path) -> None:
        for command in (
            ["check"],
            ["createsuperuser", "--noinput"],
            ["grant_role", "x", "operator"],
        ):
            out = _run([sys.executable, "manage.py", *command], _env(tmp_path))
            _one_line(out, "DJANGO_SECRET_KEY is required")

    def test_traceback_flag_still_shows_the_traceback(self, tmp_path: Path) -> None:
        out = _run([sys.executable, "manage.py", "check", "--traceback"], _env(tmp_path))
        assert out.returncode != 0 and "Traceback" in out.stderr

    def test_help_needs_no_secret_key(self, tmp_path: Path) -> None:
        out = _run([sys.executable, "manage.py", "help"], _env(tmp_path))
        assert out.returncode == 0, out.stderr
        assert "grant_role" in out.stdout and "ingest_failures" in out.stdout
        out = _run([sys.executable, "manage.py", "migrate", "--help"], _env(tmp_path))
        assert out.returncode == 0 and "--noinput" in out.stdout, out.stderr

    def test_unreachable_redis_is_one_line_without_the_password(self, tmp_path: Path) -> None:
        url = f"redis://ops:hunter2@127.0.0.1:{free_port()}/0"
        env = _env(tmp_path, DJANGO_SECRET_KEY=KEY, REDIS_URL=url)
        out = _run([sys.executable, "manage.py", "ingest_failures", "--once"], env)
        line = _one_line(out, "cannot reach Redis at redis://ops:***@127.0.0.1:", "REDIS_URL")
        assert "hunter2" not in line


class AsgiConfigErrorTests:
    def test_daphne_without_a_secret_key_prints_one_line(self, tmp_path: Path) -> None:
        argv = [
            sys.executable,
            "-m",
            "daphne",
            "-p",
            str(free_port()),
            "dashboard.asgi:application",
        ]
        out = _run(argv, _env(tmp_path))
        _one_line(out, "DJANGO_SECRET_KEY is required")

    def test_daphne_with_a_bad_number_prints_one_line(self, tmp_path: Path) -> None:
        argv = [
            sys.executable,
            "-m",
            "daphne",
            "-p",
            str(free_port()),
            "dashboard.asgi:application",
        ]
        out = _run(argv, _env(tmp_path, DJANGO_SECRET_KEY=KEY, ACKBOARD_MAX_STREAMS="0"))
        _one_line(out, "ACKBOARD_MAX_STREAMS must be a whole number of at least 1")
