"""``manage.py serve [--server uvicorn|granian|daphne] [-b HOST] [-p PORT]``: the web process.

Runs the production ASGI server with production flags (``dashboard.runtime.serve.server_argv``:
one worker, WebSocket keep-alive, no proxy-header rewriting, access lines on) in place of
this process (exec), so signals from a supervisor reach the server itself. The settings
are read from the environment as for every command; it never touches Redis or the
database itself.
"""

from __future__ import annotations

import os
import sys
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from dashboard.runtime.serve import DEFAULT_SERVER, SERVERS, server_argv


class Command(BaseCommand):
    help = (
        f"Serve the dashboard with the production ASGI server ({DEFAULT_SERVER} by default) "
        "and its production flags."
    )
    # The server process checks nothing Django's checks would not; it starts Django itself.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--server", choices=SERVERS, default=DEFAULT_SERVER)
        # daphne's short flags too, so a daphne command line keeps working with serve.
        parser.add_argument("-b", "--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
        parser.add_argument("-p", "--port", type=int, default=8000, help="port to bind (8000)")
        parser.add_argument(
            "--print", action="store_true", help="print the server's command line and exit"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        argv = server_argv(options["server"], host=options["host"], port=options["port"])
        if options["print"]:
            self.stdout.write(" ".join(argv))
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(argv[0], argv)
