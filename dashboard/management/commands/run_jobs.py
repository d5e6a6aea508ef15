"""``manage.py run_jobs [--once] [--poll S] [--lease S]``: the background job runner.

Runs redrive jobs (``dashboard.redrive.runner``): takes the oldest active job whose
lease is free (one conditional UPDATE, so two runners never work one job at once),
replays its dead letters at the job's rate, and takes the next. Beside them, on threads:
the edited-replay sweeper and Retry later's (``queue_core.later.later_sweeper``, every
2 s: parked entries kept parked, due ones handed back to their groups). Any number of runners
may run; one is enough. SIGTERM or Ctrl-C stops it before its next replay and releases
its lease, so another runner (or this one restarted) takes the job over at once; after a
SIGKILL the job waits for the lease to expire (``--lease``, ``ACKBOARD_REDRIVE_LEASE_S``,
10 s by default). Either way no dead letter is replayed twice: each replay deletes its
dead letter in the same atomic step.

In production it is a process of its own beside the web server and the ingestor
(Procfile ``jobs: python manage.py run_jobs``); it needs Redis and the database.
"""

from __future__ import annotations

import logging
import threading
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from dashboard.redrive import runner
from dashboard.runtime.connection import get_redis
from dashboard.runtime.stop_signals import set_on_signals
from queue_core.edited_replays import edited_replays_sweeper
from queue_core.later import later_sweeper


class Command(BaseCommand):
    help = "Run background jobs (dead-letter redrives) until SIGTERM."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="Exit when no job is active.")
        parser.add_argument("--poll", type=float, default=0.5, help="Seconds between looks.")
        parser.add_argument(
            "--lease",
            type=float,
            default=None,
            help="Seconds a job's lease lasts without renewal (ACKBOARD_REDRIVE_LEASE_S).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        poll, lease = options["poll"], options["lease"]
        if not poll > 0:
            raise CommandError("--poll must be above 0 seconds")
        if lease is not None and not lease >= 1:
            raise CommandError("--lease must be at least 1 second")
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("ackboard.redrive").setLevel(logging.INFO)
        stopping = threading.Event()
        set_on_signals(stopping)
        owner = runner.runner_name()
        self.stdout.write(
            f"run_jobs {owner}: Redis {settings.ACKBOARD_REDIS_URL}, max rate "
            f"{runner.max_rate():g}/s; Ctrl-C stops."
        )
        self.stdout.flush()
        # Edit & replay: delete dead letters whose edited replay succeeded.
        sweeper = threading.Thread(
            target=edited_replays_sweeper, args=(get_redis, stopping), daemon=True
        )
        sweeper.start()
        # Retry later: keep parked entries parked, hand back the due ones, for queues
        # whose workers are not queue_core's (its worker does this in its own sweeps).
        threading.Thread(target=later_sweeper, args=(get_redis, stopping), daemon=True).start()
        runner.run_loop(
            get_redis, owner=owner, stopping=stopping, poll_s=poll, lease=lease,
            once=options["once"],
        )  # fmt: skip
        self.stdout.write(f"run_jobs {owner}: stopped; leases released.")
