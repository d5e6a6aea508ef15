"""``manage.py ingest_failures``: copy every ``{S}:failures`` stream into the failure index.

Runs until SIGINT or SIGTERM (finishing the batch in hand), or with ``--once`` drains
what is there and exits. It never acks a record before its row is committed; see
``dashboard.insight.failure_index.FailureIngestor``.
"""

from __future__ import annotations

import threading
from argparse import ArgumentParser
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from dashboard.insight.failure_index import INGEST_BATCH, RECLAIM_IDLE_MS, failures_ingest
from dashboard.runtime.stop_signals import set_on_signals
from queue_core.connection import connect


class Command(BaseCommand):
    help = "Ingest failed-handler records from every {S}:failures stream into the failure index."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="Drain what is there and exit.")
        parser.add_argument("--batch", type=int, default=INGEST_BATCH, help="Records per read.")
        parser.add_argument(
            "--reclaim-idle-ms",
            type=int,
            default=RECLAIM_IDLE_MS,
            help="Take over records left pending this long by a crashed ingestor.",
        )
        parser.add_argument(
            "--poll", type=float, default=0.5, help="Seconds between reads when idle."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        client = connect(settings.ACKBOARD_REDIS_URL, client_name="ackboard-ingest")
        common: dict[str, Any] = {
            "client": client,
            "batch": options["batch"],
            "reclaim_idle_ms": options["reclaim_idle_ms"],
        }
        if options["once"]:
            try:
                total = failures_ingest(once=True, **common)
            except (redis.RedisError, DatabaseError) as exc:
                # The records in hand stay pending; the next run stores them.
                raise CommandError(f"ingest stopped: {type(exc).__name__}: {exc}") from exc
            self.stdout.write(f"Ingested {total} failure record{'s' if total != 1 else ''}.")
            return
        stop = threading.Event()
        set_on_signals(stop)
        self.stdout.write("Ingesting failure records; Ctrl-C to stop.")
        total = failures_ingest(once=False, stop=stop, poll_s=options["poll"], **common)
        self.stdout.write(f"Stopped after {total} failure record{'s' if total != 1 else ''}.")
