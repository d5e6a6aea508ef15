"""Payload decoders: what a field's bytes carry, when it is not plain JSON or text.

Owns the decoder chain of a stream's fields: the rules (``ACKBOARD_DECODERS``, parsed by
``rules_parse``: per stream pattern, optionally per field, a chain of steps), the
protobuf descriptor set they name (``ACKBOARD_PROTO_DESCRIPTORS``,
``dashboard.display.protobuf_set``),
and ``chain_decode``, which runs a chain on one value within bounds. Steps:

- transforms, bytes to bytes: ``base64`` (standard or URL-safe alphabet), ``gzip``
  (gzip or zlib, the stdlib's ``zlib``), ``zstd`` (``zstandard``);
- envelopes: ``faststream`` (FastStream's Redis message, its binary format read by
  FastStream's own parser, or its older JSON envelope: headers kept, the body decoded on)
  and ``taskiq`` (taskiq's message, JSON or msgpack: its args and kwargs are the value,
  the task's name, id and labels its envelope);
- values: ``msgpack`` (``msgpack``), ``protobuf:<message type>`` (``protobuf``, from the
  descriptor set), ``json`` (today's display: JSON pretty-printed, else text, and no
  guessing), ``auto``.

Bytes that a chain leaves (a transform or an envelope last) are decoded by ``auto``:
values that are valid UTF-8 are left to the JSON and text display exactly as before;
only other bytes are guessed at: gzip and zstd by their magic bytes, a FastStream
binary message by its identity header, then msgpack only when the whole value decodes
strictly to a map or an array. Protobuf is never guessed (its bytes say nothing of
their type). At most ``MAX_LAYERS`` guesses are made per value.

Bounds, the JSON display's own: nothing is decoded past ``max_bytes`` (the caller's JSON
size bound) in or out, so a decompression bomb stops at that size; a decoded value nested
deeper than ``bounded_json.MAX_DEPTH`` is refused; the walk that turns a decoded value
into JSON-like data gives up after ``MAX_MS``. A step that fails says why in a short
note ("not msgpack: …") and the value is shown as its bytes were; redaction
(``dashboard.views.redaction``) is ``dashboard.views.payloads``' and applies to what
this returns.

It never imports Django (the pages pass the rules in) and never renders anything. Cost:
linear in the bytes decoded; the first FastStream binary message in a process imports
FastStream (about 2 s once, on the 2-core dev machine); see docs/benchmarks.md for the
decode cost per page.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import fnmatch
import io
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import msgpack

from dashboard.display.protobuf_set import descriptors_load, message_class
from queue_core.bounded_json import MAX_DEPTH, json_read

#: Guesses made by ``auto`` per value (a gzip inside a FastStream message inside a zstd
#: frame is three).
MAX_LAYERS = 4
#: Milliseconds one value's decoding may take before it is refused.
MAX_MS = 1000

TRANSFORMS = ("base64", "gzip", "zstd")
ENVELOPES = ("faststream", "taskiq")
VALUES = ("json", "msgpack", "protobuf", "auto")
STEP_NAMES = TRANSFORMS + ENVELOPES + VALUES
#: A steps' names as the badge shows them.
LABELS = {
    "base64": "base64",
    "gzip": "gzip",
    "zstd": "zstd",
    "faststream": "FastStream",
    "taskiq": "taskiq",
    "json": "JSON",
    "msgpack": "msgpack",
    "protobuf": "protobuf",
}

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: FastStream's ``BinaryMessageFormatV1.IDENTITY_HEADER`` (checked here, read by FastStream).
FASTSTREAM_MAGIC = b"\x89BIN\r\n\x1a\n"
# msgpack's first byte of a map or an array (fixmap, fixarray, array 16/32, map 16/32).
_MSGPACK_CONTAINER = frozenset([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])
_TYPE_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


class DecodeFailed(ValueError):
    """A step that could not decode its input; the message is the short note shown."""


# --- rules -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a chain: its name, and for ``protobuf`` the message type."""

    name: str
    arg: str = ""

    @property
    def label(self) -> str:
        return f"protobuf {self.arg}" if self.name == "protobuf" else LABELS.get(self.name, "")


@dataclass(frozen=True, slots=True)
class Rule:
    """Streams matching ``streams`` (an fnmatch pattern; ``field``, when set, a pattern of
    the field names it applies to) are decoded by ``steps``."""

    streams: str
    field: str | None
    steps: tuple[Step, ...]

    def applies(self, stream: str, name: str) -> bool:
        return fnmatch.fnmatchcase(stream, self.streams) and (
            self.field is None or fnmatch.fnmatchcase(name, self.field)
        )


def _step_parse(text: str, rule: str) -> Step:
    name, _, arg = text.partition(":")
    name, arg = name.strip().lower(), arg.strip()
    if name not in STEP_NAMES:
        known = ", ".join(STEP_NAMES)
        raise ValueError(f"{rule!r}: {name!r} is not a decoder (one of {known})")
    if name == "protobuf":
        if not _TYPE_NAME.match(arg):
            raise ValueError(
                f"{rule!r}: protobuf needs its message type, as protobuf:package.Message"
            )
    elif arg:
        raise ValueError(f"{rule!r}: {name} takes no argument")
    return Step(name, arg)


def rules_parse(text: str) -> tuple[Rule, ...]:
    """``ACKBOARD_DECODERS``: rules separated by ``;`` or new lines, each
    ``PATTERN=STEP,STEP`` or ``PATTERN#FIELD=STEP,…`` (the stream pattern is everything
    before the last ``#`` and ``=``; fnmatch patterns, matched case-sensitively). The first
    rule that matches a stream and field applies; fields no rule matches are ``auto``.

    Raises ValueError saying which rule is wrong: no ``=``, an empty pattern or chain, an
    unknown step, a protobuf step without its type, or a value step (json, msgpack,
    protobuf, taskiq, auto) anywhere but last.
    """
    rules: list[Rule] = []
    for raw in re.split(r"[;\n]", text):
        rule = raw.strip()
        if not rule:
            continue
        where, sep, chain = rule.rpartition("=")
        if not sep or not where.strip():
            raise ValueError(f"{rule!r} is not PATTERN=DECODER[,DECODER…]")
        streams, hash_sep, name = where.rpartition("#")
        if not hash_sep:
            streams, name = where, ""
        if not streams.strip() or (hash_sep and not name.strip()):
            raise ValueError(f"{rule!r}: the stream pattern and the field are not empty")
        steps = tuple(_step_parse(part, rule) for part in chain.split(",") if part.strip())
        if not steps:
            raise ValueError(f"{rule!r} names no decoder")
        for step in steps[:-1]:
            if step.name in VALUES or step.name == "taskiq":
                raise ValueError(f"{rule!r}: {step.name} decodes a value, so it comes last")
        rules.append(Rule(streams.strip(), name.strip() if hash_sep else None, steps))
    return tuple(rules)


@lru_cache(maxsize=16)
def _rules_cached(text: str) -> tuple[Rule, ...]:
    return rules_parse(text)


def steps_for(rules_text: str, stream: str | None, name: str) -> tuple[Step, ...] | None:
    """The chain of the first rule for ``stream`` and field ``name`` (None: ``auto``)."""
    if not rules_text or stream is None:
        return None
    for rule in _rules_cached(rules_text):
        if rule.applies(stream, name):
            return rule.steps
    return None


def protobuf_types(rules: tuple[Rule, ...]) -> set[str]:
    """The message types the rules name."""
    return {s.arg for r in rules for s in r.steps if s.name == "protobuf"}


# --- the chain ---------------------------------------------------------------------------

_NOTHING: Any = object()


@dataclass(slots=True)
class Limits:
    """What one value may cost: bytes in and out of each step, and a deadline (moved on
    by the time a first use spends importing a library)."""

    max_bytes: int
    deadline: float
    descriptors: str = ""

    @classmethod
    def start(cls, max_bytes: int, *, descriptors: str = "", max_ms: int = MAX_MS) -> Limits:
        return cls(max_bytes, time.monotonic() + max_ms / 1000, descriptors)

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise DecodeFailed(f"decoding took over {MAX_MS} ms")


@dataclass(frozen=True, slots=True)
class Decoded:
    """What a chain made of a value.

    ``value`` is the JSON-like value a decoder produced (dicts with str keys, lists, str,
    int, float, bool, None), or ``NOTHING``; then ``data`` is what is left to show as
    JSON or text (the value itself when nothing applied). ``steps`` are the labels of the
    steps that applied, ``envelope`` an envelope's metadata (``envelope_kind`` says
    whose), ``note`` why a step did not apply. ``withheld`` when the value is larger than
    a configured chain may decode (so it is not shown: its secrets could not be found).
    """

    value: Any = _NOTHING
    data: bytes = b""
    steps: tuple[str, ...] = ()
    envelope: dict[str, Any] | None = None
    envelope_kind: str = ""
    note: str = ""
    withheld: bool = False
    guessing: bool = field(default=True)

    @property
    def has_value(self) -> bool:
        return self.value is not _NOTHING


NOTHING = _NOTHING


def _base64(data: bytes, limits: Limits) -> bytes:
    compact = b"".join(data.split())
    if b"-" in compact or b"_" in compact:
        compact = compact.translate(bytes.maketrans(b"-_", b"+/"))
    compact += b"=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        raise DecodeFailed("not base64: characters outside its alphabet") from None


def _gzip(data: bytes, limits: Limits) -> bytes:
    inflater = zlib.decompressobj(wbits=47)  # 32 + 15: a gzip or a zlib header
    try:
        out = inflater.decompress(data, limits.max_bytes + 1)
    except zlib.error as exc:
        raise DecodeFailed(f"not gzip: {exc}") from None
    if len(out) > limits.max_bytes:
        raise DecodeFailed(f"not shown decompressed: over {limits.max_bytes} bytes")
    if not inflater.eof:
        raise DecodeFailed("not gzip: the compressed data is cut short")
    return out


def _zstd(data: bytes, limits: Limits) -> bytes:
    """A zstd frame, decompressed up to ``limits.max_bytes``: a frame that states a larger
    size is refused unread; one that states none is decompressed into a buffer of that
    size, and only if that fails, read as a bounded stream to tell a bomb from a bad frame."""
    import zstandard

    over = DecodeFailed(f"not shown decompressed: over {limits.max_bytes} bytes")
    decompressor = zstandard.ZstdDecompressor(max_window_size=1 << 25)
    try:
        size = zstandard.get_frame_parameters(data).content_size
        if size != zstandard.CONTENTSIZE_UNKNOWN:
            if size > limits.max_bytes:
                raise over
            return bytes(decompressor.decompress(data))
        return bytes(decompressor.decompress(data, max_output_size=limits.max_bytes))
    except zstandard.ZstdError as exc:
        if _zstd_streamed_over(decompressor, data, limits.max_bytes):
            raise over from None
        raise DecodeFailed(f"not zstd: {exc}") from None


def _zstd_streamed_over(decompressor: Any, data: bytes, max_bytes: int) -> bool:
    """Whether ``data`` decompresses to more than ``max_bytes`` (read at most that far)."""
    import zstandard

    size = 0
    try:
        with decompressor.stream_reader(io.BytesIO(data)) as reader:
            while size <= max_bytes:
                chunk = reader.read(min(1 << 20, max_bytes + 1 - size))
                if not chunk:
                    break
                size += len(chunk)
    except zstandard.ZstdError:
        return False
    return size > max_bytes


def _faststream(data: bytes, limits: Limits) -> tuple[bytes, dict[str, Any]]:
    """FastStream's Redis message: its body and headers. The binary format (FastStream
    0.6+, its default) is read by FastStream's own parser; the older JSON envelope
    (``{"data": …, "headers": {…}}``) by the bounded JSON reader."""
    if data.startswith(FASTSTREAM_MAGIC):
        started = time.monotonic()
        try:
            from faststream.redis.parser import BinaryMessageFormatV1
        except ImportError:
            raise DecodeFailed(
                "not unwrapped: reading FastStream messages needs the faststream package"
            ) from None
        limits.deadline += time.monotonic() - started  # a first import is no decoding
        body, headers = BinaryMessageFormatV1.parse(data)
        if body is data or (not headers and body == data):
            raise DecodeFailed("not a FastStream message: its header does not parse")
        return bytes(body), dict(headers)
    try:
        document = json_read(data, max_size=limits.max_bytes)
    except ValueError:
        document = None
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("data"), str)
        or not isinstance(document.get("headers", {}), dict)
    ):
        raise DecodeFailed("not a FastStream message: no FastStream header, nor its JSON envelope")
    return document["data"].encode("utf-8", "surrogatepass"), document.get("headers", {})


def _taskiq(data: bytes, limits: Limits) -> tuple[Any, dict[str, Any]]:
    """taskiq's message (as taskiq-redis stores it, JSON or msgpack): its arguments as
    the value, its task's name, id and labels as the envelope."""
    document: Any = None
    try:
        document = json_read(data, max_size=limits.max_bytes)
    except ValueError:
        try:
            document = _msgpack(data, limits)
        except DecodeFailed:
            document = None
    if (
        not isinstance(document, dict)
        or not isinstance(document.get("task_name"), str)
        or not isinstance(document.get("args", []), list)
        or not isinstance(document.get("kwargs", {}), dict)
    ):
        raise DecodeFailed("not a taskiq message: no task_name, args and kwargs")
    envelope = {k: document[k] for k in ("task_name", "task_id", "labels") if k in document}
    value = {"args": document.get("args", []), "kwargs": document.get("kwargs", {})}
    return value, envelope


def _msgpack(data: bytes, limits: Limits) -> Any:
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            unicode_errors="surrogateescape",  # shown as \xNN by the display
            strict_map_key=False,
            timestamp=0,
        )
    except msgpack.StackError:
        raise DecodeFailed(f"not msgpack: nested deeper than {MAX_DEPTH} levels") from None
    except msgpack.ExtraData:
        raise DecodeFailed("not msgpack: bytes left after the value") from None
    except Exception as exc:  # msgpack raises ValueError, TypeError and its own errors
        raise DecodeFailed(f"not msgpack: {_reason(exc)}") from None
    return _jsonable(value, limits)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (text[:80] if text else type(exc).__name__).rstrip(".")


def _protobuf(data: bytes, type_name: str, limits: Limits) -> Any:
    from google.protobuf import json_format

    if not limits.descriptors:
        raise DecodeFailed("not protobuf: no descriptor set (ACKBOARD_PROTO_DESCRIPTORS)")
    try:
        message = message_class(limits.descriptors, type_name)()
    except (KeyError, ValueError) as exc:
        raise DecodeFailed(f"not protobuf: {_reason(exc)}") from None
    try:
        message.ParseFromString(data)
        limits.check()
        value = json_format.MessageToDict(
            message,
            preserving_proto_field_name=True,
            descriptor_pool=descriptors_load(limits.descriptors),
        )
    except DecodeFailed:
        raise
    except Exception as exc:  # DecodeError, RecursionError, an Any of an unknown type
        raise DecodeFailed(f"not {type_name}: {_reason(exc)}") from None
    return _jsonable(value, limits)


def _jsonable(value: Any, limits: Limits) -> Any:
    """``value`` as JSON-like data: bytes as text (``\\xNN`` for what is not UTF-8), map
    keys as strings, extension types and timestamps as text; refused past ``MAX_DEPTH``
    levels or the deadline."""
    nodes = [0]

    def walk(node: Any, depth: int) -> Any:
        nodes[0] += 1
        if nodes[0] & 0xFFF == 0:
            limits.check()
        if isinstance(node, msgpack.ExtType):  # a namedtuple: before the tuples
            return f"ext({node.code}, {bytes(node.data).hex()[:200]})"
        if isinstance(node, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise DecodeFailed(f"not shown decoded: nested deeper than {MAX_DEPTH} levels")
            if isinstance(node, dict):
                return {_key(k): walk(v, depth + 1) for k, v in node.items()}
            return [walk(v, depth + 1) for v in node]
        if node is None or isinstance(node, str | bool | int | float):
            return node
        if isinstance(node, bytes | bytearray | memoryview):
            return bytes(node).decode("utf-8", "surrogateescape")
        if isinstance(node, msgpack.Timestamp):
            try:
                return node.to_datetime().isoformat().replace("+00:00", "Z")
            except (OverflowError, ValueError, OSError):
                return f"timestamp({node.seconds}, {node.nanoseconds})"
        if isinstance(node, datetime.datetime):
            return node.isoformat()
        return str(node)

    return walk(value, 0)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        return key.decode("utf-8", "surrogateescape")
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    return str(key)


def _is_utf8(data: bytes) -> bool:
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_Transform = Callable[[bytes, Limits], bytes]
_TRANSFORM: dict[str, _Transform] = {"base64": _base64, "gzip": _gzip, "zstd": _zstd}


def _guess(
    data: bytes, limits: Limits, steps: list[str]
) -> tuple[Any, bytes, dict[str, Any] | None, str, str]:
    """``auto`` on ``data``: (value or NOTHING, bytes left, envelope, its kind, note)."""
    envelope: dict[str, Any] | None = None
    kind = ""
    for _ in range(MAX_LAYERS):
        # Every magic below, and msgpack's containers but 0xdc-0xdf, are invalid UTF-8 at
        # their first bytes: a valid UTF-8 value (however long) is never decoded whole
        # here to tell, and is left to the text display.
        try:
            if data.startswith(GZIP_MAGIC):
                data = _gzip(data, limits)
                steps.append("gzip")
            elif data.startswith(ZSTD_MAGIC):
                data = _zstd(data, limits)
                steps.append("zstd")
            elif data.startswith(FASTSTREAM_MAGIC):
                data, envelope = _faststream(data, limits)
                kind = "FastStream"
                steps.append("FastStream")
            elif (
                data[:1]
                and data[0] in _MSGPACK_CONTAINER
                and len(data) <= limits.max_bytes
                and not (data[0] >= 0xDC and _is_utf8(data))
            ):
                try:
                    value = _msgpack(data, limits)
                except DecodeFailed:
                    break  # a guess that failed: the bytes are shown as they are
                if not value:
                    break  # b"\x80" is an empty map, but more likely one byte of binary
                steps.append("msgpack")
                return value, b"", envelope, kind, ""
            else:
                break
        except DecodeFailed as exc:
            return _NOTHING, data, envelope, kind, str(exc)
        limits.check()
    return _NOTHING, data, envelope, kind, ""


def chain_decode(value: bytes, steps: tuple[Step, ...] | None, limits: Limits) -> Decoded:
    """``value`` through ``steps`` (None: ``auto``), within ``limits``.

    A configured chain that fails returns the value's own bytes with the note (``guessing``
    False, so the display shows them as JSON or text without guessing); a value larger
    than ``limits.max_bytes`` for a configured chain is ``withheld``. Never raises for
    any input (``DecodeFailed`` is caught here)."""
    if steps is None or (len(steps) == 1 and steps[0].name == "auto"):
        return _auto(value, limits, [])
    if len(steps) == 1 and steps[0].name == "json":
        return Decoded(data=value, guessing=False)
    if len(value) > limits.max_bytes:
        return Decoded(data=value, steps=(steps[0].label,), withheld=True, guessing=False)
    applied: list[str] = []
    data = value
    envelope: dict[str, Any] | None = None
    kind = ""
    try:
        for step in steps:
            if step.name in _TRANSFORM:
                data = _TRANSFORM[step.name](data, limits)
            elif step.name == "faststream":
                data, envelope = _faststream(data, limits)
                kind = "FastStream"
            elif step.name == "taskiq":
                result, envelope = _taskiq(data, limits)
                applied.append(step.label)
                return Decoded(
                    result, steps=tuple(applied), envelope=envelope, envelope_kind="taskiq"
                )
            elif step.name == "msgpack":
                result = _msgpack(data, limits)
                applied.append(step.label)
                return Decoded(result, steps=tuple(applied), envelope=envelope, envelope_kind=kind)
            elif step.name == "protobuf":
                result = _protobuf(data, step.arg, limits)
                applied.append(step.label)
                return Decoded(result, steps=tuple(applied), envelope=envelope, envelope_kind=kind)
            elif step.name == "json":
                applied.append(step.label)
                return Decoded(data=data, steps=tuple(applied), envelope=envelope,
                               envelope_kind=kind, guessing=False)  # fmt: skip
            elif step.name == "auto":
                break
            applied.append(step.label)
            limits.check()
    except DecodeFailed as exc:
        return Decoded(data=value, note=str(exc), guessing=False)
    decoded = _auto(data, limits, applied)
    if envelope is None:
        return decoded
    return Decoded(decoded.value, decoded.data, decoded.steps, envelope, kind, decoded.note)


def _auto(data: bytes, limits: Limits, applied: list[str]) -> Decoded:
    try:
        value, data, envelope, kind, note = _guess(data, limits, applied)
    except DecodeFailed as exc:  # the deadline, between guesses
        return Decoded(data=data, steps=tuple(applied), note=str(exc))
    return Decoded(value, data, tuple(applied), envelope, kind, note)


def search_value(
    value: bytes, steps: tuple[Step, ...] | None, *, max_bytes: int, descriptors: str = ""
) -> Any:
    """What a payload search matches ``value`` against once decoded: the decoded value, or
    the JSON (else the text) of the bytes a transform or an envelope left; ``NOTHING``
    when no decoder applies (then the search matches the raw bytes, as it always has)."""
    if steps is None and value.isascii():
        return _NOTHING
    decoded = chain_decode(value, steps, Limits.start(max_bytes, descriptors=descriptors))
    if decoded.withheld or not decoded.steps:
        return _NOTHING
    if decoded.has_value:
        return decoded.value
    try:
        return json_read(decoded.data, max_size=max_bytes)
    except ValueError:
        return decoded.data.decode("utf-8", "replace")
