"""The entry page's fields are paged (dashboard.views.payloads.fields_page): an entry of many
fields, or of many large values, costs one page's work; the page says how many more there
are and links to them; the dead-letter rows and the pending table's preview are bounded
the same way."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
from django.test import Client
from django.urls import reverse

from dashboard.views import payloads
from queue_core.keys import stream_keys
from tests.html import element_text

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("page_settings")]


def _field_names(page: str) -> list[str]:
    """The names of the fields the page shows, in order."""
    listing = page.split('<dl class="fields">', 1)[1].split("</dl>", 1)[0]
    return [chunk.split("</span>", 1)[0] for chunk in listing.split('<dt><span class="mono">')[1:]]


class EntryFieldsPageTests:
    def test_an_entry_of_many_fields_shows_one_page_and_links_the_next(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        n, shown = 5_000, payloads.PAGE_FIELDS
        entry_id = r.xadd(stream, {f"f{i:05d}": f"v{i}" for i in range(n)}).decode()
        url = reverse("dashboard:entry-detail", args=[stream, entry_id])
        page = viewer.get(url).content.decode()
        assert _field_names(page) == [f"f{i:05d}" for i in range(shown)]
        assert element_text(page, "fields-range") == f"Fields 1–{shown} of {n}"
        assert element_text(page, "fields-more") == f"{n - shown} more fields · next fields"
        following = viewer.get(url, {"fields_from": str(shown)}).content.decode()
        assert _field_names(following) == [f"f{i:05d}" for i in range(shown, 2 * shown)]
        assert element_text(following, "fields-range") == (
            f"Fields {shown + 1}–{2 * shown} of {n} · first fields"
        )
        last = viewer.get(url, {"fields_from": str(n - 1)}).content.decode()
        assert _field_names(last) == [f"f{n - 1:05d}"]
        assert 'id="fields-more"' not in last

    def test_a_small_entry_shows_every_field_without_paging(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        entry_id = r.xadd(stream, {"a": "1", "b": "2"}).decode()
        page = viewer.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
        text = page.content.decode()
        assert _field_names(text) == ["a", "b"]
        assert 'id="fields-range"' not in text and 'id="fields-more"' not in text

    def test_fields_whose_names_repeat_are_each_shown_as_stored(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        # Redis keeps both ``a`` fields; a dict (redis-py's parse) would keep only the last.
        entry_id = r.execute_command("XADD", stream, "*", "a", "1", "b", "2", "a", "3")  # type: ignore[no-untyped-call]
        entry_id = entry_id.decode()
        page = viewer.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
        assert _field_names(page.content.decode()) == ["a", "b", "a"]

    def test_large_values_stop_the_page_at_its_character_budget(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        big = "x" * payloads.MAX_CHARS
        entry_id = r.xadd(stream, {f"f{i:02d}": big for i in range(20)}).decode()
        page = viewer.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
        assert page.status_code == 200
        text = page.content.decode()
        shown = len(_field_names(text))
        assert 0 < shown < 20
        assert len(page.content) < 3 * payloads.PAGE_FIELD_CHARS  # not 20 values x 2 copies
        assert element_text(text, "fields-more") == f"{20 - shown} more fields · next fields"

    def test_a_bad_fields_from_is_400_and_one_past_the_end_says_so(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        entry_id = r.xadd(stream, {"a": "1"}).decode()
        url = reverse("dashboard:entry-detail", args=[stream, entry_id])
        for bad in ("-1", "x", "1" * 40, "1.5"):
            assert viewer.get(url, {"fields_from": bad}).status_code == 400, bad
        beyond = viewer.get(url, {"fields_from": "5"}).content.decode()
        listing = beyond.split('<dl class="fields">', 1)[1].split("</dl>", 1)[0]
        assert " ".join(listing.split()).endswith(
            '<p class="muted">No fields from field 6: the entry has 1.</p>'
        )


class DeadLetterRowFieldsTests:
    def test_a_dead_letter_of_many_fields_shows_the_first_and_says_how_many_more(
        self, viewer: Client, r: redis.Redis, stream: str
    ) -> None:
        r.xadd(stream, {"x": "1"})
        n = 500
        r.xadd(stream_keys(stream).dlq, {f"f{i:03d}": "v" for i in range(n)})
        page = viewer.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert _field_names(page) == [f"f{i:03d}" for i in range(payloads.DLQ_ROW_FIELDS)]
        more = page.split('<p class="muted fields-more">', 1)[1].split("</p>", 1)[0]
        assert more == f"{n - payloads.DLQ_ROW_FIELDS} more fields not shown here"


class PreviewBoundTests:
    def test_the_preview_reads_only_the_fields_it_can_show(self) -> None:
        read = 0

        def fields() -> Iterator[tuple[bytes, bytes]]:
            nonlocal read
            for i in range(50_000):
                read += 1
                yield f"f{i}".encode(), b""

        line = payloads.preview(fields())
        assert line.startswith("f0= f1= ") and line.endswith("…")
        assert len(line) == payloads.PREVIEW_CHARS
        assert read <= payloads.PREVIEW_CHARS


class FieldsPageTests:
    def test_a_page_ends_before_a_value_its_json_budget_cannot_parse(self) -> None:
        doc = json.dumps({"items": ["x" * 100] * 2_900}).encode()  # ~300 KB of JSON
        assert payloads.PREVIEW_JSON_BYTES < len(doc) < payloads.PRETTY_JSON_BYTES
        fields = [(f"f{i}".encode(), doc) for i in range(4)]
        page = payloads.fields_page(fields, budget=payloads.DecodeBudget(total=700_000))
        assert [f.name for f in page] == ["f0", "f1"] and all(f.is_json for f in page)
        assert page.more == 2
        following = payloads.fields_page(fields, start=page.end)
        assert [f.name for f in following] == ["f2", "f3"] and all(f.is_json for f in following)
