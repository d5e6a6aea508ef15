"""Property-based fuzzing of the payload decoder and the redactor (hypothesis).

Values are generated as JSON documents with secrets under keys that match
``ACKBOARD_REDACT_PATTERN`` (each secret a marker string that appears nowhere else), then
encoded the ways producers really do it, and worse: BOMs, leading whitespace, UTF-16/32,
invalid bytes, Latin-1, truncation, deep nesting, huge numbers, NaN, JSON inside JSON
strings, escaped key names, Python reprs, %-encoding and HTML entities, one to three at
a time. Then, for the entry page's fields and for table previews of every width:

- nothing raises, and no value falls to the last-resort "could not be decoded";
- the HTML is safe: only the template's own tags and attributes, and encodable as UTF-8;
- the secret marker never appears.
"""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

from django.template import Context, Template
from django.template.loader import render_to_string
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard.views import payload_json, payloads

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: Letters that cannot spell password, secret, token or key (nor card or pin), plus
#: markup, quotes, escapes, controls and non-ASCII: what plain keys and strings are made of.
SAFE_TEXT = "bfghjlmquvxz0123456789_-<>&\"'\\/{}[]:,= \n\t\x00\x1bé流😀\u2028"
#: Keys that match the default pattern, in several spellings.
SECRET_KEYS = ("password", "Password", "API_TOKEN", "client_secret", "ssh_key", "refreshToken")
#: The tags and attributes the templates below write; anything else came from a payload.
FIELD_TAGS = {"dl", "div", "dt", "dd", "span", "pre", "details", "summary", "p"}
FIELD_ATTRS = {"class", "title"}
PREVIEW_TEMPLATE = Template('<td class="preview" title="{{ p }}">{{ p }}</td>')

plain_text = st.text(alphabet=SAFE_TEXT, max_size=12)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | plain_text
)


def _with_secret(keys: tuple[str, ...]) -> Any:
    """A JSON document holding at least one secret (the marker ``MARK``) under ``keys``."""
    secret = st.sampled_from(["MARK", ["MARK"], {"inner": "MARK"}, {"v": [1, "MARK"]}])

    def extend(children: Any) -> Any:
        plain = st.dictionaries(plain_text, children, max_size=3)
        with_secret = st.builds(lambda d, k, v: {**d, k: v}, plain, st.sampled_from(keys), secret)
        return st.lists(children, max_size=3) | plain | with_secret

    tree = st.recursive(scalars, extend, max_leaves=12)
    top = st.builds(
        lambda d, k, v: {**d, k: v},
        st.dictionaries(plain_text, tree, max_size=3),
        st.sampled_from(keys),
        secret,
    )
    # The secret-holding object, somewhere down a few lists and objects.
    wrap = st.lists(st.sampled_from(["list", "object"]), max_size=4)
    return st.builds(_wrap, top, wrap)


def _wrap(doc: Any, how: list[str]) -> Any:
    for kind in how:
        doc = [doc] if kind == "list" else {"data": doc}
    return doc


def _dumps(doc: Any, *, indent: int | None = None, ensure_ascii: bool = False) -> str:
    return json.dumps(doc, indent=indent, ensure_ascii=ensure_ascii)


def _encode(doc: Any, how: Encoding) -> bytes:
    """``doc`` as a producer might send it: text steps in order, one codec, byte steps."""
    text_steps, codec, byte_steps = how
    text = _dumps(doc)
    for step, n in text_steps:
        if step == "indent":
            text = _dumps(doc, indent=n % 5)
        elif step == "ascii":
            text = _dumps(doc, ensure_ascii=True)
        elif step == "escaped_keys":  # o, c and k as \u escapes: valid JSON, hidden names
            for ch in "ock":
                text = text.replace(ch, f"\\u{ord(ch):04x}")
        elif step == "bom":
            text = "\ufeff" + text
        elif step == "whitespace":
            text = " \n\t\r"[n % 4] * (n * 37 % 5000) + text
        elif step == "in_string":  # JSON carried in a JSON string, once or more
            for _ in range(1 + n % 3):
                text = json.dumps({"payload": text})
        elif step == "string_of_json":  # the whole value is a JSON string of JSON
            text = json.dumps(text)
        elif step == "deep":
            depth = 60 + n % 300
            text = "[" * depth + text + "]" * depth
        elif step == "deep_object":
            depth = 60 + n % 300
            text = '{"a":' * depth + text + "}" * depth
        elif step == "huge_number":
            text = '{"n": ' + "9" * (4000 + n % 3000) + ', "d": ' + text + "}"
        elif step == "huge_exponent":
            text = f'{{"n": 1e{400 + n % 1000}, "d": {text}}}'
        elif step == "python_repr":
            text = repr(doc)
        elif step == "percent":
            text = quote(text)
        elif step == "entities":
            text = html.escape(text)
        elif step == "prefix_text":
            text = "[INFO] payload=" + text
    # Latin-1 stands for a producer that is not UTF-8: "é" is one invalid byte.
    value = text.encode(codec, "replace" if codec == "latin-1" else "surrogatepass")
    for step, n in byte_steps:
        if step == "invalid_byte":
            at = _between_tokens(value, n)
            value = value[:at] + b"\xe9" + value[at:]
        elif step == "truncate":
            value = value[: n % (len(value) + 1)]
    return value


def _between_tokens(value: bytes, n: int) -> int:
    """A position just after a ``{ [ : ,``: never inside a key name (a byte there would
    make another name, not the secret's), maybe inside a string value (as "José" is)."""
    marks = [i + 1 for i, byte in enumerate(value) if byte in b"{[:,"]
    return marks[n % len(marks)] if marks else 0


Encoding = tuple[list[tuple[str, int]], str, list[tuple[str, int]]]
TEXT_STEPS = (
    "indent",
    "ascii",
    "escaped_keys",
    "bom",
    "whitespace",
    "in_string",
    "string_of_json",
    "deep",
    "deep_object",
    "huge_number",
    "huge_exponent",
    "python_repr",
    "percent",
    "entities",
    "prefix_text",
)
CODECS = ("utf-8",) * 5 + ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "latin-1")
ENCODINGS = st.tuples(
    st.lists(st.tuples(st.sampled_from(TEXT_STEPS), st.integers(0, 10**6)), max_size=3),
    st.sampled_from(CODECS),
    st.lists(
        st.tuples(st.sampled_from(["invalid_byte", "truncate"]), st.integers(0, 10**6)), max_size=1
    ),
)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attrs: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.update(name for name, _ in attrs)


def _markup(page: str) -> _Tags:
    page.encode("utf-8")  # a lone surrogate here would make the response a 500
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


def _rendered(fields: list[tuple[bytes, bytes]]) -> list[str]:
    """The entry-page fields and table previews of ``fields``, as HTML, checked safe."""
    views = payloads.fields_view(fields)
    assert all(v.note != payloads.UNDECODABLE for v in views), "decoding raised"
    page = render_to_string("dashboard/_fields.html", {"fields": views})
    tags = _markup(page)
    assert tags.tags <= FIELD_TAGS and tags.attrs <= FIELD_ATTRS, (tags.tags, tags.attrs)
    out: list[str] = [page]
    for chars in (20, payloads.PREVIEW_CHARS, 2000, 10**6):
        line = payloads.preview(fields, chars=chars)
        assert len(line) <= chars
        assert payloads.UNDECODABLE not in line, "decoding raised"
        cell = PREVIEW_TEMPLATE.render(Context({"p": line}))
        tags = _markup(cell)
        assert tags.tags == {"td"} and tags.attrs == {"class", "title"}, cell[:200]
        out.append(cell)
    return out


class RedactionFuzzTests:
    @FUZZ
    @given(doc=_with_secret(SECRET_KEYS), how=ENCODINGS, n=st.integers(0, 10**6))
    def test_secrets_are_never_shown(self, doc: Any, how: Encoding, n: int) -> None:
        marker = f"ZQXJ{n}W"
        value = _encode(_swap(doc, marker), how)
        for html_out in _rendered([(b"payload", value), (b"n", b"1")]):
            assert marker not in html_out, (how, value[:300])

    @FUZZ
    @given(doc=_with_secret(("card", "PIN")), how=ENCODINGS, n=st.integers(0, 10**6))
    def test_an_anchored_pattern_is_never_bypassed(self, doc: Any, how: Encoding, n: int) -> None:
        marker = f"ZQXJ{n}W"
        value = _encode(_swap(doc, marker), how)
        with override_settings(ACKBOARD_REDACT_PATTERN=r"^(card|pin)$"):
            for html_out in _rendered([(b"payload", value)]):
                assert marker not in html_out, (how, value[:300])


def _swap(doc: Any, marker: str) -> Any:
    """``doc`` with every "MARK" replaced by this example's marker."""
    if isinstance(doc, dict):
        return {k: _swap(v, marker) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_swap(v, marker) for v in doc]
    return marker if doc == "MARK" else doc


class DecoderFuzzTests:
    @FUZZ
    @given(value=st.binary(max_size=3000))
    def test_any_bytes_render_safely(self, value: bytes) -> None:
        _rendered([(b"payload", value), (value[:40], b"x")])

    @FUZZ
    @given(doc=st.recursive(scalars, lambda c: st.lists(c) | st.dictionaries(plain_text, c)))
    def test_plain_json_is_parsed_and_shown_whole(self, doc: Any) -> None:
        value = _dumps(doc).encode()
        view = payloads.field_view(b"payload", value)
        if isinstance(doc, dict | list):
            assert view.is_json and not view.redacted and view.note == ""
        _rendered([(b"payload", value)])

    @FUZZ
    @given(
        depth=st.integers(min_value=1, max_value=3000),
        opener=st.sampled_from(["[", '{"a":', '["x",']),
    )
    def test_depth_is_bounded(self, depth: int, opener: str) -> None:
        closer = {"[": "]", '{"a":': "}", '["x",': "]"}[opener]
        value = (opener * depth + "0" + closer * depth).encode()
        view = payloads.field_view(b"payload", value)
        assert view.is_json == (depth <= payload_json.MAX_DEPTH)
        if depth > payload_json.MAX_DEPTH:
            assert view.note == "shown as text: nested deeper than 64 levels"
        _rendered([(b"payload", value)])

    @FUZZ
    @given(
        digits=st.integers(min_value=1, max_value=20_000),
        exponent=st.integers(min_value=-2000, max_value=2000),
        fraction=st.booleans(),
    )
    def test_numbers_are_bounded(self, digits: int, exponent: int, fraction: bool) -> None:
        number = "9" * digits + (".5" if fraction else "") + f"e{exponent}"
        value = f'{{"n": {number}}}'.encode()
        view = payloads.field_view(b"payload", value)
        if len(number) > payload_json.MAX_NUMBER_DIGITS:
            assert view.note == "shown as text: a number longer than 4000 digits"
        elif not view.is_json:
            assert view.note == "shown as text: a number out of range"
        _rendered([(b"payload", value)])
