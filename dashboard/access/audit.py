"""The operator audit trail: one AuditEvent row plus one JSON log line per action attempt.

Owns writing AuditEvent rows (``audit_record``) and the reads the Audit page and the
entry page use. Every attempt is recorded, successful, refused (guard or permission) or
errored. It never touches Redis and never decides permissions; rows are never updated
or deleted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

from dashboard.models import AuditEvent

log = logging.getLogger("ackboard.audit")

Result = AuditEvent.Result

#: Actions whose ``entry_ids`` are ids in the stream itself (not dead-letter ids).
STREAM_ID_ACTIONS = (
    "retry",
    "claim",
    "dead-letter",
    "acknowledge",
    "bulk-retry",
    "bulk-dead-letter",
    "bulk-acknowledge",
    "redrive-replay",
)
#: Actions whose ``new_ids`` are ids in the stream (a replay adds the entry back).
STREAM_NEW_ID_ACTIONS = ("replay", "redrive-replay")


def _no_nul(value: Any) -> Any:
    """``value`` with NUL characters replaced, in strings, lists and dict keys and values.

    Request text (ids from the path, reasons, consumer names) may hold NUL, which
    PostgreSQL refuses in text and JSON columns; the row must still be written.
    """
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list | tuple):
        return [_no_nul(v) for v in value]
    if isinstance(value, dict):
        return {_no_nul(k): _no_nul(v) for k, v in value.items()}
    return value


def _fit(field_name: str, value: str) -> str:
    limit: int | None = getattr(AuditEvent._meta.get_field(field_name), "max_length", None)
    return value if limit is None or len(value) <= limit else value[: limit - 1] + "…"


def audit_record(
    *,
    user: AbstractBaseUser | AnonymousUser | None,
    action: str,
    stream: str,
    result: str,
    group: str = "",
    entry_ids: Iterable[str] = (),
    reason: str = "",
    detail: str = "",
    state_before: Mapping[str, Any] | None = None,
    new_ids: Iterable[str] = (),
    channel: str = "button",
) -> AuditEvent:
    """Write one AuditEvent row and one JSON line on the ``ackboard.audit`` logger.

    The log line is written even when the row cannot be, so an action never leaves no
    trace; the database error is then re-raised. One INSERT.
    """
    known = user if user is not None and user.is_authenticated else None
    username = known.get_username() if known is not None else ""
    # A refused request may carry a name longer than the column (PostgreSQL enforces
    # varchar lengths; SQLite does not): the row keeps the head of it rather than failing.
    stream, group = (_fit(f, _no_nul(v)) for f, v in (("stream", stream), ("group", group)))
    reason, detail = _no_nul(reason), _no_nul(detail)
    event = AuditEvent(
        user_id=known.pk if known is not None else None,
        username=username,
        action=action,
        stream=stream,
        group=group,
        entry_ids=_no_nul(list(entry_ids)),
        reason=reason,
        result=Result(result),
        detail=detail,
        state_before=_no_nul(dict(state_before or {})),
        new_ids=_no_nul(list(new_ids)),
        channel=AuditEvent.Channel(channel),
    )
    try:
        event.save()
    finally:
        log.info(_log_line(event))
    return event


def _log_line(event: AuditEvent) -> str:
    """The audit log line of ``event`` (saved or not): one JSON object, ids and state as
    stored, ``audit_id`` None when the row could not be written."""
    return json.dumps(
        {
            "event": "ackboard.action",
            "audit_id": event.pk,
            "user": event.username,
            "action": event.action,
            "stream": event.stream,
            "group": event.group,
            "ids": event.entry_ids,
            "reason": event.reason,
            "result": str(event.result),
            "detail": event.detail,
            "state_before": event.state_before,
            "new_ids": event.new_ids,
            "channel": str(event.channel),
        },
        default=str,
        ensure_ascii=False,
    )


def _ids_contain(field: str, entry_id: str) -> Q:
    # JSON "contains" is not available on SQLite, so match the JSON text instead: the
    # list is stored as ["1-0", "2-0"] on SQLite and PostgreSQL alike, and a stream id
    # (digits and one dash) quoted cannot match a longer id by accident. The stream
    # filter that goes with it is indexed; the text match scans only that stream's rows.
    return Q(**{f"{field}_text__contains": json.dumps(entry_id)})


def audit_for_entry(*, stream: str, entry_id: str, limit: int = 50) -> list[AuditEvent]:
    """The newest ``limit`` audit rows that touched ``entry_id`` of ``stream``.

    Includes bulk actions that listed it and the replay that re-added it under that id.
    """
    qs = (
        AuditEvent.objects.filter(stream=stream)
        .annotate(
            entry_ids_text=Cast("entry_ids", TextField()),
            new_ids_text=Cast("new_ids", TextField()),
        )
        .filter(
            (_ids_contain("entry_ids", entry_id) & Q(action__in=STREAM_ID_ACTIONS))
            | (_ids_contain("new_ids", entry_id) & Q(action__in=STREAM_NEW_ID_ACTIONS))
        )
    )
    return list(qs[:limit])


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """The Audit page's filters; empty strings mean "any"."""

    user: str = ""
    action: str = ""
    stream: str = ""
    result: str = ""


def audit_list(*, filters: AuditFilter) -> QuerySet[AuditEvent]:
    """Audit rows matching ``filters``, newest first (indexed columns only)."""
    qs = AuditEvent.objects.all()
    if filters.user:
        qs = qs.filter(username=filters.user)
    if filters.action:
        qs = qs.filter(action=filters.action)
    if filters.stream:
        qs = qs.filter(stream=filters.stream)
    if filters.result:
        qs = qs.filter(result=filters.result)
    return qs
