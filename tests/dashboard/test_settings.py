"""Production settings: refuse to start without a secret key, and pass check --deploy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
