"""``Worker``: the long-running loop behind ``manage.py queue_worker``.

Owns scheduling one consumer's work: reading ahead, handing chunks to the lanes, batching
acks, writing settlements, sweeping stale entries, reconnecting, and stopping within the
grace period. Its decisions come from ``contract``, its settings from ``config``, its
connections from ``wire``. Never imports Django; needs no database.

The rules it must never break:

- an entry is acked only after its handler returned, or after it was dead-lettered (one
  atomic Lua step), or when it is a replay meant for another group (REPLAY_GROUP_FIELD);
- a handler error never stops the loop: the attempt is recorded in ``{S}:failures`` (a
  record Redis cannot take in an outage waits in a bounded backlog, written when it is
  back) and the entry stays pending, until ``max_deliveries`` moves it to ``{S}:dlq``;
- a Redis error never crashes the worker and is never swallowed: it is logged, the
  entries concerned stay pending (at-least-once), and the loop reconnects with capped,
  jittered backoff;
- while its group is paused (``queue_core.control``, watched by ``heartbeat``) it issues
  no XREADGROUP and no XAUTOCLAIM sweep: the blocking read in flight is cancelled (as at
  shutdown; entries Redis delivered to it stay pending and are reclaimed after the
  resume), what it holds runs and is acked as usual, and its heartbeat confirms the
  pause once no read or sweep is in flight. A worker starts reading only after its
  first pause check, so one started while paused reads nothing.

Cost model of the hot path: one XREADGROUP per up to ``batch`` entries, one multi-id
XACK per completed chunk of handlers (several chunks' ids share one XACK while the
previous one is in flight), one thread hop per chunk for sync handlers. Reads are issued
ahead while handlers run, so Redis and Python work overlap. Everything rare (failure
records, dead-letters, reclaim sweeps) runs on a second, synchronous client in a worker
thread, reusing ``sweep.sweep_once`` (``once.reclaim_stale``) and ``settle.settlements_write``.

Fleet control adds no command per entry: a pause check (one GET) every 0.5 s and a
heartbeat (GET + HSET + PEXPIRE, one pipeline) every ``heartbeat_ms`` (2 s), each a
thread hop on the synchronous client, so about 2.5 round trips a second per worker
whatever its throughput; an HGETALL rides along every 30 s to prune. Per scheduler
turn, ``_control`` compares a few attributes and times: about 1 µs (timeit, shared
2-core machine), and a turn serves a whole chunk of handlers.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from queue_core.backoff import Backoff
from queue_core.connection import Client
from queue_core.errors import group_missing, topology_changed
from queue_core.keys import stream_keys
from queue_core.worker import wire
from queue_core.worker.config import WorkerConfig
from queue_core.worker.contract import handler_failed_settle
from queue_core.worker.heartbeat import CONTROL_ERRORS, ControlLink, Report
from queue_core.worker.inflight import InFlight
from queue_core.worker.intake import Intake
from queue_core.worker.lanes import (
    Chunk,
    Failed,
    ThreadLanes,
    chunk_run_async,
    chunk_run_sync,
    handler_is_async,
)
from queue_core.worker.settle import SettleBatch
from queue_core.worker.stats import WorkerStats
from queue_core.worker.stop import StopControl, grace_wait
from queue_core.worker.sweep import Sweep, counts_restore, deliveries_sort, held_ids, sweep_once

log = logging.getLogger("queue_core.worker")

#: The heartbeat's report while not paused (one constant: ``_control`` runs every turn).
_NOT_PAUSED: Report = (False, None)

#: The first reconnect waits 0.1-0.2 s; each failure in a row doubles it, up to the cap.
_BACKOFF_BASE_S = 0.2


class Worker:
    """Consume ``group`` of ``stream`` with ``handler`` under the ack contract.

    Built from a WorkerConfig, or from its fields as keywords (``Worker(stream=…,
    group=…, handler=…, url=…)``). ``run()`` blocks until SIGTERM/SIGINT (or ``stop()``);
    ``run(drain=True)`` returns once a read finds nothing new and everything taken has
    been settled. A stop signal gives in-flight handlers ``grace_seconds``; only a second
    signal more than 1 s after the first cuts that short (see ``stop.StopControl``). See the
    module docstring for the cost model and docs/ack-contract.md for the guarantees.
    """

    def __init__(self, config: WorkerConfig | None = None, /, **settings: Any) -> None:
        if config is None:
            config = WorkerConfig(**settings)
        elif settings:
            raise TypeError("Worker takes a WorkerConfig or its fields, not both")
        self.config = config
        self.keys = stream_keys(config.stream)
        self.is_async = handler_is_async(config.handler)
        self.stats = WorkerStats()
        #: Set once the group exists and the loop is about to read (for tests and tools).
        self.ready = threading.Event()

        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Client | None = None
        self._route: wire.Route | None = None
        self._reader: wire.Line | None = None
        self._acker: wire.Line | None = None
        self._lanes: ThreadLanes | None = None
        self._stop = StopControl(grace_seconds=config.grace_seconds, wake=self._wake)
        self._waiter: asyncio.Future[None] | None = None

        self._flight = InFlight(
            concurrency=config.concurrency, batch=config.batch, min_idle_ms=config.min_idle_ms
        )
        self._acks = wire.AckBatch()
        self._settles = SettleBatch()
        self._sweep = Sweep()
        self._intake = Intake(config=config, stats=self.stats, flight=self._flight,
                              acks=self._acks, settles=self._settles)  # fmt: skip
        self._backoff = Backoff(base=_BACKOFF_BASE_S, cap=config.backoff_cap_s)
        self._backoff_until = 0.0
        self._read_task: asyncio.Task[None] | None = None
        self._last_read_empty = False
        self._link = ControlLink(config, self.stats)

    @property
    def stream(self) -> str:
        return self.config.stream

    @property
    def group(self) -> str:
        return self.config.group

    @property
    def consumer(self) -> str:
        return self.config.consumer

    @property
    def url(self) -> str:
        return self.config.url

    # -- lifecycle ---------------------------------------------------------------------

    def run(self, *, drain: bool = False) -> WorkerStats:
        """Run until stopped (SIGTERM/SIGINT when called from the main thread)."""
        return asyncio.run(self.serve(drain=drain, install_signals=True))

    def stop(self) -> None:
        """Ask the worker to stop, from any thread: stop reading, finish within the grace period.

        A second call stops waiting for in-flight handlers.
        """
        self._stop.request_from_any_thread()

    async def serve(self, *, drain: bool = False, install_signals: bool = False) -> WorkerStats:
        """The worker as a coroutine. Raises WorkerConfigError when Redis cannot be set up."""
        config = self.config
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop.attach(loop)
        self._client = wire.group_client_open(config)
        # On a cluster the hot path goes to the primary serving the stream's slot.
        route = self._route = wire.Route(
            config.url, consumer=config.consumer, block_ms=config.block_ms,
            owner=wire.slot_owner(self._client, config.stream),
        )  # fmt: skip
        self._reader = wire.Line(route)
        self._acker = wire.Line(route)
        if not self.is_async:
            self._lanes = ThreadLanes(config.concurrency, loop, "ackboard")
        signals = self._stop.signals_install(loop) if install_signals else []
        log.info(
            "worker %s consuming %s group %s (batch %d, concurrency %d, %s handler)",
            config.consumer, config.stream, config.group, config.batch, config.concurrency,
            "async" if self.is_async else "sync",
        )  # fmt: skip
        try:
            self.ready.set()
            if self._stop.early:
                self._stop.request()
            await self._serve_loop(drain)
        finally:
            try:
                await self._shutdown()
            finally:
                self._stop.signals_remove(loop, signals)
                if self._lanes is not None:
                    self._lanes.close()
                await self._reader.close()
                await self._acker.close()
                await route.aclose()
                self._client.close()
        return self.stats

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the scheduler -----------------------------------------------------------------

    async def _serve_loop(self, drain: bool) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop.stopping:
            now = time.monotonic()
            self._dispatch()
            if drain and self._drained():
                return
            self._control(loop, now)
            if now >= self._backoff_until:
                self._start_tasks(loop, now)
            # Nothing starts before the backoff ends: an earlier deadline would spin the loop.
            backoff_until = self._backoff_until
            deadlines = [self._link.due_at()]
            resume_at = self._link.resume_at(now)
            if resume_at is None:
                deadlines.append(max(self._sweep.next_at, backoff_until))
            else:
                deadlines.append(resume_at)  # paused: no sweep until then
            if self._settles.backlog:
                deadlines.append(max(self._settles.retry_at, backoff_until))
            if now < backoff_until:
                deadlines.append(backoff_until)
            timeout = min(1.0, max(0.0, min(deadlines) - now))
            self._waiter = loop.create_future()
            timer = loop.call_later(timeout, self._wake)
            try:
                await self._waiter
            finally:
                timer.cancel()
                self._waiter = None

    def _start_tasks(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        """Start each Redis task that has work and is not already under way."""
        if self._acks.waiting and self._acks.task is None:
            self._acks.task = loop.create_task(self._flush_acks())
        if self._settles.due(now):
            self._settles.task = loop.create_task(self._settle_pending())
        link = self._link
        if not link.checked or link.paused():
            return  # paused (or not known yet): no new reads, no sweeps
        if self._sweep.task is None and now >= self._sweep.next_at:
            self._sweep.task = loop.create_task(self._reclaim())
        if self._read_task is None:
            count = 0 if self._stop.stopping else self._flight.read_count(len(self._settles))
            if count:
                self._read_task = loop.create_task(self._read(count))

    def _drained(self) -> bool:
        return (
            self._last_read_empty
            and not self._flight.waiting
            and not self._flight.running
            and not self._acks.waiting
            and not self._settles.queued
            and self._read_task is None
            and self._acks.task is None
            and self._settles.task is None
            and self._sweep.task is None
        )

    def _dispatch(self) -> None:
        """Start chunks on free lanes: one thread hop (sync) or one task (async) per chunk."""
        loop = self._loop
        assert loop is not None
        handler = self.config.handler
        while not self._stop.stopping:
            chunk = self._flight.chunk_take()
            if chunk is None:
                return
            waitable: asyncio.Future[Any]
            if self._lanes is not None:
                waitable = self._lanes.submit(functools.partial(chunk_run_sync, handler, chunk))
            else:
                waitable = loop.create_task(chunk_run_async(handler, chunk))
            chunk.waitable = waitable
            waitable.add_done_callback(functools.partial(self._chunk_done, chunk))

    def _chunk_done(self, chunk: Chunk, future: asyncio.Future[Any]) -> None:
        if not self._flight.chunk_done(chunk):
            return  # settled at shutdown already
        if not future.cancelled() and future.exception() is not None:
            log.error("chunk runner failed; its entries stay pending", exc_info=future.exception())
        self._take_results(list(chunk.ok), list(chunk.failed))
        # Refill the freed lane now rather than on the scheduler's next turn: one loop
        # iteration less between two handlers, which is most of the gap at 10 ms each.
        self._dispatch()
        self._wake()

    def _take_results(self, ok: list[str], failed: list[Failed]) -> None:
        self._acks.waiting.extend(ok)
        self.stats.processed += len(ok)
        for job, exc, duration_ms, failed_at in failed:
            self.stats.failed += 1
            item = handler_failed_settle(
                entry_id=job.id, delivery_count=job.delivery_count, exc=exc,
                duration_ms=duration_ms, failed_at_ms=failed_at,
                max_deliveries=self.config.max_deliveries,
            )  # fmt: skip
            log.warning("handler failed on %s %s (delivery %d): %s", self.stream, job.id,
                        job.delivery_count, item.last_error)  # fmt: skip
            self._settles.queued.append(item)

    # -- fleet control -----------------------------------------------------------------

    def _control(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        """Honour the pause: drop the read in flight; read the pause and beat when due."""
        link = self._link
        paused = link.paused()
        read = self._read_task
        if paused and read is not None and not read.cancelling():
            # XREADGROUP may block for block_ms: cancel it, as shutdown does. Entries Redis
            # delivered to it stay pending under this consumer and are reclaimed later.
            read.cancel()
        report = self._report(paused)
        if link.task is None and link.due(now, report):
            link.task = loop.create_task(self._control_exchange(report))

    def _report(self, paused: bool) -> Report:
        """What the heartbeat says: the pause is confirmed once seen and nothing that takes
        new entries (a read, a sweep) is in flight; what is held still finishes."""
        pause = self._link.pause
        if paused and pause is not None and self._read_task is None and self._sweep.task is None:
            return (True, pause.at_ms)
        return _NOT_PAUSED

    async def _control_exchange(self, report: Report) -> None:
        """One pause check, with a heartbeat when one is due or the report changed."""
        link, client = self._link, self._client
        assert client is not None
        now = time.monotonic()
        beat = None
        if now >= link.next_beat or report != link.reported:
            beat = link.heartbeat(report, running=self._flight.running,
                                  buffered=len(self._flight.waiting))  # fmt: skip
        prune = beat is not None and now >= link.next_prune
        try:
            pause = await asyncio.to_thread(link.exchange, client, beat, prune=prune)
        except CONTROL_ERRORS as exc:
            link.failed(exc, at=now)
        except Exception as exc:
            # Not Redis: a bug something hostile in the control keys found. Handled as a
            # failed exchange (logged once, the next tried a tick later), never left as
            # the task's exception: nobody awaits this task, and a due check would start
            # the next one at once, a traceback per turn of the loop.
            link.failed(exc, at=now, unexpected=True)
        else:
            link.took(pause, beat, pruned=prune, at=now)
        finally:
            link.task = None
            self._wake()

    async def _control_final(self) -> None:
        """The last heartbeat, after the last acks: it says the worker stopped, so it is
        not live from now on (a failed write leaves it to go stale, as a killed worker's)."""
        link = self._link
        if link.task is not None:
            await asyncio.gather(link.task, return_exceptions=True)
        assert self._client is not None
        beat = link.heartbeat(self._report(link.paused()), running=self._flight.running,
                              buffered=len(self._flight.waiting), stopped=True)  # fmt: skip
        try:
            await asyncio.to_thread(link.exchange, self._client, beat, prune=False)
        except CONTROL_ERRORS as exc:
            log.warning("the last heartbeat of %s could not be written: %s", self.consumer, exc)
        except Exception as exc:  # not Redis (see _control_exchange): the stop goes on
            log.warning("the last heartbeat of %s could not be written: %s", self.consumer, exc,
                        exc_info=exc)  # fmt: skip

    # -- reading -----------------------------------------------------------------------

    async def _read(self, count: int) -> None:
        assert self._reader is not None
        config = self.config
        try:
            if self.stats.first_read_at is None:
                self.stats.first_read_at = time.perf_counter()
            entries = await wire.new_entries_read(
                self._reader, stream=config.stream, group=config.group,
                consumer=config.consumer, count=count, block_ms=config.block_ms,
            )  # fmt: skip
        except redis.ResponseError as exc:
            self._read_refused(exc)
        except (redis.RedisError, OSError) as exc:
            self._outage("XREADGROUP", exc)
        else:
            self._healthy()
            self._last_read_empty = not entries
            if entries:
                self._intake.accept_new(entries)
        finally:
            self._read_task = None
            self._wake()

    def _read_refused(self, exc: redis.ResponseError) -> None:
        config = self.config
        if group_missing(exc) and self._client is not None:
            log.warning("group %s of %s is gone; creating it again at %s",
                        config.group, config.stream, config.group_start)  # fmt: skip
            try:
                self._client.xgroup_create(
                    config.stream, config.group, id=config.group_start, mkstream=True
                )
                return
            except redis.RedisError as again:
                exc = redis.ResponseError(f"{exc}; re-creating the group failed: {again}")
        log.error("XREADGROUP on %s refused: %s", config.stream, exc)
        self._back_off()

    # -- writing -----------------------------------------------------------------------

    async def _flush_acks(self) -> None:
        assert self._acker is not None
        count = len(self._acks.waiting)
        try:
            acked = await self._acks.send(self._acker, stream=self.stream, group=self.group)
        except (redis.RedisError, OSError) as exc:
            self.stats.ack_errors += count
            log.error(
                "XACK of %d entries of %s failed (%s); they stay pending and will be "
                "delivered again", count, self.stream, exc,
            )  # fmt: skip
            if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
                self._outage("XACK", exc)
        else:
            self.stats.acked += acked
            self.stats.last_ack_at = time.perf_counter()
        finally:
            self._acks.task = None
            self._wake()

    async def _settle_pending(self) -> None:
        assert self._client is not None
        count = len(self._settles.queued)
        try:
            settled = await self._settles.write(
                client=self._client, stream=self.stream, group=self.group, consumer=self.consumer
            )
            self.stats.dead_lettered += settled.moved
        except Exception:
            log.exception("settling %d failures of %s failed; they stay pending", count,
                          self.stream)  # fmt: skip
        finally:
            self._settles.task = None
            self._wake()

    # -- reclaiming --------------------------------------------------------------------

    async def _reclaim(self) -> None:
        assert self._client is not None
        config = self.config
        count = max(1, min(config.batch, self._flight.target()))
        full = False
        try:
            result = await asyncio.to_thread(
                sweep_once, client=self._client, stream=config.stream, group=config.group,
                consumer=config.consumer, min_idle_ms=config.min_idle_ms, count=count,
                cursor=self._sweep.cursor, backlog=self._settles.backlog,
            )  # fmt: skip
        except redis.ResponseError as exc:
            if topology_changed(exc):
                await self._topology_changed("XAUTOCLAIM", exc)
            else:
                log.error("XAUTOCLAIM on %s refused: %s", config.stream, exc)
        except (redis.RedisError, RedisClusterException, OSError) as exc:
            self._outage("XAUTOCLAIM", exc)
        else:
            self._healthy()
            self._sweep.cursor = result.cursor
            self.stats.payload_missing += len(result.deleted)
            full = len(result.deliveries) + len(result.deleted) >= count
            held = held_ids(self._flight, self._acks, self._settles)
            jobs, recounts = deliveries_sort(result.deliveries, held=held, intake=self._intake)
            if recounts:
                await counts_restore(self._client, config, recounts)
            if jobs:
                self.stats.reclaimed += len(jobs)
                log.info("reclaimed %d stale entries of %s", len(jobs), config.stream)
                # Stale entries have waited longest: they go first.
                self._flight.waiting.extendleft(reversed(jobs))
        finally:
            # A full sweep means more may be waiting: sweep again soon, not after a whole
            # interval. The cursor moves on either way, so this never rescans the head.
            delay = 0.0 if full else config.reclaim_every_ms / 1000
            self._sweep.next_at = time.monotonic() + delay
            self._sweep.task = None
            self._wake()

    # -- outages -----------------------------------------------------------------------

    def _outage(self, what: str, exc: BaseException) -> None:
        self.stats.outages += 1
        delay = self._back_off()
        log.warning("%s failed: %s; retrying in %.2fs (attempt %d)", what, exc, delay,
                    self._backoff.failures)  # fmt: skip

    async def _topology_changed(self, what: str, exc: BaseException) -> None:
        """The sync client's node no longer serves the stream (READONLY, CLUSTERDOWN…, which
        a cluster client does not follow by itself): refresh its view, then back off."""
        assert self._client is not None
        await asyncio.to_thread(wire.topology_refresh, self._client)
        if self._route is not None:
            self._route.lost()
        self._outage(what, exc)

    def _back_off(self) -> float:
        """Wait before the next Redis command: capped exponential backoff with jitter
        (queue_core.backoff), so a fleet does not reconnect in lockstep."""
        delay = self._backoff.failed()
        self._backoff_until = max(self._backoff_until, time.monotonic() + delay)
        return delay

    def _healthy(self) -> None:
        if self._backoff.failures:
            log.info("Redis is back after %d failed attempts", self._backoff.succeeded())
            self._backoff_until = 0.0

    # -- shutdown ----------------------------------------------------------------------

    async def _shutdown(self) -> None:
        """Stop reading, give running chunks the grace period, then write every outcome."""
        self._stop.stopping = True
        if not self._stop.at:
            self._stop.at = time.monotonic()
        for task in (self._read_task, self._sweep.task):
            if task is not None and not task.done():
                if task is self._read_task and not task.cancelling():
                    task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await grace_wait(self._flight.chunks, stop=self._stop)
        await self._abandon_chunks()
        waiting = self._flight.waiting
        if waiting:
            log.info("%d entries of %s were read but not started; they stay pending and will "
                     "be reclaimed", len(waiting), self.stream)  # fmt: skip
            self.stats.unfinished += len(waiting)
            waiting.clear()
        await self._flush_outcomes()
        await self._control_final()
        log.info(
            "stopped: %d acked, %d failed, %d dead-lettered, %d reclaimed",
            self.stats.acked, self.stats.failed, self.stats.dead_lettered, self.stats.reclaimed,
        )  # fmt: skip

    async def _abandon_chunks(self) -> None:
        """Past the grace period: ack what finished, leave the rest pending."""
        for chunk in list(self._flight.chunks):
            chunk.abandoned = True
            ok, failed = list(chunk.ok), list(chunk.failed)
            unfinished = len(chunk.jobs) - len(ok) - len(failed)
            self.stats.unfinished += unfinished
            log.warning("%d entries of %s still running after the grace period; they stay "
                        "pending", unfinished, self.stream)  # fmt: skip
            self._flight.chunks.discard(chunk)
            if isinstance(chunk.waitable, asyncio.Task):
                chunk.waitable.cancel()
                await asyncio.gather(chunk.waitable, return_exceptions=True)
            self._take_results(ok, failed)

    async def _flush_outcomes(self) -> None:
        """The last acks and settlements; what Redis still cannot take is logged as lost."""
        for task in (self._acks.task, self._settles.task):
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)
        if self._acks.waiting:
            await self._flush_acks()
        backlog = self._settles.backlog
        if self._settles.queued or backlog:
            await self._settle_pending()
        if backlog:
            lost = len(backlog) + backlog.dropped
            log.error("%d failure records of %s could not be written before exit and are "
                      "lost; their entries stay pending", lost, self.stream)  # fmt: skip
