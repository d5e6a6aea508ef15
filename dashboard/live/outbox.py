"""A socket's outbox: the pushes the broadcaster handed it that it has not sent yet.

Owns the per-socket end of the fan-out. The broadcaster renders a surface once per
permission set and hands the same partials (the same ``str`` objects, never a copy) to
the outbox of every socket of that surface in this process: ``offer`` only stores them
and wakes the socket's sender task, so handing an update to 1,000 sockets costs 1,000
dict updates and never waits for any socket.

Bounded: it holds at most one HTML per partial name (a few per surface). A socket whose
sends are slow (the ASGI server waits for its buffer to drain) gets the *newest* state
of each partial when it is ready again; the states in between are skipped for it alone.
The final state is never skipped. Never renders, never reads Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping

from dashboard.runtime.logs import socket_warnings


class Outbox:
    """One socket's pending partials and the task that sends them, in order of arrival."""

    def __init__(self, send: Callable[[str], Awaitable[object]]) -> None:
        self._send = send
        self._pending: dict[str, str] = {}
        self._ready = asyncio.Event()
        self._closed = False
        #: Partials replaced by a newer state before they were sent (a slow socket).
        self.skipped = 0
        #: Messages sent (one per wake-up, holding every partial pending then).
        self.sent = 0
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="ackboard-live-outbox"
        )

    def offer(self, partials: Mapping[str, str]) -> None:
        """Queue ``partials`` ({partial name: html}); a newer HTML replaces a pending one."""
        if self._closed or not partials:
            return
        if self._pending:  # a send is slow: newer states replace the pending ones
            self.skipped += len(self._pending.keys() & partials.keys())
        self._pending.update(partials)
        self._ready.set()

    def pending(self) -> int:
        return len(self._pending)

    async def _run(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            pending, self._pending = self._pending, {}
            if not pending:
                continue
            try:
                await self._send("".join(pending.values()))
                self.sent += 1
            except Exception as exc:  # this socket's problem; the sender goes on
                socket_warnings.warn("outbox", "live: a push could not be sent (%s)", exc)

    async def close(self) -> None:
        """Stop sending; what is still pending is dropped (the socket is gone)."""
        self._closed = True
        self._pending.clear()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
