"""The failure index: ingesting ``{S}:failures`` into FailureRecord, and the reads over it.

Owns the ingestor (a consumer group on every failures companion stream, under the ack
contract: store, commit, then XACK), the queries the pages use (latest failure per
entry, an entry's history, counts per stream, the bounded search) and pruning.

It never writes to the queue streams themselves and never acks a failure record before
the row holding it is committed: a crash or a database error leaves the record pending,
to be reclaimed and stored again (idempotent through the unique source key).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.db import (
    DatabaseError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import Count, F, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from dashboard.models import FailureRecord
from queue_core.keys import (
    EVENTS_CHANNEL,
    FAILURES_SUFFIX,
    companion_parent,
    stream_keys,
    stream_visible,
)

log = logging.getLogger("ackboard.failures")

# --- queries used by other pages ----------------------------------------------------------


def last_failures(*, stream: str, group: str, entry_ids: Sequence[str]) -> dict[str, str]:
    """The newest failure message of each of ``entry_ids`` in ``group``; absent ids are left out.

    One query on the ``(stream, entry_id)`` index; a window function keeps one row per
    entry, so a poison entry with many attempts costs index reads, not transferred rows.
    """
    if not entry_ids:
        return {}
    latest = (
        FailureRecord.objects.filter(stream=stream, group=group, entry_id__in=list(entry_ids))
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("entry_id")],
                order_by=[F("failed_at").desc(), F("id").desc()],
            )
        )
        .filter(rank=1)
        .values_list("entry_id", "message")
    )
    return dict(latest)


def failure_history(*, stream: str, entry_id: str, limit: int = 1000) -> list[FailureRecord]:
    """Every recorded attempt of ``entry_id`` in any group of ``stream``, oldest first.

    One query on the ``(stream, entry_id)`` index. Attempts are bounded by the groups'
    max deliveries; ``limit`` is a guard that keeps the newest ``limit`` if ever exceeded.
    """
    newest = FailureRecord.objects.filter(stream=stream, entry_id=entry_id).order_by(
        "-failed_at", "-id"
    )[:limit]
    return list(reversed(newest))


def failures_count_since(*, streams: Sequence[str], since: datetime) -> dict[str, int]:
    """Failures per stream at or after ``since``; every asked stream is a key (0 if none).

    One grouped query on the ``(stream, failed_at)`` index (a covering range per stream).
    """
    counts = dict.fromkeys(streams, 0)
    if not counts:
        return counts
    rows = (
        FailureRecord.objects.filter(stream__in=list(counts), failed_at__gte=since)
        .order_by()
        .values("stream")
        .annotate(n=Count("id"))
        .values_list("stream", "n")
    )
    counts.update(dict(rows))
    return counts


# --- ingestion ------------------------------------------------------------------------------

#: The consumer group the ingestor reads every failures stream with.
INGEST_GROUP = "ackboard-ingest"
#: Records read (and rows written in one transaction) per stream per round trip.
INGEST_BATCH = 500
#: A record pending this long under any ingestor consumer is taken over (a crashed ingestor).
RECLAIM_IDLE_MS = 60_000
#: Text caps, so one oversized record cannot make its whole batch fail on a strict database.
MESSAGE_CAP = 4_000
TRACEBACK_CAP = 16_000
#: Fields a record must carry; without one of them it is stored as ``Malformed``.
REQUIRED_FIELDS = ("group", "entry_id", "consumer", "attempt", "error_type", "failed_at_ms")
MALFORMED = "Malformed"

_ENTRY_ID = re.compile(r"\A\d{1,20}-\d{1,20}\Z")
_MAX_LEN = {
    f.name: f.max_length
    for f in FailureRecord._meta.concrete_fields
    if isinstance(f.max_length, int)
}


def _clean(text: str, cap: int | None = None, *, tail: bool = False) -> str:
    # NUL is legal in Redis and in SQLite text but PostgreSQL refuses it.
    text = text.replace("\x00", "\ufffd")
    if cap is not None and len(text) > cap:
        text = "…" + text[-(cap - 1) :] if tail else text[: cap - 1] + "…"
    return text


def _ms_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def failure_record_parse(
    *, failures_key: str, stream: str, source_id: str, fields: Mapping[bytes, bytes]
) -> FailureRecord:
    """One ``{S}:failures`` entry as an unsaved FailureRecord, keeping whatever parses.

    A record missing a field, or with a field that does not parse, is stored anyway with
    ``error_type="Malformed"``; the message says what was wrong and the traceback keeps
    the raw fields, so nothing is silently dropped. Pure: no I/O.
    """
    problems: list[str] = []
    text: dict[str, str] = {}
    for raw_key, raw_value in fields.items():
        key = raw_key.decode("utf-8", "replace")
        try:
            text[key] = raw_value.decode("utf-8")
        except UnicodeDecodeError:
            text[key] = raw_value.decode("utf-8", "replace")
            problems.append(f"{key} is not UTF-8")
    missing = [name for name in REQUIRED_FIELDS if name not in text]
    if missing:
        problems.append("missing " + ", ".join(missing))

    attempt = 0
    if "attempt" in text:
        try:
            attempt = int(text["attempt"])
            if not 0 <= attempt <= 2_147_483_647:
                raise ValueError
        except ValueError:
            attempt = 0
            problems.append(f"attempt {text['attempt'][:40]!r} is not a count")
    duration_ms: float | None = None
    if text.get("duration_ms", "") != "":
        try:
            duration_ms = float(text["duration_ms"])
            if duration_ms != duration_ms or duration_ms in (float("inf"), float("-inf")):
                raise ValueError
        except ValueError:
            duration_ms = None
            problems.append(f"duration_ms {text['duration_ms'][:40]!r} is not a number")
    # The record's own stream id is its write time: the fallback when failed_at_ms is bad.
    failed_at = _ms_datetime(int(source_id.partition("-")[0]))
    if "failed_at_ms" in text:
        try:
            failed_at = _ms_datetime(int(text["failed_at_ms"]))
        except (ValueError, OverflowError, OSError):
            problems.append(f"failed_at_ms {text['failed_at_ms'][:40]!r} is not a time")
    entry_id = text.get("entry_id", "")
    if entry_id and not _ENTRY_ID.match(entry_id):
        problems.append(f"entry_id {entry_id[:45]!r} is not a stream id")
        entry_id = ""

    error_type = text.get("error_type", "")
    message = text.get("message", "")
    traceback = text.get("traceback", "")
    if problems:
        original = f"{error_type}: {message}" if (error_type or message) else ""
        message = "Malformed failure record: " + "; ".join(problems)
        if original:
            message += " | original: " + original
        raw = "\n".join(f"{k} = {v[:500]!r}" for k, v in text.items())
        traceback = (traceback + "\n\n" if traceback else "") + "[raw record]\n" + raw
        error_type = MALFORMED

    def short(name: str, value: str) -> str:
        return _clean(value, _MAX_LEN[name])

    return FailureRecord(
        failures_key=short("failures_key", failures_key),
        source_id=source_id,
        stream=short("stream", stream),
        group=short("group", text.get("group", "")),
        entry_id=entry_id,
        consumer=short("consumer", text.get("consumer", "")),
        attempt=attempt,
        error_type=short("error_type", error_type),
        message=_clean(message, MESSAGE_CAP),
        traceback=_clean(traceback, TRACEBACK_CAP, tail=True),
        duration_ms=duration_ms,
        failed_at=failed_at,
    )


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
    *, client: redis.Redis, patterns: Sequence[str] = ("*",), cap: int = 1000
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
    """Moves records from every ``{S}:failures`` stream into FailureRecord, ack after commit.

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
        client: redis.Redis,
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
            text = str(exc)
            if "BUSYGROUP" not in text:
                if "requires the key to exist" in text:
                    return False
                raise
        source.group_ready = True
        return True

    # -- the ack contract --------------------------------------------------------------

    def _store(self, source: _Source, entries: Sequence[Any]) -> int:
        """Write ``entries`` in one durable transaction, then XACK them. Returns the count."""
        ids: list[bytes] = []
        records: list[FailureRecord] = []
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
            records.append(
                failure_record_parse(
                    failures_key=source.name,
                    stream=source.stream,
                    source_id=entry_id.decode(),
                    fields=fields,
                )
            )
        if not ids:
            return 0
        if records:
            try:
                # durable: this is the outermost transaction, so leaving the block is the
                # commit and the XACK below can never run for rows that might roll back.
                with transaction.atomic(durable=True):
                    FailureRecord.objects.bulk_create(records, ignore_conflicts=True)
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
            if "NOGROUP" in str(exc):
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
                if "NOGROUP" in str(exc):
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
    client: redis.Redis,
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


def failures_ingest_loop(*, client: redis.Redis, stop: threading.Event, **options: Any) -> int:
    """The long-running ingestor, for a thread (the demo) or the management command."""
    return failures_ingest(client=client, once=False, stop=stop, **options)


def _ingest_loop(
    ingestor: FailureIngestor,
    *,
    stop: threading.Event,
    poll_s: float,
    rediscover_s: float,
    reclaim_every_s: float,
    prune_every_s: float,
) -> int:
    backoff = 0.0
    next_discover = next_reclaim = next_prune = 0.0
    # Workers publish a "failure" event for each record they write: waiting on it instead
    # of sleeping makes a failure searchable (and live on the group page) within
    # milliseconds, while the poll stays a fallback for events that are lost.
    events = ingestor.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]  # redis-py leaves pubsub() untyped
    try:
        while not stop.is_set():
            now = time.monotonic()
            try:
                if now >= next_discover:
                    ingestor.discover()
                    next_discover = now + rediscover_s
                if now >= next_reclaim:
                    for source in list(ingestor.sources.values()):
                        ingestor.reclaim(source)
                    next_reclaim = now + reclaim_every_s
                if now >= next_prune:
                    days = int(getattr(settings, "ACKBOARD_FAILURE_RETENTION_DAYS", 30))
                    if days > 0:
                        failures_prune(older_than=timezone.now() - timedelta(days=days))
                    next_prune = now + prune_every_s
                moved = ingestor.drain()
                backoff = 0.0
                if not moved:
                    if not events.subscribed:
                        events.subscribe(EVENTS_CHANNEL)
                    _wait_for_failure(events, poll_s, stop)
            except (redis.RedisError, DatabaseError) as exc:
                # Nothing acked for what failed: it stays pending and is read again.
                backoff = min(30.0, max(0.5, backoff * 2))
                delay = backoff * (0.5 + random.random() / 2)
                log.warning(
                    "failure ingest: %s: %s; retrying in %.1f s", type(exc).__name__, exc, delay
                )
                next_discover = 0.0
                if isinstance(exc, DatabaseError):
                    close_old_connections()
                stop.wait(delay)
        ingestor.retire()
    finally:
        events.close()
        connection.close()
    return ingestor.stored


def _wait_for_failure(events: redis.client.PubSub, timeout: float, stop: threading.Event) -> None:
    """Return when a failure event arrives, ``stop`` is set, or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0 and not stop.is_set():
        # Short slices keep a stop request answered within a quarter second.
        message = events.get_message(timeout=min(left, 0.25))
        if message is None:
            continue
        try:
            event = json.loads(message["data"])
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "failure":
            return


# --- retention --------------------------------------------------------------------------------


def failures_prune(*, older_than: datetime, batch_size: int = 5000) -> int:
    """Delete rows that failed before ``older_than``, ``batch_size`` at a time.

    Each batch is its own short transaction on the ``failed_at`` index, so a large prune
    never holds a long write lock (SQLite) or bloats one transaction (PostgreSQL).
    """
    deleted = 0
    while True:
        ids = list(
            FailureRecord.objects.filter(failed_at__lt=older_than)
            .order_by("failed_at")
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return deleted
        with transaction.atomic():
            n, _ = FailureRecord.objects.filter(id__in=ids).delete()
        deleted += n


# --- search -----------------------------------------------------------------------------------

#: Rows per page of the Failures page.
SEARCH_PAGE_SIZE = 50
#: Database time one search may take before it is cut off as too broad (overridable with
#: settings.ACKBOARD_FAILURE_SEARCH_MS).
SEARCH_BUDGET_MS = 1500


class SearchTooBroad(Exception):  # noqa: N818 - reads as the condition it reports
    """The search hit its time budget: the user should narrow it."""


class BadCursor(ValueError):
    """A paging cursor that is not one this module made."""


@dataclass(frozen=True, slots=True)
class FailureFilter:
    """What the Failures page searches by. Empty strings and None mean "any"."""

    stream: str = ""
    group: str = ""
    error_type: str = ""
    text: str = ""
    since: datetime | None = None
    until: datetime | None = None

    @property
    def empty(self) -> bool:
        return not (self.stream or self.group or self.error_type or self.text) and (
            self.since is None and self.until is None
        )


@dataclass(frozen=True, slots=True)
class FailurePage:
    """One page of matches, newest first, with keyset cursors to the pages beside it."""

    rows: tuple[FailureRecord, ...]
    newer: str | None
    older: str | None
    elapsed_ms: float = field(default=0.0, compare=False)


def cursor_encode(row: FailureRecord) -> str:
    micros = int(row.failed_at.timestamp() * 1_000_000)
    return f"{micros}.{row.pk}"


def cursor_decode(value: str) -> tuple[datetime, int]:
    """``"<epoch µs>.<id>"`` back to ``(failed_at, id)``; BadCursor if it is not one."""
    micros, dot, pk = value.partition(".")
    if not (dot and micros.isdigit() and pk.isdigit() and len(value) <= 40):
        raise BadCursor(value[:50])
    try:
        when = datetime.fromtimestamp(int(micros) / 1_000_000, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise BadCursor(value[:50]) from exc
    return when, int(pk)


def failure_filter_queryset(*, filters: FailureFilter) -> QuerySet[FailureRecord]:
    """The rows matching ``filters``, unordered. Equality filters and the time range are
    served by the indexes (stream[, group], failed_at) or (error_type, failed_at); the text
    filter is a LIKE on the rows those leave, which is why searches carry a time budget.
    """
    qs = FailureRecord.objects.all()
    if filters.stream:
        qs = qs.filter(stream=filters.stream)
    if filters.group:
        qs = qs.filter(group=filters.group)
    if filters.error_type:
        qs = qs.filter(error_type=filters.error_type)
    if filters.since is not None:
        qs = qs.filter(failed_at__gte=filters.since)
    if filters.until is not None:
        qs = qs.filter(failed_at__lt=filters.until)
    if filters.text:
        qs = qs.filter(Q(message__icontains=filters.text) | Q(traceback__icontains=filters.text))
    return qs


@contextmanager
def statement_budget(ms: int) -> Iterator[None]:
    """Cut off any query inside the block that runs longer than ``ms``: SearchTooBroad.

    SQLite: a progress handler checked every 1,000 VM steps interrupts the statement.
    PostgreSQL: ``SET LOCAL statement_timeout`` in a transaction. Other databases: no cap.
    """
    deadline = time.monotonic() + ms / 1000
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        raw: Any = connection.connection
        raw.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        try:
            yield
        except OperationalError as exc:
            if "interrupted" in str(exc):
                raise SearchTooBroad(str(exc)) from exc
            raise
        finally:
            raw.set_progress_handler(None, 0)
    elif connection.vendor == "postgresql":
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL statement_timeout = %s", [max(1, int(ms))])
                yield
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) == "57014" or "timeout" in str(exc):
                raise SearchTooBroad(str(exc)) from exc
            raise
    else:
        yield


def failure_search(
    *,
    filters: FailureFilter,
    before: str | None = None,
    after: str | None = None,
    page_size: int = SEARCH_PAGE_SIZE,
    budget_ms: int | None = None,
) -> FailurePage:
    """A page of failures matching ``filters``, newest first, keyset-paged.

    ``before``: rows older than that cursor (the "Older" link); ``after``: rows newer
    (the "Newer" link); neither: the newest page. Keyset paging keeps a deep page as cheap
    as the first. One query of ``page_size + 1`` rows, cut off after ``budget_ms``
    (default settings.ACKBOARD_FAILURE_SEARCH_MS or 1,500 ms) with SearchTooBroad.
    Raises BadCursor on a cursor this module did not make.
    """
    budget = budget_ms if budget_ms is not None else SEARCH_BUDGET_MS
    if budget_ms is None:
        budget = int(getattr(settings, "ACKBOARD_FAILURE_SEARCH_MS", SEARCH_BUDGET_MS))
    qs = failure_filter_queryset(filters=filters)
    forward = after is not None and before is None
    if before is not None:
        when, pk = cursor_decode(before)
        # The first term is an index range; the second breaks ties on the same instant.
        qs = qs.filter(failed_at__lte=when).filter(Q(failed_at__lt=when) | Q(id__lt=pk))
        qs = qs.order_by("-failed_at", "-id")
    elif after is not None:
        when, pk = cursor_decode(after)
        qs = qs.filter(failed_at__gte=when).filter(Q(failed_at__gt=when) | Q(id__gt=pk))
        qs = qs.order_by("failed_at", "id")
    else:
        qs = qs.order_by("-failed_at", "-id")
    started = time.perf_counter()
    with statement_budget(budget):
        fetched = list(qs[: page_size + 1])
    elapsed = (time.perf_counter() - started) * 1000
    more = len(fetched) > page_size
    rows = fetched[:page_size]
    if forward:
        rows.reverse()
        newer = cursor_encode(rows[0]) if more and rows else None
        older = cursor_encode(rows[-1]) if rows else None
    else:
        newer = cursor_encode(rows[0]) if before is not None and rows else None
        older = cursor_encode(rows[-1]) if more and rows else None
    return FailurePage(rows=tuple(rows), newer=newer, older=older, elapsed_ms=elapsed)
