"""Sessions read from a shared Redis cache, kept in the database ("cached_db").

Owns ``SESSION_ENGINE``: Django's ``cached_db`` store, whose cache is the ``sessions``
alias (Django's own ``RedisCache`` on ``ACKBOARD_CHANNELS_URL``, which defaults to
``ACKBOARD_REDIS_URL``; see settings). A page request reads its session's data with one
Redis GET, and checks that the session's row still exists and is unexpired with one
prepared SQL statement (``SELECT 1`` by primary key, written once per process).

The database row is the session's record: a logout deletes the row first, then the cached
copy. While the cache cannot be reached (down, or hung past its timeout) the logout still
ends the session: the row is gone, the cookie is deleted, and a cached copy that survives
the outage (a paused server, a restart from disk) is refused on its next read, because its
row is missing, and deleted then. So a logout never depends on the cache, and no copy in
any web process's view outlives its row. The socket re-check (``dashboard.live.session``)
reads the rows themselves.

Django's ``RedisCache`` speaks to one server: on a Redis Cluster node it would get MOVED
for most keys. So the cache is used only after one ``INFO cluster`` (once per process and
URL) said the server is not a cluster node; otherwise, and while that server cannot be
asked, the store is plain database sessions.

Django keeps one cache object per request context under ASGI, and each ``RedisCache``
makes its own connection pool, so every request opened a new Redis connection (a TCP
connect and HELLO per page). ``SharedConnectionPool`` (the cache's ``pool_class``) hands
every cache object of a process the same pool per URL and options. ``SessionCache`` (the
cache's backend) goes one step further: Django's client also builds a ``redis.Redis`` for
every cache call (~60 us: its table of reply parsers is copied each time); every cache
object of a process shares one client per servers and options, and it one ``redis.Redis``
per pool.

Never used for anything but sessions; never writes to Redis outside the cache's keys.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import lru_cache
from typing import Any, ClassVar, cast

import redis
from django.conf import settings
from django.contrib.sessions.backends.cached_db import SessionStore as CachedDBStore
from django.contrib.sessions.backends.db import SessionStore as DBStore
from django.core.cache import caches
from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.db import connections, router
from django.utils import timezone
from django.utils.functional import cached_property

from queue_core.connection import cluster_enabled

log = logging.getLogger("ackboard.web")

#: Stands in for the cache where it cannot be used: every read misses, writes are dropped,
#: so the store is the database alone.
_NO_CACHE = DummyCache("sessions-off", {})
#: After the cache's server did not answer, ask again no sooner than this (seconds), so an
#: outage does not add a probe to every request.
PROBE_BACKOFF_S = 5.0


class SharedConnectionPool(redis.ConnectionPool):
    """One pool per process for each URL and options: Django builds a ``RedisCache`` (and
    its pools) per ASGI request context, which would connect afresh on every request.
    redis-py's pool already starts over in a forked child (it checks the pid)."""

    _shared: ClassVar[dict[tuple[str, str], redis.ConnectionPool]] = {}

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Any:
        key = (url, repr(sorted(kwargs.items(), key=lambda item: item[0])))
        with _SHARED_LOCK:
            pool = cls._shared.get(key)
            if pool is None:
                pool = cls._shared[key] = redis.ConnectionPool.from_url(url, **kwargs)
        return pool


_SHARED_LOCK = threading.Lock()


class _SharedClient(RedisCacheClient):
    """Django's cache client, with one ``redis.Redis`` per pool instead of one per call
    (``redis.Redis`` is thread-safe; its pool hands each thread its own connection)."""

    def __init__(self, servers: list[str], **options: Any) -> None:
        super().__init__(servers, **options)
        self._redis: dict[int, redis.Redis] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        django: Any = self  # the private helpers of Django's client (not in the stubs)
        index = django._get_connection_pool_index(write)
        client = self._redis.get(index)
        if client is None:
            pool = django._get_connection_pool(write)
            client = self._redis[index] = redis.Redis(connection_pool=pool)
        return client


class SessionCache(RedisCache):
    """Django's ``RedisCache``; every cache object of a process (one per request context
    under ASGI) shares one client per servers and options (``_SharedClient``)."""

    _clients: ClassVar[dict[tuple[str, str], _SharedClient]] = {}

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._location = server
        self._client_options: dict[str, Any] = params.get("OPTIONS", {})

    @cached_property
    def _cache(self) -> _SharedClient:
        options = self._client_options
        key = (self._location, repr(sorted(options.items(), key=lambda item: item[0])))
        with _SHARED_LOCK:
            client = self._clients.get(key)
            if client is None:
                servers = cast(Any, self)._servers  # RedisCache's split LOCATION
                client = self._clients[key] = _SharedClient(servers, **options)
        return client


#: Per process: URL -> whether its server is usable (False: a cluster node).
_known: dict[str, bool] = {}
_retry_at: dict[str, float] = {}


def _masked(url: str) -> str:
    return url.split("@", 1)[-1]


def session_cache_state() -> bool | None:
    """Whether sessions may be read from the ``SESSION_CACHE_ALIAS`` cache: True, False (a
    Redis Cluster node), or None while its server cannot be asked (the cache may still hold
    copies written earlier). One ``INFO cluster`` per process and URL, once it answers."""
    location = settings.CACHES[settings.SESSION_CACHE_ALIAS].get("LOCATION", "")
    if not isinstance(location, str) or not location:
        return False
    if location in _known:
        return _known[location]
    now = time.monotonic()
    if _retry_at.get(location, 0.0) > now:
        return None
    try:
        usable = not cluster_enabled(location, connect_timeout=0.5, timeout=0.5)
    except redis.RedisError:
        _retry_at[location] = now + PROBE_BACKOFF_S
        return None
    if not usable:
        log.warning(
            "sessions: %s is a Redis Cluster node, which Django's RedisCache cannot use; "
            "sessions are read from the database (set ACKBOARD_CHANNELS_URL to a "
            "standalone Redis to cache them)",
            _masked(location),
        )
    _known[location] = usable
    return usable


@lru_cache(maxsize=8)
def _row_alive_sql(table: str, alias: str, vendor: str) -> str:
    """``SELECT 1`` of one unexpired session row by key (the columns of Django's model)."""
    quote = connections[alias].ops.quote_name
    return (
        f"SELECT 1 FROM {quote(table)} "
        f"WHERE {quote('session_key')} = %s AND {quote('expire_date')} > %s"
    )


class SessionStore(CachedDBStore):
    """``cached_db``, falling back to the database alone on a cluster, whose cached copy
    counts only while its row exists (module docstring)."""

    def __init__(self, session_key: str | None = None) -> None:
        super().__init__(session_key)
        self._cache_state = session_cache_state()
        if self._cache_state is not True:
            self._cache = _NO_CACHE

    # While the cache's server is away, pages are read from the database (and say Redis is
    # away, RedisErrorMiddleware), never a 500: every cache call below may fail.

    def _row_alive(self, session_key: str) -> bool:
        """Whether the session's row exists and has not expired: one prepared statement
        (~0.03 ms on SQLite; the ORM's ``exists()`` compiles a query each time, ~0.3 ms)."""
        model = self.model
        alias = router.db_for_read(model)
        connection = connections[alias]
        sql = _row_alive_sql(model._meta.db_table, alias, connection.vendor)
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        with connection.cursor() as cursor:
            cursor.execute(sql, [session_key, now])
            return cursor.fetchone() is not None

    def load(self) -> dict[str, Any]:
        try:
            data = self._cache.get(self.cache_key)
        except Exception:  # as cached_db: also a key the backend refuses
            data = None
        if data is not None:
            if self._row_alive(cast(str, self.session_key)):
                return cast(dict[str, Any], data)
            # A copy its logout could not delete (the cache was away): ended all the same.
            self._forget_cached(cast(str, self.session_key))
            return {}
        stored = self._get_session_from_db()  # type: ignore[attr-defined]  # not in the stubs
        if not stored:
            return {}
        data = self.decode(stored.session_data)
        try:
            self._cache.set(self.cache_key, data, self.get_expiry_age(expiry=stored.expire_date))
        except redis.RedisError as exc:
            log.warning("sessions: not cached (%s)", exc)
        return data

    def exists(self, session_key: str) -> bool:
        try:
            if session_key and (self.cache_key_prefix + session_key) in self._cache:
                return True
        except redis.RedisError as exc:
            log.warning("sessions: cache not asked (%s)", exc)
        return DBStore.exists(self, session_key)

    def save(self, must_create: bool = False) -> None:
        DBStore.save(self, must_create)
        try:
            self._cache.set(self.cache_key, self._session, self.get_expiry_age())  # type: ignore[attr-defined]
        except redis.RedisError as exc:
            # The row is written. A copy cached earlier may be older: the next save
            # replaces it and a logout deletes it (a login always gets a new key).
            log.warning("sessions: not cached (%s)", exc)

    def cycle_key(self) -> None:
        """A new key for this session's data (login, password change). A cache that cannot
        be reached does not stop it: the old key's row is still removed, and a copy of it
        cached earlier is refused on read (its row is gone)."""
        old = self.session_key
        try:
            super().cycle_key()
        except redis.RedisError as exc:
            log.warning("sessions: old key's cached copy not deleted (%s)", exc)
            if old:
                DBStore.delete(self, old)

    def delete(self, session_key: str | None = None) -> None:
        """Logout and flush: the row first (the session's record: with it gone, no cached
        copy is accepted again), then the cached copy. A cache that cannot be reached does
        not fail the logout; its copy is refused and deleted when next read. One SQL
        DELETE and one DEL."""
        key = session_key if session_key is not None else self.session_key
        if key is None:
            return
        DBStore.delete(self, key)
        self._forget_cached(key)

    def _forget_cached(self, session_key: str) -> None:
        if self._cache_state is False:
            return
        try:
            caches[settings.SESSION_CACHE_ALIAS].delete(self.cache_key_prefix + session_key)
        except redis.RedisError as exc:
            log.warning(
                "sessions: cached copy not deleted (%s); it is refused while its row is gone",
                exc,
            )
