"""dashboard.asgi: the production application, loaded as a server loads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_loaded_application_is_kept_out_of_the_collectors_sight(tmp_path: Path) -> None:
    """After loading, the process's objects are frozen (``gc.freeze``): a full collection
    no longer walks Django and the apps on some request every few hundred."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "ACKBOARD_"))}
    env |= {
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "DJANGO_SECRET_KEY": "a-production-key-" + "q7Zx9" * 12,
        "ACKBOARD_HOME": str(tmp_path),
    }
    code = (
        "import gc; before = gc.get_freeze_count(); import dashboard.asgi; "
        "print(before, gc.get_freeze_count(), len(gc.get_objects()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    before, frozen, tracked = map(int, out.stdout.split())
    assert before == 0
    assert frozen > 50_000  # Django and the apps
    assert tracked < frozen // 10  # what the collector still walks
