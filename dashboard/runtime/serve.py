"""The one way to start the web process: an ASGI server's command line with production flags.

``manage.py serve``, the demo, the browser tests and ``benchmarks.serving`` all build the
server's argv here, so the server users run in production is the one the demo and the
tests run. It owns the flags; it never imports a server (the argv runs as its own
process, ``python -m <server> …``), and it never reads Redis or the database.

The same promises on every server:
- **one worker process**: each web process runs one live broadcaster (see
  dashboard/live/broadcaster.py); scale out with more processes behind a balancer;
- **no proxy-header rewriting by the server**: the client address and scheme behind a
  proxy come from Django's settings alone (``DJANGO_BEHIND_PROXY``,
  ``DJANGO_PROXY_COUNT``: the right-most ``X-Forwarded-For`` entries); uvicorn's own
  rewriting, on by default for 127.0.0.1, would be a second rule that could disagree
  (daphne's takes the left-most entry, which the client writes);
- **WebSocket keep-alive** like daphne's defaults: a ping every 20 s, closed after 30 s
  without an answer (granian keeps its own, not configurable);
- **no per-message deflate on sockets**, as with daphne: each socket would compress each
  push on its own, 2.6x uvicorn's CPU per pushed update (``benchmarks.serving``);
- **access lines on** (one per request and per socket handshake), as daphne logs them.

The default is uvicorn (uvloop, httptools, the sans-I/O ``websockets`` protocol), chosen
by ``uv run python -m benchmarks.serving --only compare`` on this 2-core machine: it
served the 1M-pending group page at 1.4-2x daphne's rate for less CPU per request,
and pushed live updates for the least CPU per socket (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Final

#: The ASGI application every server runs.
APPLICATION: Final = "dashboard.asgi:application"
#: Servers ``serve`` knows.
SERVERS: Final = ("daphne", "granian", "uvicorn")
#: The production default (chosen by the numbers of ``benchmarks.serving --only compare``).
DEFAULT_SERVER: Final = "uvicorn"
#: daphne's defaults, which the other servers are configured to match.
WS_PING_INTERVAL: Final = 20
WS_PING_TIMEOUT: Final = 30
#: Seconds a stopping server waits for open requests and sockets (daphne's default is 10).
GRACEFUL_SECONDS: Final = 5


def server_argv(
    server: str = DEFAULT_SERVER,
    *,
    host: str = "127.0.0.1",
    port: int | str = 8000,
    extra: Sequence[str] = (),
    python: str = sys.executable,
) -> list[str]:
    """The command line that serves the dashboard with ``server`` on ``host:port``.

    ``extra`` is appended before the application (server-specific flags, e.g. daphne's
    ``--websocket_timeout``). ValueError for an unknown server.
    """
    if server == "daphne":
        flags = ["-b", host, "-p", str(port)]
    elif server == "uvicorn":
        flags = [
            "--host", host, "--port", str(port),
            "--workers", "1",
            "--loop", "uvloop", "--http", "httptools",
            "--ws", "websockets-sansio", "--ws-per-message-deflate", "false",
            "--no-proxy-headers", "--no-server-header",
            "--timeout-graceful-shutdown", str(GRACEFUL_SECONDS),
            # Channels' router has no lifespan handler; "auto" would log its refusal.
            "--lifespan", "off",
            "--ws-ping-interval", str(WS_PING_INTERVAL),
            "--ws-ping-timeout", str(WS_PING_TIMEOUT),
        ]  # fmt: skip
    elif server == "granian":
        flags = [
            "--interface", "asgi",
            "--host", host, "--port", str(port),
            "--workers", "1",
            "--loop", "uvloop",
            "--ws", "--access-log",
            "--no-respawn-failed-workers",
        ]  # fmt: skip
    else:
        raise ValueError(f"unknown server {server!r}: expected one of {', '.join(SERVERS)}")
    return [python, "-m", server, *flags, *extra, APPLICATION]
