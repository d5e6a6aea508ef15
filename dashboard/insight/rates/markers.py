"""A chart's audit markers: the operator actions on a stream (or group) in a time range.

Owns reading ``AuditEvent`` rows into ``Marker`` summaries ("retry 3 entries on billing"):
one indexed SQL query per chart, at most ``MAX_MARKERS`` rows, the entry ids counted in
the database. It never writes and never touches Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper

from queue_core.bounded_json import json_read

#: Audit markers per series at most (newest kept).
MAX_MARKERS = 500


@dataclass(frozen=True, slots=True)
class Marker:
    t: int
    action: str
    username: str
    summary: str


def _aware(value: Any) -> float:
    """An audit row's ``created_at`` as epoch seconds, from what the driver returns: a
    datetime (PostgreSQL; naive means UTC) or SQLite's ISO text in UTC."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return float(value.timestamp())


def _id_count(db: BaseDatabaseWrapper) -> str:
    """SQL for the number of entry ids of an audit row (the JSON array's length in the
    database, so a bulk action's 10,000 ids are never decoded for a marker)."""
    column = db.ops.quote_name("entry_ids")
    if db.vendor == "postgresql":
        return f"jsonb_array_length({column})"
    if db.vendor == "sqlite":
        return f"json_array_length({column})"
    return column  # decoded below


def markers_read(stream: str, group: str, since: float, until: float) -> list[Marker]:
    from dashboard.models import AuditEvent

    db = connections[router.db_for_read(AuditEvent)]
    q = db.ops.quote_name
    sql = (
        f"SELECT {q('created_at')}, {q('action')}, {q('username')}, {q('group')}, "
        f"{_id_count(db)}, {q('result')} FROM {q(AuditEvent._meta.db_table)} "
        f"WHERE {q('stream')} = %s AND {q('created_at')} > %s AND {q('created_at')} <= %s"
    )
    params: list[Any] = [
        stream,
        db.ops.adapt_datetimefield_value(datetime.fromtimestamp(since, UTC)),
        db.ops.adapt_datetimefield_value(datetime.fromtimestamp(until, UTC)),
    ]
    if group:
        sql += f" AND {q('group')} IN (%s, %s)"
        params += [group, ""]
    sql += f" ORDER BY {q('created_at')} DESC, {q('id')} DESC LIMIT {MAX_MARKERS}"
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        events = cursor.fetchall()
    found = []
    for created, action, username, event_group, ids, result in events:
        if ids is not None and not isinstance(ids, int):
            ids = _id_total(ids)
        where = f" on {event_group}" if event_group and not group else ""
        count = f" {ids} {'entry' if ids == 1 else 'entries'}" if ids else ""
        summary = f"{action}{count}{where}" + ("" if result == "ok" else f" ({result})")
        found.append(Marker(int(_aware(created)), action, username, summary))
    found.reverse()
    return found


def _id_total(ids: Any) -> int:
    """How many entry ids an audit row's ``entry_ids`` column holds (JSON text on some
    backends); 0 when it is not a readable list (then the marker names no count)."""
    if isinstance(ids, str | bytes):
        try:
            ids = json_read(ids, max_size=None)  # a row the dashboard wrote itself
        except ValueError:
            return 0
    return len(ids) if isinstance(ids, list) else 0
