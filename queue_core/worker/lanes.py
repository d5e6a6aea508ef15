"""Execution lanes: where the Worker's handlers run, a chunk of jobs at a time.

Owns running handlers: sync ones on daemon threads (one thread hop per chunk, about
30 µs, which is why jobs go in chunks), async ones as one task per chunk on the loop.
Each lane records what returned (``ok``) and what raised (``failed``) as it goes, so a
chunk cut short by the grace period still acks what finished. Never talks to Redis and
never decides an outcome: the loop hands results to the contract.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from queue_core.clock import now_ms
from queue_core.jobs import Job

#: A handler takes the Job; a sync one returns anything, an async one is awaited.
Handler = Callable[[Job], Any]
#: A failed attempt: the job, what it raised, its duration (ms) and when (epoch ms).
Failed = tuple[Job, BaseException, float, int]


def handler_is_async(handler: Handler) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one."""
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - an object with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


@dataclass(eq=False, slots=True)
class Chunk:
    """Jobs one lane runs back to back. ``ok`` grows as each handler returns, so a chunk
    cut short by the grace period still acks what finished."""

    jobs: list[Job]
    ok: list[str] = field(default_factory=list)
    failed: list[Failed] = field(default_factory=list)
    abandoned: bool = False
    elapsed: float = 0.0
    waitable: asyncio.Future[Any] | None = None


def chunk_run_sync(handler: Handler, chunk: Chunk) -> None:
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


async def chunk_run_async(handler: Handler, chunk: Chunk) -> None:
    """Run as one task on the loop: each handler awaited in turn."""
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


async def _await(awaitable: Awaitable[Any]) -> None:
    await awaitable


class ThreadLanes:
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
