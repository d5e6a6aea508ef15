"""Ackboard for FastStream workers: a broker middleware for ``StreamSub`` consumer groups.

Add it to a ``faststream.redis.RedisBroker`` and start and stop it with the app::

    broker = RedisBroker(url)
    ackboard = AckboardFastStreamMiddleware(broker, max_deliveries=5)   # adds itself to the broker
    app = FastStream(broker, after_startup=[ackboard.start], after_shutdown=[ackboard.stop])

Then, for every subscriber on a stream with a consumer group
(``@broker.subscriber(stream=StreamSub("orders", group="billing", consumer=name))``):

- a handler's exception is recorded in ``{S}:failures`` (type, message, traceback tail,
  duration, attempt = the entry's delivery count), exactly as Ackboard's worker records
  it, and the exception goes on to FastStream unchanged;
- on delivery ``max_deliveries`` (or a ``queue_core.PermanentFailure``) the entry is moved
  to ``{S}:dlq`` and acked, in Ackboard's atomic dead-letter script;
- each such consumer writes a heartbeat (``{S}:workers:<group>``) from ``start`` to
  ``stop``, so it shows as a worker; while its group is paused, no new handler starts:
  the message waits in this middleware (pending, in this consumer's name) until the
  resume, which also keeps FastStream's reader from reading further; the heartbeat
  confirms the pause once nothing runs. A message that waited is run only if it is still
  this consumer's (one XPENDING): a ``min_idle_time`` subscriber may have reclaimed it
  meanwhile, and then its copy runs, once.

A failure must stay pending for the retry: FastStream's default ack policy for a stream
subscriber with a group, ``AckPolicy.REJECT_ON_ERROR``, does that (its ``reject`` sends no
XACK), and so does ``NACK_ON_ERROR``. ``AckPolicy.ACK`` and ``ACK_FIRST`` ack failed
messages; ``start`` refuses a subscriber that uses them (or ``no_ack``), and batch
subscribers (one handler call for many entries has no per-entry failure). FastStream
reads new entries only (``>``): redelivery needs a subscriber with ``min_idle_time`` on the
same group (XAUTOCLAIM), as FastStream documents for retries.

Never acks a success (FastStream does), never changes FastStream's control flow (every
exception is re-raised; ``AckMessage``/``NackMessage``/``RejectMessage`` pass through
unrecorded), never raises a Redis error of its own (logged). Cost per message: a pause
check in memory and two counter updates; a failure adds ``recording``'s 3 round trips
(5 when it dead-letters). The heartbeats are one pipelined round trip every 0.5 s for
the whole process (``_fleet``).
"""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio
from faststream import BaseMiddleware, ContextRepo, StreamMessage
from faststream.exceptions import HandlerException, SkipMessage
from faststream.middlewares import AckPolicy
from faststream.redis import RedisBroker

from queue_core.adapters._fleet import (
    AdapterFleet,
    Slot,
    attempt_settle,
    deliveries_check,
    still_held,
)
from queue_core.recording import MAX_DELIVERIES

#: Ack policies that XACK a failed message: it could never be retried or dead-lettered.
ACKING_POLICIES = (AckPolicy.ACK, AckPolicy.ACK_FIRST)


class AckboardFastStreamMiddleware:
    """The middleware FastStream builds once per message; it owns the process's fleet."""

    def __init__(
        self, broker: RedisBroker, *, max_deliveries: int = MAX_DELIVERIES,
        heartbeat_ms: int = 2000,
    ) -> None:  # fmt: skip
        self.broker = broker
        self.max_deliveries = deliveries_check(max_deliveries)
        self.fleet = AdapterFleet(heartbeat_ms=heartbeat_ms)
        self.client: redis.asyncio.Redis | None = None
        broker.add_middleware(self)

    def __call__(self, msg: Any, /, *, context: ContextRepo) -> _MessageScope:
        return _MessageScope(msg, context=context, ackboard=self)

    async def start(self) -> None:
        """Check the subscribers, then heartbeat their consumers (after the broker started).

        Raises ValueError for a group subscriber whose ack policy would ack a failure."""
        for sub in self.broker.subscribers:
            target = _target(sub)
            if target is None:
                continue
            stream, group, consumer = target
            policy, stream_sub = sub.ack_policy, getattr(sub, "stream_sub")  # noqa: B009
            if policy in ACKING_POLICIES or stream_sub.no_ack or stream_sub.batch:
                raise ValueError(
                    f"the subscriber of stream {stream} group {group} acks failed messages "
                    f"(ack_policy={policy.name}, no_ack={stream_sub.no_ack}, batch="
                    f"{stream_sub.batch}): Ackboard needs a failure to stay pending; use "
                    "the default AckPolicy.REJECT_ON_ERROR (or NACK_ON_ERROR), one entry a call"
                )
            self.fleet.add(stream=stream, group=group, consumer=consumer,
                           concurrency=getattr(sub, "max_workers", 1))  # fmt: skip
        self.client = await self.broker.connect()
        await self.fleet.start(self.client)

    async def stop(self) -> None:
        """Write each consumer's last heartbeat, saying it stopped."""
        await self.fleet.stop()


def _target(sub: Any) -> tuple[str, str, str] | None:
    """(stream, group, consumer) of a stream subscriber with a consumer group, else None."""
    stream_sub = getattr(sub, "stream_sub", None)
    if stream_sub is None or not stream_sub.group or not stream_sub.consumer:
        return None
    return stream_sub.name, stream_sub.group, stream_sub.consumer


class _MessageScope(BaseMiddleware[Any, Any]):
    """One message's passage: wait out a pause, run the handler, settle a failure."""

    __slots__ = ("ackboard",)

    def __init__(
        self, msg: Any, /, *, context: ContextRepo, ackboard: AckboardFastStreamMiddleware
    ):
        super().__init__(msg, context=context)
        self.ackboard = ackboard

    async def consume_scope(self, call_next: Any, msg: StreamMessage[Any]) -> Any:
        raw = msg.raw_message
        if not isinstance(raw, dict) or raw.get("type") != "stream":
            return await call_next(msg)  # not one stream entry: not Ackboard's business
        target = _target(self.context.get_local("handler_"))
        if target is None:
            return await call_next(msg)  # a plain XREAD subscriber: nothing is pending
        ackboard = self.ackboard
        stream, group, consumer = target
        slot: Slot = ackboard.fleet.slot(stream, group, consumer)
        entry_id = raw["message_ids"][0].decode()
        client = ackboard.client or await ackboard.broker.connect()
        if await ackboard.fleet.admit(slot) and not await still_held(
            client=client, stream=stream, group=group, consumer=consumer, entry_id=entry_id
        ):
            ackboard.fleet.withdraw(slot)
            raise SkipMessage  # reclaimed by another consumer during the pause: its copy runs
        started = time.perf_counter()
        failed = False
        try:
            return await call_next(msg)
        except HandlerException:
            raise  # FastStream's own ack/nack/reject: the user's decision, not a failure
        except Exception as exc:
            failed = True
            await attempt_settle(
                client=client, stream=stream, group=group, consumer=consumer,
                entry_id=entry_id, exc=exc,
                duration_ms=(time.perf_counter() - started) * 1000,
                max_deliveries=ackboard.max_deliveries,
            )  # fmt: skip
            raise
        finally:
            ackboard.fleet.done(slot, failed=failed)
