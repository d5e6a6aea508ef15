"""The suite's one way to wait for something to happen: poll a predicate until it holds,
with a deadline. A test that waits for an event waits for that event, never for a fixed
time; a bare ``time.sleep`` is only for a test that needs time itself to pass (an idle
time, a window in which nothing may happen), and says so.

Costs nothing when the event has already happened; polls every ``interval`` seconds
(10 ms by default) until ``timeout``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any],
    timeout: float = 5.0,
    what: str = "condition",
    *,
    interval: float = 0.01,
) -> Any:
    """``predicate()``'s first truthy value; AssertionError naming ``what`` if none came
    within ``timeout`` seconds. The predicate is tried once more at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


async def wait_until_async(
    predicate: Callable[[], Any | Awaitable[Any]],
    timeout: float = 5.0,
    what: str = "condition",
    *,
    interval: float = 0.01,
) -> Any:
    """``wait_until`` inside an event loop: the loop runs between tries. ``predicate``
    may be a plain function or return an awaitable."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)
