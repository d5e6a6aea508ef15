"""``manage.py queue_worker --stream S --group G --handler pkg.mod:func``: run one worker.

A thin shell over ``queue_core.worker.Worker``: parse options, load the handler, run. It
never touches the database (workers need none) and never turns bad configuration into a
traceback: an unknown or non-callable handler, an unreachable Redis or a stream name
whose companions cannot share its cluster slot is one line on stderr and exit code 2.
The connection comes from VALKEY_URL, then REDIS_URL, then redis://127.0.0.1:6379/0.

SIGTERM or SIGINT stops it with the full grace period. A copy of that signal within 1 s
(``uv run`` delivers a process-group signal twice) is the same request; only a later
one stops waiting for in-flight handlers. Either way the exit status is 0.
"""

from __future__ import annotations

import atexit
import logging
import signal
import sys
import threading
import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from queue_core.connection import redis_url
from queue_core.worker import SAME_STOP_S, Worker, WorkerConfigError, handler_load

#: Django's CommandError exit status for bad configuration.
CONFIG_ERROR = 2


class Command(BaseCommand):
    help = "Consume a Redis Streams consumer group under the ack contract."
    # No system checks and no migrations check: both may open the database.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--stream", required=True, help="Stream to consume.")
        parser.add_argument("--group", required=True, help="Consumer group.")
        parser.add_argument(
            "--handler", required=True, help="package.module:function taking a Job (sync or async)."
        )
        parser.add_argument(
            "--consumer", default=None, help="Consumer name (default host-pid-random)."
        )
        parser.add_argument(
            "--batch", type=int, default=100, help="XREADGROUP COUNT (default 100)."
        )
        parser.add_argument(
            "--concurrency", type=int, default=1, help="Handlers in flight at once (default 1)."
        )
        parser.add_argument(
            "--block-ms", type=int, default=2000, help="XREADGROUP BLOCK (default 2000)."
        )
        parser.add_argument(
            "--min-idle-ms",
            type=int,
            default=30_000,
            help="Reclaim entries idle this long (default 30000); above your slowest handler.",
        )
        parser.add_argument(
            "--max-deliveries",
            type=int,
            default=5,
            help="Dead-letter an entry whose handler fails on this delivery (default 5).",
        )
        parser.add_argument(
            "--reclaim-interval-ms",
            type=int,
            default=None,
            help="XAUTOCLAIM sweep interval (default half min-idle, at most 10000).",
        )
        parser.add_argument(
            "--group-start", default="$", help="Where a new group starts: $ (default) or 0."
        )
        parser.add_argument(
            "--grace-seconds",
            type=float,
            default=30.0,
            help=(
                "On SIGTERM/SIGINT, how long in-flight handlers may finish (default 30). "
                "A second signal more than 1 s after the first stops waiting."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(int(options.get("verbosity", 1)))
        try:
            handler = handler_load(options["handler"])
            worker = Worker(
                stream=options["stream"],
                group=options["group"],
                handler=handler,
                consumer=options["consumer"],
                url=redis_url(),
                batch=options["batch"],
                concurrency=options["concurrency"],
                block_ms=options["block_ms"],
                min_idle_ms=options["min_idle_ms"],
                max_deliveries=options["max_deliveries"],
                reclaim_interval_ms=options["reclaim_interval_ms"],
                group_start=options["group_start"],
                grace_seconds=options["grace_seconds"],
            )
            worker.run()
            _ignore_copies_of_the_stop_signal()
        except WorkerConfigError as exc:
            # One line, whatever the underlying error said.
            raise CommandError(" ".join(str(exc).split()), returncode=CONFIG_ERROR) from exc

    @staticmethod
    def _configure_logging(verbosity: int) -> None:
        level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
        logger = logging.getLogger("queue_core")
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(
                logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
            )
            logger.addHandler(handler)


def _ignore_copies_of_the_stop_signal() -> None:
    """The worker has stopped; the process only exits from here. Keep that exit clean.

    A copy of the stop signal can still be on its way: ``uv run`` forwards a process-group
    SIGINT 200 ms after the worker got it directly. In interpreter teardown (about half a
    second with Django loaded) Python's own handlers are gone, so it would kill a clean
    exit with status 130. Until the atexit callbacks run, a stop signal within
    SAME_STOP_S is ignored and a later one still ends a wait on threads a handler left
    running; from atexit on, nothing is left to interrupt and both signals are ignored.
    """
    if threading.current_thread() is not threading.main_thread():
        return  # the worker installed no signal handlers either (call_command in a thread)
    stopped_at = time.monotonic()

    def late_signal(signum: int, frame: object) -> None:
        if time.monotonic() - stopped_at >= SAME_STOP_S:
            raise SystemExit(128 + signum)

    def ignore() -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, late_signal)
    atexit.register(ignore)
