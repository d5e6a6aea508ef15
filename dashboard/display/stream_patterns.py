"""Stream name patterns (``orders:*``, ``billing:invoices``): their one syntax and matcher.

``*`` is any run of characters, ``?`` one character, everything else is literal and
case-sensitive, as stream names are. Stream scopes (``dashboard.access.scopes``) and
the redaction rules (``dashboard.display.redact_rules``) both read patterns through
here, so a pattern means the same wherever it is written; the translation into a regular
expression is the one Python and the database both read (SQLite's REGEXP, PostgreSQL's
``~``). Imports nothing from Django: the settings check its patterns at startup.
Cost: one compiled alternation per set of patterns (cached), one C call per name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

#: The longest pattern a scope or rule may hold (a stream name's column is 1,024 long).
MAX_PATTERN = 1024

_ANY_RUN = r"[\s\S]*"  # "." misses a newline in Python and SQLite's REGEXP
_ANY_ONE = r"[\s\S]"


def pattern_regex(pattern: str) -> str:
    """``pattern`` as an anchored regular expression both Python and the database read
    alike (``\\A``/``\\Z``: ``$`` would also match before a trailing newline)."""
    parts = [_ANY_RUN if c == "*" else _ANY_ONE if c == "?" else re.escape(c) for c in pattern]
    return r"\A" + "".join(parts) + r"\Z"


def pattern_check(pattern: str) -> str:
    """``pattern`` if a scope may hold it; ValueError with a message an admin can act on."""
    if not pattern:
        raise ValueError("A stream pattern may not be empty (use * for every stream).")
    if len(pattern) > MAX_PATTERN:
        raise ValueError(f"A stream pattern is at most {MAX_PATTERN} characters long.")
    if any(ord(c) < 32 or ord(c) == 127 for c in pattern):
        raise ValueError("A stream pattern may not contain control characters.")
    return pattern


@lru_cache(maxsize=256)
def matcher(patterns: tuple[str, ...]) -> Callable[[str], re.Match[str] | None]:
    """One compiled alternation for a set of patterns: one C call per name checked."""
    return re.compile("|".join(f"(?:{pattern_regex(p)})" for p in patterns)).match
