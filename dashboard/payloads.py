"""Payload rendering: stream entry fields as text that is safe to show and pleasant to read.

Owns how field bytes become display text: UTF-8 when it decodes, an escaped form of
the bytes otherwise (control characters escaped too, so a terminal escape or a NUL in
a payload cannot confuse the page), JSON pretty-printed, long values cut with the full
value behind an expander, and fields whose names match
``settings.ACKBOARD_REDACT_PATTERN`` redacted (also inside JSON objects).

It returns plain strings for Django's autoescaping and never produces HTML itself:
templates must never mark payload text ``|safe``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings

#: Characters of a value shown before the rest hides behind "show all".
SHOWN_CHARS = 2_000
#: Most characters ever sent for one value, even expanded (a 512 MB value must not
#: become a 512 MB page).
MAX_CHARS = 200_000
#: Characters of the one-line preview in tables.
PREVIEW_CHARS = 140
#: JSON values up to this size are parsed for the preview (so nested secrets are redacted).
PREVIEW_JSON_BYTES = 256 * 1024
#: JSON values up to this size are parsed and pretty-printed on the entry and dead-letter
#: pages (about 0.1 s each). A larger JSON-looking value is not shown at all: its nested
#: secrets could only be redacted by parsing it, and parsing 80 MB takes ~9 s.
PRETTY_JSON_BYTES = 2 * 1024 * 1024
#: Bytes of a non-JSON value that are decoded: enough for ``MAX_CHARS`` characters even
#: when every byte becomes a 4-character ``\xNN`` escape, so a 50 MB value costs no more.
DECODE_BYTES = (MAX_CHARS + 1) * 4
REDACTED = "•••• redacted"

# C0/C1 controls and DEL, except tab and newline, which read fine in <pre>.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@lru_cache(maxsize=8)
def _redact_re(pattern: str) -> re.Pattern[str] | None:
    return re.compile(pattern, re.IGNORECASE) if pattern else None


def _redacts(name: str) -> bool:
    regex = _redact_re(getattr(settings, "ACKBOARD_REDACT_PATTERN", ""))
    return bool(regex and regex.search(name))


def _escape_controls(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def bytes_text(raw: bytes, *, limit: int | None = None) -> tuple[str, bool]:
    """``raw`` (or its first ``limit`` bytes) as display text, and whether it is binary.

    Binary bytes (not valid UTF-8) are shown as ``\\xNN`` escapes around their printable
    ASCII; either way control characters are escaped, so the text is one safe, visible
    string. A UTF-8 character cut by ``limit`` is dropped, not taken for binary.
    """
    head = raw if limit is None or len(raw) <= limit else raw[:limit]
    try:
        return _escape_controls(head.decode("utf-8")), False
    except UnicodeDecodeError as exc:
        if len(head) < len(raw) and exc.reason == "unexpected end of data":
            try:
                return _escape_controls(head[: exc.start].decode("utf-8")), False
            except UnicodeDecodeError:
                pass
        text = head.decode("ascii", "backslashreplace")
        return _escape_controls(text), True


def _redact_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and _redacts(k) else _redact_json(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact_json(v) for v in value]
    return value


def _json_pretty(text: str) -> str | None:
    """Indented JSON when ``text`` is a JSON object or array, else None."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return json.dumps(_redact_json(value), indent=2, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class FieldView:
    """One field, ready for a template (every string is escaped there).

    ``shown`` is the visible part; ``full`` is set only when the value was cut, and
    holds up to ``MAX_CHARS`` characters for the expander; ``size`` is in bytes.
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

    @property
    def truncated(self) -> bool:
        return self.full is not None


def field_view(name: bytes, value: bytes, *, shown_chars: int = SHOWN_CHARS) -> FieldView:
    """One field as display text: decoded or escaped, redacted, JSON-indented, cut."""
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
    json_like = value[:1024].lstrip()[:1] in (b"{", b"[")
    if json_like and len(value) > PRETTY_JSON_BYTES:
        return FieldView(
            name=name_text,
            shown=f"(JSON-like, {len(value)} bytes: too large to show with its secrets redacted)",
            full=None,
            size=len(value),
            binary=False,
            name_binary=name_binary,
            is_json=False,
            redacted=True,
            clipped=True,
        )
    # JSON is decoded whole (it is at most PRETTY_JSON_BYTES) so that it parses and its
    # nested secrets are redacted; anything else only as far as it can be shown.
    text, binary = bytes_text(value, limit=None if json_like else DECODE_BYTES)
    pretty = None if binary or not json_like else _json_pretty(text)
    if pretty is not None:
        text = pretty
    clipped = len(text) > MAX_CHARS
    if clipped:
        text = text[:MAX_CHARS]
    cut = len(text) > shown_chars
    return FieldView(
        name=name_text,
        shown=text[:shown_chars] if cut else text,
        full=text if cut else None,
        size=len(value),
        binary=binary,
        name_binary=name_binary,
        is_json=pretty is not None,
        redacted=pretty is not None and REDACTED in pretty,
        clipped=clipped,
    )


def fields_view(fields: Iterable[tuple[bytes, bytes]]) -> list[FieldView]:
    """Every field of an entry, in stream order."""
    return [field_view(name, value) for name, value in fields]


def preview(fields: Iterable[tuple[bytes, bytes]], *, chars: int = PREVIEW_CHARS) -> str:
    """A one-line summary of an entry for table rows: ``name=value name=value …``.

    Redaction and escaping apply as on the entry page; JSON is shown compact.
    """
    parts: list[str] = []
    length = 0
    for name, value in fields:
        name_text, _ = bytes_text(name)
        if _redacts(name_text):
            shown = REDACTED
        elif value.lstrip()[:1] in (b"{", b"[") and len(value) <= PREVIEW_JSON_BYTES:
            # Parsed whole, so keys inside the JSON are redacted in the preview too.
            text, binary = bytes_text(value)
            compact = None if binary else _json_compact(text)
            shown = compact if compact is not None else text
        elif value.lstrip()[:1] in (b"{", b"["):
            shown = f"(JSON-like, {len(value)} bytes)"
        else:
            # Only the start of a huge value is decoded: a preview never costs more.
            shown, _binary = bytes_text(value, limit=chars * 4)
        part = f"{name_text}={shown}".replace("\n", " ")
        parts.append(part)
        length += len(part) + 1
        if length > chars:
            break
    line = " ".join(parts)
    return line if len(line) <= chars else line[: chars - 1] + "…"


def _json_compact(text: str) -> str | None:
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return json.dumps(_redact_json(value), ensure_ascii=False, separators=(",", ":"))
