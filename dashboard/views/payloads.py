"""Payload rendering: stream entry fields as text that is safe to show and pleasant to read.

Owns how field bytes become display text: UTF-8 when it decodes, an escaped form of
the bytes otherwise (control characters and lone surrogates escaped too, so a terminal
escape, a NUL or an unencodable character in a payload cannot confuse or break the
page), JSON pretty-printed, long values cut with the full value behind an expander, and
fields whose names match ``settings.ACKBOARD_REDACT_PATTERN`` redacted (also inside JSON
objects, and inside JSON carried in JSON strings).

Decoding is bounded, because one hostile value must cost only its own row:

- **size**: JSON is parsed only up to ``PRETTY_JSON_BYTES`` (``PREVIEW_JSON_BYTES`` for
  table previews), other text decoded only as far as it can be shown; a page that shows
  many entries' fields shares ``PAGE_JSON_BYTES`` of full parsing (``DecodeBudget``);
- **depth**: JSON nested deeper than ``MAX_DEPTH`` is not parsed (a linear scan decides,
  before the recursive parser runs), so nothing recurses without bound;
- **numbers**: a number literal longer than ``MAX_NUMBER_DIGITS`` or out of float range
  is not parsed (int parsing is quadratic, and 1e999 would show as Infinity).

A refused or invalid document is shown as escaped text with a short note saying why.

Redaction fails closed. JSON is found after a byte order mark, leading whitespace, in
UTF-16/32, and with invalid bytes (kept as ``\\xNN``). A value that looks like a JSON
document but is not parsed (invalid, or refused by a bound) is masked whole if a
redacted key name appears anywhere in it; any text is masked whole if it holds a quoted
key matching the pattern followed by ``:`` or ``=``. Both checks also look through
``\\u``/``\\x`` escapes, %-encoding, HTML entities, NUL padding and NFKC look-alikes.
Redaction always happens before a value is cut, so previews cannot leak either.

It returns plain strings for Django's autoescaping and never produces HTML itself:
templates must never mark payload text ``|safe``.

Cost: linear in the bytes decoded. Measured on the 2-core dev machine (CPU time, one
value, ``uv run python -m benchmarks.payload_decode``): a 2 MB JSON value takes
0.17-0.37 s whatever its shape (deep, flat, escaped, 100k inner documents, 4000-digit
numbers, a typical object with a secret); a 256 KB preview at most 0.06 s; a 50 MB text
value 0.02 s.
"""

from __future__ import annotations

import html
import json
import logging
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import Any

from django.conf import settings

from queue_core import bounded_json
from queue_core.bounded_json import BoundedJSONError, json_read

log = logging.getLogger("ackboard.payloads")

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
#: Deepest JSON nesting that is parsed (objects and arrays, counted together, including
#: JSON inside JSON strings): the bounded reader's own default. Python's parser recurses
#: once per level.
MAX_DEPTH = bounded_json.MAX_DEPTH
#: JSON documents inside JSON strings parsed per value (only strings that look like JSON
#: and name a redacted key are); past this, such strings are masked whole.
MAX_INNER_DOCUMENTS = 100
#: Strings up to this length have their redaction verdict remembered within one value.
SHORT_STRING = 256
#: Longest number literal that is parsed: below Python's own 4300-digit guard, which a
#: process may have lifted (``sys.set_int_max_str_digits``), and int() is quadratic.
MAX_NUMBER_DIGITS = 4000
REDACTED = "•••• redacted"
#: The note of a value whose decoding failed in a way nothing here expected (a bug): it
#: is withheld, not shown, and the fuzz tests assert this never happens.
UNDECODABLE = "withheld: this value could not be decoded"

# C0/C1 controls and DEL (except tab and newline, which read fine in <pre>), lone
# surrogates (an HTTP response cannot encode them) and the invisible BOM.
_UNSHOWABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff]")
# What may precede a JSON document: ASCII whitespace runs, between UTF-8 BOMs and no-break
# spaces (skipped a few at a time, so a long run costs one C-speed scan).
_WHITESPACE = re.compile(rb"[ \t\n\r\f\v]*")
_LEAD_MARKS = (b"\xef\xbb\xbf", b"\xc2\xa0")
_PAD = " \t\n\r\f\v\xa0\ufeff"
# The start of a JSON document: an object, an array that starts like one (so "[INFO] …"
# is text), or a JSON string that holds one (double-encoded JSON).
_JSON_START = re.compile(
    r"""\{|\[\s*(?:[\[{"'\]\-0-9]|true\b|false\b|null\b|NaN\b|-?Infinity\b)|"\s*[\[{]"""
)
# What a JSON string that holds a JSON document can start with.
_JSON_FIRST = frozenset('{["' + _PAD)
# Text that may hide a key behind an escape, an encoding or a look-alike character.
_ENCODED = re.compile("[\\\\%&\x00]|[^\x00-\x7f]")
# Text that may hold a quoted key, plainly or behind an escape.
_MAYBE_QUOTED = re.compile("[\"'\\\\%&\x00]|[^\x00-\x7f]")
# A quoted key followed by ":" or "=": JSON, a Python dict repr, YAML/INI with quotes.
_QUOTED_KEY = re.compile(r"""(["'])([^"'\r\n]{1,256})\1\s*[:=]""")
# Key-like tokens, for patterns anchored to a whole name (``^card$``): bare words, and
# the contents of quotes of either kind (separate passes: one kind nests in the other).
_TOKENS = (
    re.compile(r"""[^\s"'{}\[\]:,=&;<>()\\]{1,256}"""),
    re.compile(r'"([^"\r\n]{1,256})"'),
    re.compile(r"'([^'\r\n]{1,256})'"),
)
# Escapes that spell a character by its code (``\\u0070``).
_CODE_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|U([0-9a-fA-F]{8}))")
_PERCENT_RUN = re.compile(r"(?:%[0-9a-fA-F]{2})+")


@lru_cache(maxsize=8)
def _redact_re(pattern: str) -> re.Pattern[str] | None:
    return re.compile(pattern, re.IGNORECASE) if pattern else None


def _pattern() -> re.Pattern[str] | None:
    return _redact_re(getattr(settings, "ACKBOARD_REDACT_PATTERN", ""))


def _redacts(name: str) -> bool:
    regex = _pattern()
    return bool(regex and regex.search(name))


def _escape_unshowable(text: str) -> str:
    def escape(match: re.Match[str]) -> str:
        code = ord(match.group())
        if 0xDC80 <= code <= 0xDCFF:  # an invalid byte, kept by "surrogateescape"
            return f"\\x{code - 0xDC00:02x}"
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"

    return _UNSHOWABLE.sub(escape, text)


def bytes_text(raw: bytes, *, limit: int | None = None) -> tuple[str, bool]:
    """``raw`` (or its first ``limit`` bytes) as display text, and whether it is binary.

    Binary bytes (not valid UTF-8) are shown as ``\\xNN`` escapes around their printable
    ASCII; either way control characters are escaped, so the text is one safe, visible
    string. A UTF-8 character cut by ``limit`` is dropped, not taken for binary.
    """
    head = raw if limit is None or len(raw) <= limit else raw[:limit]
    try:
        return _escape_unshowable(head.decode("utf-8")), False
    except UnicodeDecodeError as exc:
        if len(head) < len(raw) and exc.reason == "unexpected end of data":
            try:
                return _escape_unshowable(head[: exc.start].decode("utf-8")), False
            except UnicodeDecodeError:
                pass
        text = head.decode("ascii", "backslashreplace")
        return _escape_unshowable(text), True


# --- secrets in text that is not parsed --------------------------------------------------


def _unescape(text: str) -> str:
    """``text`` with code escapes spelled out and other backslashes dropped (close enough
    to find a key name in JSON, Python or C escapes, at C speed for most of it)."""
    if "\\" not in text:
        return text

    def spell(match: re.Match[str]) -> str:
        value = int(match.group(1) or match.group(2) or match.group(3), 16)
        return chr(value) if value <= 0x10FFFF else ""

    return _CODE_ESCAPE.sub(spell, text).replace("\\", "")


def _unpercent(text: str) -> str:
    """``text`` with %-encoded runs decoded as UTF-8 (one call per run, not per byte)."""
    if "%" not in text:
        return text
    return _PERCENT_RUN.sub(
        lambda m: bytes.fromhex(m.group().replace("%", "")).decode("utf-8", "replace"), text
    )


def _forms(text: str) -> Iterator[str]:
    """``text``, then the same with escapes and encodings undone, a layer per round."""
    yield text
    if _ENCODED.search(text) is None:
        return
    seen = {text}
    form = text
    for _ in range(3):
        form = _unpercent(_unescape(form.replace("\x00", "")))
        if "&" in form:
            form = html.unescape(form)
        if not form.isascii():
            form = unicodedata.normalize("NFKC", form)
        if form in seen:
            return
        seen.add(form)
        yield form


@lru_cache(maxsize=8)
def _anchored(pattern: str) -> bool:
    """Whether ``pattern`` can match a whole key but not inside a longer text (``^card$``):
    then the words of a text are tried one by one, which costs more."""
    return any(mark in pattern for mark in ("^", "$", "\\A", "\\Z", "\\b", "\\B", "(?"))


def _tokens(text: str) -> set[str]:
    return {m.group(m.lastindex or 0) for pattern in _TOKENS for m in pattern.finditer(text)}


def _names_secret(text: str, *, anywhere: bool, regex: re.Pattern[str] | None) -> bool:
    """Whether a redacted key name (``regex``) appears in ``text``: ``anywhere``, or as a
    quoted key. Used on text that is shown unparsed, to fail closed.
    """
    if regex is None:
        return False
    if not anywhere and _MAYBE_QUOTED.search(text) is None:
        return False  # the common case, one scan: no quote, escape or encoding at all
    for form in _forms(text):
        if anywhere:
            if regex.search(form):
                return True
            if _anchored(regex.pattern) and any(regex.search(token) for token in _tokens(form)):
                return True
        elif any(regex.search(m.group(2)) for m in _QUOTED_KEY.finditer(form)):
            return True
    return False


# --- JSON, bounded -----------------------------------------------------------------------


def _parse(text: str, *, depth: int) -> Any:
    """``text`` as JSON, refusing what is deeper than ``MAX_DEPTH`` from ``depth`` and
    numbers past ``MAX_NUMBER_DIGITS`` or out of float range: ``queue_core.bounded_json``
    scans the brackets outside strings before its parser recurses.

    Raises ValueError (``BoundedJSONError`` for a bound, with the reason).
    """
    # strict=False: raw newlines inside strings (a common producer slip) still parse. No
    # size bound here: the callers check PRETTY_JSON_BYTES / PREVIEW_JSON_BYTES first.
    return json_read(
        text, max_depth=MAX_DEPTH - depth, max_size=None, max_digits=MAX_NUMBER_DIGITS,
        strict=False,
    )  # fmt: skip


def _looks_like_json(text: str) -> bool:
    return _JSON_START.match(text.lstrip(_PAD)) is not None


class _Redactor:
    """Masks the secrets of one parsed value; ``hit`` says whether it masked any.

    JSON inside a JSON string is parsed in turn, at most ``MAX_INNER_DOCUMENTS`` times per
    value; past that, such a string is masked whole rather than parsed (a value of 100k
    tiny documents must not cost 100k parses).
    """

    def __init__(self, regex: re.Pattern[str] | None) -> None:
        self.regex = regex
        self.hit = False
        self.inner_left = MAX_INNER_DOCUMENTS
        # Verdicts remembered: arrays of objects repeat their keys and short values.
        # Key name -> (as shown, whether its value is masked); string -> (as shown, hit).
        self._keys: dict[str, tuple[str, bool]] = {}
        self._strings: dict[str, tuple[str, bool]] = {}

    def value(self, value: Any, depth: int) -> Any:
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, item in value.items():
                shown_key, masked = self.key(key, depth + 1)
                if masked:
                    self.hit = True
                    out[shown_key] = REDACTED
                elif isinstance(item, dict | list | str):
                    out[shown_key] = self.value(item, depth + 1)
                else:
                    out[shown_key] = item
            return out
        if isinstance(value, list):
            return [
                self.value(item, depth + 1) if isinstance(item, dict | list | str) else item
                for item in value
            ]
        if isinstance(value, str):
            return self.string(value, depth)
        return value

    def key(self, key: str, depth: int) -> tuple[str, bool]:
        """A key as shown, and whether its value is masked: its name matches the pattern,
        or the key itself held a secret (then both are masked). Remembered per name."""
        known = self._keys.get(key)
        if known is None:
            outer, self.hit = self.hit, False
            shown = self.string(key, depth)
            known = (shown, self.hit or bool(self.regex and self.regex.search(key)))
            self.hit = outer
            self._keys[key] = known
        return known

    def string(self, text: str, depth: int) -> str:
        """A JSON string with its secrets masked: JSON inside it is parsed and redacted
        (or masked whole if it cannot be); other text with a quoted secret key is masked."""
        if len(text) > SHORT_STRING:
            return self._string(text, depth)
        known = self._strings.get(text)
        if known is None:
            outer, self.hit = self.hit, False
            known = (self._string(text, depth), self.hit)
            self.hit = outer
            self._strings[text] = known
        self.hit = self.hit or known[1]
        return known[0]

    def _string(self, text: str, depth: int) -> str:
        if text[:1] in _JSON_FIRST and _looks_like_json(text):
            if not _names_secret(text, anywhere=True, regex=self.regex):
                return text
            if self.inner_left <= 0:
                self.hit = True
                return REDACTED
            self.inner_left -= 1
            inner = _Redactor(self.regex)
            inner.inner_left = self.inner_left  # the budget is shared by every level
            try:
                value = inner.value(_parse(text.strip(_PAD), depth=depth), depth)
            except ValueError:
                self.hit = True
                return REDACTED
            finally:
                self.inner_left = inner.inner_left
            if not inner.hit:
                return text  # it only mentions the name (as a value): shown as written
            self.hit = True
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        if _names_secret(text, anywhere=False, regex=self.regex):
            self.hit = True
            return REDACTED
        return text


# --- one value ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Decoded:
    """A value as display text (escaped, not yet cut) and what happened to it."""

    text: str
    binary: bool = False
    is_json: bool = False
    redacted: bool = False
    note: str = ""


def _lead_end(value: bytes, *, limit: int) -> int:
    """Where ``value`` starts after whitespace, BOMs and no-break spaces (a few of those),
    looking no further than ``limit`` bytes."""
    end = 0
    for _ in range(16):
        match = _WHITESPACE.match(value, end, limit)
        end = match.end() if match else end
        mark = next((m for m in _LEAD_MARKS if value.startswith(m, end)), None)
        if mark is None:
            break
        end += len(mark)
    return end


def _wide_json(value: bytes) -> tuple[str, str] | None:
    """``value`` as UTF-16 or UTF-32 JSON (text, encoding), when it is that."""
    encoding = json.detect_encoding(value[:4])
    if encoding in ("utf-8", "utf-8-sig"):
        return None
    try:
        text = value.decode(encoding)
    except UnicodeDecodeError:
        return None
    if not _looks_like_json(text):
        return None
    return text, {"utf-16": "UTF-16", "utf-32": "UTF-32"}.get(encoding, encoding.upper())


def _decode(value: bytes, *, pretty: bool, json_bytes: int, text_bytes: int) -> _Decoded:
    regex = _pattern()
    # Past either limit, only whitespace would be shown anyway.
    start = _lead_end(value, limit=max(json_bytes, text_bytes))
    wide = _wide_json(value) if len(value) <= json_bytes else None
    head = value[start : start + 64].decode("utf-8", "replace")
    if wide is None and not _looks_like_json(head):
        return _decode_text(value, text_bytes=text_bytes)
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
        parsed = _parse(text.strip(_PAD), depth=0)
    except ValueError as exc:
        reason = str(exc) if isinstance(exc, BoundedJSONError) else "not valid JSON"
        if _names_secret(text, anywhere=True, regex=regex):
            return _masked(value, binary, f"{reason}, and it names a redacted key")
        if isinstance(exc, BoundedJSONError):
            notes.insert(0, f"shown as text: {reason}")
        return _Decoded(_escape_unshowable(text), binary=binary, note="; ".join(notes))
    redactor = _Redactor(regex)
    # Nothing to walk (100k+ Python calls for a big value) if no name matches anywhere.
    named = _names_secret(text, anywhere=True, regex=regex)
    shown = redactor.value(parsed, 0) if named else parsed
    if isinstance(shown, str):  # a JSON string: shown as written unless it held secrets
        out = json.dumps(shown, ensure_ascii=False) if redactor.hit else text
        return _Decoded(_escape_unshowable(out), binary=binary, redacted=redactor.hit)
    return _Decoded(
        _escape_unshowable(_json_text(shown, pretty=pretty)),
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


def _decode_text(value: bytes, *, text_bytes: int) -> _Decoded:
    """A value that is not JSON, decoded as far as it can be shown."""
    text, binary = bytes_text(value, limit=text_bytes)
    raw = value[:text_bytes].decode("utf-8", "surrogateescape")
    if _names_secret(raw, anywhere=False, regex=_pattern()):
        return _masked(value, binary, "it holds a quoted key that is redacted")
    return _Decoded(text, binary=binary)


def _decode_safely(value: bytes, *, pretty: bool, json_bytes: int, text_bytes: int) -> _Decoded:
    """``_decode``, with a last line of defence: one value never breaks its page."""
    try:
        return _decode(value, pretty=pretty, json_bytes=json_bytes, text_bytes=text_bytes)
    except Exception as exc:  # a bug here must cost one value, not the page
        log.warning("payload withheld: decoding raised %s", type(exc).__name__)
        return _Decoded(text=UNDECODABLE, redacted=True, note=UNDECODABLE)


@dataclass(frozen=True, slots=True)
class FieldView:
    """One field, ready for a template (every string is escaped there).

    ``shown`` is the visible part; ``full`` is set only when the value was cut, and
    holds up to ``MAX_CHARS`` characters for the expander; ``size`` is in bytes;
    ``note`` says why a value is shown as text, masked whole or decoded unusually.
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
            return PRETTY_JSON_BYTES  # small values are cheap; they never spend the budget
        if size <= min(self.left, PRETTY_JSON_BYTES):
            self.left -= size
            return PRETTY_JSON_BYTES
        return PREVIEW_JSON_BYTES


def field_view(
    name: bytes,
    value: bytes,
    *,
    shown_chars: int = SHOWN_CHARS,
    budget: DecodeBudget | None = None,
) -> FieldView:
    """One field as display text: decoded or escaped, redacted, JSON-indented, cut.

    With a ``budget`` (a table of many entries), a large JSON value is parsed in full only
    while the page's budget lasts; past it, it is withheld as too large, like any value
    over ``PRETTY_JSON_BYTES``.
    """
    name_text, name_binary = bytes_text(name)
    if _redacts(name_text):
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
    decoded = _decode_safely(value, pretty=True, json_bytes=json_bytes, text_bytes=DECODE_BYTES)
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
    )


def fields_view(
    fields: Iterable[tuple[bytes, bytes]], *, budget: DecodeBudget | None = None
) -> list[FieldView]:
    """Every field of an entry, in stream order (``budget``: see ``field_view``). Unbounded:
    pages show ``fields_page`` instead."""
    return [field_view(name, value, budget=budget) for name, value in fields]


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
) -> FieldsPage:
    """At most ``count`` fields from index ``start``, and no more once the page has sent
    ``budget.chars_left`` characters of field text, or before a large value its JSON budget
    can no longer parse (one field always, while any characters are left):
    an entry of 50,000 fields, or of a hundred 200,000-character values, costs one page's
    work, not the whole entry's. Each field as ``field_view`` (JSON parsing charged to
    ``budget``, a fresh ``DecodeBudget`` when None). O(fields shown)."""
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
            view = field_view(name, value, budget=budget)
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


def preview(fields: Iterable[tuple[bytes, bytes]], *, chars: int = PREVIEW_CHARS) -> str:
    """A one-line summary of an entry for table rows: ``name=value name=value …``.

    Redaction and escaping apply as on the entry page, before the line is cut; JSON is
    shown compact. A small entry's line is cached by its exact fields, ``chars`` and the
    redaction pattern (the line is a function of those alone): about 2 µs instead of
    20-60 µs a row.
    """
    # A line shows at most ``chars`` characters and each field takes at least two ("=" and
    # a space), so fields past the first ``chars`` never show: an entry of 50,000 fields
    # costs what its first ``chars`` do.
    pairs = tuple(islice(fields, chars))
    if sum(len(name) + len(value) for name, value in pairs) > PREVIEW_CACHE_BYTES:
        return _preview(pairs, chars)
    try:
        return _preview_cached(getattr(settings, "ACKBOARD_REDACT_PATTERN", ""), chars, pairs)
    except TypeError:  # pairs that are not hashable (lists): shown, not cached
        return _preview(pairs, chars)


@lru_cache(maxsize=PREVIEW_CACHE_SIZE)
def _preview_cached(pattern: str, chars: int, pairs: tuple[tuple[bytes, bytes], ...]) -> str:
    # ``pattern`` is the key's part for the setting that _preview reads itself.
    return _preview(pairs, chars)


def _preview(fields: tuple[tuple[bytes, bytes], ...], chars: int) -> str:
    parts: list[str] = []
    length = 0
    for name, value in fields:
        name_text, _ = bytes_text(name)
        if _redacts(name_text):
            shown = REDACTED
        else:
            decoded = _decode_safely(
                value, pretty=False, json_bytes=PREVIEW_JSON_BYTES, text_bytes=chars * 4
            )
            shown = decoded.text
        part = f"{name_text}={shown}".replace("\n", " ")
        parts.append(part)
        length += len(part) + 1
        if length > chars:
            break
    line = " ".join(parts)
    return line if len(line) <= chars else line[: chars - 1] + "…"
