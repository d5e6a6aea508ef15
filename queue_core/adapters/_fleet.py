"""What the framework adapters share: failure settlement, heartbeats and the pause watch.

Owns, for a loop that Ackboard did not write and that runs on ``redis.asyncio``:

- ``attempt_settle``: one failed attempt recorded and, when due, dead-lettered, through
  the same functions as ``queue_core.recording`` (record layout, verdict, the atomic
  dead-letter script that also XACKs). Returns whether the entry left the PEL;
- ``AdapterFleet``: one heartbeat per consumer the framework runs, in ``{S}:workers:<group>``
  with ``control.Heartbeat``'s JSON, and the group's pause as ``control`` writes it, read
  every ``PAUSE_CHECK_MS``. ``admit`` is where a framework's message waits while its group
  is paused; a heartbeat confirms the pause once its consumer runs nothing.

Never acks a success (the framework does), never raises a Redis error into the
framework's loop (logged; the last pause read stays in force), never imports Django or
a framework. Cost: nothing on a success but two counter updates; a failure is
``recording``'s 3 round trips (5 when it dead-letters); the fleet sends one pipelined
round trip every 0.5 s for all its consumers together (a GET per group, and every 2 s an
HSET and a PEXPIRE per consumer; an HGETALL per group every 30 s to prune heartbeats of
consumers gone for an hour).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio

from queue_core.clock import now_ms
from queue_core.control import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_KEEP_MS,
    HEARTBEAT_PRUNE_EVERY_MS,
    Heartbeat,
    Pause,
    _heartbeats_of,
    _pause_reply,
    ackboard_version,
)
from queue_core.events import event_message
from queue_core.keys import EVENTS_CHANNEL, stream_keys
from queue_core.recording import (
    _attempt_read_async,
    _deliveries_check,
    _moved,
    _settlement_write_async,
    _verdict_item,
    entry_pending_async,
)
from queue_core.worker.heartbeat import PAUSE_CHECK_MS

log = logging.getLogger("queue_core.adapters")


async def attempt_settle(
    *,
    client: redis.asyncio.Redis,
    stream: str,
    group: str,
    consumer: str,
    entry_id: str,
    exc: BaseException,
    duration_ms: float,
    max_deliveries: int,
) -> bool:
    """Record a failed attempt of ``entry_id``; dead-letter it on delivery
    ``max_deliveries`` or a ``PermanentFailure``. True when the entry left the PEL through
    the DLQ move (the script acked it); False when it stays pending (a Redis error or a
    refused move included, logged). ``failure_recorded_async``'s failure path, without a
    handler to wrap. Round trips: 3; 5 when it dead-letters."""
    attempt = await _attempt_read_async(client, stream, group, entry_id)
    item = _verdict_item(entry_id=entry_id, exc=exc, attempt=attempt, duration_ms=duration_ms,
                         max_deliveries=max_deliveries)  # fmt: skip
    settled = await _settlement_write_async(client, stream, group, consumer, item)
    return _moved(item, settled)


async def still_held(
    *, client: redis.asyncio.Redis, stream: str, group: str, consumer: str, entry_id: str
) -> bool:
    """Whether ``entry_id`` is still pending in ``consumer``'s name: after a pause, a reclaim
    sweep may have given it to another consumer, whose copy runs instead. A Redis error
    answers True (run it: at-least-once). One XPENDING, only after a pause."""
    try:
        held = await entry_pending_async(client=client, stream=stream, group=group,
                                         entry_id=entry_id)  # fmt: skip
    except redis.RedisError:
        return True
    return held is not None and held[1] == consumer


def deliveries_check(max_deliveries: int) -> int:
    """``max_deliveries`` checked as the recording calls check it (an int, at least 1)."""
    return _deliveries_check(max_deliveries)


@dataclass(eq=False)
class Slot:
    """One consumer of a group that the framework runs, and what its heartbeat reports."""

    stream: str
    group: str
    consumer: str
    concurrency: int = 1
    #: Handlers running now; messages waiting at ``admit`` while paused.
    running: int = 0
    buffered: int = 0
    processed: int = 0
    failed: int = 0
    #: What the last heartbeat written said: (confirmed, the pause's at_ms).
    reported: tuple[bool, int | None] | None = None


@dataclass
class _Group:
    pause: Pause | None = None
    #: Set while the group runs; cleared while its pause holds.
    open: asyncio.Event = field(default_factory=asyncio.Event)


class AdapterFleet:
    """The heartbeats and pause watch of every consumer one framework process runs.

    ``add`` the consumers, ``await start(client)`` once the framework is connected (it
    reads the pauses once before returning, so nothing runs under a pause it has not
    seen), ``await stop()`` at shutdown (a last heartbeat that says the worker stopped).
    Without ``start`` nothing is sent and ``admit`` never waits.
    """

    def __init__(self, *, heartbeat_ms: int = HEARTBEAT_INTERVAL_MS) -> None:
        self.slots: dict[tuple[str, str, str], Slot] = {}
        self._groups: dict[tuple[str, str], _Group] = {}
        self._beat_s = heartbeat_ms / 1000
        self._check_s = min(PAUSE_CHECK_MS, heartbeat_ms) / 1000
        self._client: redis.asyncio.Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._next_beat = 0.0
        self._next_prune = 0.0
        self._failing = False
        self._started_ms = now_ms()
        self._host = socket.gethostname()
        self._pid = os.getpid()

    def add(self, *, stream: str, group: str, consumer: str, concurrency: int = 1) -> Slot:
        """The slot of this consumer (created once; adding it again returns it)."""
        key = (stream, group, consumer)
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = Slot(stream, group, consumer, concurrency)
            self._groups.setdefault((stream, group), _Group()).open.set()
        return slot

    def slot(self, stream: str, group: str, consumer: str) -> Slot:
        return self.slots.get((stream, group, consumer)) or self.add(
            stream=stream, group=group, consumer=consumer
        )

    async def start(self, client: redis.asyncio.Redis) -> None:
        """Read every group's pause, send the first heartbeats, then keep both going."""
        if self._task is not None:
            return
        self._client = client
        await self._tick()
        self._task = asyncio.create_task(self._run(), name="ackboard-heartbeat")

    async def stop(self) -> None:
        """Stop the heartbeats; write a last one per consumer with ``stopped_ms``, so the
        dashboard shows the workers stopped at once. A Redis error is logged."""
        task, self._task = self._task, None
        if task is None or self._client is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for group in self._groups.values():
            group.open.set()  # nothing waits on a pause after the stop
        try:
            await self._send(beat=True, stopped=True)
        except redis.RedisError as exc:
            log.warning("could not write the last heartbeats: %s", exc)

    def paused(self, stream: str, group: str) -> bool:
        state = self._groups.get((stream, group))
        return state is not None and not state.open.is_set()

    async def admit(self, slot: Slot) -> bool:
        """Wait while the slot's group is paused; then count a running handler. Returns
        whether it waited: the caller then checks the entry is still its own (another
        consumer's reclaim sweep may have taken it meanwhile: ``still_held``)."""
        state = self._groups[(slot.stream, slot.group)]
        waited = not state.open.is_set()
        if waited:
            slot.buffered += 1
            self._wake.set()  # the heartbeat reports the waiting message
            try:
                await state.open.wait()
            finally:
                slot.buffered -= 1
        slot.running += 1
        return waited

    async def resumed(self, stream: str, group: str) -> bool:
        """Wait while ``group`` is paused, counting nothing (a reader that has taken no
        message yet); whether it waited."""
        state = self._groups.get((stream, group))
        if state is None or state.open.is_set():
            return False
        await state.open.wait()
        return True

    def withdraw(self, slot: Slot) -> None:
        """An admitted message that will not run after all (not held any more)."""
        slot.running -= 1

    def done(self, slot: Slot, *, failed: bool) -> None:
        """A handler admitted by ``admit`` finished."""
        slot.running -= 1
        if failed:
            slot.failed += 1
        else:
            slot.processed += 1
        if slot.running == 0 and self.paused(slot.stream, slot.group):
            self._wake.set()  # confirm the pause now, not at the next beat

    # -- the loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._check_s)
            self._wake.clear()
            try:
                await self._tick()
            except Exception as exc:  # never let the heartbeat die: log, retry next tick
                if not self._failing:
                    log.warning("Ackboard pause check / heartbeat failed: %s; the last pause "
                                "read stays in force, retrying every %.1fs", exc,
                                self._check_s)  # fmt: skip
                    self._failing = True

    async def _tick(self) -> None:
        now = time.monotonic()
        beat = now >= self._next_beat or any(
            self._report(slot) != slot.reported for slot in self.slots.values()
        )
        await self._send(beat=beat, stopped=False, prune=beat and now >= self._next_prune)
        if self._failing:
            log.info("Ackboard pause checks and heartbeats reach Redis again")
            self._failing = False
        if beat:
            self._next_beat = now + self._beat_s
        if beat and now >= self._next_prune:
            self._next_prune = now + HEARTBEAT_PRUNE_EVERY_MS / 1000

    def _report(self, slot: Slot) -> tuple[bool, int | None]:
        pause = self._groups[(slot.stream, slot.group)].pause
        if pause is None or not self.paused(slot.stream, slot.group):
            return (False, None)
        return (slot.running == 0, pause.at_ms if slot.running == 0 else None)

    def _beat(self, slot: Slot, *, stopped: bool) -> Heartbeat:
        confirmed, at_ms = self._report(slot)
        seen = now_ms()
        return Heartbeat(
            consumer=slot.consumer, host=self._host, pid=self._pid, version=ackboard_version(),
            concurrency=slot.concurrency, running=slot.running, buffered=slot.buffered,
            processed=slot.processed, failed=slot.failed, started_ms=self._started_ms,
            seen_ms=seen, paused=confirmed, pause_at_ms=at_ms,
            stopped_ms=seen if stopped else None,
        )  # fmt: skip

    async def _send(self, *, beat: bool, stopped: bool, prune: bool = False) -> None:
        """One pipeline: each group's pause (GET), and the heartbeats when ``beat``."""
        client = self._client
        assert client is not None
        groups = list(self._groups.items())
        pipe = client.pipeline(transaction=False)
        for (stream, group), _ in groups:
            pipe.get(stream_keys(stream).pause(group))
        beats: list[tuple[Slot, Heartbeat]] = []
        if beat:
            for slot in self.slots.values():
                heartbeat = self._beat(slot, stopped=stopped)
                workers = stream_keys(slot.stream).workers(slot.group)
                pipe.hset(workers, slot.consumer, heartbeat.to_json())
                pipe.pexpire(workers, HEARTBEAT_KEEP_MS)
                beats.append((slot, heartbeat))
            if stopped:
                for slot, _ in beats:
                    pipe.publish(EVENTS_CHANNEL, event_message(
                        type="action", stream=slot.stream, group=slot.group, ids=[],
                        consumer=slot.consumer, action="worker-stopped"))  # fmt: skip
        if prune:
            for (stream, group), _ in groups:
                pipe.hgetall(stream_keys(stream).workers(group))
        replies = await pipe.execute(raise_on_error=False)
        for reply in replies[len(groups):]:  # fmt: skip
            if isinstance(reply, Exception):
                raise reply
        if stopped:
            return
        at = now_ms()
        for ((stream, group), state), reply in zip(groups, replies, strict=False):
            self._pause_seen(stream, group, state, _pause_reply(reply), at)
        for slot, heartbeat in beats:
            slot.reported = (heartbeat.paused, heartbeat.pause_at_ms)
        if prune:
            await self._prune(groups, replies[-len(groups):], at)  # fmt: skip

    def _pause_seen(
        self, stream: str, group: str, state: _Group, pause: Pause | None, at: int
    ) -> None:
        if pause is not None and not pause.active(at):
            pause = None
        if pause != state.pause:
            if pause is None:
                log.info("group %s of %s resumed", group, stream)
            else:
                log.info("group %s of %s paused by %s (%s): no new handlers start until it "
                         "resumes", group, stream, pause.by, pause.reason)  # fmt: skip
        state.pause = pause
        if pause is None:
            state.open.set()
        else:
            state.open.clear()

    async def _prune(
        self, groups: Iterable[tuple[tuple[str, str], _Group]], replies: list[Any], at: int
    ) -> None:
        client = self._client
        assert client is not None
        ours = {slot.consumer for slot in self.slots.values()}
        for ((stream, group), _), raw in zip(groups, replies, strict=False):
            if not isinstance(raw, dict):
                continue
            before = at - HEARTBEAT_KEEP_MS
            old = [
                beat.consumer
                for beat in _heartbeats_of(raw)
                if beat.seen_ms < before and beat.consumer not in ours
            ]
            if old:
                await client.hdel(stream_keys(stream).workers(group), *old)
