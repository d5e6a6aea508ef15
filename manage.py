#!/usr/bin/env python
"""Django's command-line utility for administrative tasks.

A configuration error (a missing ``DJANGO_SECRET_KEY``, a malformed ``DATABASE_URL`` or
``REDIS_URL``, a mistyped number, an unreachable Redis) is one line on stderr and exit
code 2, never a traceback: it is the operator's to fix, not a bug in the code.
"""

import os
import sys

#: Commands that sign nothing: workers, the failure-index jobs and the key-name upgrade.
HEADLESS_COMMANDS = {"queue_worker", "ingest_failures", "prune_failures", "rename_companions"}
#: Asking for help signs nothing either, so it works before the secret key is set.
HELP_WORDS = {"", "help", "--help", "-h", "--version", "version"}
#: Exit code of a configuration error (argparse uses 2 for a bad command line, too).
CONFIG_ERROR = 2


def _redacted(url: str) -> str:
    """``url`` without its password, to name the Redis that could not be reached."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)[1]
        user = f"{parts.username}:***@" if parts.username else "***@"
        return parts._replace(netloc=user + netloc).geturl()
    except ValueError:
        return "(unparseable URL)"


def _config_error(text: str) -> None:
    sys.stderr.write(f"Error: {text}\n")
    sys.exit(CONFIG_ERROR)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "demo":
        # The demo runs with embedded defaults on a fresh machine (see settings.py).
        os.environ.setdefault("ACKBOARD_DEMO", "1")
    elif (
        command in HEADLESS_COMMANDS
        or command in HELP_WORDS
        or {"--help", "-h"} & set(sys.argv[2:])
    ):
        # These serve no web requests, so they need no secret key (see settings.py).
        os.environ.setdefault("ACKBOARD_HEADLESS", "1")
    import redis
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018 - loads the settings, which check the environment
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        if "--traceback" in sys.argv:
            raise
        _config_error(str(exc))
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        if "--traceback" in sys.argv:
            raise
        # Commands connect at start (the worker then rides out outages by itself), so an
        # error that reaches here means Redis was never reachable: a wrong URL or host.
        source = "VALKEY_URL" if os.environ.get("VALKEY_URL") else "REDIS_URL"
        url = _redacted(str(getattr(settings, "ACKBOARD_REDIS_URL", "")))
        _config_error(f"cannot reach Redis at {url} (from {source}): {exc}")


if __name__ == "__main__":
    main()
