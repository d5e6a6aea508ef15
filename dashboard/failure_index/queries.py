"""The failure index reads other pages use: latest failure per entry, history, counts.

Owns the three small queries behind the group page's "last failure" column, the entry
page's attempt history and the overview's failures per hour. Each is one indexed SQL
query; none touches Redis or writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber

from dashboard.models import IndexedFailure


def last_failures(*, stream: str, group: str, entry_ids: Sequence[str]) -> dict[str, str]:
    """The newest failure message of each of ``entry_ids`` in ``group``; absent ids are left out.

    One query on the ``(stream, entry_id)`` index; a window function keeps one row per
    entry, so a poison entry with many attempts costs index reads, not transferred rows.
    """
    if not entry_ids:
        return {}
    latest = (
        IndexedFailure.objects.filter(stream=stream, group=group, entry_id__in=list(entry_ids))
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("entry_id")],
                order_by=[F("failed_at").desc(), F("id").desc()],
            )
        )
        .filter(rank=1)
        .values_list("entry_id", "message")
    )
    return dict(latest)


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
