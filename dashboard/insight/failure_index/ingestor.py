"""The ingestor: moves every ``{S}:failures`` record into the failure index, ack after commit.

Owns the consumer group ``ackboard-ingest`` on every failures companion stream, the
discovery of those streams, and the long-running loop (wake on the workers' ``failure``
events, re-discover, reclaim a crashed ingestor's records, prune, back off on errors).

It never writes to the queue streams and never XACKs a record before the transaction
holding its row has committed: a crash or a database error leaves the record pending, to
be read again (by this consumer) or reclaimed (by another) and stored again, which is a
no-op through the unique ``(failures_key, source_id)``. Cost per batch of ``INGEST_BATCH``
records: one XREADGROUP, one INSERT transaction, one XACK.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction

from dashboard.insight.failure_index.records import failure_record_parse
from dashboard.insight.failure_index.retention import failures_prune_expired
from dashboard.models import IndexedFailure
from dashboard.runtime.logs import FailureLog
from queue_core.backoff import Backoff
from queue_core.bounded_json import json_read
from queue_core.connection import Client
from queue_core.errors import group_exists, group_missing, key_missing
from queue_core.keys import (
    EVENTS_CHANNEL,
    FAILURES_SUFFIX,
    companion_parent,
    stream_keys,
    stream_visible,
)

log = logging.getLogger("ackboard.failures")
#: Unreadable events (anyone may PUBLISH) and unexpected errors: at most once a minute each.
_warnings = FailureLog(log)

#: The consumer group the ingestor reads every failures stream with.
INGEST_GROUP = "ackboard-ingest"
#: Records read (and rows written in one transaction) per stream per round trip.
INGEST_BATCH = 500
#: A record pending this long under any ingestor consumer is taken over (a crashed ingestor).
RECLAIM_IDLE_MS = 60_000


@dataclass
class _Source:
    """One failures stream being ingested, with its reclaim cursor."""

    key: bytes
    name: str
    stream: str
    group_ready: bool = False
    reclaim_cursor: bytes = b"0-0"
    retry_own: bool = False


def failure_sources_discover(
    *, client: Client, patterns: Sequence[str] = ("*",), cap: int = 1000
) -> list[tuple[bytes, str]]:
    """``(key, stream)`` of each failures companion stream whose stream the allowlist admits.

    ``SCAN MATCH *:failures TYPE stream``, stopping after ``cap`` keys: O(keyspace / 1000)
    round trips, each a few ms of Redis time on a large keyspace.
    """
    found: list[tuple[bytes, str]] = []
    for key in client.scan_iter(match="*" + FAILURES_SUFFIX, count=1000, _type="stream"):
        name = key.decode("utf-8", "replace")
        parent = companion_parent(name)
        if parent is None or not stream_visible(parent, tuple(patterns)):
            continue
        if stream_keys(parent).failures.encode() != key:
            continue  # a non-UTF-8 name that does not round-trip; nothing we could show
        found.append((key, parent))
        if len(found) >= cap:
            log.warning("failure ingest: discovery capped at %d streams", cap)
            break
    return sorted(found)


class FailureIngestor:
    """Moves records from every ``{S}:failures`` stream into IndexedFailure rows, ack after commit.

    For each stream: a consumer group (``INGEST_GROUP``, created at ``0`` so history is
    taken too) reads a batch; the batch is written in one durable transaction with
    ``ignore_conflicts`` (the unique ``(failures_key, source_id)`` makes a redelivered
    record a no-op); only then is the batch XACKed. A failed write leaves the batch pending
    under this consumer, read again from its own history; a crashed ingestor's pending
    records are taken over with XAUTOCLAIM once idle ``reclaim_idle_ms``.
    """

    def __init__(
        self,
        *,
        client: Client,
        group: str = INGEST_GROUP,
        consumer: str | None = None,
        batch: int = INGEST_BATCH,
        reclaim_idle_ms: int = RECLAIM_IDLE_MS,
        patterns: Sequence[str] | None = None,
        max_streams: int | None = None,
    ) -> None:
        self.client = client
        self.group = group
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.batch = batch
        self.reclaim_idle_ms = reclaim_idle_ms
        self.patterns = tuple(patterns or settings.ACKBOARD_STREAMS)
        self.max_streams = max_streams or int(settings.ACKBOARD_MAX_STREAMS)
        self.sources: dict[bytes, _Source] = {}
        #: Records stored and acked by this ingestor so far.
        self.stored = 0

    # -- discovery ---------------------------------------------------------------------

    def discover(self) -> int:
        """Refresh the set of failures streams; keeps the state of the ones still there."""
        found = failure_sources_discover(
            client=self.client, patterns=self.patterns, cap=self.max_streams
        )
        self.sources = {
            key: self.sources.get(key) or _Source(key=key, name=key.decode(), stream=stream)
            for key, stream in found
        }
        return len(self.sources)

    def _ensure_group(self, source: _Source) -> bool:
        if source.group_ready:
            return True
        try:
            # No MKSTREAM: a failures stream deleted since discovery must not be recreated.
            self.client.xgroup_create(source.key, self.group, id="0")
        except redis.ResponseError as exc:
            if key_missing(exc):
                return False
            if not group_exists(exc):
                raise
        source.group_ready = True
        return True

    # -- the ack contract --------------------------------------------------------------

    def _store(self, source: _Source, entries: Sequence[Any]) -> int:
        """Store ``entries`` as rows in one durable transaction, then XACK them. Returns a count."""
        ids: list[bytes] = []
        rows: list[IndexedFailure] = []
        for entry_id, fields in entries:
            ids.append(entry_id)
            if fields is None:
                # Trimmed while pending (Redis < 7 still lists it): nothing left to keep.
                log.warning(
                    "failure ingest: %s %s was trimmed before it was stored",
                    source.name,
                    entry_id.decode(),
                )
                continue
            rows.append(
                failure_record_parse(
                    failures_key=source.name,
                    stream=source.stream,
                    source_id=entry_id.decode(),
                    fields=fields,
                )
            )
        if not ids:
            return 0
        if rows:
            try:
                # durable: this is the outermost transaction, so leaving the block is the
                # commit and the XACK below can never run for rows that might roll back.
                with transaction.atomic(durable=True):
                    IndexedFailure.objects.bulk_create(rows, ignore_conflicts=True)
            except DatabaseError:
                source.retry_own = True
                raise
        self.client.xack(source.key, self.group, *ids)
        self.stored += len(ids)
        return len(ids)

    def _read(self, source: _Source, start: str) -> list[Any]:
        reply: Any
        try:
            reply = self.client.xreadgroup(
                self.group, self.consumer, {source.key: start}, count=self.batch
            )
        except redis.ResponseError as exc:
            if group_missing(exc):
                # Group destroyed or stream deleted: recreate next time (re-ingesting from 0
                # is harmless: rows are unique by source id).
                source.group_ready = False
                return []
            raise
        return list(reply[0][1]) if reply else []

    def reclaim(self, source: _Source, *, sweep: bool = False) -> int:
        """XAUTOCLAIM stale records into this consumer and store them; keeps the cursor.

        ``sweep`` walks the whole pending list once (used by ``--once``); otherwise one
        step of ``batch`` records per call, on a timer.
        """
        if not self._ensure_group(source):
            return 0
        stored = 0
        while True:
            try:
                reply = self.client.xautoclaim(
                    source.key,
                    self.group,
                    self.consumer,
                    self.reclaim_idle_ms,
                    start_id=source.reclaim_cursor,
                    count=self.batch,
                )
            except redis.ResponseError as exc:
                if group_missing(exc):
                    source.group_ready = False
                    return stored
                raise
            cursor, entries = reply[0], reply[1]
            if len(reply) > 2 and reply[2]:
                log.warning(
                    "failure ingest: %d records of %s were trimmed before storing",
                    len(reply[2]),
                    source.name,
                )
            stored += self._store(source, entries)
            source.reclaim_cursor = cursor
            if not sweep or cursor in (b"0-0", "0-0"):
                return stored

    def step(self, source: _Source) -> int:
        """One batch from ``source``: this consumer's own unacked records first, then new."""
        if not self._ensure_group(source):
            return 0
        if source.retry_own:
            entries = self._read(source, "0")
            if entries:
                return self._store(source, entries)
            source.retry_own = False
        return self._store(source, self._read(source, ">"))

    def drain(self) -> int:
        """Read every stream until nothing new is left. Returns records stored and acked."""
        total = 0
        busy = True
        while busy:
            busy = False
            for source in list(self.sources.values()):
                n = self.step(source)
                total += n
                busy = busy or n > 0
        return total

    def retire(self) -> None:
        """Delete this consumer from each group if it holds nothing pending (clean exit)."""
        for source in self.sources.values():
            if not source.group_ready:
                continue
            try:
                pending = self.client.xpending_range(
                    source.key, self.group, min="-", max="+", count=1, consumername=self.consumer
                )
                if not pending:
                    self.client.xgroup_delconsumer(source.key, self.group, self.consumer)
            except redis.RedisError:
                log.debug("failure ingest: could not retire consumer on %s", source.name)


def failures_ingest(
    *,
    client: Client,
    once: bool = True,
    stop: threading.Event | None = None,
    reclaim_idle_ms: int = RECLAIM_IDLE_MS,
    consumer: str | None = None,
    batch: int = INGEST_BATCH,
    poll_s: float = 0.5,
    rediscover_s: float = 30.0,
    reclaim_every_s: float = 30.0,
    prune_every_s: float = 3600.0,
) -> int:
    """Ingest every failures stream; returns the number of records stored and acked.

    ``once``: discover, sweep stale pending records once, drain, and return; database and
    Redis errors propagate (the records stay pending). Otherwise loop until ``stop`` is
    set: errors are logged and retried with capped, jittered backoff, streams are
    re-discovered every ``rediscover_s`` and rows older than the retention are pruned
    every ``prune_every_s``. Safe to run in a thread (closes its DB connection on exit).
    """
    ingestor = FailureIngestor(
        client=client, consumer=consumer, batch=batch, reclaim_idle_ms=reclaim_idle_ms
    )
    if once:
        ingestor.discover()
        for source in list(ingestor.sources.values()):
            ingestor.reclaim(source, sweep=True)
        ingestor.drain()
        ingestor.retire()
        return ingestor.stored
    return _ingest_loop(
        ingestor,
        stop=stop or threading.Event(),
        poll_s=poll_s,
        rediscover_s=rediscover_s,
        reclaim_every_s=reclaim_every_s,
        prune_every_s=prune_every_s,
    )


def failures_ingest_loop(*, client: Client, stop: threading.Event, **options: Any) -> int:
    """The long-running ingestor, for a thread (the demo) or the management command."""
    return failures_ingest(client=client, once=False, stop=stop, **options)


@dataclass
class _Chores:
    """The loop's periodic work besides draining, and when each is next due (monotonic s)."""

    rediscover_s: float
    reclaim_every_s: float
    prune_every_s: float
    next_discover: float = 0.0
    next_reclaim: float = 0.0
    next_prune: float = 0.0

    def run_due(self, ingestor: FailureIngestor, *, now: float) -> None:
        """Re-discover streams, reclaim stale records, prune old rows: each when it is due."""
        if now >= self.next_discover:
            ingestor.discover()
            self.next_discover = now + self.rediscover_s
        if now >= self.next_reclaim:
            for source in list(ingestor.sources.values()):
                ingestor.reclaim(source)
            self.next_reclaim = now + self.reclaim_every_s
        if now >= self.next_prune:
            failures_prune_expired()
            self.next_prune = now + self.prune_every_s


def _ingest_loop(
    ingestor: FailureIngestor,
    *,
    stop: threading.Event,
    poll_s: float,
    rediscover_s: float,
    reclaim_every_s: float,
    prune_every_s: float,
) -> int:
    backoff = Backoff(base=0.5, cap=30.0)
    chores = _Chores(rediscover_s, reclaim_every_s, prune_every_s)
    # Workers publish a "failure" event for each record they write: waiting on it instead
    # of sleeping makes a failure searchable (and live on the group page) within
    # milliseconds, while the poll stays a fallback for events that are lost.
    events = _events_open(ingestor.client)
    try:
        while not stop.is_set():
            try:
                chores.run_due(ingestor, now=time.monotonic())
                moved = ingestor.drain()
                backoff.succeeded()
                if not moved:
                    if not events.subscribed:
                        events.subscribe(EVENTS_CHANNEL)
                    _wait_for_failure(events, poll_s, stop)
            except (redis.RedisError, DatabaseError) as exc:
                # Nothing acked for what failed: it stays pending and is read again.
                delay = backoff.failed()
                log.warning(
                    "failure ingest: %s: %s; retrying in %.1f s", type(exc).__name__, exc, delay
                )
                chores.next_discover = 0.0
                if isinstance(exc, DatabaseError):
                    close_old_connections()
                else:
                    # The subscription may be on a node that is gone (on a cluster, a
                    # failover hands the channel's slot to another primary): subscribe
                    # afresh next time, where the client routes now.
                    events.close()
                    events = _events_open(ingestor.client)
                stop.wait(delay)
            except Exception as exc:
                # A bug something hostile found: nothing acked for what failed (it is read
                # again), logged at most once a minute, and the index stays fresh for the
                # rest instead of going stale until someone restarts the process.
                _warnings.report("ingest", "failure ingest", exc)
                stop.wait(backoff.failed())
        ingestor.retire()
    finally:
        events.close()
        connection.close()
    return ingestor.stored


def _events_open(client: Client) -> redis.client.PubSub:
    """A pub/sub for the failure events, not yet subscribed. On a cluster, redis-py's
    ClusterPubSub subscribes on the node that serves the channel's slot; a classic PUBLISH
    on any node reaches it."""
    events: redis.client.PubSub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]  # redis-py leaves pubsub() untyped
    return events


def _wait_for_failure(events: redis.client.PubSub, timeout: float, stop: threading.Event) -> None:
    """Return when a failure event arrives, ``stop`` is set, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0 and not stop.is_set():
        # Short slices keep a stop request answered within a quarter second.
        message = events.get_message(timeout=min(left, 0.25))
        if message is not None and failure_event(message.get("data")):
            return


def failure_event(data: Any) -> bool:
    """Whether a pub/sub message's ``data`` is a worker's ``failure`` event. Anything else,
    whatever it holds (malformed, nested thousands deep, not text at all), is False: an
    unreadable one is logged at most once a minute, and the loop goes on."""
    if not isinstance(data, str | bytes):
        return False
    try:
        event = json_read(data)
    except ValueError as exc:
        _warnings.warn(
            "unreadable-event",
            "failure ingest: ignored an event on %s that is not readable JSON (%s)",
            EVENTS_CHANNEL,
            str(exc)[:200],
        )
        return False
    return isinstance(event, dict) and event.get("type") == "failure"
