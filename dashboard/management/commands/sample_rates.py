"""``manage.py sample_rates [--interval S] [--once]``: run the rates sampler standalone.

The same loop as the web processes' sampler thread (``dashboard.insight.rates.sampler``): it
samples only while it holds the Redis lease, so running it next to web processes that
also sample (``ACKBOARD_SAMPLER=1``) never doubles the history; set ``ACKBOARD_SAMPLER=0``
on the web processes when this command is the sampler. SIGTERM or Ctrl-C stops it after
the tick under way and releases the lease, so another sampler takes over at once.
"""

from __future__ import annotations

import threading
from argparse import ArgumentParser
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from dashboard.insight.rates import sampler as rates_sampler
from dashboard.runtime.stop_signals import call_on_signals


class Command(BaseCommand):
    help = "Sample every stream's counters into the rates history (one sampler per deployment)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="Seconds between ticks (default: ACKBOARD_SAMPLER_INTERVAL_S).",
        )
        parser.add_argument(
            "--once", action="store_true", help="One tick (if the lease is free), then exit."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"]
        if interval is not None:
            if not interval >= 0.1:
                raise CommandError("--interval must be at least 0.1 seconds")
            settings.ACKBOARD_SAMPLER_INTERVAL_S = interval
        if options["once"]:
            try:
                sampler = rates_sampler.Sampler()
                report = sampler.tick()
            except redis.RedisError as exc:
                raise CommandError(f"Redis at {settings.ACKBOARD_REDIS_URL}: {exc}") from exc
            if report is None:
                self.stdout.write("Another sampler holds the lease; nothing sampled.")
            else:
                sampler.stop()
                self.stdout.write(
                    f"Sampled {report.streams} streams and {report.groups} groups "
                    f"({report.rows} rows) in {report.took_s * 1000:.1f} ms."
                )
            return
        state = rates_sampler._SamplerThread()

        def stop(signum: int) -> None:
            state.stopping = True
            state.wake.set()

        call_on_signals(stop)
        self.stdout.write(
            f"Sampling every {settings.ACKBOARD_SAMPLER_INTERVAL_S:g}s while holding the lease "
            f"{settings.ACKBOARD_SAMPLER_LEASE_KEY!r}; Ctrl-C stops."
        )
        self.stdout.flush()
        runner = threading.Thread(target=rates_sampler.run_loop, args=(state,), daemon=True)
        runner.start()
        while runner.is_alive():
            runner.join(0.5)
        self.stdout.write("Sampler stopped; lease released.")
