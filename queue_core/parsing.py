"""The default job parser: an entry's raw fields -> UTF-8 text fields.

Owns what "parseable" means for the worker by default. It never talks to Redis and never
acks: a rejected entry raises UnparseableEntry and the worker dead-letters it with the
message as the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from queue_core.jobs import UnparseableEntry

#: A parser turns an entry's raw fields into the text fields a Job carries, or raises
#: UnparseableEntry. ``None`` means the entry was deleted from the stream while pending.
FieldParser = Callable[[Mapping[bytes, bytes] | None], dict[str, str]]

PAYLOAD_MISSING_REASON = "payload missing: the entry was deleted from the stream while pending"


def fields_parse(raw: Mapping[bytes, bytes] | None) -> dict[str, str]:
    """Decode field names and values as UTF-8; an entry must have at least one field.

    O(fields). The fast path is one dict comprehension; only a rejected entry pays for
    finding the culprit, so the message names the field.
    """
    if raw is None:
        raise UnparseableEntry(PAYLOAD_MISSING_REASON)
    if not raw:
        raise UnparseableEntry("entry has no fields")
    try:
        return {k.decode(): v.decode() for k, v in raw.items()}
    except UnicodeDecodeError:
        pass
    for name, value in raw.items():
        try:
            text = name.decode()
        except UnicodeDecodeError:
            raise UnparseableEntry(f"field name {name[:60]!r} is not UTF-8 text") from None
        try:
            value.decode()
        except UnicodeDecodeError:
            raise UnparseableEntry(f"field {text[:60]!r} is not UTF-8 text") from None
    raise UnparseableEntry("entry is not UTF-8 text")  # pragma: no cover - unreachable
