"""Helpers for tests that run a Worker against the private Redis (and their readers).

A Worker runs in a thread with its own event loop and small idle and interval values;
these read back the Redis state tests assert on: pending lists, failures, the DLQ.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from queue_core import Worker
from queue_core.keys import stream_keys
from tests.waiting import wait_until as wait_until  # re-exported: the worker tests use it


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    """Run ``worker`` in a thread; stop it (graceful) and require a clean exit afterwards."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(worker.serve())
        except BaseException as exc:  # surfaced in the test thread below
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert worker.ready.wait(5), "worker did not start"
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(10)
        assert not thread.is_alive(), "worker did not stop"
        assert not errors, errors


def new_worker(redis_url: str, stream: str, handler: Any, **options: Any) -> Worker:
    defaults: dict[str, Any] = {
        "group": "g",
        "consumer": "w1",
        "block_ms": 50,
        "group_start": "0",
        "min_idle_ms": 60_000,
        "grace_seconds": 5,
    }
    return Worker(stream=stream, handler=handler, url=redis_url, **(defaults | options))


def pending_count(r: redis.Redis, stream: str, group: str = "g") -> int:
    return int(r.xpending(stream, group)["pending"])


def failures(r: redis.Redis, stream: str) -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in r.xrange(stream_keys(stream).failures)
    ]


def dead_letters(r: redis.Redis, stream: str) -> list[dict[str, str]]:
    return [
        {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
        for _, fields in r.xrange(stream_keys(stream).dlq)
    ]


def xack_calls(r: redis.Redis) -> int:
    stats: Any = r.info("commandstats")
    return int(stats.get("cmdstat_xack", {}).get("calls", 0))
