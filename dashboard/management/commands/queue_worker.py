"""``manage.py queue_worker --stream S --group G --handler pkg.mod:func``: run one worker.

A thin shell over ``queue_core.worker.Worker``: the flags are WorkerConfig's own
(``worker_arguments_add``); parse them, build the config (which loads the handler), run. It
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
from queue_core.worker import (
    SAME_STOP_S,
    Worker,
    WorkerConfigError,
    worker_arguments_add,
    worker_config_from_options,
)

#: Django's CommandError exit status for bad configuration.
CONFIG_ERROR = 2


class Command(BaseCommand):
    help = "Consume a Redis Streams consumer group under the ack contract."
    # No system checks and no migrations check: both may open the database.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        worker_arguments_add(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(int(options.get("verbosity", 1)))
        try:
            worker = Worker(worker_config_from_options(options, url=redis_url()))
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
