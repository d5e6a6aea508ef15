"""Read the element a test cares about out of a rendered page.

Pages print times, dates, ports and generated ids, so a test that searches the whole page
for a short string can match one of those on some day of the year. These helpers return
the text of one element, or the cells of the rows of one table, so assertions target the
element that matters.
"""

from __future__ import annotations

from html.parser import HTMLParser

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}


class _Rows(HTMLParser):
    """Collects ``<tr id="{prefix}…">`` rows as lists of cell texts."""

    def __init__(self, prefix: str) -> None:
        super().__init__(convert_charrefs=True)
        self.prefix = prefix
        self.rows: dict[str, list[str]] = {}
        self._row: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            row_id = dict(attrs).get("id") or ""
            self._row = row_id if row_id.startswith(self.prefix) else None
            if self._row is not None:
                self.rows[self._row] = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self.rows[self._row].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def table_rows(page: str, id_prefix: str) -> dict[str, list[str]]:
    """The rows whose id starts with ``id_prefix``: row id -> texts of its cells, in order."""
    parser = _Rows(id_prefix)
    parser.feed(page)
    parser.close()
    return parser.rows


class _ById(HTMLParser):
    """The text inside the first element with a given id (or another attribute's value)."""

    def __init__(self, element_id: str, attr: str = "id") -> None:
        super().__init__(convert_charrefs=True)
        self.element_id = element_id
        self.attr = attr
        self.depth = 0
        self.found = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            return
        if self.depth:
            self.depth += 1
        elif not self.found and dict(attrs).get(self.attr) == self.element_id:
            self.found = True
            self.depth = 1

    def handle_endtag(self, tag: str) -> None:
        if self.depth and tag not in _VOID:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.text.append(data)


def element_text(page: str, element_id: str) -> str:
    """Whitespace-folded text of the element with ``id=element_id``; AssertionError if absent."""
    parser = _ById(element_id)
    parser.feed(page)
    parser.close()
    assert parser.found, f"no element with id={element_id!r} in the page"
    return " ".join("".join(parser.text).split())


def labelled_text(page: str, label: str) -> str:
    """Whitespace-folded text of the first element with ``aria-label=label`` (a dialog)."""
    parser = _ById(label, attr="aria-label")
    parser.feed(page)
    parser.close()
    assert parser.found, f"no element with aria-label={label!r} in the page"
    return " ".join("".join(parser.text).split())


def attribute_text(page: str, attr: str, value: str) -> str:
    """Whitespace-folded text of the first element with ``attr=value``; AssertionError if
    absent."""
    parser = _ById(value, attr=attr)
    parser.feed(page)
    parser.close()
    assert parser.found, f"no element with {attr}={value!r} in the page"
    return " ".join("".join(parser.text).split())
