"""The decoder chain (dashboard.display.decoders) and how a field shows what it decodes.

Each decoder on payloads made by its format's own library (tests/decoder_samples.py), the
chains, the automatic guess (and that it leaves JSON and text exactly as before), the
bounds (size in and out, depth, time), the short notes of what failed, redaction of
decoded fields and of envelopes, failing closed, the rules' syntax and the settings'
startup checks.
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from django.test import override_settings
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.display import decoders
from dashboard.display.decoders import Limits, Step, chain_decode, rules_parse, steps_for
from dashboard.views import payloads
from dashboard.views.redaction import REDACTED
from queue_core.bounded_json import MAX_DEPTH
from tests import decoder_samples
from tests.dashboard.test_config_errors import KEY, _env, _one_line, _run

ORDER = {"order": "o-1", "amount": 12, "card": {"api_token": "tok-SECRET", "last4": "4242"}}


def view(value: bytes, stream: str | None = None, name: bytes = b"payload") -> payloads.FieldView:
    return payloads.field_view(name, value, stream=stream)


def limits(max_bytes: int = 1_000_000, descriptors: str = "") -> Limits:
    return Limits.start(max_bytes, descriptors=descriptors)


@pytest.fixture
def proto(tmp_path: Path, settings: SettingsWrapper) -> str:
    path = decoder_samples.descriptor_set(tmp_path / "set.pb")
    settings.ACKBOARD_PROTO_DESCRIPTORS = path
    return path


class RulesTests:
    def test_rules_and_their_first_match(self) -> None:
        text = "orders:*#body=base64,msgpack; orders:*=msgpack\npay:*=protobuf:acme.Payment"
        rules = rules_parse(text)
        assert [(r.streams, r.field) for r in rules] == [
            ("orders:*", "body"),
            ("orders:*", None),
            ("pay:*", None),
        ]
        assert steps_for(text, "orders:eu", "body") == (Step("base64"), Step("msgpack"))
        assert steps_for(text, "orders:eu", "other") == (Step("msgpack"),)
        assert steps_for(text, "pay:1", "x") == (Step("protobuf", "acme.Payment"),)
        assert steps_for(text, "mail", "x") is None
        assert steps_for(text, None, "x") is None
        assert steps_for("", "orders:eu", "body") is None

    def test_a_pattern_may_hold_an_equals_sign(self) -> None:
        assert rules_parse("a=b*=gzip")[0].streams == "a=b*"

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ("orders:*", "is not PATTERN=DECODER"),
            ("=msgpack", "is not PATTERN=DECODER"),
            ("orders:*=", "names no decoder"),
            ("orders:*=yaml", "'yaml' is not a decoder"),
            ("orders:*=protobuf", "protobuf needs its message type"),
            ("orders:*=protobuf:not a type", "protobuf needs its message type"),
            ("orders:*=gzip:9", "gzip takes no argument"),
            ("orders:*=msgpack,gzip", "msgpack decodes a value, so it comes last"),
            ("orders:*=taskiq,json", "taskiq decodes a value, so it comes last"),
            ("orders:*#=gzip", "the stream pattern and the field are not empty"),
        ],
    )
    def test_bad_rules_say_what_is_wrong(self, text: str, says: str) -> None:
        with pytest.raises(ValueError, match=says.replace("(", r"\(")):
            rules_parse(text)


class SettingsCheckTests:
    """Bad decoder settings stop every command with one line (test_config_errors.py)."""

    @pytest.mark.parametrize(
        ("env", "says"),
        [
            ({"ACKBOARD_DECODERS": "orders:*=yaml"}, "'orders:*=yaml': 'yaml' is not a decoder"),
            ({"ACKBOARD_DECODERS": "p:*=protobuf:acme.Payment"}, "protobuf needs ACKBOARD_PROTO"),
            ({"ACKBOARD_PROTO_DESCRIPTORS": "/nonexistent/set.pb"}, "cannot read /nonexistent"),
        ],
    )
    def test_a_bad_setting_is_one_line(
        self, tmp_path: Path, env: dict[str, str], says: str
    ) -> None:
        out = _run(
            [sys.executable, "manage.py", "check"], _env(tmp_path, DJANGO_SECRET_KEY=KEY, **env)
        )
        _one_line(out, "ACKBOARD_DECODERS: ", says)

    def test_the_set_must_hold_the_types(self, tmp_path: Path) -> None:
        path = decoder_samples.descriptor_set(tmp_path / "set.pb")
        (tmp_path / "junk.pb").write_bytes(b"\xff\xff\xff")
        for env, says in (
            (
                {"ACKBOARD_DECODERS": "p:*=protobuf:acme.Nope"},
                f"{path} has no message type acme.Nope",
            ),
            ({"ACKBOARD_DECODERS": "p:*=protobuf:acme.Payment"}, ""),
            (
                {"ACKBOARD_PROTO_DESCRIPTORS": str(tmp_path / "junk.pb")},
                "not a protobuf FileDescriptorSet",
            ),
        ):
            env.setdefault("ACKBOARD_PROTO_DESCRIPTORS", path)
            out = _run(
                [sys.executable, "manage.py", "check"], _env(tmp_path, DJANGO_SECRET_KEY=KEY, **env)
            )
            if says:
                _one_line(out, "ACKBOARD_DECODERS: ", says)
            else:
                assert out.returncode == 0, out.stderr


class EachDecoderTests:
    def test_msgpack(self) -> None:
        packed = msgpack.packb({**ORDER, "raw": b"\x00\xff", 7: [1.5, None, True]})
        got = chain_decode(packed, (Step("msgpack"),), limits())
        assert got.steps == ("msgpack",)
        assert got.value == {**ORDER, "raw": "\x00\udcff", "7": [1.5, None, True]}

    def test_msgpack_timestamps_and_extension_types(self) -> None:
        packed = msgpack.packb([msgpack.Timestamp(1_700_000_000, 0), msgpack.ExtType(5, b"ab")])
        got = chain_decode(packed, (Step("msgpack"),), limits())
        assert got.value == ["2023-11-14T22:13:20Z", "ext(5, 6162)"]

    def test_protobuf(self, proto: str) -> None:
        value = decoder_samples.payment("o-1", token="tok-SECRET", cents=1250, tags=("a", "b"))
        got = chain_decode(value, (Step("protobuf", "acme.Payment"),), limits(descriptors=proto))
        assert got.steps == ("protobuf acme.Payment",)
        assert got.value == {
            "order": "o-1",
            "cents": 1250,
            "card": {"api_token": "tok-SECRET", "last4": "4242"},
            "tags": ["a", "b"],
        }

    def test_base64_standard_url_safe_and_unpadded(self) -> None:
        for encoded in (
            base64.b64encode(b"\xfb\xff hello"),
            base64.urlsafe_b64encode(b"\xfb\xff hello").rstrip(b"="),
            b"+/8g\naGVs\nbG8=",
        ):
            got = chain_decode(encoded, (Step("base64"),), limits())
            assert got.data == b"\xfb\xff hello", encoded
            assert got.steps == ("base64",)

    def test_gzip_zlib_and_zstd(self) -> None:
        doc = json.dumps(ORDER).encode()
        for step, packed in (
            ("gzip", gzip.compress(doc, mtime=0)),
            ("gzip", zlib.compress(doc)),
            ("zstd", zstandard.ZstdCompressor().compress(doc)),
        ):
            got = chain_decode(packed, (Step(step),), limits())
            assert got.data == doc and got.steps == (step,)

    def test_faststream_binary_message(self) -> None:
        packed = decoder_samples.faststream_message(ORDER, {"x-trace": "abc"})
        got = chain_decode(packed, (Step("faststream"),), limits())
        assert got.steps == ("FastStream",)
        assert json.loads(got.data) == ORDER
        assert got.envelope == {
            "correlation_id": "corr-1",
            "content-type": "application/json",
            "x-trace": "abc",
        }

    def test_faststream_json_envelope(self) -> None:
        packed = json.dumps({"data": "plain text", "headers": {"correlation_id": "c"}}).encode()
        got = chain_decode(packed, (Step("faststream"),), limits())
        assert got.data == b"plain text" and got.envelope == {"correlation_id": "c"}

    def test_taskiq_json_and_msgpack_messages(self) -> None:
        message = {
            "task_id": "t-1",
            "task_name": "jobs:charge",
            "labels": {"retry": "2"},
            "labels_types": {"retry": 2},
            "args": ["o-1", 12],
            "kwargs": {"api_token": "tok-SECRET"},
        }
        for packed in (json.dumps(message).encode(), msgpack.packb(message)):
            got = chain_decode(packed, (Step("taskiq"),), limits())
            assert got.value == {"args": ["o-1", 12], "kwargs": {"api_token": "tok-SECRET"}}
            assert got.envelope == {
                "task_name": "jobs:charge",
                "task_id": "t-1",
                "labels": {"retry": "2"},
            }
            assert got.envelope_kind == "taskiq"


class ChainTests:
    def test_base64_of_gzip_of_msgpack(self) -> None:
        packed = base64.b64encode(gzip.compress(msgpack.packb(ORDER), mtime=0))
        chain = (Step("base64"), Step("gzip"), Step("msgpack"))
        got = chain_decode(packed, chain, limits())
        assert got.value == ORDER and got.steps == ("base64", "gzip", "msgpack")

    def test_what_a_chain_leaves_is_guessed(self) -> None:
        packed = base64.b64encode(zstandard.ZstdCompressor().compress(msgpack.packb(ORDER)))
        got = chain_decode(packed, (Step("base64"),), limits())
        assert got.value == ORDER and got.steps == ("base64", "zstd", "msgpack")

    def test_a_faststream_body_of_msgpack(self) -> None:
        packed = decoder_samples.faststream_message(msgpack.packb(ORDER))
        got = chain_decode(packed, (Step("faststream"), Step("msgpack")), limits())
        assert got.value == ORDER and got.envelope == {"correlation_id": "corr-1"}


class AutoTests:
    @pytest.mark.parametrize(
        "value",
        [
            b'{"a": 1, "password": "x"}',
            b"plain text",
            "caf\u00e9 \u6d41".encode(),
            b"[INFO] started",
            '{"name": "Jos\u00e9"}'.encode("latin-1"),  # a Latin-1 producer: today's JSON
            '{"a": "\u00e9"}'.encode("utf-16"),
            b"\x00\x01\x02 binary",
            b"\x80",  # an empty msgpack map: too little to call it msgpack
            "\u079e\u079e text".encode(),  # valid UTF-8 whose first byte is msgpack's map 16
        ],
    )
    def test_json_text_and_other_bytes_show_as_before(self, value: bytes) -> None:
        before = payloads._decode_plain(
            value, pretty=True, json_bytes=payloads.PRETTY_JSON_BYTES, text_bytes=10_000
        )
        after = payloads._decode(
            value, pretty=True, json_bytes=payloads.PRETTY_JSON_BYTES, text_bytes=10_000
        )
        assert after == before and after.decoded_as == ""

    def test_guesses(self) -> None:
        doc = json.dumps(ORDER).encode()
        packed = msgpack.packb(ORDER)
        cases = {
            packed: ("msgpack",),
            gzip.compress(doc, mtime=0): ("gzip",),
            zstandard.ZstdCompressor().compress(packed): ("zstd", "msgpack"),
            decoder_samples.faststream_message(ORDER): ("FastStream",),
            decoder_samples.faststream_message(gzip.compress(packed, mtime=0)): (
                "FastStream",
                "gzip",
                "msgpack",
            ),
        }
        for value, steps in cases.items():
            got = chain_decode(value, None, limits())
            assert got.steps == steps
            assert (got.value if got.has_value else json.loads(got.data)) == ORDER

    def test_msgpack_is_guessed_only_for_a_whole_map_or_array(self) -> None:
        for value in (msgpack.packb(ORDER) + b"\x01", msgpack.packb("text"), b"\x81\xc1"):
            got = chain_decode(value, None, limits())
            assert not got.has_value and got.data == value and got.note == ""

    def test_protobuf_is_never_guessed(self, proto: str) -> None:
        value = decoder_samples.payment("o-1", token="tok-SECRET")
        got = chain_decode(value, None, limits(descriptors=proto))
        assert got.steps == () and got.data == value


class BoundsTests:
    def test_decompression_bombs_stop_at_the_size_bound(self) -> None:
        for step, bomb in (
            ("gzip", gzip.compress(b"0" * 20_000_000, mtime=0)),
            ("zstd", zstandard.ZstdCompressor().compress(b"0" * 20_000_000)),
            (
                "zstd",
                zstandard.ZstdCompressor(write_content_size=False).compress(b"0" * 20_000_000),
            ),
        ):
            got = chain_decode(bomb, (Step(step),), limits(max_bytes=100_000))
            assert got.note == "not shown decompressed: over 100000 bytes"
            assert got.data == bomb and got.steps == ()
            guessed = chain_decode(bomb, None, limits(max_bytes=100_000))
            assert guessed.note == "not shown decompressed: over 100000 bytes"

    def test_a_value_over_the_size_bound_is_withheld(self) -> None:
        big = msgpack.packb({"api_token": "x" * 300_000})
        got = chain_decode(big, (Step("msgpack"),), limits(max_bytes=200_000))
        assert got.withheld
        shown = payloads._decode(
            big, pretty=False, json_bytes=200_000, text_bytes=500, steps=(Step("msgpack"),)
        )
        assert (
            shown.redacted
            and shown.text == f"(msgpack, {len(big)} bytes: too large to show redacted)"
        )

    @pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 5000])
    def test_msgpack_depth(self, depth: int) -> None:
        packed = b"\x91" * depth + b"\x01"
        got = chain_decode(packed, (Step("msgpack"),), limits())
        if depth <= MAX_DEPTH:
            assert got.has_value
        else:
            assert got.note == f"not msgpack: nested deeper than {MAX_DEPTH} levels" or (
                got.note == f"not shown decoded: nested deeper than {MAX_DEPTH} levels"
            )
            assert not got.has_value

    @pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH + 1, 99, 150])
    def test_protobuf_depth(self, proto: str, depth: int) -> None:
        got = chain_decode(
            decoder_samples.nested_nodes(depth),
            (Step("protobuf", "acme.Node"),),
            limits(descriptors=proto),
        )
        assert got.has_value == (depth <= MAX_DEPTH), got.note
        if depth > MAX_DEPTH:
            assert got.note.startswith(("not shown decoded: nested deeper", "not acme.Node:"))

    def test_time(self, monkeypatch: pytest.MonkeyPatch) -> None:
        packed = msgpack.packb([[i] for i in range(20_000)])
        got = chain_decode(packed, (Step("msgpack"),), Limits.start(1_000_000, max_ms=-1))
        assert got.note == f"decoding took over {decoders.MAX_MS} ms" and not got.has_value


class NotesTests:
    @pytest.mark.parametrize(
        ("steps", "value", "note"),
        [
            ((Step("msgpack"),), b"\xc1", "not msgpack: "),
            ((Step("msgpack"),), msgpack.packb(1) + b"\x01", "not msgpack: bytes left after"),
            ((Step("base64"),), b"not base64!", "not base64: characters outside its alphabet"),
            ((Step("gzip"),), b"\x1f\x8bjunk", "not gzip: "),
            (
                (Step("gzip"),),
                gzip.compress(b"x" * 1000, mtime=0)[:20],
                "not gzip: the compressed data",
            ),
            ((Step("zstd"),), b"\x28\xb5\x2f\xfdjunk", "not zstd: "),
            ((Step("zstd"),), zstandard.ZstdCompressor().compress(b"x" * 999)[:-3], "not zstd: "),
            ((Step("faststream"),), b"plain", "not a FastStream message: "),
            ((Step("faststream"),), b"\x89BIN\r\n\x1a\n\x00", "not a FastStream message: "),
            ((Step("taskiq"),), b'{"a": 1}', "not a taskiq message: no task_name"),
            ((Step("protobuf", "acme.Node"),), b"\xff\xff\xff", "not acme.Node: "),
        ],
    )
    def test_a_failed_step_says_why_and_shows_the_bytes(
        self, proto: str, steps: tuple[Step, ...], value: bytes, note: str
    ) -> None:
        got = chain_decode(value, steps, limits(descriptors=proto))
        assert got.note.startswith(note), got.note
        assert got.data == value and not got.has_value and not got.guessing
        shown = payloads._decode(
            value, pretty=True, json_bytes=1_000_000, text_bytes=10_000, steps=steps
        )
        assert shown.note.startswith(note)
        plain = payloads._decode_plain(value, pretty=True, json_bytes=1_000_000, text_bytes=10_000)
        assert shown.text == plain.text

    def test_protobuf_without_a_descriptor_set(self) -> None:
        got = chain_decode(b"\x0a\x01a", (Step("protobuf", "acme.Payment"),), limits())
        assert got.note == "not protobuf: no descriptor set (ACKBOARD_PROTO_DESCRIPTORS)"


class ShownTests:
    """What a page shows of a decoded field: decoded, redacted, badged, with envelopes."""

    def test_msgpack_field_is_shown_decoded_and_redacted(self) -> None:
        shown = view(msgpack.packb(ORDER))
        assert shown.decoded_as == "msgpack" and shown.is_json and shown.redacted
        assert json.loads(shown.shown) == {
            **ORDER,
            "card": {"api_token": REDACTED, "last4": "4242"},
        }
        assert "tok-SECRET" not in payloads.preview([(b"payload", msgpack.packb(ORDER))])

    def test_protobuf_field_by_rule(self, proto: str, settings: SettingsWrapper) -> None:
        settings.ACKBOARD_DECODERS = "pay:*#body=protobuf:acme.Payment"
        value = decoder_samples.payment("o-1", token="tok-SECRET")
        shown = view(value, stream="pay:eu", name=b"body")
        assert shown.decoded_as == "protobuf acme.Payment" and shown.redacted
        assert json.loads(shown.shown)["card"] == {"api_token": REDACTED, "last4": "4242"}
        assert view(value, stream="pay:eu", name=b"other").decoded_as == ""
        line = payloads.preview([(b"body", value)], stream="pay:eu")
        assert line.startswith('body={"order":"o-1","card":{"api_token":"') and "SECRET" not in line

    def test_envelopes_are_redacted_too(self, settings: SettingsWrapper) -> None:
        packed = decoder_samples.faststream_message({"n": 1}, {"authorization_token": "tok-SECRET"})
        shown = view(packed, name=b"__data__")
        assert shown.decoded_as == "FastStream" and shown.redacted
        assert shown.envelope == (
            'FastStream headers: {"correlation_id":"corr-1","content-type":"application/json",'
            f'"authorization_token":"{REDACTED}"}}'
        )
        assert json.loads(shown.shown) == {"n": 1}

    def test_a_failed_decoder_fails_closed(self, settings: SettingsWrapper) -> None:
        settings.ACKBOARD_DECODERS = "mp:*=msgpack"
        # Not msgpack, and a redacted name appears in it: nothing of it is shown.
        shown = view(b"\xc1 password=hunter2", stream="mp:x")
        assert shown.redacted and "hunter2" not in shown.shown
        assert shown.note.startswith("redacted whole: not msgpack: ")
        plain = view(b"\xc1 nothing to hide", stream="mp:x")
        assert not plain.redacted and plain.note.startswith("not msgpack: ")

    def test_a_failed_protobuf_fails_closed_by_its_type(self, proto: str, settings: Any) -> None:
        settings.ACKBOARD_DECODERS = "pay:*=protobuf:acme.Payment; node:*=protobuf:acme.Node"
        cut = decoder_samples.payment("o-1", token="hunter2")[:-3]
        shown = view(cut, stream="pay:x")
        assert shown.redacted and "hunter" not in shown.shown
        assert shown.note.endswith("and its type has a redacted field")
        nodes = view(decoder_samples.nested_nodes(3)[:-1], stream="node:x")
        assert not nodes.redacted and nodes.note.startswith("not acme.Node: ")

    def test_json_rule_turns_the_guess_off(self, settings: SettingsWrapper) -> None:
        settings.ACKBOARD_DECODERS = "raw:*=json"
        packed = msgpack.packb({"a": 1})
        assert view(packed, stream="raw:x").decoded_as == ""
        assert view(packed, stream="other").decoded_as == "msgpack"

    def test_previews_follow_the_rules(self, settings: SettingsWrapper) -> None:
        fields = ((b"data", base64.b64encode(b'{"a": 1}')),)
        plain = payloads.preview(fields, stream="b64:x")
        settings.ACKBOARD_DECODERS = "b64:*=base64"
        with override_settings(ACKBOARD_DECODERS="b64:*=base64"):
            assert payloads.preview(fields, stream="b64:x") == 'data={"a":1}'
        assert plain == "data=" + base64.b64encode(b'{"a": 1}').decode()


def _fields_html(values: list[tuple[bytes, bytes]], stream: str | None = None) -> Any:
    from django.template.loader import render_to_string

    return render_to_string(
        "dashboard/_fields.html", {"fields": payloads.fields_view(values, stream=stream)}
    )


class TemplateTests:
    def test_the_badge_and_the_envelope_line(self) -> None:
        from tests.html import attribute_text

        page = _fields_html([(b"__data__", decoder_samples.faststream_message({"n": 1}))])
        assert attribute_text(page, "class", "badge decoded") == "FastStream"
        assert attribute_text(page, "class", "muted small field-envelope mono").startswith(
            "FastStream headers: "
        )
