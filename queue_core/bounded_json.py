"""Reading JSON that anyone could have written: the one JSON parser of Ackboard.

Owns ``json_read``, which every place that parses JSON from Redis (pause keys, heartbeats,
events, edited-replay records, payloads), from a request (API bodies, edited fields) or
from a query string (payload search) calls, and ``BoundedJSONError``, the one error a
bound raises. A test walks ``queue_core/`` and ``dashboard/`` and fails on any other
``json.loads``.

Why: Python's parser recurses once per level of nesting, so ``[[[[…]]]]`` a thousand
levels deep raises ``RecursionError``, which is no ``ValueError``: it went past every
``except ValueError`` and ended requests with a 500 and long-running loops with a
traceback. Hooks (``object_hook``, ``object_pairs_hook``) run after a level is parsed
and cannot stop the recursion, so the depth is checked *before* parsing, by a scan of
the brackets outside strings:

- **depth**: objects and arrays nested deeper than ``max_depth`` (``MAX_DEPTH``) are
  refused; a scalar is depth 0, ``[]`` depth 1;
- **size**: data longer than ``max_size`` (``MAX_SIZE``; bytes, or characters of text)
  is refused unread;
- **numbers** (optional, ``max_digits``): a number literal longer than that, or a float
  out of range (``1e999``), is refused; int parsing is quadratic in the digits;
- **recursion**: a ``RecursionError`` that still happens (a caller already deep in its
  own stack) is the same error, never let through.

Every refusal is a ``BoundedJSONError`` (a ``ValueError``) whose message says which
bound, plainly ("nested deeper than 64 levels"); malformed JSON raises what ``json``
raises (``json.JSONDecodeError``, or ``UnicodeDecodeError`` for bytes that are no text),
also ``ValueError``\\ s. So ``except ValueError`` around ``json_read`` catches everything
it can raise about its input. It never logs and never imports Django.

Cost: a document with at most ``max_depth`` opening brackets anywhere (a pause key, a
heartbeat, an event, most payloads) costs two ``str.count`` calls more than
``json.loads`` (about 2 µs); a larger one a C-speed regex pass to drop its strings and one
to keep its brackets, then a C-speed running sum over the brackets only: a typical 1 MB
document of objects 32 ms against ``json.loads``'s 10 ms, and a million ``[`` is refused
in 9 ms (CPU time, 2-core dev machine, ``uv run python -m benchmarks.bounded_json``).
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from itertools import accumulate
from typing import Any, Literal

#: Deepest nesting of objects and arrays read by default. The payload display shares it.
MAX_DEPTH = 64
#: Longest data read by default: bytes, or characters of text.
MAX_SIZE = 1_000_000
#: The float range ends near 1.8e308: a literal of 309 digits may be out of it.
_FLOAT_DIGITS = 309

Bound = Literal["depth", "size", "number"]


class BoundedJSONError(ValueError):
    """JSON refused by a bound before (or instead of) being parsed; ``bound`` says which:
    ``"depth"``, ``"size"`` or ``"number"``. The message is a short reason, shown as is."""

    def __init__(self, message: str, *, bound: Bound) -> None:
        super().__init__(message)
        self.bound: Bound = bound


# A JSON string, or an unterminated one up to the end: every match succeeds, so no quote
# is scanned from twice (an unterminated string would make that quadratic).
_STRING = re.compile(r'"[^"\\]*(?:\\(?:.|\Z)[^"\\]*)*(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}
_BIG_EXPONENT = re.compile(r"[eE][+-]?\d{3}")


@lru_cache(maxsize=32)
def _deep_run(max_depth: int) -> re.Pattern[str]:
    """A run of more than ``max_depth`` opening brackets, found from the run's start (so
    a long run is scanned once): the usual hostile shape, found without counting."""
    return re.compile(r"(?<![\[{])[\[{]{" + str(max_depth + 1) + "}")


@lru_cache(maxsize=32)
def _long_digits(max_digits: int) -> re.Pattern[str]:
    return re.compile(r"(?<!\d)\d{" + str(min(_FLOAT_DIGITS, max_digits + 1)) + "}")


def _outside_strings(text: str) -> str:
    return _STRING.sub("", text)


def _depth_over(outside: str, max_depth: int) -> bool:
    """Whether the brackets of ``outside`` (text without its strings) nest deeper than
    ``max_depth``. The running sum over-counts only text that is invalid anyway (a stray
    ``]`` lowers it, never raises it), so it is an upper bound on the parser's depth."""
    brackets = _NOT_BRACKET.sub("", outside)
    if _deep_run(max_depth).search(brackets):
        return True
    return max(accumulate(map(_NESTING.__getitem__, brackets)), default=0) > max_depth


def _too_deep(max_depth: int) -> BoundedJSONError:
    return BoundedJSONError(f"nested deeper than {max_depth} levels", bound="depth")


def _number_hooks(max_digits: int) -> dict[str, Any]:
    def parse_int(literal: str) -> int:
        if len(literal) > max_digits:
            raise BoundedJSONError(f"a number longer than {max_digits} digits", bound="number")
        return int(literal)

    def parse_float(literal: str) -> float:
        if len(literal) > max_digits:
            raise BoundedJSONError(f"a number longer than {max_digits} digits", bound="number")
        value = float(literal)
        if math.isinf(value):
            raise BoundedJSONError("a number out of range", bound="number")
        return value

    return {"parse_int": parse_int, "parse_float": parse_float}


def json_read(
    data: str | bytes | bytearray,
    *,
    max_depth: int = MAX_DEPTH,
    max_size: int | None = MAX_SIZE,
    max_digits: int | None = None,
    strict: bool = True,
) -> Any:
    """``data`` parsed as JSON, within bounds (see the module's docstring).

    ``max_size=None`` reads any length (for data already bounded elsewhere);
    ``max_digits`` bounds number literals (None: only Python's own 4300-digit guard on
    ints); ``strict=False`` accepts control characters inside strings, as ``json.loads``
    does. Bytes are decoded as ``json.loads`` decodes them (UTF-8, -16 or -32, a UTF-8
    byte order mark skipped). Raises ``BoundedJSONError`` for a bound, else what
    ``json.loads`` raises for malformed input: always a ``ValueError``.
    """
    if max_size is not None and len(data) > max_size:
        unit = "characters" if isinstance(data, str) else "bytes"
        raise BoundedJSONError(f"longer than {max_size} {unit}", bound="size")
    if isinstance(data, str):
        text = data
    else:
        text = bytes(data).decode(json.detect_encoding(data), "surrogatepass")
    hooks: dict[str, Any] = {}
    if max_digits is not None:
        outside = _outside_strings(text)
        if _depth_over(outside, max_depth):
            raise _too_deep(max_depth)
        if _long_digits(max_digits).search(outside) or _BIG_EXPONENT.search(outside):
            hooks = _number_hooks(max_digits)  # Python-level calls per number: only if needed
    elif text.count("[") + text.count("{") > max_depth and _depth_over(
        _outside_strings(text), max_depth
    ):
        raise _too_deep(max_depth)
    try:
        return json.loads(text, strict=strict, **hooks)
    except RecursionError as exc:
        # Within the bound, but the caller's stack was already deep: the same refusal.
        raise BoundedJSONError(
            f"nested too deep to read here (at most {max_depth} levels are read)", bound="depth"
        ) from exc
