"""Property-based fuzzing of the decoder chain (hypothesis, 500 examples each).

Random bytes through every decoder and chain, random documents holding a secret encoded
in each format (and wrapped in base64, gzip, zstd and FastStream's envelope), and random
bytes on the entry, stream and search pages (100 examples: the pages render what the
500-example tests render, so this checks the views' wiring): nothing raises, nothing falls to the
last-resort "could not be decoded", the HTML holds only the templates' own tags, and a
secret never shows; random ``ACKBOARD_REDACT_RULES`` and streams (100 examples) mask
exactly the fields their rules name on the streams their patterns match.
"""

from __future__ import annotations

import base64
import fnmatch
import gzip
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import msgpack
import pytest
import redis
import zstandard
from django.template import Context
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.views import payloads
from tests import decoder_samples
from tests.dashboard.test_payloads_fuzz import (
    FIELD_ATTRS,
    FIELD_TAGS,
    PREVIEW_TEMPLATE,
    SAFE_TEXT,
    _markup,
)

FUZZ = settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
#: One rule per chain, each on its own stream ("c0", "c1", …); "auto" is no rule at all.
CHAINS = (
    "msgpack",
    "protobuf:acme.Payment",
    "protobuf:acme.Node",
    "base64",
    "gzip",
    "zstd",
    "faststream",
    "taskiq",
    "json",
    "base64,gzip,msgpack",
    "faststream,msgpack",
    "base64,zstd,faststream",
    "auto",
)
RULES = "; ".join(f"c{i}={chain}" for i, chain in enumerate(CHAINS))
STREAMS = [f"c{i}" for i in range(len(CHAINS))] + [None]

plain = st.text(alphabet=SAFE_TEXT, max_size=10)
scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | plain
documents = st.recursive(
    scalars | st.binary(max_size=10),
    lambda c: (
        st.lists(c, max_size=4)
        | st.dictionaries(plain | st.integers(-(2**63), 2**63 - 1), c, max_size=4)
    ),
    max_leaves=20,
)
SECRET_KEYS = ("password", "api_token", "Client_Secret", "ssh_key")


@pytest.fixture
def decoder_settings(tmp_path: Path, settings: SettingsWrapper) -> SettingsWrapper:
    settings.ACKBOARD_PROTO_DESCRIPTORS = decoder_samples.descriptor_set(tmp_path / "set.pb")
    settings.ACKBOARD_DECODERS = RULES
    return settings


def _wrap(value: bytes, how: list[str]) -> tuple[bytes, str | None]:
    """``value`` wrapped as ``how`` says, and the stream whose rule (or guess) reads it."""
    for step in how:
        if step == "gzip":
            value = gzip.compress(value)
        elif step == "zstd":
            value = zstandard.ZstdCompressor().compress(value)
        elif step == "faststream":
            value = decoder_samples.faststream_message(value)
    if "base64" in how:
        return base64.b64encode(value), "c3"  # base64, then guessed
    return value, None  # gzip, zstd and FastStream's header are guessed


class DecoderChainFuzzTests:
    @FUZZ
    @given(value=st.binary(max_size=2000), stream=st.sampled_from(STREAMS))
    def test_any_bytes_through_any_chain_render_safely(
        self, decoder_settings: SettingsWrapper, value: bytes, stream: str | None
    ) -> None:
        for prefix in (
            b"",
            b"\x1f\x8b",
            b"\x28\xb5\x2f\xfd",
            b"\x89BIN\r\n\x1a\n\x00\x01",
            b"\x82",
        ):
            _rendered_on(stream, [(b"payload", prefix + value), (prefix + value[:30], b"x")])

    @FUZZ
    @given(
        doc=documents,
        key=st.sampled_from(SECRET_KEYS),
        n=st.integers(0, 10**6),
        how=st.lists(st.sampled_from(["gzip", "zstd", "faststream", "base64"]), max_size=3),
        nest=st.integers(0, 3),
    )
    def test_a_secret_in_msgpack_never_shows(
        self,
        decoder_settings: SettingsWrapper,
        doc: Any,
        key: str,
        n: int,
        how: list[str],
        nest: int,
    ) -> None:
        marker = f"ZQXJ{n}W"
        secret: Any = {key: marker, "doc": doc}
        for _ in range(nest):
            secret = [secret] if n % 2 else {"inner": secret}
        value, stream = _wrap(msgpack.packb(secret), how)
        for page in _rendered_on(stream, [(b"payload", value)]):
            assert marker not in page, (how, value[:200])

    @FUZZ
    @given(
        order=plain,
        n=st.integers(0, 10**6),
        tags=st.lists(plain, max_size=4),
        cut=st.integers(0, 200),
    )
    def test_a_secret_in_protobuf_never_shows(
        self,
        decoder_settings: SettingsWrapper,
        order: str,
        n: int,
        tags: list[str],
        cut: int,
    ) -> None:
        marker = f"ZQXJ{n}W"
        value = decoder_samples.payment(order, token=marker, cents=n, tags=tuple(tags))
        for candidate in (value, value[: len(value) - cut % (len(value) + 1)]):
            for page in _rendered_on("c1", [(b"body", candidate)]):
                assert marker not in page, candidate


RULES_FUZZ = settings(FUZZ, max_examples=100)
#: Stream names and patterns over a small alphabet (so they often match), field names over
#: letters the global pattern never matches (password|secret|token|key hold an "e" or "o");
#: the fields that carry them as keys are named "json" and "msgp", which no rule matches.
NAME_CHARS = "ab:"
FIELD_CHARS = "abcd"


class RedactRulesFuzzTests:
    @RULES_FUZZ
    @given(
        rules=st.lists(
            st.tuples(
                st.text(NAME_CHARS + "*?", min_size=1, max_size=4),
                st.text(FIELD_CHARS, min_size=1, max_size=3),
            ),
            max_size=4,
        ),
        stream=st.text(NAME_CHARS, min_size=1, max_size=4),
        key=st.text(FIELD_CHARS, min_size=1, max_size=4),
        n=st.integers(0, 10**6),
    )
    def test_random_rules_mask_their_fields_and_only_theirs(
        self,
        decoder_settings: SettingsWrapper,
        rules: list[tuple[str, str]],
        stream: str,
        key: str,
        n: int,
    ) -> None:
        """A field, a JSON key and a msgpack key named ``key`` are masked exactly when a rule
        whose pattern matches the stream (fnmatch, the same syntax over these characters)
        has a regex found in the name."""
        decoder_settings.ACKBOARD_REDACT_RULES = "; ".join(f"{p}={f}" for p, f in rules)
        masked = any(fnmatch.fnmatchcase(stream, p) and f in key for p, f in rules)
        marker = f"ZQXJ{n}W"
        for fields in (
            [(key.encode(), marker.encode())],
            [(b"json", json.dumps({key: marker}).encode())],
            [(b"msgp", msgpack.packb({key: marker}))],
        ):
            entry, *previews = _rendered_on(stream, fields)
            assert (marker not in entry) is masked, (rules, stream, fields)
            if masked:
                assert not any(marker in p for p in previews), (rules, stream, fields)


def _rendered_on(stream: str | None, fields: list[tuple[bytes, bytes]]) -> list[str]:
    """The entry-page fields and table previews of ``fields`` on ``stream``, as HTML,
    checked as test_payloads_fuzz checks them: safe tags only, nothing withheld."""
    views = payloads.fields_view(fields, stream=stream)
    assert all(v.note != payloads.UNDECODABLE for v in views), "decoding raised"
    page = render_to_string("dashboard/_fields.html", {"fields": views})
    tags = _markup(page)
    assert tags.tags <= FIELD_TAGS and tags.attrs <= FIELD_ATTRS, (tags.tags, tags.attrs)
    out: list[str] = [page]
    for chars in (20, payloads.PREVIEW_CHARS, 10**6):
        line = payloads.preview(fields, chars=chars, stream=stream)
        assert len(line) <= chars and payloads.UNDECODABLE not in line
        cell = PREVIEW_TEMPLATE.render(Context({"p": line}))
        assert _markup(cell).tags == {"td"}, cell[:200]
        out.append(cell)
    return out


@pytest.mark.django_db
@pytest.mark.usefixtures("page_settings")
class DecoderPagesFuzzTests:
    @settings(FUZZ, max_examples=100)
    @given(value=st.binary(max_size=500), chain=st.integers(0, len(CHAINS) - 1))
    def test_pages_never_fail_on_any_bytes(
        self,
        viewer: Client,
        r: redis.Redis,
        prefix: str,
        tmp_path: Path,
        page_settings: SettingsWrapper,
        value: bytes,
        chain: int,
    ) -> None:
        page_settings.ACKBOARD_PROTO_DESCRIPTORS = decoder_samples.descriptor_set(
            tmp_path / "set.pb"
        )
        page_settings.ACKBOARD_DECODERS = f"{prefix}*={CHAINS[chain]}"
        stream = prefix + "fuzz"
        fields = {"payload": value, "secret": b"ZQXJW", "markup": b"<xmp>" + value[:20]}
        entry_id = r.xadd(stream, fields).decode()
        try:
            for url in (
                reverse("dashboard:entry-detail", args=[stream, entry_id]),
                reverse("dashboard:stream-detail", args=[stream]),
                reverse("dashboard:payload-find", args=[stream])
                + "?"
                + urlencode({"field": "payload", "op": "json", "path": "$", "value": "1"}),
            ):
                response = viewer.get(url)
                assert response.status_code == 200, (url, response.content[:300])
                body = response.content.decode()
                assert "ZQXJW" not in body and "<xmp" not in body
        finally:
            r.delete(stream)
