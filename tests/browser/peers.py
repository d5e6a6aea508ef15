"""More web processes over one LiveServer's database: several behind one balancer.

A ``PeerServer`` is another web process (the same server and flags) on its own port,
with the same production settings, Redis, SQLite database and secret key as the
LiveServer it is made from, so one login
serves both and live updates must cross processes through Redis. Used by the
two-web-process browser test and ``benchmarks.scale_out``. It never migrates or creates
users (the first server did) and never removes the shared work dir (the first server's
``cleanup`` does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.browser.server import LiveServer


@dataclass
class PeerServer(LiveServer):
    """Another web process over a LiveServer's database, secret key and Redis."""

    @property
    def log_path(self) -> Path:
        return self.workdir / f"web-{self.port}.log"


@contextlib.contextmanager
def peer_of(first: LiveServer) -> Iterator[PeerServer]:
    """Web process B beside ``first``: its own port and process, the rest shared. Only its
    process is stopped afterwards."""
    peer = PeerServer(
        redis_url=first.redis_url, streams=first.streams, tick=first.tick,
        username=first.username, password=first.password, secret_key=first.secret_key,
        workdir=first.workdir, server=first.server, server_args=first.server_args,
    )  # fmt: skip
    try:
        yield peer.start_web()  # no migrate, no new superuser: the database is first's
    finally:
        peer.stop()
