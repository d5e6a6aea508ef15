"""Ackboard for taskiq workers: a middleware for taskiq-redis's ``RedisStreamBroker``.

Add it to the broker, on the worker and on the client alike (it does nothing on the
client side)::

    broker = RedisStreamBroker(url, queue_name="orders", consumer_group_name="billing")
    broker.add_middlewares(AckboardTaskiqMiddleware(max_deliveries=5))

Then, in the worker process (``taskiq worker``, or ``run_receiver_task``):

- a task's exception is recorded in ``{S}:failures`` (type, message, traceback tail,
  duration, attempt = the entry's delivery count), exactly as Ackboard's worker records
  it, and the entry **stays pending**: taskiq acks every message once it is done, failed
  or not (its ``ack_type``: ``when_saved`` by default, ``when_executed``, or
  ``when_received`` before the task even runs). This middleware takes over the broker's
  ack for each stream entry and sends the XACK only once the task has returned: an ack
  asked for earlier (``when_received``, or ``Context.ack`` inside the task) waits for the
  task's end, and is dropped if the task fails. No taskiq setting is needed for it;
- on delivery ``max_deliveries`` (or a ``queue_core.PermanentFailure``) the entry is moved
  to ``{S}:dlq`` and acked, in Ackboard's atomic dead-letter script;
- the broker's consumer writes a heartbeat per stream it reads (``{S}:workers:<group>``)
  from the worker's startup to its shutdown, so it shows as a worker. While the group of
  any stream it reads is paused, the broker's ``listen`` is not asked for a next message:
  no new task starts and no XREADGROUP is sent (one XREADGROUP reads all its streams, so
  one pause holds them all). Entries it had read already wait in its PEL; after a pause
  each of them runs only if it is still this consumer's (another worker's reclaim may
  have taken it), checked with one XPENDING.

Redelivery is taskiq-redis's: its ``listen`` XAUTOCLAIMs entries idle for ``idle_timeout``
ms (10 minutes by default), but only after an XREADGROUP that returned something, so a
failed entry is retried when new messages arrive, not on an idle queue. A message taskiq
cannot parse, or whose task it does not know, is acked by taskiq as before, unrecorded.
Do not combine it with taskiq's retry middlewares (``SimpleRetryMiddleware``,
``SmartRetryMiddleware``): they send a new message for each retry, while Ackboard retries
the same entry.

Never acks a failure, never raises a Redis error into taskiq (logged), never imports
Django. Cost per message: its task id read once more (the broker's formatter, in
``listen``; see ``benchmarks/adapters.py``), a dict entry and two counter updates; a
failure adds ``recording``'s 3 round trips (5 when it dead-letters). The heartbeats are
one pipelined round trip every 0.5 s for the process (``_fleet``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio
from taskiq import AckableMessage, TaskiqMessage, TaskiqMiddleware, TaskiqResult
from taskiq.abc.broker import AsyncBroker
from taskiq.exceptions import NoResultError
from taskiq_redis import RedisStreamBroker

from queue_core.adapters._fleet import (
    AdapterFleet,
    Slot,
    attempt_settle,
    deliveries_check,
    still_held,
)
from queue_core.recording import MAX_DELIVERIES

log = logging.getLogger("queue_core.adapters")


@dataclass(eq=False, slots=True)
class _EntryAck:
    """The broker's ack for one stream entry, held until the task's outcome is known."""

    stream: str
    entry_id: str
    ack: Callable[[], Awaitable[None]]
    slot: Slot | None = None
    started: float = 0.0
    #: Set while the task runs; an ack asked for meanwhile waits for its end.
    running: bool = False
    asked: bool = False
    #: The task failed: no XACK (pending for a retry, or acked by the DLQ move).
    failed: bool = False
    #: The middleware's map of task ids, and this entry's key there once mapped.
    entries: dict[str, _EntryAck] | None = None
    task_id: str = ""

    async def __call__(self) -> None:
        if self.running:
            self.asked = True  # sent by post_execute if the task returns
            return
        if self.entries is not None:
            self.entries.pop(self.task_id, None)  # acked without running (unknown task)
        if not self.failed:
            await self.ack()


class AckboardTaskiqMiddleware(TaskiqMiddleware):
    """Failure history, dead-letters, heartbeats and the pause for a ``RedisStreamBroker``."""

    def __init__(
        self, *, max_deliveries: int = MAX_DELIVERIES, heartbeat_ms: int = 2000,
        concurrency: int = 1,
    ) -> None:  # fmt: skip
        super().__init__()
        self.max_deliveries = deliveries_check(max_deliveries)
        #: What the Workers table shows as Concurrency (the worker's --max-async-tasks).
        self.concurrency = concurrency
        self.fleet = AdapterFleet(heartbeat_ms=heartbeat_ms)
        self.client: redis.asyncio.Redis | None = None
        self._entries: dict[str, _EntryAck] = {}

    def set_broker(self, broker: AsyncBroker) -> None:
        if not isinstance(broker, RedisStreamBroker):
            raise TypeError("AckboardTaskiqMiddleware works with taskiq_redis.RedisStreamBroker")
        super().set_broker(broker)
        stream_broker: Any = broker  # the two hooks below are the broker's own, wrapped
        make_ack = stream_broker._ack_generator
        listen = stream_broker.listen

        def ack_generator(id: Any, queue_name: Any) -> _EntryAck:
            return _EntryAck(_text(queue_name), _text(id), make_ack(id=id, queue_name=queue_name))

        stream_broker._ack_generator = ack_generator
        stream_broker.listen = lambda: self._listen(listen())

    def _streams(self) -> list[str]:
        broker: Any = self.broker
        return [broker.queue_name, *broker.additional_streams]

    async def startup(self) -> None:
        """In the worker process: read the pauses, then heartbeat every stream's consumer."""
        broker: Any = self.broker
        if not broker.is_worker_process:
            return
        self.client = redis.asyncio.Redis(connection_pool=broker.connection_pool)
        for stream in self._streams():
            self.fleet.add(stream=stream, group=broker.consumer_group_name,
                           consumer=broker.consumer_name, concurrency=self.concurrency)  # fmt: skip
        await self.fleet.start(self.client)

    async def shutdown(self) -> None:
        """Write the consumer's last heartbeats, saying it stopped."""
        await self.fleet.stop()

    async def _listen(
        self, messages: AsyncGenerator[AckableMessage, None]
    ) -> AsyncGenerator[AckableMessage, None]:
        """The broker's ``listen``, asked for a next message only while nothing is paused;
        each entry's task id is mapped to its ack."""
        broker: Any = self.broker
        recheck = 0
        try:
            while True:
                if await self._pause_wait():
                    recheck = broker.count or broker.unacknowledged_batch_size
                message = await anext(messages)
                ack = message.ack
                if not isinstance(ack, _EntryAck):
                    yield message
                    continue
                if recheck:
                    recheck -= 1
                    if self.client is not None and not await still_held(
                        client=self.client, stream=ack.stream, group=broker.consumer_group_name,
                        consumer=broker.consumer_name, entry_id=ack.entry_id,
                    ):  # fmt: skip
                        continue  # reclaimed by another consumer during the pause
                try:
                    task_id = broker.formatter.loads(message.data).task_id
                except Exception:
                    yield message  # taskiq logs it and acks it, as without Ackboard
                    continue
                ack.entries, ack.task_id = self._entries, task_id
                self._entries[task_id] = ack
                yield message
        finally:
            await messages.aclose()

    async def _pause_wait(self) -> bool:
        """Wait while a group this broker reads is paused; whether it waited."""
        broker: Any = self.broker
        waited = False
        for stream in self._streams():
            waited = await self.fleet.resumed(stream, broker.consumer_group_name) or waited
        return waited

    def pre_execute(self, message: TaskiqMessage) -> TaskiqMessage:
        ack = self._entries.get(message.task_id)
        if ack is not None:
            broker: Any = self.broker
            ack.slot = self.fleet.slot(ack.stream, broker.consumer_group_name,
                                       broker.consumer_name)  # fmt: skip
            ack.slot.running += 1
            ack.running = True
            ack.started = time.perf_counter()
        return message

    async def on_error(
        self, message: TaskiqMessage, result: TaskiqResult[Any], exception: BaseException
    ) -> None:
        ack = self._entries.get(message.task_id)
        if ack is None or isinstance(exception, NoResultError):
            return  # NoResultError: the task asked not to store a result; not a failure
        ack.failed = True  # pending for a retry (or acked by the DLQ move below)
        if not isinstance(exception, Exception) or self.client is None:
            return  # a cancelled task is not a failure: nothing recorded, still pending
        broker: Any = self.broker
        await attempt_settle(
            client=self.client, stream=ack.stream, group=broker.consumer_group_name,
            consumer=broker.consumer_name, entry_id=ack.entry_id, exc=exception,
            duration_ms=(time.perf_counter() - ack.started) * 1000,
            max_deliveries=self.max_deliveries,
        )  # fmt: skip

    async def post_execute(self, message: TaskiqMessage, result: TaskiqResult[Any]) -> None:
        ack = self._entries.pop(message.task_id, None)
        if ack is None:
            return
        ack.running = False
        if ack.slot is not None:
            self.fleet.done(ack.slot, failed=ack.failed)
        if ack.asked:
            await ack()  # an early ack (when_received, Context.ack): sent now, if it succeeded


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
