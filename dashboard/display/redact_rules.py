"""``ACKBOARD_REDACT_RULES``: payload fields redacted on some streams only, on top of the
global ``ACKBOARD_REDACT_PATTERN``.

A rule is ``STREAM_PATTERN=FIELD_REGEX`` (``orders:*=card_number|cvv``); rules are
separated by ``;`` or new lines. The stream pattern is everything before the first
``=`` (the syntax of stream scopes, ``dashboard.display.stream_patterns``); the field
regex, everything after it, is read like the global one (case-insensitive, searched
anywhere in a name). On a stream that rules match, a field is redacted when its name
matches the global pattern OR any matching rule's regex: a rule only adds fields, never
removes one. ``redaction_pattern`` gives the one regex text a stream's payloads are
redacted with; ``dashboard.views.redaction`` compiles and applies it.

Imports nothing from Django: the settings parse the rules at startup, so a malformed
rule stops every command with one line instead of masking nothing. Cost: the rules are
parsed once per text, a stream's pattern is built once per stream (cached).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from dashboard.display.stream_patterns import matcher, pattern_check


@dataclass(frozen=True, slots=True)
class RedactRule:
    """Fields whose names match ``fields`` (a regex) are redacted on ``streams``."""

    streams: str
    fields: str


def _regex_check(regex: str, rule: str) -> None:
    """Refuses a field regex that would not compile where it is used: as one alternative
    after the global pattern (``(?i)`` is refused there, so it is refused here too)."""
    try:
        re.compile(f"(?:x)|(?:{regex})", re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"{rule!r}: the field regex is not valid ({exc})") from None


def rules_parse(text: str) -> tuple[RedactRule, ...]:
    """The rules of ``text``; ValueError saying which rule is wrong and how: no ``=``, an
    empty or invalid stream pattern, an empty or invalid field regex."""
    rules: list[RedactRule] = []
    for raw in re.split(r"[;\n]", text):
        rule = raw.strip()
        if not rule:
            continue
        streams, sep, fields = rule.partition("=")
        streams, fields = streams.strip(), fields.strip()
        if not sep:
            raise ValueError(f"{rule!r} is not STREAM_PATTERN=FIELD_REGEX")
        try:
            pattern_check(streams)
        except ValueError as exc:
            raise ValueError(f"{rule!r}: {exc}") from None
        if not fields:
            raise ValueError(f"{rule!r}: the field regex is empty")
        _regex_check(fields, rule)
        rules.append(RedactRule(streams, fields))
    return tuple(rules)


def settings_check(global_pattern: str, rules_text: str) -> None:
    """What the settings run at startup: the global pattern compiles, the rules parse, and
    both combine (ValueError naming the setting otherwise)."""
    try:
        re.compile(global_pattern, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"ACKBOARD_REDACT_PATTERN is not a valid regex ({exc})") from None
    try:
        rules = rules_parse(rules_text)
        re.compile(_combined(global_pattern, tuple(r.fields for r in rules)), re.IGNORECASE)
    except re.error as exc:
        raise ValueError(
            f"ACKBOARD_REDACT_RULES: does not combine with ACKBOARD_REDACT_PATTERN ({exc})"
        ) from None
    except ValueError as exc:
        raise ValueError(f"ACKBOARD_REDACT_RULES: {exc}") from None


@lru_cache(maxsize=16)
def _rules_cached(text: str) -> tuple[RedactRule, ...]:
    return rules_parse(text)


def _combined(global_pattern: str, regexes: tuple[str, ...]) -> str:
    parts = (global_pattern, *regexes) if global_pattern else regexes
    return "|".join(f"(?:{p})" for p in parts)


@lru_cache(maxsize=4096)
def redaction_pattern(global_pattern: str, rules_text: str, stream: str | None) -> str:
    """The regex text field names of ``stream`` are redacted with: the global pattern
    alone (as written) when no rule matches the stream or ``stream`` is None, else it and
    every matching rule's regex as one alternation ("" when nothing is redacted)."""
    if not rules_text or stream is None:
        return global_pattern
    regexes = tuple(
        r.fields for r in _rules_cached(rules_text) if matcher((r.streams,))(stream) is not None
    )
    return _combined(global_pattern, regexes) if regexes else global_pattern
