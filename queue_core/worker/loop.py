"""The ack contract: consume one consumer group of one stream, acking only what succeeded.

Owns ``process_entry`` and ``reclaim_stale`` (one entry / one sweep, synchronous, the
workshop semantics generalised to any stream and group) and ``Worker``, the long-running
loop behind ``manage.py queue_worker``. Never imports Django; needs no database.

The rules this module must never break:

- an entry is acked only after its handler returned, or after it was dead-lettered (one
  atomic Lua step), or when it is a replay meant for another group (REPLAY_GROUP_FIELD);
- a handler error never stops the loop: the attempt is recorded in ``{S}:failures`` (a
  record Redis cannot take in an outage waits in a bounded backlog, written when it is
  back) and the entry stays pending, until ``max_deliveries`` moves it to ``{S}:dlq``;
- a Redis error never crashes the worker and is never swallowed: it is logged, the
  entries concerned stay pending (at-least-once), and the loop reconnects with capped,
  jittered backoff.

Cost model of the hot path (``Worker``): one XREADGROUP per up to ``batch`` entries, one
multi-id XACK per completed chunk of handlers (several chunks' ids share one XACK while
the previous one is in flight), one thread hop per chunk for sync handlers. Reads are
issued ahead while handlers run, so Redis and Python work overlap. Everything rare
(failure records, dead-letters, reclaim sweeps) runs on a second, synchronous client in
a worker thread, reusing ``queue_core.services`` and ``queue_core.failures`` as they are.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import logging
import os
import queue
import random
import re
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import hiredis
import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.connection import HiredisRespSerializer
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from queue_core.connection import connect, redis_url
from queue_core.events import event_publish
from queue_core.failures import (
    MAX_MESSAGE,
    PAYLOAD_MISSING,
    FailureBacklog,
    FailureRecord,
    failure_from_exception,
    failures_record,
    now_ms,
)
from queue_core.keys import REPLAY_GROUP_FIELD, CrossSlotName, stream_keys
from queue_core.parsing import PAYLOAD_MISSING_REASON, FieldParser, fields_parse
from queue_core.services import TooManyFields, entry_dead_letter
from queue_core.types import (
    ActionRefused,
    Delivery,
    Job,
    Outcome,
    PermanentFailure,
    Reclaimed,
    UnparseableEntry,
)

log = logging.getLogger("queue_core.worker")

#: A handler takes the Job; a sync one returns anything, an async one is awaited.
Handler = Callable[[Job], Any]

_REPLAY_KEY = REPLAY_GROUP_FIELD.encode()
_START_ID = re.compile(r"\A(\$|\d{1,20}(-\d{1,20})?)\Z")
#: How long one chunk of handler calls should take: long enough to amortise a thread hop
#: (~30 µs), short enough that acks stay prompt and lanes stay balanced.
_CHUNK_BUDGET_S = 0.005
_BACKOFF_BASE_S = 0.1
#: A stop signal this soon after the stop request is that request delivered again, not a
#: second one. Signalling a process group reaches ``uv run``'s child twice: directly, and
#: forwarded by uv (SIGTERM at once; SIGINT 200 ms later when not on a terminal). 1 s is
#: far above that delay and below any deliberate "stop now" a person or supervisor sends.
SAME_STOP_S = 1.0
#: How often a worker retries failure records it kept through an outage.
_BACKLOG_RETRY_S = 1.0


class WorkerConfigError(ValueError):
    """Bad worker configuration; the CLI prints the message on one line and exits 2."""


# --- pieces shared by process_entry and Worker ----------------------------------------


def consumer_name_default() -> str:
    """``host-pid-random``: unique per process, readable in XINFO CONSUMERS."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def handler_is_async(handler: Handler) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - an object with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def handler_load(path: str) -> Handler:
    """Import ``package.module:function`` (the attribute may be dotted).

    Raises WorkerConfigError with a one-line message.
    """
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise WorkerConfigError(f"handler {path!r} must look like package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or whatever the module raised on import
        raise WorkerConfigError(
            f"cannot import handler module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise WorkerConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise WorkerConfigError(
            f"handler {path!r} is not callable (it is a {type(target).__name__})"
        )
    handler: Handler = target
    return handler


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def _last_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE]


def _over_max_reason(count: int, max_deliveries: int) -> str:
    return (
        f"delivered {count} times (max {max_deliveries}) without an outcome; "
        "the handler may have crashed its worker each time"
    )


def _failed_max_reason(count: int, max_deliveries: int) -> str:
    return f"handler failed on delivery {count} of max {max_deliveries}"


@dataclass(slots=True)
class _Settle:
    """A rare outcome to write with the synchronous client: a record and/or a dead-letter."""

    entry_id: str
    attempt: int
    exc: BaseException | None = None
    record: FailureRecord | None = None
    duration_ms: float = 0.0
    failed_at_ms: int = 0
    dead_letter_reason: str | None = None
    last_error: str = ""


def _settle(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    items: Iterable[_Settle],
    kept: list[str] | None = None,
    backlog: FailureBacklog | None = None,
) -> tuple[int, int]:
    """Write failure records (one pipeline), then dead-letter what must go, one script each.

    Returns ``(records written, entries dead-lettered)``. Redis errors are logged: the
    entries concerned stay pending and come back through reclaim; their ids are added to
    ``kept`` when it is given. Records that cannot be written while Redis is away go to
    ``backlog`` when it is given (which is written first).
    """
    items = list(items)
    records: list[FailureRecord] = []
    for item in items:
        if item.record is not None:
            records.append(item.record)
        elif item.exc is not None:
            records.append(
                failure_from_exception(
                    item.exc,
                    group=group,
                    entry_id=item.entry_id,
                    consumer=consumer,
                    attempt=item.attempt,
                    duration_ms=item.duration_ms,
                    failed_at_ms=item.failed_at_ms,
                )
            )
    written = failures_record(client=client, stream=stream, records=records, backlog=backlog)
    moved = 0
    for item in items:
        if item.dead_letter_reason is None:
            continue
        try:
            result = entry_dead_letter(
                client=client,
                stream=stream,
                group=group,
                entry_id=item.entry_id,
                reason=item.dead_letter_reason,
                last_error=item.last_error,
                expected_consumer=consumer,
            )
        except ActionRefused as exc:
            if isinstance(exc.__cause__, redis.ResponseError) or isinstance(exc, TooManyFields):
                # Redis refused (the group is gone, or the DLQ key is not a stream), or the
                # entry is too wide for one script: not a race another consumer won. The
                # entry stays pending and will come back.
                log.error("could not dead-letter %s %s (%s); it stays pending",
                          stream, item.entry_id, exc.__cause__ or exc)  # fmt: skip
                if kept is not None:
                    kept.append(item.entry_id)
            else:
                log.info("not dead-lettering %s %s: %s", stream, item.entry_id, exc)
            continue
        except redis.RedisError as exc:
            log.error(
                "could not dead-letter %s %s (%s); it stays pending", stream, item.entry_id, exc
            )
            if kept is not None:
                kept.append(item.entry_id)
            if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
                break  # Redis is away: the rest stay pending too, and are redelivered later
            continue
        if result is None:
            log.info(
                "%s %s was no longer pending in %s; not dead-lettered", stream, item.entry_id, group
            )
            continue
        moved += 1
        log.warning(
            "dead-lettered %s %s of group %s: %s",
            stream,
            item.entry_id,
            group,
            item.dead_letter_reason,
        )
        event_publish(
            client=client, type="dead_letter", stream=stream, group=group, entry_id=item.entry_id
        )
    return written, moved


def _run_handler_sync(handler: Handler, job: Job) -> None:
    """Call a handler from synchronous code; an async one gets its own event loop."""
    result = handler(job)
    if inspect.isawaitable(result):
        asyncio.run(_await(result))


async def _await(awaitable: Awaitable[Any]) -> None:
    await awaitable


# --- process_entry / reclaim_stale ----------------------------------------------------


def process_entry(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    entry_id: str,
    fields: Mapping[bytes, bytes] | None,
    handler: Handler,
    delivery_count: int = 1,
    max_deliveries: int = 5,
    parser: FieldParser = fields_parse,
) -> Outcome:
    """Process one delivered entry under the ack contract; never raises a handler's error.

    1. A replay meant for another group (REPLAY_GROUP_FIELD) is acked without running.
    2. An entry delivered more than ``max_deliveries`` times, one the parser rejects, or
       one whose payload was trimmed is dead-lettered at once with the reason.
    3. The handler runs (an async one in its own event loop). On success: XACK. On error:
       a record in ``{S}:failures`` and the entry stays pending, unless the error is a
       PermanentFailure or this was delivery ``max_deliveries``: then it is dead-lettered.

    Round trips: 1 on success; 2 on a failure that stays pending (record, event); up to 4
    when it is dead-lettered (record, event, script, event).
    """
    raw = None if fields is None else dict(fields)
    settle = _Settle(entry_id=entry_id, attempt=delivery_count)
    if raw is not None:
        target = raw.get(_REPLAY_KEY)
        if target is not None and target != group.encode():
            log.debug(
                "%s %s is a replay for group %r; acked in %s", stream, entry_id, target, group
            )
            client.xack(stream, group, entry_id)
            return Outcome.SKIPPED
    if delivery_count > max_deliveries:
        settle.dead_letter_reason = _over_max_reason(delivery_count, max_deliveries)
        return _settle_one(client, stream, group, consumer, settle)
    try:
        text = parser(raw)
    except UnparseableEntry as exc:
        settle.record = FailureRecord(
            group=group,
            entry_id=entry_id,
            consumer=consumer,
            attempt=delivery_count,
            error_type=PAYLOAD_MISSING if raw is None else type(exc).__name__,
            message=str(exc),
            failed_at_ms=now_ms(),
        )
        settle.dead_letter_reason = f"unparseable: {exc}"
        settle.last_error = str(exc)
        return _settle_one(client, stream, group, consumer, settle)
    job = Job(stream, group, entry_id, text, delivery_count, consumer, raw or {})
    started = time.perf_counter()
    try:
        _run_handler_sync(handler, job)
    except (Exception, asyncio.CancelledError) as exc:
        # CancelledError here can only come from the handler (this call is synchronous).
        settle.exc = exc
        settle.duration_ms = (time.perf_counter() - started) * 1000
        settle.failed_at_ms = now_ms()
        settle.last_error = _last_error(exc)
        if isinstance(exc, PermanentFailure):
            settle.dead_letter_reason = f"permanent failure: {exc}"[:MAX_MESSAGE]
        elif delivery_count >= max_deliveries:
            settle.dead_letter_reason = _failed_max_reason(delivery_count, max_deliveries)
        log.warning("handler failed on %s %s (delivery %d): %s", stream, entry_id,
                    delivery_count, settle.last_error)  # fmt: skip
        if settle.dead_letter_reason is None:
            _settle(client=client, stream=stream, group=group, consumer=consumer, items=[settle])
            return Outcome.FAILED
        return _settle_one(client, stream, group, consumer, settle)
    try:
        client.xack(stream, group, entry_id)
    except redis.RedisError as exc:
        log.error("XACK of %s %s failed (%s); it stays pending", stream, entry_id, exc)
        return Outcome.ACK_FAILED
    return Outcome.ACKED


def _settle_one(
    client: redis.Redis, stream: str, group: str, consumer: str, item: _Settle
) -> Outcome:
    kept: list[str] = []
    _, moved = _settle(
        client=client, stream=stream, group=group, consumer=consumer, items=[item], kept=kept
    )
    if moved:
        return Outcome.DEAD_LETTERED
    return Outcome.DEAD_LETTER_FAILED if kept else Outcome.NOT_PENDING


def reclaim_stale(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    min_idle_ms: int,
    count: int = 100,
    cursor: str = "0-0",
    backlog: FailureBacklog | None = None,
) -> Reclaimed:
    """Take over entries idle at least ``min_idle_ms`` with one XAUTOCLAIM from ``cursor``.

    Keep the returned ``cursor`` for the next call: restarting at 0-0 every time rescans
    the head of the PEL (about 1.7 s of Redis CPU per sweep of a 1M-entry PEL). Entries
    deleted from the stream while pending are recorded as PayloadMissing; on Redis 7+
    XAUTOCLAIM drops them from the PEL itself, on 6.2 (which returns them as nil without
    an id) they are found with one XPENDING and dead-lettered. Delivery counts come from
    one pipelined XPENDING per claimed entry (XAUTOCLAIM has just incremented them).
    Their failure records go through ``backlog`` when it is given (see failures_record).
    """
    reply: Any = client.xautoclaim(
        stream, group, consumer, min_idle_time=min_idle_ms, start_id=cursor, count=count
    )
    next_cursor = _text(reply[0])
    live = [(_text(i), dict(f)) for i, f in reply[1] if i is not None]
    nils = sum(1 for i, _ in reply[1] if i is None)
    deleted = [_text(i) for i in reply[2]] if len(reply) > 2 else []

    counts: dict[str, int] = {}
    if live:
        pipe = client.pipeline(transaction=False)
        for entry_id, _ in live:
            pipe.xpending_range(stream, group, min=entry_id, max=entry_id, count=1)
        for (entry_id, _), rows in zip(live, pipe.execute(), strict=True):
            if rows and _text(rows[0]["consumer"]) == consumer:
                counts[entry_id] = int(rows[0]["times_delivered"])
    missing: list[_Settle] = [_Settle(entry_id=i, attempt=0) for i in deleted]
    if nils:
        missing.extend(
            _deleted_claimed(client, stream, group, consumer, cursor, next_cursor, counts)
        )
    for item in missing:
        item.record = FailureRecord(
            group=group,
            entry_id=item.entry_id,
            consumer=consumer,
            attempt=item.attempt,
            error_type=PAYLOAD_MISSING,
            message=PAYLOAD_MISSING_REASON,
            failed_at_ms=now_ms(),
        )
    if missing:
        log.warning(
            "%d entries of %s were deleted while pending in %s", len(missing), stream, group
        )
        _settle(
            client=client, stream=stream, group=group, consumer=consumer, items=missing,
            backlog=backlog,
        )  # fmt: skip
    deliveries = tuple(Delivery(i, f, counts[i]) for i, f in live if i in counts)
    return Reclaimed(
        deliveries=deliveries, deleted=tuple(m.entry_id for m in missing), cursor=next_cursor
    )


def _deleted_claimed(
    client: redis.Redis,
    stream: str,
    group: str,
    consumer: str,
    start: str,
    end: str,
    live: Mapping[str, int],
) -> list[_Settle]:
    """Redis 6.2: ids XAUTOCLAIM claimed as nil, i.e. now ours but gone from the stream.

    One XPENDING over the swept range for this consumer, then one pipelined XRANGE per
    candidate to confirm the payload is gone (an in-flight entry of ours still exists).
    Each comes back as a _Settle that dead-letters it (the script records
    ``payload-missing=1``), since 6.2 keeps it pending.
    """
    upper = "+" if end == "0-0" else "(" + end
    rows: Any = client.xpending_range(
        stream, group, min=start, max=upper, count=10_000, consumername=consumer
    )
    candidates = [(_text(r["message_id"]), int(r["times_delivered"])) for r in rows]
    candidates = [(i, n) for i, n in candidates if i not in live]
    if not candidates:
        return []
    pipe = client.pipeline(transaction=False)
    for entry_id, _ in candidates:
        pipe.xrange(stream, min=entry_id, max=entry_id, count=1)
    gone = [(i, n) for (i, n), found in zip(candidates, pipe.execute(), strict=True) if not found]
    return [
        _Settle(entry_id=i, attempt=n, dead_letter_reason=PAYLOAD_MISSING_REASON) for i, n in gone
    ]


# --- Worker ----------------------------------------------------------------------------


@dataclass
class WorkerStats:
    """Counters of one Worker run (entries, not commands). Times are perf_counter()."""

    read: int = 0
    acked: int = 0
    failed: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    reclaimed: int = 0
    payload_missing: int = 0
    ack_errors: int = 0
    outages: int = 0
    unfinished: int = 0
    first_read_at: float | None = None
    last_ack_at: float | None = None


@dataclass(eq=False, slots=True)
class _Chunk:
    """Jobs one lane runs back to back. ``ok`` grows as each handler returns, so a chunk
    cut short by the grace period still acks what finished."""

    jobs: list[Job]
    ok: list[str] = field(default_factory=list)
    failed: list[tuple[Job, BaseException, float, int]] = field(default_factory=list)
    abandoned: bool = False
    elapsed: float = 0.0
    waitable: asyncio.Future[Any] | None = None


def _run_chunk_sync(handler: Handler, chunk: _Chunk) -> None:
    """Run in a lane thread. The hot loop: no allocation beyond the ok list on success."""
    ok = chunk.ok.append
    perf = time.perf_counter
    begin = perf()
    for job in chunk.jobs:
        if chunk.abandoned:
            break
        started = perf()
        try:
            result = handler(job)
            if result is not None and inspect.isawaitable(result):
                # A sync-looking callable returned an awaitable: run it here, in this thread.
                asyncio.run(_await(result))
        except BaseException as exc:  # noqa: BLE001 - any handler error is a failed attempt
            chunk.failed.append((job, exc, (perf() - started) * 1000, now_ms()))
        else:
            ok(job.id)
    chunk.elapsed = perf() - begin


class _ThreadLanes:
    """Daemon threads that run chunks of sync handler calls.

    Not a ThreadPoolExecutor: its threads are joined at interpreter exit, so a handler
    still running after the grace period would keep a stopped worker alive.
    """

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], None], asyncio.Future[None]] | None] = (
            queue.SimpleQueue()
        )
        self._loop = loop
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-lane-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[], None]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self._loop.create_future()
        self._jobs.put((fn, future))
        return future

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            fn, future = item
            error: BaseException | None = None
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported to the loop, not lost
                error = exc
            try:
                self._loop.call_soon_threadsafe(_resolve, future, error)
            except RuntimeError:
                return  # the loop is closed: the worker stopped without this chunk


def _resolve(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class Worker:
    """Consume ``group`` of ``stream`` with ``handler`` under the ack contract.

    ``run()`` blocks until SIGTERM/SIGINT (or ``stop()``); ``run(drain=True)`` returns
    once a read finds nothing new and everything taken has been settled. A stop signal
    gives in-flight handlers ``grace_seconds``; only a second signal more than 1 s after
    the first cuts that short (see ``_signal_stop``). See the module docstring for the
    cost model and the README for the guarantees.
    """

    def __init__(
        self,
        *,
        stream: str,
        group: str,
        handler: Handler,
        consumer: str | None = None,
        url: str | None = None,
        batch: int = 100,
        concurrency: int = 1,
        block_ms: int = 2000,
        min_idle_ms: int = 30_000,
        max_deliveries: int = 5,
        reclaim_interval_ms: int | None = None,
        group_start: str = "$",
        grace_seconds: float = 30.0,
        parser: FieldParser = fields_parse,
        backoff_cap_s: float = 5.0,
    ) -> None:
        if not stream or not group:
            raise WorkerConfigError("stream and group must be non-empty")
        try:
            self.keys = stream_keys(stream)
        except CrossSlotName as exc:
            raise WorkerConfigError(str(exc)) from exc
        for name, value, low in (
            ("batch", batch, 1),
            ("concurrency", concurrency, 1),
            ("block-ms", block_ms, 1),
            ("min-idle-ms", min_idle_ms, 0),
            ("max-deliveries", max_deliveries, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise WorkerConfigError(f"{name} must be a whole number >= {low}, not {value!r}")
        if reclaim_interval_ms is not None and reclaim_interval_ms < 1:
            raise WorkerConfigError("reclaim-interval-ms must be >= 1")
        if not _START_ID.match(group_start):
            raise WorkerConfigError(f"group-start must be $, 0 or a stream id, not {group_start!r}")
        if grace_seconds < 0:
            raise WorkerConfigError("grace-seconds must be >= 0")
        if not callable(handler):
            raise WorkerConfigError(f"handler {handler!r} is not callable")
        self.stream = stream
        self.group = group
        self.handler = handler
        self.consumer = consumer or consumer_name_default()
        self.url = url or redis_url()
        self.batch = batch
        self.concurrency = concurrency
        self.block_ms = block_ms
        self.min_idle_ms = min_idle_ms
        self.max_deliveries = max_deliveries
        # Default: a sweep every half min-idle (at most 10 s), so a stale entry waits at
        # most 1.5x min-idle; each sweep is one XAUTOCLAIM of up to ``batch`` entries.
        self.reclaim_interval_ms = reclaim_interval_ms or max(100, min(min_idle_ms // 2, 10_000))
        self.group_start = group_start
        self.grace_seconds = grace_seconds
        self.parser = parser
        self.backoff_cap_s = backoff_cap_s
        self.is_async = handler_is_async(handler)
        self.stats = WorkerStats()
        #: Set once the group exists and the loop is about to read (for tests and tools).
        self.ready = threading.Event()
        # How long an entry may wait in our hands before a lane starts it; well below
        # min-idle, or other workers would reclaim entries we are about to run.
        self._hold_budget_s = max(0.005, min(1.0, min_idle_ms / 10_000))

        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: redis.Redis | None = None
        self._reader: _Line | None = None
        self._acker: _Line | None = None
        self._lanes: _ThreadLanes | None = None
        self._stop_requested = False
        self._stopping = False
        self._stop_at = 0.0
        self._force: asyncio.Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None

        self._buffer: deque[Job] = deque()
        self._running = 0
        self._free_lanes = concurrency
        self._chunks: set[_Chunk] = set()
        self._acks: list[str | bytes] = []
        self._to_settle: list[_Settle] = []
        # What the running ack and settle tasks hold: their outcome is being written, so a
        # reclaim sweep must not hand these entries back to a lane (a second run).
        self._acking: list[str | bytes] = []
        self._settling: list[_Settle] = []
        # Failure records Redis could not take during an outage; written when it is back.
        self._backlog = FailureBacklog()
        self._backlog_retry_at = 0.0
        self._avg: float | None = None
        self._cursor = "0-0"
        self._next_reclaim = 0.0
        self._last_read_empty = False
        self._failures_in_row = 0
        self._backoff_until = 0.0
        self._read_task: asyncio.Task[None] | None = None
        self._ack_task: asyncio.Task[None] | None = None
        self._settle_task: asyncio.Task[None] | None = None
        self._reclaim_task: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def run(self, *, drain: bool = False) -> WorkerStats:
        """Run until stopped (SIGTERM/SIGINT when called from the main thread)."""
        return asyncio.run(self.serve(drain=drain, install_signals=True))

    def stop(self) -> None:
        """Ask the worker to stop, from any thread: stop reading, finish within the grace period.

        A second call stops waiting for in-flight handlers.
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            self._stop_requested = True
            return
        try:
            loop.call_soon_threadsafe(self._request_stop)
        except RuntimeError:
            self._stop_requested = True

    async def serve(self, *, drain: bool = False, install_signals: bool = False) -> WorkerStats:
        """The worker as a coroutine. Raises WorkerConfigError when Redis cannot be set up."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._force = loop.create_future()
        self._client = self._connect_sync()
        pool = aredis.ConnectionPool.from_url(
            self.url,
            connection_class=_connection_class(self.url),
            decode_responses=False,
            socket_timeout=self.block_ms / 1000 + 5,
            socket_connect_timeout=2,
            retry=Retry(NoBackoff(), 0),  # our own backoff decides, not redis-py's
            client_name=self.consumer,
            max_connections=8,
        )
        self._reader = _Line(pool)
        self._acker = _Line(pool)
        if not self.is_async:
            self._lanes = _ThreadLanes(self.concurrency, loop, "ackboard")
        signals = self._install_signals(loop) if install_signals else []
        log.info(
            "worker %s consuming %s group %s (batch %d, concurrency %d, %s handler)",
            self.consumer, self.stream, self.group, self.batch, self.concurrency,
            "async" if self.is_async else "sync",
        )  # fmt: skip
        try:
            self.ready.set()
            if self._stop_requested:
                self._request_stop()
            await self._serve_loop(drain)
        finally:
            try:
                await self._shutdown()
            finally:
                for sig in signals:
                    loop.remove_signal_handler(sig)
                if self._lanes is not None:
                    self._lanes.close()
                await self._reader.close()
                await self._acker.close()
                await pool.aclose()
                self._client.close()
        return self.stats

    def _connect_sync(self) -> redis.Redis:
        try:
            client = connect(self.url, socket_timeout=10.0, client_name=self.consumer)
            client.set_retry(Retry(NoBackoff(), 0))
            client.ping()
        except redis.RedisError as exc:
            raise WorkerConfigError(f"cannot reach Redis at {_safe_url(self.url)}: {exc}") from exc
        try:
            client.xgroup_create(self.stream, self.group, id=self.group_start, mkstream=True)
            log.info("created group %s on %s at %s", self.group, self.stream, self.group_start)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                client.close()
                raise WorkerConfigError(
                    f"cannot create group {self.group!r} on {self.stream!r}: {exc}"
                ) from exc
        except redis.RedisError as exc:
            client.close()
            raise WorkerConfigError(f"cannot reach Redis at {_safe_url(self.url)}: {exc}") from exc
        return client

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[signal.Signals]:
        if threading.current_thread() is not threading.main_thread():
            return []
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._signal_stop, sig)
            installed.append(sig)
        return installed

    def _signal_stop(self, sig: signal.Signals) -> None:
        """SIGTERM or SIGINT: the first starts a graceful stop with the full grace period.

        Another one less than ``SAME_STOP_S`` (1 s) after the stop request is the same
        request delivered twice (a process-group signal under ``uv run``) and is ignored.
        One arriving later is a deliberate second request: stop waiting for handlers.
        """
        since = time.monotonic() - self._stop_at
        if self._stopping and since < SAME_STOP_S:
            log.info("%s %.0f ms after the stop request: taken as the same request; send it "
                     "again after %.0f s to stop waiting for in-flight handlers",
                     sig.name, since * 1000, SAME_STOP_S)  # fmt: skip
            return
        self._request_stop()

    def _request_stop(self) -> None:
        """Stop reading; in-flight handlers get the grace period. Called again: stop waiting."""
        if self._stopping:
            log.warning("second stop request: not waiting for in-flight handlers")
            if self._force is not None and not self._force.done():
                self._force.set_result(None)
            return
        log.info("stopping: no new reads; in-flight handlers get %.1fs", self.grace_seconds)
        self._stopping = True
        self._stop_at = time.monotonic()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the scheduler -----------------------------------------------------------------

    async def _serve_loop(self, drain: bool) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            now = time.monotonic()
            self._dispatch()
            if drain and self._drained():
                return
            if now >= self._backoff_until:
                if self._acks and self._ack_task is None:
                    self._ack_task = loop.create_task(self._flush_acks())
                if self._settle_task is None and (
                    self._to_settle or (self._backlog and now >= self._backlog_retry_at)
                ):
                    self._settle_task = loop.create_task(self._settle_pending())
                if self._reclaim_task is None and now >= self._next_reclaim:
                    self._reclaim_task = loop.create_task(self._reclaim())
                if self._read_task is None:
                    count = self._read_count()
                    if count:
                        self._read_task = loop.create_task(self._read(count))
            deadlines = [self._next_reclaim]
            if self._backlog:
                deadlines.append(self._backlog_retry_at)
            if now < self._backoff_until:
                deadlines.append(self._backoff_until)
            timeout = min(1.0, max(0.0, min(deadlines) - now))
            self._waiter = loop.create_future()
            timer = loop.call_later(timeout, self._wake)
            try:
                await self._waiter
            finally:
                timer.cancel()
                self._waiter = None

    def _drained(self) -> bool:
        return (
            self._last_read_empty
            and not self._buffer
            and not self._running
            and not self._acks
            and not self._to_settle
            and self._read_task is None
            and self._ack_task is None
            and self._settle_task is None
            and self._reclaim_task is None
        )

    def _target(self) -> int:
        """How many entries to hold (running + waiting): enough to keep lanes busy and read
        ahead, few enough that none waits longer than the hold budget (from measured speed)."""
        if self._avg is None:
            return self.concurrency
        by_time = int(self.concurrency * self._hold_budget_s / max(self._avg, 1e-7))
        return max(self.concurrency, min(2 * self.batch, by_time))

    def _read_count(self) -> int:
        if self._stopping:
            return 0
        # Failed attempts still to be written count as held: when every handler fails
        # (a downstream outage), reading on would outrun the failure log without bound,
        # each waiting entry holding its exception and traceback in memory.
        held = len(self._buffer) + self._running + len(self._to_settle) + len(self._settling)
        target = self._target()
        deficit = target - held
        if deficit <= 0:
            return 0
        if held and deficit < max(1, min(self.batch, target) // 2):
            return 0  # read in big bites, not one entry per finished handler
        return min(self.batch, deficit)

    def _dispatch(self) -> None:
        """Start chunks on free lanes: one thread hop (sync) or one task (async) per chunk."""
        loop = self._loop
        assert loop is not None
        while self._buffer and self._free_lanes > 0 and not self._stopping:
            size = self._chunk_size()
            if size >= len(self._buffer):
                jobs = list(self._buffer)
                self._buffer.clear()
            else:
                jobs = [self._buffer.popleft() for _ in range(size)]
            chunk = _Chunk(jobs)
            self._free_lanes -= 1
            self._running += len(jobs)
            self._chunks.add(chunk)
            waitable: asyncio.Future[Any]
            if self._lanes is not None:
                run = functools.partial(_run_chunk_sync, self.handler, chunk)
                waitable = self._lanes.submit(run)
            else:
                waitable = loop.create_task(self._run_chunk_async(chunk))
            chunk.waitable = waitable
            waitable.add_done_callback(functools.partial(self._chunk_done, chunk))

    def _chunk_size(self) -> int:
        cap = 1 if self._avg is None else max(1, int(_CHUNK_BUDGET_S / max(self._avg, 1e-7)))
        share = -(-len(self._buffer) // self._free_lanes)
        return min(cap, share)

    async def _run_chunk_async(self, chunk: _Chunk) -> None:
        handler = self.handler
        ok = chunk.ok.append
        perf = time.perf_counter
        begin = perf()
        task = asyncio.current_task()
        for job in chunk.jobs:
            started = perf()
            try:
                await handler(job)
            except Exception as exc:
                chunk.failed.append((job, exc, (perf() - started) * 1000, now_ms()))
            except (asyncio.CancelledError, SystemExit) as exc:
                if isinstance(exc, asyncio.CancelledError) and (
                    chunk.abandoned or (task is not None and task.cancelling())
                ):
                    raise  # our own cancellation at shutdown: the entry stays pending
                # Raised by the handler itself (it awaited something cancelled, or called
                # sys.exit, as argparse does): a failed attempt, as in the sync lanes. Out
                # of a task, SystemExit would stop the whole worker; CancelledError would
                # end the chunk silently, with no record. KeyboardInterrupt still stops it.
                chunk.failed.append((job, exc, (perf() - started) * 1000, now_ms()))
            else:
                ok(job.id)
        chunk.elapsed = perf() - begin

    def _chunk_done(self, chunk: _Chunk, future: asyncio.Future[Any]) -> None:
        if chunk not in self._chunks:
            return  # settled at shutdown already
        self._chunks.discard(chunk)
        self._free_lanes += 1
        self._running -= len(chunk.jobs)
        if not future.cancelled() and future.exception() is not None:
            log.error("chunk runner failed; its entries stay pending", exc_info=future.exception())
        self._take_results(chunk, list(chunk.ok), list(chunk.failed))
        if chunk.jobs and chunk.elapsed > 0 and not chunk.abandoned:
            per_job = chunk.elapsed / len(chunk.jobs)
            self._avg = per_job if self._avg is None else 0.8 * self._avg + 0.2 * per_job
        # Refill the freed lane now rather than on the scheduler's next turn: one loop
        # iteration less between two handlers, which is most of the gap at 10 ms each.
        self._dispatch()
        self._wake()

    def _take_results(
        self, chunk: _Chunk, ok: list[str], failed: list[tuple[Job, BaseException, float, int]]
    ) -> None:
        self._acks.extend(ok)
        for job, exc, duration_ms, failed_at in failed:
            self.stats.failed += 1
            item = _Settle(
                entry_id=job.id,
                attempt=job.delivery_count,
                exc=exc,
                duration_ms=duration_ms,
                failed_at_ms=failed_at,
                last_error=_last_error(exc),
            )
            if isinstance(exc, PermanentFailure):
                item.dead_letter_reason = f"permanent failure: {exc}"[:MAX_MESSAGE]
            elif job.delivery_count >= self.max_deliveries:
                item.dead_letter_reason = _failed_max_reason(
                    job.delivery_count, self.max_deliveries
                )
            log.warning(
                "handler failed on %s %s (delivery %d): %s",
                self.stream, job.id, job.delivery_count, item.last_error,
            )  # fmt: skip
            self._to_settle.append(item)

    # -- Redis I/O ---------------------------------------------------------------------

    async def _read(self, count: int) -> None:
        assert self._reader is not None
        try:
            if self.stats.first_read_at is None:
                self.stats.first_read_at = time.perf_counter()
            reply = await self._reader.call(
                "XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count,
                "BLOCK", self.block_ms, "STREAMS", self.stream, ">",
            )  # fmt: skip
        except redis.ResponseError as exc:
            self._read_refused(exc)
        except (redis.RedisError, OSError) as exc:
            self._outage("XREADGROUP", exc)
        else:
            self._healthy()
            entries = _entries(reply)
            self._last_read_empty = not entries
            if entries:
                self._accept_new(entries)
        finally:
            self._read_task = None
            self._wake()

    def _accept_new(self, entries: list[list[Any]]) -> None:
        """Entries read with ``>``: first delivery, so the count is 1. The per-entry hot path."""
        stream, group = self.stream, self.group
        group_b = group.encode()
        parse = self.parser
        default_parse = parse is fields_parse
        decode = bytes.decode
        jobs = self._buffer.append
        acks = self._acks
        proto = {"stream": stream, "group": group, "delivery_count": 1, "consumer": self.consumer}
        new = object.__new__
        set_dict = object.__setattr__
        for entry_id, kv in entries:
            if kv is None:
                self._admit(_text(entry_id), None, 1)
                continue
            it = iter(kv)
            raw = dict(zip(it, it, strict=False))  # pairs: Redis never sends an odd list
            target = raw.get(_REPLAY_KEY)
            if target is not None and target != group_b:
                acks.append(entry_id)
                self.stats.skipped += 1
                log.debug("%s %r is a replay for group %r; acked", stream, entry_id, target)
                continue
            fields: dict[str, str] | None
            try:
                if default_parse and raw:
                    # fields_parse, inlined: map() decodes in C, no frame per entry.
                    it = map(decode, kv)
                    fields = dict(zip(it, it, strict=False))
                else:
                    fields = parse(raw)
            except Exception:
                fields = self._parse_slow(decode(entry_id), raw, 1)
                if fields is None:
                    continue
            # Job(...) without its frozen __init__: same fields, a third of the cost.
            job = new(Job)
            set_dict(
                job, "__dict__", {**proto, "id": decode(entry_id), "fields": fields, "raw": raw}
            )
            jobs(job)
        self.stats.read += len(entries)

    def _admit(self, entry_id: str, raw: dict[bytes, bytes] | None, count: int) -> Job | None:
        """The general path (reclaimed entries): replay, over-max and parse checks."""
        if raw is not None:
            target = raw.get(_REPLAY_KEY)
            if target is not None and target != self.group.encode():
                self._acks.append(entry_id)
                self.stats.skipped += 1
                return None
        if count > self.max_deliveries:
            self._to_settle.append(
                _Settle(
                    entry_id=entry_id,
                    attempt=count,
                    dead_letter_reason=_over_max_reason(count, self.max_deliveries),
                )
            )
            return None
        fields = self._parse_slow(entry_id, raw, count)
        if fields is None:
            return None
        return Job(self.stream, self.group, entry_id, fields, count, self.consumer, raw or {})

    def _parse_slow(
        self, entry_id: str, raw: dict[bytes, bytes] | None, count: int
    ) -> dict[str, str] | None:
        """The parser, with its outcomes: fields; None after queuing a dead-letter for an
        UnparseableEntry; None for a parser bug (logged; the entry stays pending)."""
        try:
            return self.parser(raw)
        except UnparseableEntry as exc:
            self._unparseable(entry_id, raw, count, exc)
        except Exception:
            log.exception("the job parser failed on %s %s; it stays pending", self.stream, entry_id)
        return None

    def _unparseable(
        self, entry_id: str, raw: dict[bytes, bytes] | None, count: int, exc: UnparseableEntry
    ) -> None:
        log.warning("unparseable entry %s %s: %s", self.stream, entry_id, exc)
        self._to_settle.append(
            _Settle(
                entry_id=entry_id,
                attempt=count,
                record=FailureRecord(
                    group=self.group,
                    entry_id=entry_id,
                    consumer=self.consumer,
                    attempt=count,
                    error_type=PAYLOAD_MISSING if raw is None else type(exc).__name__,
                    message=str(exc),
                    failed_at_ms=now_ms(),
                ),
                dead_letter_reason=f"unparseable: {exc}"[:MAX_MESSAGE],
                last_error=str(exc)[:MAX_MESSAGE],
            )
        )

    def _read_refused(self, exc: redis.ResponseError) -> None:
        if "NOGROUP" in str(exc) and self._client is not None:
            log.warning("group %s of %s is gone; creating it again at %s",
                        self.group, self.stream, self.group_start)  # fmt: skip
            try:
                self._client.xgroup_create(
                    self.stream, self.group, id=self.group_start, mkstream=True
                )
                return
            except redis.RedisError as again:
                exc = redis.ResponseError(f"{exc}; re-creating the group failed: {again}")
        log.error("XREADGROUP on %s refused: %s", self.stream, exc)
        self._backoff()

    async def _flush_acks(self) -> None:
        assert self._acker is not None
        ids, self._acks = self._acks, []
        self._acking = ids
        try:
            acked = 0
            # Bounded command size: one XACK per 10k ids.
            for start in range(0, len(ids), 10_000):
                part = ids[start : start + 10_000]
                acked += await self._acker.call("XACK", self.stream, self.group, *part)
        except (redis.RedisError, OSError) as exc:
            self.stats.ack_errors += len(ids)
            log.error(
                "XACK of %d entries of %s failed (%s); they stay pending and will be "
                "delivered again", len(ids), self.stream, exc,
            )  # fmt: skip
            if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
                self._outage("XACK", exc)
        else:
            self.stats.acked += acked
            self.stats.last_ack_at = time.perf_counter()
        finally:
            self._acking = []
            self._ack_task = None
            self._wake()

    async def _settle_pending(self) -> None:
        assert self._client is not None
        items, self._to_settle = self._to_settle, []
        self._settling = items
        try:
            _, moved = await asyncio.to_thread(
                _settle,
                client=self._client,
                stream=self.stream,
                group=self.group,
                consumer=self.consumer,
                items=items,
                backlog=self._backlog,
            )
            self.stats.dead_lettered += moved
        except Exception:
            log.exception("settling %d failures of %s failed; they stay pending", len(items),
                          self.stream)  # fmt: skip
        finally:
            if self._backlog:
                self._backlog_retry_at = time.monotonic() + _BACKLOG_RETRY_S
            self._settling = []
            self._settle_task = None
            self._wake()

    async def _reclaim(self) -> None:
        assert self._client is not None
        count = max(1, min(self.batch, self._target()))
        full = False
        try:
            result = await asyncio.to_thread(
                reclaim_stale,
                client=self._client,
                stream=self.stream,
                group=self.group,
                consumer=self.consumer,
                min_idle_ms=self.min_idle_ms,
                count=count,
                cursor=self._cursor,
                backlog=self._backlog,
            )
        except redis.ResponseError as exc:
            log.error("XAUTOCLAIM on %s refused: %s", self.stream, exc)
        except (redis.RedisError, OSError) as exc:
            self._outage("XAUTOCLAIM", exc)
        else:
            self._healthy()
            self._cursor = result.cursor
            self.stats.payload_missing += len(result.deleted)
            full = len(result.deliveries) + len(result.deleted) >= count
            held = self._held_ids()
            jobs = []
            for delivery in result.deliveries:
                if delivery.id in held:
                    # Still running here, or its ack or dead-letter is on its way:
                    # XAUTOCLAIM only refreshed its idle time.
                    continue
                job = self._admit(delivery.id, delivery.fields, delivery.delivery_count)
                if job is not None:
                    jobs.append(job)
            if jobs:
                self.stats.reclaimed += len(jobs)
                log.info("reclaimed %d stale entries of %s", len(jobs), self.stream)
                # Stale entries have waited longest: they go first.
                self._buffer.extendleft(reversed(jobs))
        finally:
            # A full sweep means more may be waiting: sweep again soon, not after a whole
            # interval. The cursor moves on either way, so this never rescans the head.
            delay = 0.0 if full else self.reclaim_interval_ms / 1000
            self._next_reclaim = time.monotonic() + delay
            self._reclaim_task = None
            self._wake()

    def _held_ids(self) -> set[str]:
        """Entries this worker still has in hand: waiting, running, or with their outcome
        (ack, failure record, dead-letter) not yet written. O(held), once per sweep."""
        held = {job.id for job in self._buffer}
        for chunk in self._chunks:
            held.update(job.id for job in chunk.jobs)
        for ids in (self._acks, self._acking):
            held.update(_text(i) for i in ids)
        for items in (self._to_settle, self._settling):
            held.update(item.entry_id for item in items)
        return held

    # -- outages -----------------------------------------------------------------------

    def _outage(self, what: str, exc: BaseException) -> None:
        self.stats.outages += 1
        delay = self._backoff()
        log.warning("%s failed: %s; retrying in %.2fs (attempt %d)", what, exc, delay,
                    self._failures_in_row)  # fmt: skip

    def _backoff(self) -> float:
        """Capped exponential backoff with jitter (half to full), so a fleet does not
        reconnect in lockstep."""
        self._failures_in_row += 1
        ceiling = min(self.backoff_cap_s, _BACKOFF_BASE_S * 2.0 ** min(self._failures_in_row, 20))
        delay = ceiling * random.uniform(0.5, 1.0)
        self._backoff_until = max(self._backoff_until, time.monotonic() + delay)
        return delay

    def _healthy(self) -> None:
        if self._failures_in_row:
            log.info("Redis is back after %d failed attempts", self._failures_in_row)
            self._failures_in_row = 0
            self._backoff_until = 0.0

    # -- shutdown ----------------------------------------------------------------------

    async def _shutdown(self) -> None:
        self._stopping = True
        if not self._stop_at:
            self._stop_at = time.monotonic()
        for task in (self._read_task, self._reclaim_task):
            if task is not None and not task.done():
                if task is self._read_task:
                    task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        pending = [c.waitable for c in self._chunks if c.waitable is not None]
        if pending:
            remaining = max(0.0, self._stop_at + self.grace_seconds - time.monotonic())
            assert self._force is not None
            await asyncio.wait([*pending, self._force], timeout=remaining,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            while self._chunks and not self._force.done():
                remaining = self._stop_at + self.grace_seconds - time.monotonic()
                if remaining <= 0:
                    break
                waitables = [c.waitable for c in self._chunks if c.waitable is not None]
                await asyncio.wait([*waitables, self._force], timeout=remaining,
                                   return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        for chunk in list(self._chunks):
            # Past the grace period: ack what finished, leave the rest pending.
            chunk.abandoned = True
            ok, failed = list(chunk.ok), list(chunk.failed)
            unfinished = len(chunk.jobs) - len(ok) - len(failed)
            self.stats.unfinished += unfinished
            log.warning("%d entries of %s still running after the grace period; they stay "
                        "pending", unfinished, self.stream)  # fmt: skip
            self._chunks.discard(chunk)
            if isinstance(chunk.waitable, asyncio.Task):
                chunk.waitable.cancel()
                await asyncio.gather(chunk.waitable, return_exceptions=True)
            self._take_results(chunk, ok, failed)
        if self._buffer:
            log.info("%d entries of %s were read but not started; they stay pending and will "
                     "be reclaimed", len(self._buffer), self.stream)  # fmt: skip
            self.stats.unfinished += len(self._buffer)
            self._buffer.clear()
        for task in (self._ack_task, self._settle_task):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)
        if self._acks:
            await self._flush_acks()
        if self._to_settle or self._backlog:
            await self._settle_pending()
        if self._backlog:
            lost = len(self._backlog) + self._backlog.dropped
            log.error("%d failure records of %s could not be written before exit and are "
                      "lost; their entries stay pending", lost, self.stream)  # fmt: skip
        log.info(
            "stopped: %d acked, %d failed, %d dead-lettered, %d reclaimed",
            self.stats.acked, self.stats.failed, self.stats.dead_lettered, self.stats.reclaimed,
        )  # fmt: skip


class _Line:
    """One pooled connection driven with raw send/read: the hot path's two commands skip
    the client's per-command machinery (pool checkout, retry wrapper, metrics), about
    20 µs each. Replies are hiredis's own (RESP2 or RESP3 shapes), with no callbacks.
    Any error but a Redis error reply drops the connection; the next call opens a new one.
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


def _entries(reply: Any) -> list[list[Any]]:
    """The entry list of a one-stream XREADGROUP reply, in RESP2 or RESP3 shape."""
    if not reply:
        return []
    if isinstance(reply, dict):
        entries: list[list[Any]] = next(iter(reply.values()))
    else:
        entries = reply[0][1]
    return entries or []


def _safe_url(url: str) -> str:
    """The URL without its password, for error messages."""
    return re.sub(r"//([^:/@]*):[^@/]*@", r"//\1:***@", url)


__all__ = [
    "SAME_STOP_S",
    "Handler",
    "Worker",
    "WorkerConfigError",
    "WorkerStats",
    "consumer_name_default",
    "handler_load",
    "process_entry",
    "reclaim_stale",
]
