"""The failure index reads other pages use: latest failure per entry, history, counts.

Owns the small queries behind the group page's "last failure" column, the entry page's
attempt history, failures in the last hour (per group, for the health verdict,
``dashboard.insight.health``), and the current cause (fingerprint of the last failure) of
pending entries, which the by-cause view and its bulk scope use.
Each is one indexed SQL query (per 500 ids); none touches Redis or writes.

``last_failures`` runs on every group page and every push of its pending table, so it is
one SQL statement written once per process (the ORM compiled its window query afresh on
each call: about 1.2 ms of Python for a 0.07 ms query).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

from django.db import connection
from django.db.models import Count

from dashboard.models import IndexedFailure


@lru_cache(maxsize=64)
def _last_failures_sql(vendor: str, count: int, column: str = "message") -> str:
    """The newest ``column`` per entry among ``count`` ids: a window over the rows the
    ``(stream, entry_id)`` index finds. Names are quoted by the backend ("group" is a
    reserved word); values are always parameters. Cached per vendor, count and column."""
    q = connection.ops.quote_name
    table = q(IndexedFailure._meta.db_table)
    ids = ", ".join(["%s"] * count)
    return (
        f"SELECT {q('entry_id')}, {q(column)} FROM ("
        f"SELECT {q('entry_id')}, {q(column)}, ROW_NUMBER() OVER ("
        f"PARTITION BY {q('entry_id')} ORDER BY {q('failed_at')} DESC, {q('id')} DESC) AS rk "
        f"FROM {table} WHERE {q('stream')} = %s AND {q('group')} = %s "
        f"AND {q('entry_id')} IN ({ids})) latest WHERE rk = 1"
    )


def last_failures(*, stream: str, group: str, entry_ids: Sequence[str]) -> dict[str, str]:
    """The newest failure message of each of ``entry_ids`` in ``group``; absent ids are left out.

    One query on the ``(stream, entry_id)`` index; a window function keeps one row per
    entry, so a poison entry with many attempts costs index reads, not transferred rows.
    Ties on ``failed_at`` go to the newer row (higher id), as the model's ordering.
    """
    ids = list(dict.fromkeys(entry_ids))
    if not ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_last_failures_sql(connection.vendor, len(ids)), [stream, group, *ids])
        return dict(cursor.fetchall())


def last_fingerprints(*, stream: str, group: str, entry_ids: Sequence[str]) -> dict[str, str]:
    """The fingerprint of each of ``entry_ids``' newest failure in ``group`` (its current
    cause); ids with no failure are left out. One query per 500 ids, as ``last_failures``.
    """
    ids = list(dict.fromkeys(entry_ids))
    found: dict[str, str] = {}
    with connection.cursor() as cursor:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            sql = _last_failures_sql(connection.vendor, len(chunk), "fingerprint")
            cursor.execute(sql, [stream, group, *chunk])
            found.update(cursor.fetchall())
    return found


def failure_history(*, stream: str, entry_id: str, limit: int = 1000) -> list[IndexedFailure]:
    """Every recorded attempt of ``entry_id`` in any group of ``stream``, oldest first.

    One query on the ``(stream, entry_id)`` index. Attempts are bounded by the groups'
    max deliveries; ``limit`` is a guard that keeps the newest ``limit`` if ever exceeded.
    """
    newest = IndexedFailure.objects.filter(stream=stream, entry_id=entry_id).order_by(
        "-failed_at", "-id"
    )[:limit]
    return list(reversed(newest))


def failures_count_since(*, streams: Sequence[str], since: datetime) -> dict[str, int]:
    """Failures per stream at or after ``since``; every asked stream is a key (0 if none).

    One grouped query on the ``(stream, failed_at)`` index (a covering range per stream).
    """
    counts = dict.fromkeys(streams, 0)
    if not counts:
        return counts
    rows = (
        IndexedFailure.objects.filter(stream__in=list(counts), failed_at__gte=since)
        .order_by()
        .values("stream")
        .annotate(n=Count("id"))
        .values_list("stream", "n")
    )
    counts.update(dict(rows))
    return counts


def failures_count_by_group(
    *, streams: Sequence[str], since: datetime
) -> dict[tuple[str, str], int]:
    """Failures per (stream, group) at or after ``since``; pairs with none are left out.

    One grouped query on the ``(stream, group, failed_at)`` index: the overview's health
    (``dashboard.insight.health``, per group) and, summed, its failures column.
    """
    if not streams:
        return {}
    rows = (
        IndexedFailure.objects.filter(stream__in=list(dict.fromkeys(streams)), failed_at__gte=since)
        .order_by()
        .values("stream", "group")
        .annotate(n=Count("id"))
        .values_list("stream", "group", "n")
    )
    return {(stream, group): n for stream, group, n in rows}


def failures_count_capped(*, stream: str, group: str, since: datetime, cap: int) -> int:
    """Failures of ``group`` at or after ``since``, counted up to ``cap`` (the group page's
    health needs to know only whether the "failing" mark is reached): one query reading
    at most ``cap`` entries of the ``(stream, group, failed_at)`` index, however many
    failures the hour holds."""
    return (
        IndexedFailure.objects.filter(stream=stream, group=group, failed_at__gte=since)
        .order_by()[:cap]
        .count()
    )
