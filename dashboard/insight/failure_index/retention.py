"""Retention of the failure index: deleting rows older than the kept window.

Owns the batched delete that ``manage.py prune_failures`` and the running ingestor (hourly)
call, and what the running ingestor keeps (``ACKBOARD_FAILURE_RETENTION_DAYS``; 0 or less
keeps everything). Never touches Redis. Cost: one indexed SELECT of ids and one DELETE
per batch, each in its own short transaction.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from dashboard.models import IndexedFailure
from queue_core import clock


def failures_prune(*, older_than: datetime, batch_size: int = 5000) -> int:
    """Delete rows that failed before ``older_than``, ``batch_size`` at a time.

    Each batch is its own short transaction on the ``failed_at`` index, so a large prune
    never holds a long write lock (SQLite) or bloats one transaction (PostgreSQL).
    """
    deleted = 0
    while True:
        ids = list(
            IndexedFailure.objects.filter(failed_at__lt=older_than)
            .order_by("failed_at")
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return deleted
        with transaction.atomic():
            n, _ = IndexedFailure.objects.filter(id__in=ids).delete()
        deleted += n


def failures_prune_expired() -> int:
    """Delete rows older than ``ACKBOARD_FAILURE_RETENTION_DAYS`` (the running ingestor's
    hourly prune); a setting of 0 or less keeps every row. Returns the rows deleted."""
    days = int(getattr(settings, "ACKBOARD_FAILURE_RETENTION_DAYS", 30))
    if days <= 0:
        return 0
    return failures_prune(older_than=clock.now_utc() - timedelta(days=days))
