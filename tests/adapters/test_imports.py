"""Each adapter imports only its own framework (one extra installed is enough), and none
imports Django."""

from __future__ import annotations

import subprocess
import sys

import pytest

OTHERS = {"faststream": "taskiq", "taskiq": "faststream"}


class AdapterImportTests:
    @pytest.mark.parametrize("framework", sorted(OTHERS))
    def test_an_adapter_imports_only_its_framework(self, framework: str) -> None:
        code = (
            f"import sys, queue_core.adapters.{framework}\n"
            f"print('django' in sys.modules, '{OTHERS[framework]}' in sys.modules, "
            f"'{framework}' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)  # fmt: skip
        assert out.stdout.split() == ["False", "False", "True"]

    def test_the_package_imports_no_framework(self) -> None:
        code = (
            "import sys, queue_core.adapters\n"
            "print('faststream' in sys.modules or 'taskiq' in sys.modules)"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)  # fmt: skip
        assert out.stdout.split() == ["False"]
