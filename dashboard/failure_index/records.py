"""One ``{S}:failures`` record parsed into an unsaved failure-index row.

Owns what a record must carry (``REQUIRED_FIELDS``), how each field parses, the text caps
that keep one oversized record from failing its whole batch, and the ``Malformed`` row
that keeps a record nothing could parse. Pure: no I/O, no Redis, no database writes.
Cost: CPU only, linear in the record's size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

from dashboard.models import FailureRecord

#: Text caps, so one oversized record cannot make its whole batch fail on a strict database.
MESSAGE_CAP = 4_000
TRACEBACK_CAP = 16_000
#: Fields a record must carry; without one of them it is stored as ``Malformed``.
REQUIRED_FIELDS = ("group", "entry_id", "consumer", "attempt", "error_type", "failed_at_ms")
MALFORMED = "Malformed"

_ENTRY_ID = re.compile(r"\A\d{1,20}-\d{1,20}\Z")
_MAX_LEN = {
    f.name: f.max_length
    for f in FailureRecord._meta.concrete_fields
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
) -> FailureRecord:
    """One ``{S}:failures`` entry as an unsaved FailureRecord, keeping whatever parses.

    A record missing a field, or with a field that does not parse, is stored anyway with
    ``error_type="Malformed"``; the message says what was wrong and the traceback keeps
    the raw fields, so nothing is silently dropped. Pure: no I/O.
    """
    problems: list[str] = []
    text: dict[str, str] = {}
    for raw_key, raw_value in fields.items():
        key = raw_key.decode("utf-8", "replace")
        try:
            text[key] = raw_value.decode("utf-8")
        except UnicodeDecodeError:
            text[key] = raw_value.decode("utf-8", "replace")
            problems.append(f"{key} is not UTF-8")
    missing = [name for name in REQUIRED_FIELDS if name not in text]
    if missing:
        problems.append("missing " + ", ".join(missing))

    attempt = 0
    if "attempt" in text:
        try:
            attempt = int(text["attempt"])
            if not 0 <= attempt <= 2_147_483_647:
                raise ValueError
        except ValueError:
            attempt = 0
            problems.append(f"attempt {text['attempt'][:40]!r} is not a count")
    duration_ms: float | None = None
    if text.get("duration_ms", "") != "":
        try:
            duration_ms = float(text["duration_ms"])
            if duration_ms != duration_ms or duration_ms in (float("inf"), float("-inf")):
                raise ValueError
        except ValueError:
            duration_ms = None
            problems.append(f"duration_ms {text['duration_ms'][:40]!r} is not a number")
    # The record's own stream id is its write time: the fallback when failed_at_ms is bad.
    failed_at = _ms_datetime(int(source_id.partition("-")[0]))
    if "failed_at_ms" in text:
        try:
            failed_at = _ms_datetime(int(text["failed_at_ms"]))
        except (ValueError, OverflowError, OSError):
            problems.append(f"failed_at_ms {text['failed_at_ms'][:40]!r} is not a time")
    entry_id = text.get("entry_id", "")
    if entry_id and not _ENTRY_ID.match(entry_id):
        problems.append(f"entry_id {entry_id[:45]!r} is not a stream id")
        entry_id = ""

    error_type = text.get("error_type", "")
    message = text.get("message", "")
    traceback = text.get("traceback", "")
    if problems:
        original = f"{error_type}: {message}" if (error_type or message) else ""
        message = "Malformed failure record: " + "; ".join(problems)
        if original:
            message += " | original: " + original
        raw = "\n".join(f"{k} = {v[:500]!r}" for k, v in text.items())
        traceback = (traceback + "\n\n" if traceback else "") + "[raw record]\n" + raw
        error_type = MALFORMED

    def short(name: str, value: str) -> str:
        return _clean(value, _MAX_LEN[name])

    return FailureRecord(
        failures_key=short("failures_key", failures_key),
        source_id=source_id,
        stream=short("stream", stream),
        group=short("group", text.get("group", "")),
        entry_id=entry_id,
        consumer=short("consumer", text.get("consumer", "")),
        attempt=attempt,
        error_type=short("error_type", error_type),
        message=_clean(message, MESSAGE_CAP),
        traceback=_clean(traceback, TRACEBACK_CAP, tail=True),
        duration_ms=duration_ms,
        failed_at=failed_at,
    )
