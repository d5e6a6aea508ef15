"""The public worker API: ``queue_core.__all__`` is the one list, and the docs keep to it.

Every name in ``__all__`` exists and is in the changelog; every ``from queue_core import``
that the docs, the README or the examples show a user names only ``__all__`` (a module
of the package, such as ``queue_core.selectors``, is the dashboard's and not shown there).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import queue_core

ROOT = Path(__file__).resolve().parents[2]

#: ``from queue_core import a, b`` or ``from queue_core import (\n a,\n b,\n)``.
IMPORT = re.compile(r"^\s*from queue_core import (\([^)]*\)|[^\n]+)", re.MULTILINE)


def imported_names(text: str) -> set[str]:
    names: set[str] = set()
    for match in IMPORT.finditer(text):
        body = re.sub(r"#[^\n]*", "", match.group(1)).strip("()")
        names.update(part.split(" as ")[0].strip() for part in body.split(","))
    return names - {""}


def user_facing_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "examples").glob("*.py"))]  # fmt: skip


class PublicApiTests:
    def test_every_name_in_all_exists(self) -> None:
        missing = [name for name in queue_core.__all__ if not hasattr(queue_core, name)]
        assert missing == []
        assert len(set(queue_core.__all__)) == len(queue_core.__all__)

    def test_the_docs_import_only_public_names(self) -> None:
        shown = {path.name: imported_names(path.read_text()) for path in user_facing_files()}
        assert "failure_recorded_async" in shown["worker.md"]  # the parser reads the docs
        outside = {name: sorted(names - set(queue_core.__all__)) for name, names in shown.items()}
        assert {name: names for name, names in outside.items() if names} == {}

    def test_every_public_name_is_in_the_changelog(self) -> None:
        changelog = (ROOT / "CHANGELOG.md").read_text()

        def noted(name: str) -> bool:  # `name`, or `base[_async]` for a sync/async pair
            return (
                f"`{name}`" in changelog or f"`{name.removesuffix('_async')}[_async]`" in changelog
            )

        assert [
            name for name in queue_core.__all__ if name != "__version__" and not noted(name)
        ] == []

    def test_the_version_is_the_distributions(self) -> None:
        with (ROOT / "pyproject.toml").open("rb") as f:
            project = tomllib.load(f)["project"]
        assert queue_core.__version__ == project["version"]
        assert f"## {project['version']}" in (ROOT / "CHANGELOG.md").read_text()

    def test_the_package_is_typed(self) -> None:
        assert (Path(queue_core.__file__).parent / "py.typed").is_file()

    def test_the_import_parser_reads_both_shapes(self) -> None:
        text = "from queue_core import Outcome, failure_recorded as fr\n" + (
            "from queue_core import (\n    Worker,  # the loop\n    process_entry,\n)\n"
        )
        assert imported_names(text) == {"Outcome", "failure_recorded", "Worker", "process_entry"}
