"""One ``{S}:failures`` record parsed into an unsaved failure-index row.

Owns what a record must carry (``REQUIRED_FIELDS``), how each field parses, the text caps
that keep one oversized record from failing its whole batch, and the ``Malformed`` row
that keeps a record nothing could parse, and the attempt's cause (``fingerprint``, from
``queue_core.fingerprint``). Pure: no I/O, no Redis, no database writes.
Cost: CPU only, linear in the record's size (the fingerprint reads a bounded part of it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from dashboard.models import IndexedFailure
from queue_core.fingerprint import fingerprint
from queue_core.tracing import trace_id_parse
from queue_core.validation import entry_id_ms

#: Text caps, so one oversized record cannot make its whole batch fail on a strict database.
MESSAGE_CAP = 4_000
TRACEBACK_CAP = 16_000
#: Fields a record must carry; without one of them it is stored as ``Malformed``.
REQUIRED_FIELDS = ("group", "entry_id", "consumer", "attempt", "error_type", "failed_at_ms")
MALFORMED = "Malformed"

_ENTRY_ID = re.compile(r"\A\d{1,20}-\d{1,20}\Z")
_MAX_LEN = {
    f.name: f.max_length
    for f in IndexedFailure._meta.concrete_fields
    if isinstance(f.max_length, int)
}


def _clean(text: str, cap: int | None = None, *, tail: bool = False) -> str:
    # NUL is legal in Redis and in SQLite text but PostgreSQL refuses it.
    text = text.replace("\x00", "\ufffd")
    if cap is not None and len(text) > cap:
        text = "…" + text[-(cap - 1) :] if tail else text[: cap - 1] + "…"
    return text


def _ms_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def failure_record_parse(
    *, failures_key: str, stream: str, source_id: str, fields: Mapping[bytes, bytes]
) -> IndexedFailure:
    """One ``{S}:failures`` entry as an unsaved IndexedFailure, keeping whatever parses.

    A record missing a field, or with a field that does not parse, is stored anyway with
    ``error_type="Malformed"``; the message says what was wrong and the traceback keeps
    the raw fields, so nothing is silently dropped. Pure: no I/O.
    """
    text, problems = _fields_decode(fields)
    missing = [name for name in REQUIRED_FIELDS if name not in text]
    if missing:
        problems.append("missing " + ", ".join(missing))
    attempt, attempt_problem = _attempt_parse(text.get("attempt"))
    duration_ms, duration_problem = _duration_parse(text.get("duration_ms", ""))
    failed_at, failed_at_problem = _failed_at_parse(text.get("failed_at_ms"), source_id)
    entry_id, entry_id_problem = _entry_id_parse(text.get("entry_id", ""))
    problems += [
        p for p in (attempt_problem, duration_problem, failed_at_problem, entry_id_problem) if p
    ]
    error_type, message, traceback = _error_describe(text, problems)
    error_type = _short("error_type", error_type)
    return IndexedFailure(
        failures_key=_short("failures_key", failures_key),
        source_id=source_id,
        stream=_short("stream", stream),
        group=_short("group", text.get("group", "")),
        entry_id=entry_id,
        consumer=_short("consumer", text.get("consumer", "")),
        attempt=attempt,
        error_type=error_type,
        message=_clean(message, MESSAGE_CAP),
        traceback=_clean(traceback, TRACEBACK_CAP, tail=True),
        duration_ms=duration_ms,
        failed_at=failed_at,
        # From the record's own text (the digest reads at most 1,000 characters of the
        # message and 8,000 of the traceback, so the caps above never change it).
        fingerprint=fingerprint(error_type, message, traceback),
        trace_id=trace_id_parse(text.get("trace_id")),
    )


# -- the steps: each returns its value and the problem it found (None if it parsed) -----


def _fields_decode(fields: Mapping[bytes, bytes]) -> tuple[dict[str, str], list[str]]:
    """The fields as text, and one problem per value that is not UTF-8 (kept, replaced)."""
    problems: list[str] = []
    text: dict[str, str] = {}
    for raw_key, raw_value in fields.items():
        key = raw_key.decode("utf-8", "replace")
        try:
            text[key] = raw_value.decode("utf-8")
        except UnicodeDecodeError:
            text[key] = raw_value.decode("utf-8", "replace")
            problems.append(f"{key} is not UTF-8")
    return text, problems


def _attempt_parse(value: str | None) -> tuple[int, str | None]:
    """The attempt count; 0 when absent (reported as missing) or not a 32-bit count."""
    if value is None:
        return 0, None
    try:
        attempt = int(value)
    except ValueError:
        attempt = -1
    if not 0 <= attempt <= 2_147_483_647:
        return 0, f"attempt {value[:40]!r} is not a count"
    return attempt, None


def _duration_parse(value: str) -> tuple[float | None, str | None]:
    """The handler's duration in ms; None when empty (a trimmed payload) or not finite."""
    if value == "":
        return None, None
    try:
        duration_ms = float(value)
    except ValueError:
        duration_ms = math.nan
    if not math.isfinite(duration_ms):
        return None, f"duration_ms {value[:40]!r} is not a number"
    return duration_ms, None


def _failed_at_parse(value: str | None, source_id: str) -> tuple[datetime, str | None]:
    """When the attempt failed; the record's own stream id (its write time) stands in
    when ``failed_at_ms`` is absent or not a time."""
    fallback = _ms_datetime(entry_id_ms(source_id))
    if value is None:
        return fallback, None
    try:
        return _ms_datetime(int(value)), None
    except (ValueError, OverflowError, OSError):
        return fallback, f"failed_at_ms {value[:40]!r} is not a time"


def _entry_id_parse(value: str) -> tuple[str, str | None]:
    """The failed entry's stream id; "" when absent or not a stream id (no link is made)."""
    if value and not _ENTRY_ID.match(value):
        return "", f"entry_id {value[:45]!r} is not a stream id"
    return value, None


def _error_describe(text: Mapping[str, str], problems: Sequence[str]) -> tuple[str, str, str]:
    """``(error_type, message, traceback)``: the record's own, or for a malformed record
    ``Malformed``, what was wrong (with the original error), and the raw fields."""
    error_type = text.get("error_type", "")
    message = text.get("message", "")
    traceback = text.get("traceback", "")
    if not problems:
        return error_type, message, traceback
    original = f"{error_type}: {message}" if (error_type or message) else ""
    message = "Malformed failure record: " + "; ".join(problems)
    if original:
        message += " | original: " + original
    raw = "\n".join(f"{k} = {v[:500]!r}" for k, v in text.items())
    traceback = (traceback + "\n\n" if traceback else "") + "[raw record]\n" + raw
    return MALFORMED, message, traceback


def _short(name: str, value: str) -> str:
    """``value`` capped to the column ``name``'s max_length."""
    return _clean(value, _MAX_LEN[name])
