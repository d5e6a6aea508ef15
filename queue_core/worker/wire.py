"""The Worker's connections, and the measured tricks of its hot path.

Owns how the loop talks to Redis: a synchronous client for everything rare (failure
records, dead-letters, reclaim sweeps, group creation), and on an asyncio pool the hot
path's two commands, XREADGROUP and XACK, sent raw on one connection each. Never decides
what to ack: callers hand it ids whose outcome is known. Figures (2-core machine, local
Redis 7.0, no-op handler; DESIGN.md section 6; ``benchmarks/worker_throughput.py``
re-measures the whole loop):

- one multi-id XACK per batch instead of one XACK per entry: about 5x the throughput
  (~13,000 -> ~67,000 msg/s with the pure-Python parser, ~210,000 with hiredis);
- a raw send/read on a held connection instead of ``client.execute_command``: skips the
  pool checkout, the retry wrapper and metrics, about 20 µs per command;
- commands packed in C by hiredis instead of redis.asyncio's Python packer: that costs
  about 1.4 µs per id of a 100-id XACK, a third of the Worker's per-entry cost; skipping
  the serializer's per-argument bytearray check saves another ~0.3 µs per XACK id.

Replies are hiredis's own (RESP2 or RESP3 shapes), with no response callbacks.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import hiredis
import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.connection import HiredisRespSerializer
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from queue_core.connection import connect

#: Ids per XACK: bounds one command's size (and Redis's time in it) on a huge batch.
XACK_MAX_IDS = 10_000


class Line:
    """One pooled connection driven with raw send/read: the hot path's two commands skip
    the client's per-command machinery (pool checkout, retry wrapper, metrics), about
    20 µs each. Any error but a Redis error reply drops the connection; the next call
    opens a new one.
    """

    def __init__(self, pool: aredis.ConnectionPool) -> None:
        self._pool = pool
        self._conn: Any = None

    async def call(self, *args: Any) -> Any:
        conn = self._conn
        if conn is None:
            conn = self._conn = await self._pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await conn.send_packed_command(hiredis.pack_command(args), check_health=False)
            return await conn.read_response()
        except redis.ResponseError:
            raise  # a whole error reply was read: the connection is still in step
        except BaseException:
            # Cancelled or broken mid-command: the reply may still be on its way, so this
            # connection can never be trusted again.
            self._conn = None
            await conn.disconnect()
            await self._pool.release(conn)
            raise

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await self._pool.release(conn)


async def new_entries_read(
    line: Line, *, stream: str, group: str, consumer: str, count: int, block_ms: int
) -> list[list[Any]]:
    """XREADGROUP ``>``: up to ``count`` new entries as ``[id, [k, v, k, v, ...]]`` lists."""
    reply = await line.call(
        "XREADGROUP", "GROUP", group, consumer, "COUNT", count,
        "BLOCK", block_ms, "STREAMS", stream, ">",
    )  # fmt: skip
    return _entries(reply)


def _entries(reply: Any) -> list[list[Any]]:
    """The entry list of a one-stream XREADGROUP reply, in RESP2 or RESP3 shape."""
    if not reply:
        return []
    if isinstance(reply, dict):
        entries: list[list[Any]] = next(iter(reply.values()))
    else:
        entries = reply[0][1]
    return entries or []


class AckBatch:
    """Ids whose handlers returned, acked together with multi-id XACKs.

    ``waiting`` grows as chunks finish; ``send`` moves it to ``sending`` while its XACKs
    are on their way, so a reclaim sweep can tell that these entries are still in hand.
    """

    def __init__(self) -> None:
        self.waiting: list[str | bytes] = []
        self.sending: list[str | bytes] = []
        self.task: asyncio.Task[None] | None = None

    async def send(self, line: Line, *, stream: str, group: str) -> int:
        """XACK everything waiting, in pieces of XACK_MAX_IDS; returns how many Redis acked.

        Raises what the connection raised; the ids are then still pending in Redis.
        """
        ids, self.waiting = self.waiting, []
        self.sending = ids
        try:
            acked = 0
            for start in range(0, len(ids), XACK_MAX_IDS):
                part = ids[start : start + XACK_MAX_IDS]
                acked += await line.call("XACK", stream, group, *part)
            return acked
        finally:
            self.sending = []


class _HiredisPackConnection(aredis.Connection):
    """Packs commands in C (hiredis), as the sync client does. The async client packs in
    Python: about 1.4 µs per id of a 100-id XACK, a third of the Worker's per-entry cost."""

    _packer = HiredisRespSerializer()

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str) and " " not in args[0]:
            try:
                # The worker's own commands (str, bytes and int arguments) go straight to
                # C; the serializer's per-argument bytearray check is ~0.3 µs per XACK id.
                return [hiredis.pack_command(args)]
            except TypeError:
                pass
        packed: list[bytes] = self._packer.pack(*args)
        return packed


def _connection_class(url: str) -> type[aredis.Connection]:
    # Plain TCP only: redis-py picks its own class for rediss:// and unix://.
    if HIREDIS_AVAILABLE and url.startswith("redis://"):
        return _HiredisPackConnection
    return aredis.Connection


def pool_open(url: str, *, consumer: str, block_ms: int) -> aredis.ConnectionPool:
    """The hot path's pool: read timeout above the XREADGROUP block, no redis-py retries."""
    return aredis.ConnectionPool.from_url(
        url,
        connection_class=_connection_class(url),
        decode_responses=False,
        socket_timeout=block_ms / 1000 + 5,
        socket_connect_timeout=2,
        retry=Retry(NoBackoff(), 0),  # our own backoff decides, not redis-py's
        client_name=consumer,
        max_connections=8,
    )


def client_open(url: str, *, consumer: str) -> redis.Redis:
    """The synchronous client for the rare writes, checked with one PING.

    No redis-py retries: the loop's own backoff decides. Raises the RedisError when
    Redis cannot be reached.
    """
    client = connect(url, socket_timeout=10.0, client_name=consumer)
    client.set_retry(Retry(NoBackoff(), 0))
    try:
        client.ping()
    except redis.RedisError:
        client.close()
        raise
    return client


def url_safe(url: str) -> str:
    """The URL without its password, for error messages."""
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)
