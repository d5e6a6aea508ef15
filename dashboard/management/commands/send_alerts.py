"""``manage.py send_alerts [--interval S] [--once]``: judge the alert rules, post breaches.

The loop of ``dashboard.alerts.sender``: it judges and sends only while it holds the
Redis lease, so any number of these processes send each breach once. It reads the rates
sampler's history for the rate rules, so a sampler must run too (the web processes' or
``manage.py sample_rates``). SIGTERM or Ctrl-C stops it after the tick under way and
releases the lease, so another sender takes over at once.
"""

from __future__ import annotations

import threading
from argparse import ArgumentParser
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from dashboard.alerts.sender import AlertSender, run_loop
from dashboard.runtime.stop_signals import call_on_signals


class Command(BaseCommand):
    help = "Judge the alert rules and post each breach to the enabled alert webhooks."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="Seconds between ticks (default: ACKBOARD_ALERTS_INTERVAL_S).",
        )
        parser.add_argument(
            "--once", action="store_true", help="One tick (if the lease is free), then exit."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"]
        if interval is not None:
            if not interval >= 1:
                raise CommandError("--interval must be at least 1 second")
            settings.ACKBOARD_ALERTS_INTERVAL_S = interval
        if options["once"]:
            try:
                sender = AlertSender()
                report = sender.tick()
            except redis.RedisError as exc:
                raise CommandError(f"Redis at {settings.ACKBOARD_REDIS_URL}: {exc}") from exc
            if report is None:
                self.stdout.write("Another sender holds the lease; nothing judged.")
                return
            sender.stop()
            self.stdout.write(
                f"{report.conditions} condition(s), {report.firing} firing; "
                f"{report.sent} alert(s) sent, {report.failed} webhook(s) failed."
            )
            return
        stop = threading.Event()
        call_on_signals(lambda signum: stop.set())
        self.stdout.write(
            f"Judging the alert rules every {settings.ACKBOARD_ALERTS_INTERVAL_S:g}s while "
            "holding the lease; Ctrl-C stops."
        )
        self.stdout.flush()
        runner = threading.Thread(target=run_loop, args=(stop,), daemon=True)
        runner.start()
        while runner.is_alive():
            runner.join(0.5)
        self.stdout.write("Alert sender stopped; lease released.")
