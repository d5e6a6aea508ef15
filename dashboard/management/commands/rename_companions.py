"""``manage.py rename_companions [--apply]``: move hash-tagged streams' old companion keys.

A dry run by default: it lists what it would rename. The work is
``queue_core.migrate``; this command only connects and prints.
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from queue_core.connection import connect
from queue_core.migrate import legacy_companions_find, legacy_companions_rename


class Command(BaseCommand):
    help = (
        "Rename '{t}orders:dlq'/':failures' to '{t}orders:ackboard:dlq'/':failures' "
        "(the naming since hash-tagged streams got the ':ackboard' marker). Dry run unless "
        "--apply. Stop the workers first."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--apply", action="store_true", help="Rename; otherwise only list.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            client = connect(settings.ACKBOARD_REDIS_URL, socket_timeout=30)
            moves = legacy_companions_find(client=client)
            if not options["apply"]:
                for move in moves:
                    self.stdout.write(
                        f"would rename {move.old!r} -> {move.new!r}"
                        if move.new
                        else f"would skip {move.old!r}: {move.note}"
                    )
                self.stdout.write(f"{len(moves)} old companion key(s); run with --apply to move")
                return
            for line in legacy_companions_rename(client=client, moves=moves):
                self.stdout.write(line)
        except redis.RedisError as exc:
            raise CommandError(f"cannot reach Redis: {exc}") from exc
