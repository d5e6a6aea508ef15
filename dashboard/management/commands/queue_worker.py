"""``manage.py queue_worker --stream S --group G --handler pkg.mod:func``: run one worker,
or ``--processes N`` of them on the group.

A thin shell over ``queue_core.worker.Worker``: the flags are WorkerConfig's own
(``worker_arguments_add``); parse them, build the config (which loads the handler), run.
With ``--processes N`` (N > 1) this process only supervises (``queue_core.worker.fleet``):
it checks the configuration and Redis once, then runs N children, each this command
without ``--processes`` (and with ``--consumer NAME-i`` when a name was given), and exits
0 when all of them stopped cleanly, 1 naming those that did not. It
never touches the database (workers need none) and never turns bad configuration into a
traceback: an unknown or non-callable handler, an unreachable Redis or a stream name
whose companions cannot share its cluster slot is one line on stderr and exit code 2.
The connection comes from VALKEY_URL, then REDIS_URL, then redis://127.0.0.1:6379/0.

SIGTERM or SIGINT stops it with the full grace period. A copy of that signal within 1 s
(``uv run`` delivers a process-group signal twice) is the same request; only a later
one stops waiting for in-flight handlers. Either way the exit status is 0. A fleet's
parent keeps the same rule and forwards each request to every child.
"""

from __future__ import annotations

import atexit
import logging
import signal
import sys
import threading
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from queue_core.connection import connect, redis_url
from queue_core.worker import (
    SAME_STOP_S,
    Worker,
    WorkerConfig,
    WorkerConfigError,
    worker_arguments_add,
    worker_config_from_options,
)
from queue_core.worker.config import processes_check, worker_argv_from_options
from queue_core.worker.fleet import Fleet, fleet_consumer_names
from queue_core.worker.wire import url_safe

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
        not_clean = ""
        try:
            config = worker_config_from_options(options, url=redis_url())
            processes = processes_check(options.get("processes", 1))
            if processes == 1:
                Worker(config).run()
            else:
                not_clean = self._fleet_run(config, processes, options)
            _ignore_copies_of_the_stop_signal()
        except WorkerConfigError as exc:
            # One line, whatever the underlying error said.
            raise CommandError(" ".join(str(exc).split()), returncode=CONFIG_ERROR) from exc
        if not_clean:
            raise CommandError(not_clean, returncode=1)

    def _fleet_run(self, config: WorkerConfig, processes: int, options: dict[str, Any]) -> str:
        """Supervise ``processes`` children until stopped; "" or what did not stop cleanly.

        The configuration was checked when ``config`` was built; Redis is checked here
        (one PING), so a bad URL is one line and exit 2 before any child starts.
        """
        try:
            client = connect(config.url)
            try:
                client.ping()
            finally:
                client.close()
        except Exception as exc:  # a RedisError, or a URL redis-py cannot parse
            raise WorkerConfigError(f"cannot reach Redis at {url_safe(config.url)}: {exc}") from exc
        verbosity = ["--verbosity", str(options.get("verbosity", 1))]
        argvs = [
            [*_child_command(), *worker_argv_from_options(options, consumer=name), *verbosity]
            for name in fleet_consumer_names(options["consumer"], processes)
        ]
        fleet = Fleet(argvs)
        if fleet.run() == 0:
            return ""
        failed = fleet.failures()
        return f"{len(failed)} of {processes} workers did not stop cleanly: {'; '.join(failed)}"

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


def _child_command() -> list[str]:
    """How a fleet child runs this command: through the same ``manage.py`` as the parent,
    else ``python -m django`` (the parent's DJANGO_SETTINGS_MODULE is inherited)."""
    main = Path(sys.argv[0])
    if main.name == "manage.py" and main.is_file():
        return [sys.executable, str(main.resolve()), "queue_worker"]
    return [sys.executable, "-m", "django", "queue_worker"]


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
