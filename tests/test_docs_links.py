"""Every relative link in the README and docs/ points at a file that exists, and every
``#anchor`` at a heading of that file (GitHub's heading ids), so that moving or renaming a
page or a heading fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The page without code blocks and code spans, where brackets are not links."""
    return _CODE.sub("", _FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The heading ids GitHub gives a page: lowercased, punctuation dropped, spaces to
    hyphens, a repeated id suffixed -1, -2, …"""
    seen: dict[str, int] = {}
    ids = set()
    for title in _HEADING.findall(_FENCE.sub("", page.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


def links(page: Path) -> list[str]:
    return [t for t in _LINK.findall(_prose(page.read_text())) if not re.match(r"\w+:", t)]


class DocsLinksTests:
    def test_the_pages_are_found(self) -> None:
        assert ROOT / "README.md" in PAGES
        assert len(PAGES) > 1

    @pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
    def test_every_relative_link_resolves(self, page: Path) -> None:
        broken = []
        for target in links(page):
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{target}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{target}: no such heading")
        assert broken == []

    def test_the_slugs_follow_github(self, tmp_path: Path) -> None:
        page = tmp_path / "p.md"
        page.write_text("# Edit & replay\n## Use it\n## Use it\n```\n# not a heading\n```\n")
        assert anchors(page) == {"edit--replay", "use-it", "use-it-1"}
