"""Finding and parsing the JSON document a payload value may hold, within fixed bounds.

Owns where a value's JSON starts (after whitespace, byte order marks and no-break
spaces, or in UTF-16/32), whether text starts like a JSON document, and the one bounded
parse every payload view uses (``parse_json``): nothing nested deeper than ``MAX_DEPTH``
is parsed (a linear scan decides, before the recursive parser runs), nor a number
literal longer than ``MAX_NUMBER_DIGITS`` or out of float range (int parsing is
quadratic, and 1e999 would show as Infinity).

It never decides what is shown: ``dashboard.views.payloads`` does, and
``dashboard.views.redaction`` masks what the parsed value holds. Cost: linear in the text
scanned; the callers bound its size first.
"""

from __future__ import annotations

import json
import re
from typing import Any

from queue_core import bounded_json
from queue_core.bounded_json import json_read

#: Deepest JSON nesting that is parsed (objects and arrays, counted together, including
#: JSON inside JSON strings): the bounded reader's own default. Python's parser recurses
#: once per level.
MAX_DEPTH = bounded_json.MAX_DEPTH
#: Longest number literal that is parsed: below Python's own 4300-digit guard, which a
#: process may have lifted (``sys.set_int_max_str_digits``), and int() is quadratic.
MAX_NUMBER_DIGITS = 4000

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
# What text that starts like a JSON document can start with (a one-character check
# before the pattern runs).
_JSON_FIRST = frozenset('{["' + _PAD)


def parse_json(text: str, *, depth: int) -> Any:
    """``text`` (less its leading and trailing padding) as JSON, refusing what is deeper
    than ``MAX_DEPTH`` from ``depth`` and numbers past ``MAX_NUMBER_DIGITS`` or out of
    float range: ``queue_core.bounded_json`` scans the brackets outside strings before its
    parser recurses.

    Raises ValueError (``BoundedJSONError`` for a bound, with the reason).
    """
    # strict=False: raw newlines inside strings (a common producer slip) still parse. No
    # size bound here: the callers check PRETTY_JSON_BYTES / PREVIEW_JSON_BYTES first.
    return json_read(
        text.strip(_PAD), max_depth=MAX_DEPTH - depth, max_size=None,
        max_digits=MAX_NUMBER_DIGITS, strict=False,
    )  # fmt: skip


def looks_like_json(text: str) -> bool:
    """Whether ``text``, after its padding, starts like a JSON document."""
    return text[:1] in _JSON_FIRST and _JSON_START.match(text.lstrip(_PAD)) is not None


def lead_end(value: bytes, *, limit: int) -> int:
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


def wide_json(value: bytes) -> tuple[str, str] | None:
    """``value`` as UTF-16 or UTF-32 JSON (text, encoding), when it is that."""
    encoding = json.detect_encoding(value[:4])
    if encoding in ("utf-8", "utf-8-sig"):
        return None
    try:
        text = value.decode(encoding)
    except UnicodeDecodeError:
        return None
    if not looks_like_json(text):
        return None
    return text, {"utf-16": "UTF-16", "utf-32": "UTF-32"}.get(encoding, encoding.upper())
