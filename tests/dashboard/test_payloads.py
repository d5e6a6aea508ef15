"""Payload rendering: escaped-safe text, binary bytes, JSON, truncation and redaction."""

from __future__ import annotations

import json
from typing import Any

from django.template.loader import render_to_string

from dashboard import payloads
from dashboard.templatetags.ackboard import copy_button, duration_span, human_ms


class BytesTextTests:
    def test_utf8_is_kept(self) -> None:
        assert payloads.bytes_text("ünï 流".encode()) == ("ünï 流", False)

    def test_invalid_utf8_is_escaped(self) -> None:
        text, binary = payloads.bytes_text(b"ok\xff\xfe\x00")
        assert binary is True
        assert text == "ok\\xff\\xfe\\x00"

    def test_control_characters_are_escaped(self) -> None:
        text, binary = payloads.bytes_text(b"a\x1b[31mred\x00\tb\nc")
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
        assert '"Password": "' + payloads.REDACTED in view.shown
        assert '"p"' not in view.shown and view.redacted

    def test_pattern_is_configurable(self, settings: Any) -> None:
        settings.ACKBOARD_REDACT_PATTERN = r"^card$"
        assert payloads.field_view(b"card", b"4111").redacted
        assert not payloads.field_view(b"password", b"p").redacted


class PreviewTests:
    def test_one_line_compact_and_cut(self) -> None:
        line = payloads.preview([(b"payload", b'{\n "a": 1\n}'), (b"n", b"2")])
        assert line == 'payload={"a":1} n=2'
        long = payloads.preview([(b"v", b"z" * 1000)])
        assert len(long) == payloads.PREVIEW_CHARS and long.endswith("…")

    def test_preview_redacts(self) -> None:
        line = payloads.preview([(b"token", b"abc"), (b"payload", b'{"secret": "s"}')])
        assert "abc" not in line and '"s"' not in line
        assert payloads.REDACTED in line


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
