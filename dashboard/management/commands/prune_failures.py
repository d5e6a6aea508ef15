"""``manage.py prune_failures [--days N]``: delete failure-index rows older than the retention.

Deletes in batches (``dashboard.insight.failure_index.failures_prune``). Never touches Redis.
"""

from __future__ import annotations

from argparse import ArgumentParser
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from dashboard.insight.failure_index import failures_prune
from queue_core import clock


class Command(BaseCommand):
    help = "Delete failure records older than ACKBOARD_FAILURE_RETENTION_DAYS (or --days)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="Keep this many days (default: ACKBOARD_FAILURE_RETENTION_DAYS; 0 keeps all).",
        )
        parser.add_argument("--batch", type=int, default=5000, help="Rows deleted per batch.")

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        if days is None:
            days = int(settings.ACKBOARD_FAILURE_RETENTION_DAYS)
            if days <= 0:
                # The retention rule the running ingestor follows: 0 or less keeps all.
                self.stdout.write("ACKBOARD_FAILURE_RETENTION_DAYS keeps every record.")
                return
        if days < 0 or options["batch"] < 1:
            raise CommandError("--days must be >= 0 and --batch >= 1")
        cutoff = clock.now_utc() - timedelta(days=days)
        deleted = failures_prune(older_than=cutoff, batch_size=options["batch"])
        self.stdout.write(
            f"Deleted {deleted} failure record{'s' if deleted != 1 else ''} "
            f"older than {cutoff:%Y-%m-%d %H:%M:%S} UTC."
        )
