"""Payload rendering: stream entry fields as text that is safe to show and pleasant to read.

Owns how field bytes become display text: UTF-8 when it decodes, an escaped form of
the bytes otherwise (control characters and lone surrogates escaped too, so a terminal
escape, a NUL or an unencodable character in a payload cannot confuse or break the
page), JSON pretty-printed, long values cut with the full value behind an expander, and
fields whose names match ``settings.ACKBOARD_REDACT_PATTERN`` (and on a stream that
``ACKBOARD_REDACT_RULES`` names, its rules' regexes too) redacted (also inside JSON
objects, and inside JSON carried in JSON strings).

Decoding is bounded, because one hostile value must cost only its own row:

- **size**: JSON is parsed only up to ``PRETTY_JSON_BYTES`` (``PREVIEW_JSON_BYTES`` for
  table previews), other text decoded only as far as it can be shown; a page that shows
  many entries' fields shares ``PAGE_JSON_BYTES`` of full parsing (``DecodeBudget``);
- **depth**: JSON nested deeper than ``payload_json.MAX_DEPTH`` is not parsed (a linear
  scan decides, before the recursive parser runs), so nothing recurses without bound;
- **numbers**: a number literal longer than ``payload_json.MAX_NUMBER_DIGITS`` or out of
  float range is not parsed (int parsing is quadratic, and 1e999 would show as Infinity).

A refused or invalid document is shown as escaped text with a short note saying why.

Redaction fails closed (``dashboard.views.redaction``: what names a secret, even escaped
or encoded, and the masking of a parsed value), and always happens before a value is
cut, so previews cannot leak either. Finding and parsing a value's JSON, within the
bounds above, is ``dashboard.views.payload_json``'s.

Values that are neither JSON nor text go through their stream's decoder chain first
(``dashboard.display.decoders``: msgpack, protobuf, base64, gzip/zstd, FastStream and
taskiq envelopes, per ``ACKBOARD_DECODERS`` or guessed); a decoded value is redacted
like parsed JSON (envelope headers too) and a configured decoder that fails fails closed.

It returns plain strings for Django's autoescaping and never produces HTML itself:
templates must never mark payload text ``|safe``.

Cost: linear in the bytes decoded, at most a few tenths of a second for a 2 MB JSON
value whatever its shape (``benchmarks.payload_decode``, figures in docs/benchmarks.md).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import islice
from typing import Any, ParamSpec

from django.conf import settings

from dashboard.display import decoders, protobuf_set
from dashboard.display.decoders import Step
from dashboard.display.escaping import bytes_text, escape_unshowable
from dashboard.views.payload_json import lead_end, looks_like_json, parse_json, wide_json
from dashboard.views.redaction import (
    REDACTED,
    Redactor,
    names_secret,
    redact_pattern,
)
from queue_core.bounded_json import BoundedJSONError

log = logging.getLogger("ackboard.payloads")
P = ParamSpec("P")

#: JSON bytes one page may parse in full across all its rows (the dead-letter table shows
#: 50 entries' fields): past it, each value gets only the preview's allowance, so a page
#: of large documents costs about 1.5 s at worst rather than 50 x 0.37 s.
PAGE_JSON_BYTES = 4 * 1024 * 1024
#: Characters of a value shown before the rest hides behind "show all".
SHOWN_CHARS = 2_000
#: Most characters ever sent for one value, even expanded (a 512 MB value must not
#: become a 512 MB page).
MAX_CHARS = 200_000
#: Fields one page of an entry's fields shows (the entry page pages through the rest with
#: ``?fields_from=``); a dead-letter row shows fewer (``DLQ_ROW_FIELDS``).
PAGE_FIELDS = 100
DLQ_ROW_FIELDS = 20
#: Characters of field text (names, shown and expandable parts) one page sends at most,
#: across all its rows: about 1 MB of HTML, rendered in tens of ms, however many fields
#: or however large the values are.
PAGE_FIELD_CHARS = 1_000_000
#: Characters of the one-line preview in tables.
PREVIEW_CHARS = 140
#: JSON values up to this size are parsed for the preview (so nested secrets are redacted).
PREVIEW_JSON_BYTES = 256 * 1024
#: JSON values up to this size are parsed and pretty-printed on the entry and dead-letter
#: pages (at most about 0.4 s of CPU each, see above). A larger JSON-looking value is not
#: shown at all: its nested secrets could only be redacted by parsing it, and parsing
#: 80 MB takes ~9 s.
PRETTY_JSON_BYTES = 2 * 1024 * 1024
#: Bytes of a non-JSON value that are decoded: enough for ``MAX_CHARS`` characters even
#: when every byte becomes a 4-character ``\xNN`` escape, so a 50 MB value costs no more.
DECODE_BYTES = (MAX_CHARS + 1) * 4
#: The note of a value whose decoding failed in a way nothing here expected (a bug): it
#: is withheld, not shown, and the fuzz tests assert this never happens.
UNDECODABLE = "withheld: this value could not be decoded"

# --- one value ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Decoded:
    """A value as display text (escaped, not yet cut) and what happened to it."""

    text: str
    binary: bool = False
    is_json: bool = False
    redacted: bool = False
    note: str = ""
    decoded_as: str = ""
    envelope: str = ""
    #: Bytes a decoder produced beyond the value's own (decompressed), for the budget.
    grown: int = 0


#: Characters of an envelope's metadata line (FastStream's headers, taskiq's task).
ENVELOPE_CHARS = 600


def _decode(
    value: bytes,
    *,
    pretty: bool,
    json_bytes: int,
    text_bytes: int,
    steps: tuple[Step, ...] | None = None,
    stream: str | None = None,
) -> _Decoded:
    """``value`` through its decoder chain (``dashboard.display.decoders``; None: auto),
    then what is left as JSON or text (``_decode_plain``), redacted as on ``stream``."""
    if steps is None and value.isascii():
        return _decode_plain(
            value, pretty=pretty, json_bytes=json_bytes, text_bytes=text_bytes, stream=stream
        )
    limits = decoders.Limits.start(
        json_bytes, descriptors=getattr(settings, "ACKBOARD_PROTO_DESCRIPTORS", "")
    )
    decoded = decoders.chain_decode(value, steps, limits)
    chain = " → ".join(decoded.steps)
    if decoded.withheld:
        too_large = f"({chain}, {len(value)} bytes: too large to show redacted)"
        return _Decoded(text=too_large, redacted=True, decoded_as=chain)
    regex = redact_pattern(stream)
    envelope, envelope_hit = _envelope(decoded, regex)
    if decoded.has_value:
        redactor = Redactor(regex)
        shown = redactor.value(decoded.value, 0)
        return _Decoded(
            escape_unshowable(_json_text(shown, pretty=pretty)),
            is_json=isinstance(shown, dict | list),
            redacted=redactor.hit or envelope_hit,
            decoded_as=chain,
            envelope=envelope,
            note=decoded.note,
            grown=max(0, len(decoded.data) - len(value)),
        )
    if decoded.note and not decoded.guessing:
        # A configured decoder failed: the bytes are shown as they are, unless a redacted
        # key name appears anywhere in them (their structure is unknown: fail closed).
        raw = value[: max(json_bytes, text_bytes)].decode("utf-8", "surrogateescape")
        _, binary = bytes_text(value, limit=64)
        if names_secret(raw, anywhere=True, regex=regex):
            return _masked(value, binary, f"{decoded.note}, and it names a redacted key")
        if _protobuf_secret(steps, regex):
            return _masked(value, binary, f"{decoded.note}, and its type has a redacted field")
    plain = _decode_plain(
        decoded.data, pretty=pretty, json_bytes=json_bytes, text_bytes=text_bytes, stream=stream
    )
    notes = "; ".join(n for n in (decoded.note, plain.note) if n)
    return replace(
        plain,
        note=notes,
        decoded_as=chain,
        envelope=envelope,
        redacted=plain.redacted or envelope_hit,
        grown=max(0, len(decoded.data) - len(value)),
    )


def _protobuf_secret(steps: tuple[Step, ...] | None, regex: re.Pattern[str] | None) -> bool:
    """Whether a chain that failed has a protobuf step whose type has a redacted field:
    protobuf bytes hold no field names, so only the type can tell (an unknown type
    counts)."""
    if regex is None:
        return False
    for step in steps or ():
        if step.name != "protobuf":
            continue
        try:
            names = protobuf_set.protobuf_field_names(
                getattr(settings, "ACKBOARD_PROTO_DESCRIPTORS", ""), step.arg
            )
        except (KeyError, ValueError):
            return True
        if any(regex.search(name) for name in names):
            return True
    return False


def _envelope(decoded: decoders.Decoded, regex: re.Pattern[str] | None) -> tuple[str, bool]:
    """An envelope's metadata as one redacted line, and whether anything was masked."""
    if decoded.envelope is None:
        return "", False
    redactor = Redactor(regex)
    shown = redactor.value(decoded.envelope, 0)
    what = "task" if decoded.envelope_kind == "taskiq" else "headers"
    line = f"{decoded.envelope_kind} {what}: " + _json_text(shown, pretty=False)
    if len(line) > ENVELOPE_CHARS:
        line = line[: ENVELOPE_CHARS - 1] + "…"
    return escape_unshowable(line), redactor.hit


def _decode_plain(
    value: bytes, *, pretty: bool, json_bytes: int, text_bytes: int, stream: str | None = None
) -> _Decoded:
    """``value`` as JSON when it is a JSON document, else as text (escaped bytes),
    redacted as on ``stream``."""
    regex = redact_pattern(stream)
    # Past either limit, only whitespace would be shown anyway.
    start = lead_end(value, limit=max(json_bytes, text_bytes))
    wide = wide_json(value) if len(value) <= json_bytes else None
    head = value[start : start + 64].decode("utf-8", "replace")
    if wide is None and not looks_like_json(head):
        return _decode_text(value, text_bytes=text_bytes, regex=regex)
    if len(value) > json_bytes:
        # Its nested secrets could only be redacted by parsing it: withheld whole.
        return _Decoded(
            text=f"(JSON-like, {len(value)} bytes: too large to show redacted)",
            redacted=True,
        )
    notes = []
    binary = False
    if wide is not None:
        text, encoding = wide
        notes.append(f"decoded as {encoding}")
    else:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            # A Latin-1 producer's one bad byte: parse around it, show it as \xNN.
            text, binary = value.decode("utf-8", "surrogateescape"), True
        if b"\xef\xbb\xbf" in value[:start]:
            notes.append("starts with a byte order mark")
    try:
        parsed = parse_json(text, depth=0)
    except ValueError as exc:
        reason = str(exc) if isinstance(exc, BoundedJSONError) else "not valid JSON"
        if names_secret(text, anywhere=True, regex=regex):
            return _masked(value, binary, f"{reason}, and it names a redacted key")
        if isinstance(exc, BoundedJSONError):
            notes.insert(0, f"shown as text: {reason}")
        return _Decoded(escape_unshowable(text), binary=binary, note="; ".join(notes))
    redactor = Redactor(regex)
    # Nothing to walk (100k+ Python calls for a big value) if no name matches anywhere.
    named = names_secret(text, anywhere=True, regex=regex)
    shown = redactor.value(parsed, 0) if named else parsed
    if isinstance(shown, str):  # a JSON string: shown as written unless it held secrets
        out = json.dumps(shown, ensure_ascii=False) if redactor.hit else text
        return _Decoded(escape_unshowable(out), binary=binary, redacted=redactor.hit)
    return _Decoded(
        escape_unshowable(_json_text(shown, pretty=pretty)),
        binary=binary,
        is_json=True,
        redacted=redactor.hit,
        note="; ".join(notes),
    )


def _json_text(value: Any, *, pretty: bool) -> str:
    """``value`` as JSON text, indented or compact. Indented text is encoded only up to
    just past ``MAX_CHARS`` (the most ever shown), because Python's indenting encoder is
    slow (~0.4 s for 2 MB); compact text comes from the fast C encoder whole."""
    if not pretty:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    chunks: list[str] = []
    size = 0
    for chunk in json.JSONEncoder(ensure_ascii=False, indent=2).iterencode(value):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_CHARS:
            break
    return "".join(chunks)


def _masked(value: bytes, binary: bool, why: str) -> _Decoded:
    return _Decoded(
        text=f"{REDACTED} ({len(value)} bytes)",
        binary=binary,
        redacted=True,
        note=f"redacted whole: {why}",
    )


def _decode_text(value: bytes, *, text_bytes: int, regex: re.Pattern[str] | None) -> _Decoded:
    """A value that is not JSON, decoded as far as it can be shown."""
    text, binary = bytes_text(value, limit=text_bytes)
    raw = value[:text_bytes].decode("utf-8", "surrogateescape")
    if names_secret(raw, anywhere=False, regex=regex):
        return _masked(value, binary, "it holds a quoted key that is redacted")
    return _Decoded(text, binary=binary)


def _withheld_on_bug(decode: Callable[P, _Decoded]) -> Callable[P, _Decoded]:
    """``decode`` with a last line of defence: one value never breaks its page."""

    def safely(*args: P.args, **kwargs: P.kwargs) -> _Decoded:
        try:
            return decode(*args, **kwargs)
        except Exception as exc:  # a bug here must cost one value, not the page
            log.warning("payload withheld: decoding raised %s", type(exc).__name__)
            return _Decoded(text=UNDECODABLE, redacted=True, note=UNDECODABLE)

    return safely


_decode_safely = _withheld_on_bug(_decode)


@dataclass(frozen=True, slots=True)
class FieldView:
    """One field, ready for a template (every string is escaped there).

    ``shown`` is the visible part; ``full`` is set only when the value was cut, and
    holds up to ``MAX_CHARS`` characters for the expander; ``size`` is in bytes;
    ``note`` says why a value is shown as text, masked whole or decoded unusually;
    ``decoded_as`` the decoders that applied ("gzip → msgpack"), ``envelope`` an
    envelope's metadata line (FastStream's headers, taskiq's task), redacted.
    """

    name: str
    shown: str
    full: str | None
    size: int
    binary: bool
    name_binary: bool
    is_json: bool
    redacted: bool
    clipped: bool
    note: str = ""
    decoded_as: str = ""
    envelope: str = ""

    @property
    def truncated(self) -> bool:
        return self.full is not None


class DecodeBudget:
    """What a page may still spend on fields, shared by its rows: JSON bytes parsed in full
    (``PAGE_JSON_BYTES``) and characters of field text sent (``PAGE_FIELD_CHARS``)."""

    def __init__(self, total: int = PAGE_JSON_BYTES, chars: int = 0) -> None:
        self.left = total
        self.chars_left = chars or PAGE_FIELD_CHARS

    def allow(self, size: int) -> int:
        """The JSON size this value may be parsed up to; charges the budget if it fits."""
        if size <= PREVIEW_JSON_BYTES:
            # Small values are cheap and never spend the budget; once decompressed values
            # have spent it, what they decompress to is bounded as a preview's.
            return PRETTY_JSON_BYTES if self.left > 0 else PREVIEW_JSON_BYTES
        if size <= min(self.left, PRETTY_JSON_BYTES):
            self.left -= size
            return PRETTY_JSON_BYTES
        return PREVIEW_JSON_BYTES

    def spend(self, grown: int) -> None:
        """Charges bytes a decoder produced past a value's own size (decompressed)."""
        if grown > PREVIEW_JSON_BYTES:
            self.left -= grown


def decoder_steps(stream: str | None, name: str) -> tuple[Step, ...] | None:
    """The decoder chain ``ACKBOARD_DECODERS`` gives field ``name`` of ``stream``."""
    return decoders.steps_for(getattr(settings, "ACKBOARD_DECODERS", ""), stream, name)


def field_view(
    name: bytes,
    value: bytes,
    *,
    shown_chars: int = SHOWN_CHARS,
    budget: DecodeBudget | None = None,
    stream: str | None = None,
) -> FieldView:
    """One field as display text: decoded or escaped, redacted, JSON-indented, cut.

    With a ``budget`` (a table of many entries), a large JSON value is parsed in full only
    while the page's budget lasts; past it, it is withheld as too large, like any value
    over ``PRETTY_JSON_BYTES``. ``stream`` chooses the field's decoders (None: auto) and
    the redaction rules that apply on top of the global pattern (None: none).
    """
    name_text, name_binary = bytes_text(name)
    regex = redact_pattern(stream)
    if regex is not None and regex.search(name_text):
        return FieldView(
            name=name_text,
            shown=f"{REDACTED} ({len(value)} bytes)",
            full=None,
            size=len(value),
            binary=False,
            name_binary=name_binary,
            is_json=False,
            redacted=True,
            clipped=False,
        )
    json_bytes = PRETTY_JSON_BYTES if budget is None else budget.allow(len(value))
    decoded = _decode_safely(
        value,
        pretty=True,
        json_bytes=json_bytes,
        text_bytes=DECODE_BYTES,
        steps=decoder_steps(stream, name_text),
        stream=stream,
    )
    if budget is not None:
        budget.spend(decoded.grown)
    text = decoded.text
    clipped = len(text) > MAX_CHARS
    if clipped:
        text = text[:MAX_CHARS]
    cut = len(text) > shown_chars
    return FieldView(
        name=name_text,
        shown=text[:shown_chars] if cut else text,
        full=text if cut else None,
        size=len(value),
        binary=decoded.binary,
        name_binary=name_binary,
        is_json=decoded.is_json,
        redacted=decoded.redacted,
        clipped=clipped,
        note=decoded.note,
        decoded_as=decoded.decoded_as,
        envelope=decoded.envelope,
    )


def fields_view(
    fields: Iterable[tuple[bytes, bytes]],
    *,
    budget: DecodeBudget | None = None,
    stream: str | None = None,
) -> list[FieldView]:
    """Every field of an entry, in stream order (``budget``, ``stream``: see
    ``field_view``). Unbounded: pages show ``fields_page`` instead."""
    return [field_view(name, value, budget=budget, stream=stream) for name, value in fields]


class FieldsPage(list[FieldView]):
    """Some of an entry's fields, in stream order: the views (it is their list, so a
    template iterates it as before), from field ``start`` (0-based) of ``total``."""

    def __init__(self, views: Iterable[FieldView], *, start: int, total: int) -> None:
        super().__init__(views)
        self.start = start
        self.total = total

    @property
    def first(self) -> int:
        """The 1-based number of the first field shown (for "fields 101–200 of 50,000")."""
        return self.start + 1

    @property
    def end(self) -> int:
        """The 0-based index after the last field shown: where the next page starts."""
        return self.start + len(self)

    @property
    def more(self) -> int:
        """Fields after this page (0: it shows the last)."""
        return max(0, self.total - self.end)

    @property
    def partial(self) -> bool:
        return self.start > 0 or self.more > 0


def fields_page(
    fields: Sequence[tuple[bytes, bytes]],
    *,
    start: int = 0,
    count: int = PAGE_FIELDS,
    budget: DecodeBudget | None = None,
    stream: str | None = None,
) -> FieldsPage:
    """At most ``count`` fields from index ``start``, and no more once the page has sent
    ``budget.chars_left`` characters of field text, or before a large value its JSON budget
    can no longer parse (one field always, while any characters are left):
    an entry of 50,000 fields, or of a hundred 200,000-character values, costs one page's
    work, not the whole entry's. Each field as ``field_view`` (JSON parsing charged to
    ``budget``, a fresh ``DecodeBudget`` when None; ``stream``'s decoders). O(fields
    shown)."""
    budget = budget if budget is not None else DecodeBudget()
    start = max(0, start)
    views: list[FieldView] = []
    if budget.chars_left > 0:
        for name, value in fields[start : start + count]:
            if (
                views
                and PREVIEW_JSON_BYTES < len(value) <= PRETTY_JSON_BYTES
                and len(value) > budget.left
            ):
                # The page's JSON budget cannot parse it: the next page starts with it
                # (and a fresh budget) rather than showing it withheld as too large.
                break
            view = field_view(name, value, budget=budget, stream=stream)
            views.append(view)
            budget.chars_left -= len(view.name) + len(view.shown) + len(view.full or "")
            if budget.chars_left <= 0:
                break
    return FieldsPage(views, start=start, total=len(fields))


#: Previews are cached by content: a table shows the same entries on every request and
#: every live push, and an entry's fields never change under its id. Only entries whose
#: fields total at most this many bytes are kept (the key holds them), the newest
#: ``PREVIEW_CACHE_SIZE``: at most ~10 MB per process.
PREVIEW_CACHE_BYTES = 4096
PREVIEW_CACHE_SIZE = 2048


def preview(
    fields: Iterable[tuple[bytes, bytes]],
    *,
    chars: int = PREVIEW_CHARS,
    stream: str | None = None,
) -> str:
    """A one-line summary of an entry for table rows: ``name=value name=value …``.

    Redaction and escaping apply as on the entry page, before the line is cut; JSON (and
    what ``stream``'s decoders decode) is shown compact. A small entry's line is cached by
    its exact fields, ``chars``, the stream, the redaction and decoder settings (the line
    is a function of those alone): about 2 µs instead of 20-60 µs a row.
    """
    # A line shows at most ``chars`` characters and each field takes at least two ("=" and
    # a space), so fields past the first ``chars`` never show: an entry of 50,000 fields
    # costs what its first ``chars`` do.
    pairs = tuple(islice(fields, chars))
    if sum(len(name) + len(value) for name, value in pairs) > PREVIEW_CACHE_BYTES:
        return _preview(pairs, chars, stream)
    configured = (
        getattr(settings, "ACKBOARD_REDACT_PATTERN", ""),
        getattr(settings, "ACKBOARD_REDACT_RULES", ""),
        getattr(settings, "ACKBOARD_DECODERS", ""),
        getattr(settings, "ACKBOARD_PROTO_DESCRIPTORS", ""),
    )
    try:
        return _preview_cached(configured, chars, pairs, stream)
    except TypeError:  # pairs that are not hashable (lists): shown, not cached
        return _preview(pairs, chars, stream)


@lru_cache(maxsize=PREVIEW_CACHE_SIZE)
def _preview_cached(
    configured: tuple[str, str, str, str],
    chars: int,
    pairs: tuple[tuple[bytes, bytes], ...],
    stream: str | None,
) -> str:
    # ``configured`` is the key's part for the settings that _preview reads itself.
    return _preview(pairs, chars, stream)


def _preview(fields: tuple[tuple[bytes, bytes], ...], chars: int, stream: str | None = None) -> str:
    parts: list[str] = []
    length = 0
    regex = redact_pattern(stream)
    for name, value in fields:
        name_text, _ = bytes_text(name)
        if regex is not None and regex.search(name_text):
            shown = REDACTED
        else:
            decoded = _decode_safely(
                value,
                pretty=False,
                json_bytes=PREVIEW_JSON_BYTES,
                text_bytes=chars * 4,
                steps=decoder_steps(stream, name_text),
                stream=stream,
            )
            shown = decoded.text
        part = f"{name_text}={shown}".replace("\n", " ")
        parts.append(part)
        length += len(part) + 1
        if length > chars:
            break
    line = " ".join(parts)
    return line if len(line) <= chars else line[: chars - 1] + "…"
