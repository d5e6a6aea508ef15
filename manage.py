#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys

#: Commands that sign nothing: workers, the failure-index jobs and the key-name upgrade.
HEADLESS_COMMANDS = {"queue_worker", "ingest_failures", "prune_failures", "rename_companions"}


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "demo":
        # The demo runs with embedded defaults on a fresh machine (see settings.py).
        os.environ.setdefault("ACKBOARD_DEMO", "1")
    elif command in HEADLESS_COMMANDS:
        # These serve no web requests, so they need no secret key (see settings.py).
        os.environ.setdefault("ACKBOARD_HEADLESS", "1")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
