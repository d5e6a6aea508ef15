"""Bytes as one safe, visible string: what every payload, field name and note shows.

Owns the escaping of what a page cannot show as it is: invalid UTF-8 as ``\\xNN``,
control characters (but tab and newline), lone surrogates and the BOM. Never produces
HTML (Django's autoescaping does that) and never decodes formats
(``dashboard.display.decoders``).
"""

from __future__ import annotations

import re

# C0/C1 controls and DEL (except tab and newline, which read fine in <pre>), lone
# surrogates (an HTTP response cannot encode them) and the invisible BOM.
_UNSHOWABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff]")


def escape_unshowable(text: str) -> str:
    """``text`` with what a page cannot show spelled as an escape."""

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
        return escape_unshowable(head.decode("utf-8")), False
    except UnicodeDecodeError as exc:
        if len(head) < len(raw) and exc.reason == "unexpected end of data":
            try:
                return escape_unshowable(head[: exc.start].decode("utf-8")), False
            except UnicodeDecodeError:
                pass
        text = head.decode("ascii", "backslashreplace")
        return escape_unshowable(text), True
