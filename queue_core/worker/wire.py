"""The Worker's connections, and the measured tricks of its hot path.

Owns how the loop talks to Redis: a synchronous client for everything rare (failure
records, dead-letters, reclaim sweeps, group creation), and on an asyncio pool the hot
path's two commands, XREADGROUP and XACK, sent raw on one connection each. Never decides
what to ack: callers hand it ids whose outcome is known.

On a Redis Cluster (detected from the server by ``connect``: the same URL setting) the
synchronous client is a ``RedisCluster`` and the hot path's ``Route`` points at the
primary serving the stream's slot (a stream and its companions share one). A MOVED moves
the route at once and the command is sent again there; an ASK (a slot migration under
way) sends that one command with ASKING to the node named; any other sign of a changed
topology (a dropped connection, READONLY, CLUSTERDOWN, TRYAGAIN…, read by
``queue_core.errors``) drops the connection, marks the slot map stale and raises
``TopologyChanged``, a connection error: the loop backs off (capped, jittered) and the
next connection asks the cluster where the slot lives now. None of this is on the hot
path: a single node's ``Line.call`` is the same two awaits as before. Figures (2-core machine, local
Redis 7.0, no-op handler; docs/benchmarks.md; ``benchmarks/worker_throughput.py``
re-measures the whole loop):

- one multi-id XACK per batch instead of one XACK per entry: about 5x the throughput
  (~13,000 -> ~67,000 msg/s with the pure-Python parser, ~210,000 with hiredis);
- a raw send/read on a held connection instead of ``client.execute_command``: skips the
  pool checkout, the retry wrapper and metrics, about 20 µs per command;
- commands packed in C by hiredis instead of redis.asyncio's Python packer: that costs
  about 1.4 µs per id of a 100-id XACK, a third of the Worker's per-entry cost; skipping
  the serializer's per-argument bytearray check saves another ~0.3 µs per XACK id.

Replies are the parser's own (RESP2 or RESP3 shapes), with no response callbacks.

hiredis is the wheel's ``hiredis`` extra, installed with the dashboard. Without it the
same commands are packed by redis-py's Python serializer and read by its Python parser:
the same bytes on the wire, at the pure-Python figures above.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aredis
from redis._parsers import Encoder
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import HiredisRespSerializer, PythonRespSerializer
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from queue_core.connection import Client, connect
from queue_core.errors import Redirect, error_code, group_exists, redirect, topology_changed
from queue_core.worker.config import WorkerConfig, WorkerConfigError

log = logging.getLogger("queue_core.worker")

#: redis-py's own packer, for when hiredis is not installed (no chunking: ``pack`` joins).
#: redis-py leaves both untyped.
_ENCODER = Encoder("utf-8", "strict", False)  # type: ignore[no-untyped-call]
_PYTHON_SERIALIZER = PythonRespSerializer(1 << 62, _ENCODER.encode)


def pack_python(args: tuple[Any, ...]) -> bytes:
    """One command in RESP, packed in Python as redis-py packs it without hiredis."""
    return b"".join(_PYTHON_SERIALIZER.pack(*args))  # type: ignore[no-untyped-call]


#: One command in RESP: hiredis's C packer when it is installed (the hot path's figures
#: above), else ``pack_python``.
pack: Callable[[tuple[Any, ...]], bytes]
try:
    import hiredis
except ImportError:
    pack = pack_python
else:
    pack = hiredis.pack_command

#: Ids per XACK: bounds one command's size (and Redis's time in it) on a huge batch.
XACK_MAX_IDS = 10_000
#: MOVED replies followed for one command before giving up (the slot map is then
#: refreshed after a backoff): a cluster still settling a failover may redirect in a circle.
MAX_REDIRECTS = 5

#: Where the stream's slot is served now, as (host, port); ``True`` asks for a fresh slot
#: map first. Runs in a thread (it may do a round trip). None on a single node.
SlotOwner = Callable[[bool], tuple[str, int]]


class TopologyChanged(redis.ConnectionError):
    """The node answering the hot path no longer serves it (READONLY, CLUSTERDOWN, a
    redirect loop, no reachable node…). A connection error, so the loop backs off and
    reconnects; on a cluster the next connection asks for the slot's owner first."""


class Route:
    """Where the hot path's connections go.

    A single node: the URL's pool, always. A cluster: the pool of the primary serving the
    stream's slot, found with ``owner`` before the first connection, moved by a MOVED
    reply, and looked up again (with a fresh slot map) after a lost connection or a
    topology error. One pool per node address, kept until ``aclose``.
    """

    def __init__(
        self, url: str, *, consumer: str, block_ms: int, owner: SlotOwner | None = None
    ) -> None:
        self._open = functools.partial(pool_open, url, consumer=consumer, block_ms=block_ms)
        self._owner = owner
        self._pools: dict[tuple[str, int] | None, aredis.ConnectionPool] = {}
        self._address: tuple[str, int] | None = None
        #: Ask ``owner`` before the next connection (at start, and after a topology change).
        self._stale = owner is not None
        self._refresh = False
        #: Redirects followed, by kind (MOVED, ASK), and slot-map lookups: for logs and tests.
        self.followed: Counter[str] = Counter()

    @property
    def cluster(self) -> bool:
        return self._owner is not None

    @property
    def address(self) -> tuple[str, int] | None:
        """The node the route points at (None on a single node)."""
        return self._address

    async def pool(self) -> aredis.ConnectionPool:
        """The pool to take the next connection from: O(1), but one slot-map lookup (a
        round trip when it must be refreshed, in a thread) after a topology change."""
        if self._stale:
            assert self._owner is not None
            self._go_to(await asyncio.to_thread(self._owner, self._refresh))
            self.followed["lookup"] += 1
            self._stale = self._refresh = False
        return self._at(self._address)

    def moved(self, where: Redirect) -> None:
        """MOVED: the slot is served at ``where`` for good; the next connection goes there."""
        self.followed["MOVED"] += 1
        host = where.host or (self._address[0] if self._address else "")
        if not host:
            self.lost()  # nowhere to go: ask the slot map
            return
        self._go_to((host, where.port))

    def lost(self) -> None:
        """A connection broke or the node refused (a cluster's topology may have changed):
        look the slot's owner up in a fresh slot map before the next connection."""
        if self._owner is not None:
            self._stale = self._refresh = True

    def ask_pool(self, host: str, port: int) -> aredis.ConnectionPool:
        """ASK: the pool of the node importing the slot, for one command (opened once)."""
        self.followed["ASK"] += 1
        return self._at((host, port))

    def _go_to(self, address: tuple[str, int]) -> None:
        if address != self._address:
            log.info("hot path now on %s:%d (the stream's slot owner)", *address)
        self._address = address

    def _at(self, address: tuple[str, int] | None) -> aredis.ConnectionPool:
        pool = self._pools.get(address)
        if pool is None:
            pool = self._pools[address] = self._open(address=address)
        return pool

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()


class Line:
    """One pooled connection driven with raw send/read: the hot path's two commands skip
    the client's per-command machinery (pool checkout, retry wrapper, metrics), about
    20 µs each. Any error but a Redis error reply drops the connection; the next call
    opens a new one. A topology reply (MOVED, ASK, READONLY…) is handled off the hot
    path, in ``_rerouted``.
    """

    def __init__(self, route: Route) -> None:
        self._route = route
        self._conn: Any = None
        self._pool: aredis.ConnectionPool | None = None

    async def call(self, *args: Any) -> Any:
        conn = self._conn
        if conn is None:
            conn = await self._connect()
        try:
            await conn.send_packed_command(pack(args), check_health=False)
            return await conn.read_response()
        except redis.ResponseError as exc:
            # A whole error reply was read: the connection is still in step.
            if topology_changed(exc):
                return await self._rerouted(exc, args)
            raise
        except BaseException:
            # Cancelled or broken mid-command: the reply may still be on its way, so this
            # connection can never be trusted again.
            await self._drop(broken=True)
            raise

    async def _connect(self) -> Any:
        pool = await self._route.pool()
        try:
            conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        except BaseException:
            self._route.lost()  # that node may be gone: ask the slot map next time
            raise
        self._conn, self._pool = conn, pool
        return conn

    async def _drop(self, *, broken: bool) -> None:
        conn, pool, self._conn = self._conn, self._pool, None
        if broken:
            self._route.lost()
        if conn is not None and pool is not None:
            if broken:
                await conn.disconnect()
            await pool.release(conn)

    async def _rerouted(self, exc: redis.ResponseError, args: tuple[Any, ...]) -> Any:
        """The node answered that it does not serve this command (the command did not run).

        MOVED: follow it (up to MAX_REDIRECTS in a row) and send the command again. ASK:
        send this one command with ASKING to the node named. Anything else (READONLY,
        CLUSTERDOWN, TRYAGAIN, UNBLOCKED, or a redirect on a single node): drop the
        connection and raise TopologyChanged, so the loop backs off and reconnects.
        """
        for _ in range(MAX_REDIRECTS):
            where = redirect(exc) if self._route.cluster else None
            if where is None:
                break
            if where.ask:
                return await self._asking(where, args)
            await self._drop(broken=False)
            self._route.moved(where)
            conn = await self._connect()
            try:
                await conn.send_packed_command(pack(args), check_health=False)
                return await conn.read_response()
            except redis.ResponseError as again:
                if not topology_changed(again):
                    raise
                exc = again
            except BaseException:
                await self._drop(broken=True)
                raise
        await self._drop(broken=False)
        self._route.lost()
        raise TopologyChanged(f"{error_code(exc)} {exc}".strip()) from exc

    async def _asking(self, where: Redirect, args: tuple[Any, ...]) -> Any:
        """One command on the node importing the slot, after ASKING (the slot map stays)."""
        host = where.host or (self._route.address or ("",))[0]
        pool = self._route.ask_pool(host, where.port)
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            packed = pack(("ASKING",)) + pack(args)
            await conn.send_packed_command(packed, check_health=False)
            await conn.read_response()  # +OK
            return await conn.read_response()
        except redis.ResponseError as exc:
            if topology_changed(exc):
                self._route.lost()
                raise TopologyChanged(f"{error_code(exc)} {exc}".strip()) from exc
            raise
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

    async def close(self) -> None:
        await self._drop(broken=False)


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
                return [pack(args)]
            except TypeError:
                pass
        packed: list[bytes] = self._packer.pack(*args)
        return packed


def _connection_class(url: str) -> type[aredis.Connection]:
    # Plain TCP only: redis-py picks its own class for rediss:// and unix://.
    if HIREDIS_AVAILABLE and url.startswith("redis://"):
        return _HiredisPackConnection
    return aredis.Connection


def pool_open(
    url: str, *, consumer: str, block_ms: int, address: tuple[str, int] | None = None
) -> aredis.ConnectionPool:
    """The hot path's pool: read timeout above the XREADGROUP block, no redis-py retries.

    ``address`` (a cluster node's host and port) replaces the URL's; the rest of the URL
    (credentials, TLS) is kept.
    """
    pool = aredis.ConnectionPool.from_url(
        url,
        connection_class=_connection_class(url),
        decode_responses=False,
        socket_timeout=block_ms / 1000 + 5,
        socket_connect_timeout=2,
        retry=Retry(NoBackoff(), 0),  # our own backoff decides, not redis-py's
        client_name=consumer,
        max_connections=8,
    )
    if address is not None:
        pool.connection_kwargs.update(host=address[0], port=address[1])
    return pool


def client_open(url: str, *, consumer: str) -> Client:
    """The synchronous client for the rare writes, checked with one PING.

    A ``RedisCluster`` when the server is a cluster node (``connect`` asks it). No
    redis-py retries: the loop's own backoff decides (a cluster client still follows
    MOVED and ASK itself). Raises the RedisError (or RedisClusterException) when Redis
    cannot be reached.
    """
    client: Client = connect(url, socket_timeout=10.0, client_name=consumer)
    client.set_retry(Retry(NoBackoff(), 0))
    try:
        client.ping()
    except (redis.RedisError, RedisClusterException):
        client.close()
        raise
    return client


def group_client_open(config: WorkerConfig) -> Client:
    """The synchronous client, with the group created (at ``group_start``) if missing.

    Raises WorkerConfigError when Redis cannot be reached or refuses the group.
    """
    unreachable = f"cannot reach Redis at {url_safe(config.url)}"
    try:
        client = client_open(config.url, consumer=config.consumer)
    except (redis.RedisError, RedisClusterException) as exc:
        raise WorkerConfigError(f"{unreachable}: {exc}") from exc
    try:
        client.xgroup_create(config.stream, config.group, id=config.group_start, mkstream=True)
        log.info("created group %s on %s at %s", config.group, config.stream,
                 config.group_start)  # fmt: skip
    except redis.ResponseError as exc:
        if not group_exists(exc):
            client.close()
            raise WorkerConfigError(
                f"cannot create group {config.group!r} on {config.stream!r}: {exc}"
            ) from exc
    except (redis.RedisError, RedisClusterException) as exc:
        client.close()
        raise WorkerConfigError(f"{unreachable}: {exc}") from exc
    return client


def slot_owner(client: Client, stream: str) -> SlotOwner | None:
    """How a Route finds the primary serving ``stream``'s slot: None on a single node."""
    if not isinstance(client, RedisCluster):
        return None
    return functools.partial(_slot_owner, client, stream)


def _slot_owner(client: RedisCluster, stream: str, refresh: bool) -> tuple[str, int]:
    """From the sync client's slot map (refreshed first when asked: one CLUSTER SLOTS,
    which also serves the rare writes). No reachable node, or the slot not served yet
    (a failover under way), is a TopologyChanged: back off and ask again."""
    try:
        if refresh:
            client.nodes_manager.initialize()
        node = client.get_node_from_key(stream)  # type: ignore[no-untyped-call]
    except (redis.RedisError, RedisClusterException) as exc:
        raise TopologyChanged(f"cannot find the node serving {stream!r}: {exc}") from exc
    return str(node.host), int(node.port)


def topology_refresh(client: Client) -> None:
    """After a topology error on the sync client: a cluster reloads its slot map, a single
    node drops its idle connections (a failover behind one DNS name gives new ones the new
    primary). Best effort; a failure is logged and the next command tries again."""
    try:
        if isinstance(client, RedisCluster):
            client.nodes_manager.initialize()
        else:
            client.connection_pool.disconnect()
    except (redis.RedisError, RedisClusterException, OSError) as exc:
        log.warning("refreshing the topology failed: %s", exc)


def url_safe(url: str) -> str:
    """The URL without its password, for error messages."""
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)
