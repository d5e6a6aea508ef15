"""Payload rendering: escaped-safe text, binary bytes, JSON, truncation and redaction."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from dashboard.display.durations import human_ms
from dashboard.display.escaping import bytes_text
from dashboard.templatetags.ackboard import copy_button, duration_span
from dashboard.views import payload_json, payloads, redaction
from queue_core import services
from tests.factories import add_entries, make_group


class BytesTextTests:
    def test_utf8_is_kept(self) -> None:
        assert bytes_text("ünï 流".encode()) == ("ünï 流", False)

    def test_invalid_utf8_is_escaped(self) -> None:
        text, binary = bytes_text(b"ok\xff\xfe\x00")
        assert binary is True
        assert text == "ok\\xff\\xfe\\x00"

    def test_control_characters_are_escaped(self) -> None:
        text, binary = bytes_text(b"a\x1b[31mred\x00\tb\nc")
        assert binary is False
        assert text == "a\\x1b[31mred\\x00\tb\nc"


class FieldViewTests:
    def test_json_is_pretty_printed(self) -> None:
        view = payloads.field_view(b"payload", b'{"a":1,"b":[1,2]}')
        assert view.is_json
        assert view.shown == json.dumps({"a": 1, "b": [1, 2]}, indent=2)

    def test_long_values_are_cut_with_the_rest_expandable(self) -> None:
        value = b"x" * (payloads.SHOWN_CHARS + 10)
        view = payloads.field_view(b"big", value)
        assert view.truncated
        assert len(view.shown) == payloads.SHOWN_CHARS
        assert view.full == value.decode()
        assert view.size == len(value)

    def test_huge_values_are_clipped(self) -> None:
        view = payloads.field_view(b"huge", b"y" * (payloads.MAX_CHARS * 2))
        assert view.clipped
        assert view.full is not None and len(view.full) == payloads.MAX_CHARS

    def test_secret_named_fields_are_redacted(self, settings: Any) -> None:
        for name in (b"password", b"API_TOKEN", b"client_secret", b"ssh_key"):
            view = payloads.field_view(name, b"hunter2")
            assert view.redacted and "hunter2" not in view.shown
        assert not payloads.field_view(b"amount", b"12").redacted

    def test_secrets_inside_json_are_redacted(self) -> None:
        view = payloads.field_view(b"payload", b'{"user": "ann", "auth": {"Password": "p"}}')
        assert '"Password": "' + redaction.REDACTED in view.shown
        assert '"p"' not in view.shown and view.redacted

    def test_pattern_is_configurable(self, settings: Any) -> None:
        settings.ACKBOARD_REDACT_PATTERN = r"^card$"
        assert payloads.field_view(b"card", b"4111").redacted
        assert not payloads.field_view(b"password", b"p").redacted


class DecodeBudgetTests:
    """A table of many entries shares one budget of full JSON parsing (PAGE_JSON_BYTES)."""

    def test_large_documents_are_parsed_while_the_page_budget_lasts(self) -> None:
        doc = json.dumps({"items": ["x" * 100] * 9_000, "api_token": "s3cr3t"}).encode()
        assert payloads.PREVIEW_JSON_BYTES < len(doc) < payloads.PAGE_JSON_BYTES // 3
        budget = payloads.DecodeBudget()
        views = [payloads.field_view(b"body", doc, budget=budget) for _ in range(6)]
        parsed = [v.is_json for v in views]
        fits = payloads.PAGE_JSON_BYTES // len(doc)
        assert parsed == [True] * fits + [False] * (6 - fits)
        # Past the budget the value is withheld whole, never shown unredacted.
        assert all("s3cr3t" not in v.shown and v.redacted for v in views)

    def test_small_values_never_spend_the_budget(self) -> None:
        budget = payloads.DecodeBudget(total=0)
        view = payloads.field_view(b"body", b'{"a": [1, 2, 3]}', budget=budget)
        assert view.is_json and budget.left == 0

    def test_without_a_budget_each_value_gets_the_full_allowance(self) -> None:
        doc = json.dumps({"items": ["x" * 100] * 9_000}).encode()
        assert all(payloads.field_view(b"body", doc).is_json for _ in range(6))


class PreviewTests:
    def test_one_line_compact_and_cut(self) -> None:
        line = payloads.preview([(b"payload", b'{\n "a": 1\n}'), (b"n", b"2")])
        assert line == 'payload={"a":1} n=2'
        long = payloads.preview([(b"v", b"z" * 1000)])
        assert len(long) == payloads.PREVIEW_CHARS and long.endswith("…")

    def test_preview_redacts(self) -> None:
        line = payloads.preview([(b"token", b"abc"), (b"payload", b'{"secret": "s"}')])
        assert "abc" not in line and '"s"' not in line
        assert redaction.REDACTED in line


class TemplateEscapingTests:
    def test_fields_template_escapes_everything(self) -> None:
        fields = payloads.fields_view([(b"<b>name</b>", b"<script>alert(1)</script>")])
        html = render_to_string("dashboard/_fields.html", {"fields": fields})
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "&lt;b&gt;name&lt;/b&gt;" in html
        assert "<script>" not in html


class DurationTests:
    def test_human_durations(self) -> None:
        cases = {
            0: "0 ms",
            999: "999 ms",
            12_345: "12 s",
            200_000: "3 min 20 s",
            3_600_000: "1 h",
            3_660_000: "1 h 1 min",
            90_000_000: "1 d 1 h",
        }
        assert {ms: human_ms(ms) for ms in cases} == cases

    def test_exact_value_on_hover(self) -> None:
        html = str(duration_span(200_000))
        assert 'title="200,000 ms"' in html and ">3 min 20 s<" in html

    def test_copy_button_escapes(self) -> None:
        html = str(copy_button('a"<b>'))
        assert 'data-copy="a&quot;&lt;b&gt;"' in html


# --- hostile payloads -------------------------------------------------------------------

DEEP = b"[" * 5000 + b"]" * 5000
DEEP_OBJECT = b'{"a":' * 800 + b"1" + b"}" * 800
HUGE_INT = b'{"n": ' + b"9" * 100_000 + b"}"


def _rendered(views: list[payloads.FieldView]) -> str:
    """The entry-page HTML of ``views``: what a browser receives."""
    return render_to_string("dashboard/_fields.html", {"fields": views})


class HostileShapeTests:
    """Every shape decodes without raising, as escaped text with a short note."""

    def test_deep_nesting_is_text_with_a_note(self) -> None:
        for value in (DEEP, DEEP_OBJECT, b"[" * 100_000):
            view = payloads.field_view(b"payload", value)
            assert not view.is_json
            assert view.note == "shown as text: nested deeper than 64 levels"
            assert view.shown.startswith("[[[[" if value[:1] == b"[" else '{"a":{"a":')
            assert payloads.preview([(b"payload", value)]).startswith("payload=")
            assert "nested deeper than 64 levels" in _rendered([view])

    def test_depth_bound_is_exact(self) -> None:
        at_bound = b"[" * payload_json.MAX_DEPTH + b"]" * payload_json.MAX_DEPTH
        assert payloads.field_view(b"p", at_bound).is_json
        over = b"[" * (payload_json.MAX_DEPTH + 1) + b"]" * (payload_json.MAX_DEPTH + 1)
        assert not payloads.field_view(b"p", over).is_json
        # Brackets inside strings are not nesting.
        in_string = b'["' + b"[" * 1000 + b'"]'
        assert payloads.field_view(b"p", in_string).is_json

    def test_huge_numbers_are_text_with_a_note(self) -> None:
        view = payloads.field_view(b"payload", HUGE_INT)
        assert not view.is_json
        assert view.note == "shown as text: a number longer than 4000 digits"
        out_of_range = payloads.field_view(b"payload", b'{"n": 1e999}')
        assert out_of_range.note == "shown as text: a number out of range"
        assert payloads.preview([(b"payload", HUGE_INT)]).startswith('payload={"n": 999')

    def test_nan_and_infinity_are_shown_as_written(self) -> None:
        view = payloads.field_view(b"payload", b'{"a": NaN, "b": -Infinity}')
        assert view.is_json and view.shown == '{\n  "a": NaN,\n  "b": -Infinity\n}'

    def test_lone_surrogate_escapes_stay_encodable(self) -> None:
        view = payloads.field_view(b"payload", b'{"a": "\\ud800x"}')
        html = _rendered([view])
        html.encode("utf-8")  # a lone surrogate here would make the response a 500
        assert "\\ud800x" in view.shown
        assert payloads.preview([(b"p", b'["\\udfff"]')]).encode("utf-8")

    def test_html_in_keys_and_values_is_escaped(self) -> None:
        value = b'{"<img src=x onerror=alert(1)>": "<script>alert(2)</script>"}'
        html = _rendered(payloads.fields_view([(b"<b>p</b>", value)]))
        assert "<img" not in html and "<script" not in html and "<b>" not in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html

    def test_json_with_invalid_bytes_is_still_parsed(self) -> None:
        view = payloads.field_view(b"payload", b'{"name": "Jos\xe9"}')
        assert view.is_json and view.binary
        assert view.shown == '{\n  "name": "Jos\\xe9"\n}'

    def test_bom_and_leading_whitespace_are_skipped(self) -> None:
        for value in (b'\xef\xbb\xbf{"a": 1}', b" " * 5000 + b'{"a": 1}', b'\n\t {"a": 1}'):
            view = payloads.field_view(b"payload", value)
            assert view.is_json and view.shown == '{\n  "a": 1\n}', value[:10]

    def test_utf16_json_is_decoded(self) -> None:
        for value in ('{"a": "ü"}'.encode("utf-16"), '{"a": "ü"}'.encode("utf-16-le")):
            view = payloads.field_view(b"payload", value)
            assert view.is_json and view.shown == '{\n  "a": "ü"\n}'


MARK = "ZQ7MARKER"


class FailClosedRedactionTests:
    """A secret is never shown because of how its JSON was encoded."""

    SECRET_DOCS = (
        b'\xef\xbb\xbf{"user": "ann", "password": "' + MARK.encode() + b'"}',
        b'{"user": "Jos\xe9", "password": "' + MARK.encode() + b'"}',
        b" " * 3000 + b'{"password": "' + MARK.encode() + b'"}',
        ('{"password": "' + MARK + '"}').encode("utf-16"),
        ('{"password": "' + MARK + '"}').encode("utf-16-le"),
        b'{"password": "' + MARK.encode() + b'", "cut": ',  # not valid JSON
        b'{"pass\\u0077ord": "' + MARK.encode() + b'", ',  # invalid, escaped key
        b'{"n": ' + b"9" * 100_000 + b', "token": "' + MARK.encode() + b'"}',
        b"[" * 200 + b'{"secret": "' + MARK.encode() + b'"}' + b"]" * 200,
        b'{"payload": "{\\"api_key\\": \\"' + MARK.encode() + b'\\"}"}',  # JSON in a string
        b'"{\\"token\\": \\"' + MARK.encode() + b'\\"}"',  # a JSON string of JSON
        b'{"payload": "{\\"api_key\\": \\"' + MARK.encode() + b'\\""}',  # invalid inner
        b'{"{\\"password\\": \\"' + MARK.encode() + b'\\"}": 1}',  # a key holding JSON
        b"{'password': '" + MARK.encode() + b"'}",  # a Python repr
        b'[INFO] sent {"token": "' + MARK.encode() + b'"}',  # JSON after text
    )

    def test_entry_page_never_shows_the_secret(self) -> None:
        for value in self.SECRET_DOCS:
            view = payloads.field_view(b"payload", value)
            assert MARK not in view.shown and MARK not in (view.full or ""), value[:60]
            assert view.redacted, value[:60]
            assert MARK not in _rendered([view])

    def test_previews_never_show_the_secret(self) -> None:
        for value in self.SECRET_DOCS:
            for chars in (20, payloads.PREVIEW_CHARS, 10_000):
                line = payloads.preview([(b"payload", value)], chars=chars)
                assert MARK not in line, value[:60]

    def test_unparsable_without_a_redacted_key_is_shown(self) -> None:
        view = payloads.field_view(b"payload", b'{"user": "ann", "cut": ')
        assert view.shown == '{"user": "ann", "cut": ' and not view.redacted

    def test_inner_json_keeps_its_other_values(self) -> None:
        view = payloads.field_view(
            b"payload", b'{"payload": "{\\"user\\": \\"ann\\", \\"token\\": \\"t\\"}"}'
        )
        assert view.is_json and "ann" in view.shown and '\\"t\\"' not in view.shown


@pytest.fixture
def operator(
    client: Client, django_user_model: Any, settings: Any, redis_url: str, prefix: str
) -> Client:
    """A superuser (every button shown) on pages that list only this test's streams."""
    settings.ACKBOARD_REDIS_URL = redis_url
    settings.ACKBOARD_STREAMS = (prefix + "*",)
    client.force_login(django_user_model.objects.create_superuser("op", password="pw"))
    return client


HOSTILE_FIELDS: dict[str, bytes] = {
    "deep": DEEP,
    "deep_object": DEEP_OBJECT,
    "huge_int": HUGE_INT,
    "huge": b"x" * 3_000_000,
    "huge_json": b'{"a": "' + b"y" * 3_000_000 + b'"}',
    "binary": b"\xff\xfe\x00\x1b[31m\x80",
    "html": b'<img src=x onerror="window.__pwned=1"><script>alert(1)</script>',
    "nan": b'{"a": NaN, "b": Infinity}',
    "surrogate": b'{"a": "\\ud800"}',
    "in_string": b'{"payload": "{\\"token\\": \\"' + MARK.encode() + b'\\"}"}',
}


@pytest.mark.django_db
class HostilePageTests:
    """One hostile payload costs only its own row: every page answers 200 with its buttons."""

    def _seed(self, r: redis.Redis, stream: str, values: list[bytes]) -> list[str]:
        make_group(r, stream, "g")
        ids = [r.xadd(stream, {"payload": v, "n": b"1"}).decode() for v in values]
        r.xreadgroup("g", "c", {stream: ">"})
        # The first one is dead-lettered too, so the DLQ page shows it beside the others.
        for entry_id in ids[:1]:
            services.entry_dead_letter(
                client=r, stream=stream, group="g", entry_id=entry_id, reason="poison"
            )
        return ids

    def _pages(self, stream: str, entry_id: str) -> list[str]:
        return [
            reverse("dashboard:stream-detail", args=[stream]),
            reverse("dashboard:group-detail", args=[stream, "g"]),
            reverse("dashboard:entry-detail", args=[stream, entry_id]),
            reverse("dashboard:dlq", args=[stream]),
        ]

    @pytest.mark.parametrize("shape", sorted(HOSTILE_FIELDS))
    def test_every_page_renders_beside_a_hostile_entry(
        self, operator: Client, r: redis.Redis, prefix: str, shape: str
    ) -> None:
        stream = f"{prefix}{shape}"
        first, _ = self._seed(r, stream, [HOSTILE_FIELDS[shape], b'{"ok": 1}'])
        for url in self._pages(stream, first):
            response = operator.get(url)
            assert response.status_code == 200, url
            html = response.content.decode()
            assert MARK not in html, url
            assert "<script>alert(1)" not in html and "<img src=x" not in html, url
        dlq = operator.get(reverse("dashboard:dlq", args=[stream])).content.decode()
        assert re.search(r"<button[^>]*>Replay</button>", dlq)
        assert re.search(r"<button[^>]*>Delete</button>", dlq)
        assert re.search(r"<button[^>]*>Purge</button>", dlq)

    def test_deep_payload_shows_its_note_on_the_entry_page(
        self, operator: Client, r: redis.Redis, stream: str
    ) -> None:
        (entry_id,) = add_entries(r, stream, 1, fields={"payload": DEEP.decode()})
        response = operator.get(reverse("dashboard:entry-detail", args=[stream, entry_id]))
        assert response.status_code == 200
        assert b"shown as text: nested deeper than 64 levels" in response.content

    def test_bom_secret_is_hidden_on_every_page(
        self, operator: Client, r: redis.Redis, prefix: str
    ) -> None:
        stream = prefix + "bom"
        values = list(FailClosedRedactionTests.SECRET_DOCS)
        ids = self._seed(r, stream, values)
        for entry_id in ids:
            for url in self._pages(stream, entry_id):
                response = operator.get(url)
                assert response.status_code == 200, url
                assert MARK.encode() not in response.content, url

    def test_dead_letter_page_shares_one_decode_budget(
        self, operator: Client, r: redis.Redis, stream: str
    ) -> None:
        doc = json.dumps({"items": ["x" * 100] * 9_000}).encode()
        make_group(r, stream, "g")
        for _ in range(6):
            entry_id = r.xadd(stream, {"payload": doc}).decode()
            r.xreadgroup("g", "c", {stream: ">"})
            services.entry_dead_letter(
                client=r, stream=stream, group="g", entry_id=entry_id, reason="big"
            )
        response = operator.get(reverse("dashboard:dlq", args=[stream]))
        assert response.status_code == 200
        # Counted in the rows' fields (each row's preview says the same of its payload).
        shown = f'<pre class="value">(JSON-like, {len(doc)} bytes: too large'
        withheld = response.content.decode().count(shown)
        assert withheld == 6 - payloads.PAGE_JSON_BYTES // len(doc)


class PreviewCacheTests:
    """Previews are cached by content; the cache never changes what a preview says."""

    def test_the_cached_line_is_the_computed_one(self) -> None:
        fields = ((b"payload", b'{"order": 7, "password": "hunter2"}'), (b"n", b"1"))
        first = payloads.preview(fields)
        computed = payloads._preview(fields, payloads.PREVIEW_CHARS)
        assert payloads.preview(fields) == first == computed
        assert "hunter2" not in first

    def test_a_new_redaction_pattern_is_not_served_an_old_line(self, settings: Any) -> None:
        fields = ((b"sku", b"A-1"), (b"note", b"fragile"))
        settings.ACKBOARD_REDACT_PATTERN = "password"
        assert payloads.preview(fields) == "sku=A-1 note=fragile"
        settings.ACKBOARD_REDACT_PATTERN = "note"
        assert payloads.preview(fields) == f"sku=A-1 note={redaction.REDACTED}"

    def test_other_fields_or_width_are_other_lines(self) -> None:
        assert payloads.preview(((b"a", b"1"),)) != payloads.preview(((b"a", b"2"),))
        long = ((b"v", b"x" * 300),)
        assert len(payloads.preview(long, chars=20)) == 20
        assert len(payloads.preview(long, chars=40)) == 40

    def test_large_and_unhashable_entries_are_shown_uncached(self) -> None:
        before = payloads._preview_cached.cache_info().currsize
        big = ((b"v", b"y" * (payloads.PREVIEW_CACHE_BYTES + 1)),)
        assert payloads.preview(big).startswith("v=yyy")
        assert payloads.preview([[b"k", b"v"]]) == "k=v"  # type: ignore[list-item]
        assert payloads._preview_cached.cache_info().currsize == before
