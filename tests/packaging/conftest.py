"""The built wheel and a fresh virtual environment holding it and its dependencies alone.

Both are built once per session: ``uv build --wheel`` from the checkout, then ``uv venv``
(no seed packages) and ``uv pip install`` of that wheel, which brings redis from uv's cache
or the package registry. No uv, or a build that fails, fails the tests that use them: the
wheel is what worker projects install, so it is never skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def uv_binary() -> str:
    """The uv running this suite (``uv run`` sets ``UV``), else the one on PATH."""
    found = os.environ.get("UV") or shutil.which("uv")
    if not found:
        pytest.fail("the packaging tests need uv on PATH (https://docs.astral.sh/uv/: "
                    "`pip install uv`); it builds the wheel and its fresh environment",
                    pytrace=False)  # fmt: skip
    return found


def uv(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``uv ARGS`` in ``cwd``; a non-zero exit fails the test with uv's own output."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run([uv_binary(), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"uv {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}",
                    pytrace=False)  # fmt: skip
    return done


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The worker library's wheel, built from this checkout."""
    out = tmp_path_factory.mktemp("dist")
    uv("build", "--wheel", "--quiet", "-o", str(out), cwd=ROOT)
    wheels = sorted(out.glob("ackboard-*.whl"))
    if len(wheels) != 1:
        pytest.fail(f"uv build made {[p.name for p in out.iterdir()]}, not one ackboard wheel",
                    pytrace=False)  # fmt: skip
    return wheels[0]


@pytest.fixture(scope="session")
def wheel_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The interpreter of a new virtual environment with only the wheel installed (and
    what it requires). Made outside the checkout, with this suite's Python."""
    place = tmp_path_factory.mktemp("wheel-venv")
    venv = place / "venv"
    uv("venv", "--no-project", "--no-config", "--python", sys.executable, "--quiet", str(venv),
       cwd=place)  # fmt: skip
    python = venv / "bin" / "python"
    uv("pip", "install", "--no-config", "--python", str(python), "--quiet", str(wheel),
       cwd=place)  # fmt: skip
    yield python
