"""Redaction of payload text: which text names a secret, and masking the secrets of a
parsed JSON value.

Fields and keys whose names match ``settings.ACKBOARD_REDACT_PATTERN``, or on a stream
an ``ACKBOARD_REDACT_RULES`` rule matches that rule's regex too, are redacted (also
inside JSON objects, and inside JSON carried in JSON strings), and redaction fails
closed. JSON is found after a byte order mark, leading whitespace, in UTF-16/32
(``dashboard.views.payload_json``), and with invalid bytes (kept as ``\\xNN``). A value
that looks like a JSON document but is not parsed (invalid, or refused by a bound) is
masked whole if a redacted key name appears anywhere in it; any text is masked whole if
it holds a quoted key matching the pattern followed by ``:`` or ``=`` (``names_secret``).
Both checks also look through ``\\u``/``\\x`` escapes, %-encoding, HTML entities, NUL
padding and NFKC look-alikes. ``dashboard.views.payloads`` always redacts before it cuts
a value, so previews cannot leak either.

It never decodes bytes nor decides what is shown. Cost: linear in the text checked (a
few rounds for encoded text); a value's inner documents are parsed at most
``MAX_INNER_DOCUMENTS`` times.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from django.conf import settings

from dashboard.display import redact_rules
from dashboard.views.payload_json import looks_like_json, parse_json

REDACTED = "•••• redacted"
#: JSON documents inside JSON strings parsed per value (only strings that look like JSON
#: and name a redacted key are); past this, such strings are masked whole.
MAX_INNER_DOCUMENTS = 100
#: Strings up to this length have their redaction verdict remembered within one value.
SHORT_STRING = 256

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


@lru_cache(maxsize=256)
def _redact_re(pattern: str) -> re.Pattern[str] | None:
    return re.compile(pattern, re.IGNORECASE) if pattern else None


def redact_pattern(stream: str | None = None) -> re.Pattern[str] | None:
    """The compiled regex of the field names redacted on ``stream``: the global
    ``ACKBOARD_REDACT_PATTERN`` and the ``ACKBOARD_REDACT_RULES`` that match the stream
    (``dashboard.display.redact_rules``; None when nothing is redacted)."""
    return _redact_re(
        redact_rules.redaction_pattern(
            getattr(settings, "ACKBOARD_REDACT_PATTERN", ""),
            getattr(settings, "ACKBOARD_REDACT_RULES", ""),
            stream,
        )
    )


def redacts(name: str, stream: str | None = None) -> bool:
    """Whether a field or key named ``name`` is redacted on ``stream``."""
    regex = redact_pattern(stream)
    return bool(regex and regex.search(name))


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


@lru_cache(maxsize=256)
def _anchored(pattern: str) -> bool:
    """Whether ``pattern`` can match a whole key but not inside a longer text (``^card$``):
    then the words of a text are tried one by one, which costs more."""
    return any(mark in pattern for mark in ("^", "$", "\\A", "\\Z", "\\b", "\\B", "(?"))


def _tokens(text: str) -> set[str]:
    return {m.group(m.lastindex or 0) for pattern in _TOKENS for m in pattern.finditer(text)}


def names_secret(text: str, *, anywhere: bool, regex: re.Pattern[str] | None) -> bool:
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


class Redactor:
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
        if looks_like_json(text):
            if not names_secret(text, anywhere=True, regex=self.regex):
                return text
            if self.inner_left <= 0:
                self.hit = True
                return REDACTED
            self.inner_left -= 1
            inner = Redactor(self.regex)
            inner.inner_left = self.inner_left  # the budget is shared by every level
            try:
                value = inner.value(parse_json(text, depth=depth), depth)
            except ValueError:
                self.hit = True
                return REDACTED
            finally:
                self.inner_left = inner.inner_left
            if not inner.hit:
                return text  # it only mentions the name (as a value): shown as written
            self.hit = True
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        if names_secret(text, anywhere=False, regex=self.regex):
            self.hit = True
            return REDACTED
        return text
