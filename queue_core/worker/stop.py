"""Stopping a Worker: stop requests, the signals that make them, and what a second one means.

Owns the stop rule. The first request (SIGTERM, SIGINT or ``Worker.stop()``) stops
reading and gives in-flight handlers the grace period; a second, deliberate one stops
waiting for them. A signal less than SAME_STOP_S after the first request is that request
delivered twice, not a second one. Never touches Redis or the handlers: the loop reads
``stopping``, ``at`` and ``force`` and does the stopping. Costs nothing while running.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable, Collection

from queue_core.worker.lanes import Chunk

log = logging.getLogger("queue_core.worker")

#: A stop signal this soon after the stop request is that request delivered again, not a
#: second one. Signalling a process group reaches ``uv run``'s child twice: directly, and
#: forwarded by uv (SIGTERM at once; SIGINT 200 ms later when not on a terminal). 1 s is
#: far above that delay and below any deliberate "stop now" a person or supervisor sends.
SAME_STOP_S = 1.0


class StopControl:
    """One Worker's stop requests; ``wake`` nudges its loop to notice one."""

    def __init__(self, *, grace_seconds: float, wake: Callable[[], None]) -> None:
        self.grace_seconds = grace_seconds
        self._wake = wake
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Asked to stop before the loop ran: it stops as soon as it starts.
        self.early = False
        self.stopping = False
        #: When the stop was requested (monotonic); the grace period runs from here.
        self.at = 0.0
        #: Resolved by a second stop request: stop waiting for in-flight handlers.
        self.force: asyncio.Future[None] | None = None
        #: A stop signal arrived (``signals_remove`` then keeps ignoring them).
        self.signalled = False

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the worker now runs on (requests from other threads are sent to it)."""
        self._loop = loop
        self.force = loop.create_future()

    def request_from_any_thread(self) -> None:
        """``Worker.stop()``: a stop request from any thread, before or while it runs."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self.early = True
            return
        try:
            loop.call_soon_threadsafe(self.request)
        except RuntimeError:
            self.early = True

    def request(self) -> None:
        """Stop reading; in-flight handlers get the grace period. Called again: stop waiting."""
        if self.stopping:
            log.warning("second stop request: not waiting for in-flight handlers")
            if self.force is not None and not self.force.done():
                self.force.set_result(None)
            return
        log.info("stopping: no new reads; in-flight handlers get %.1fs", self.grace_seconds)
        self.stopping = True
        self.at = time.monotonic()
        self._wake()

    def signals_install(self, loop: asyncio.AbstractEventLoop) -> list[signal.Signals]:
        """Handle SIGTERM and SIGINT on ``loop`` (main thread only); returns those installed."""
        if threading.current_thread() is not threading.main_thread():
            return []
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
            installed.append(sig)
        return installed

    def signals_remove(
        self, loop: asyncio.AbstractEventLoop, installed: list[signal.Signals]
    ) -> None:
        """Take ``installed`` off ``loop``. After a stop that a signal asked for, the
        process ignores those signals from then on: it is on its way out, and under
        ``uv run`` a process-group signal arrives twice, the forwarded copy of a last
        Ctrl-C up to 200 ms later, possibly after the loop ended, where Python's default
        would raise KeyboardInterrupt in the shutdown (a traceback and exit status 130).
        Without a signal they are back to Python's defaults, as ``remove_signal_handler``
        leaves them (SIGINT raises KeyboardInterrupt)."""
        for sig in installed:
            loop.remove_signal_handler(sig)
            if self.signalled:
                signal.signal(sig, signal.SIG_IGN)

    def _on_signal(self, sig: signal.Signals) -> None:
        """SIGTERM or SIGINT: the first starts a graceful stop with the full grace period.

        Another one less than ``SAME_STOP_S`` (1 s) after the stop request is the same
        request delivered twice (a process-group signal under ``uv run``) and is ignored.
        One arriving later is a deliberate second request: stop waiting for handlers.
        """
        self.signalled = True
        since = time.monotonic() - self.at
        if self.stopping and since < SAME_STOP_S:
            log.info("%s %.0f ms after the stop request: taken as the same request; send it "
                     "again after %.0f s to stop waiting for in-flight handlers",
                     sig.name, since * 1000, SAME_STOP_S)  # fmt: skip
            return
        self.request()


async def grace_wait(chunks: Collection[Chunk], *, stop: StopControl) -> None:
    """Until every running chunk is done, the grace period is over, or a second stop.

    ``chunks`` is the live set: chunks leave it as they finish."""
    force = stop.force
    assert force is not None
    deadline = stop.at + stop.grace_seconds
    pending = [c.waitable for c in chunks if c.waitable is not None]
    if not pending:
        return
    await asyncio.wait([*pending, force], timeout=max(0.0, deadline - time.monotonic()),
                       return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
    while chunks and not force.done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        waitables = [c.waitable for c in chunks if c.waitable is not None]
        await asyncio.wait([*waitables, force], timeout=remaining,
                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
