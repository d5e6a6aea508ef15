"""SIGTERM and SIGINT as a stop request for a command's loop, without a deadlock.

A Python signal handler runs in the main thread between two bytecodes, possibly while that
thread holds a lock. ``threading.Event`` guards its flag with a plain (non-reentrant)
lock, which ``Event.wait`` and ``Event.set`` hold for a moment: a handler that calls
``Event.set`` can block forever on a lock its own thread holds. ``manage.py run_jobs``
did under ``timeout -s TERM 6 uv run …``, which signals uv and then the whole group: the
second SIGTERM arrived while the first handler was inside ``Event.set`` (waking the
sweeper thread), and the nested handler blocked on that lock (a ``py-spy dump`` showed the
two handlers stacked); from then on it ignored every SIGTERM.

Here the handler only puts the signal number on a ``queue.SimpleQueue``, whose ``put`` is
reentrant (documented as safe in signal handlers), and a daemon thread runs the
callback (``event.set``, or more) for every signal it takes off the queue. The worker
fleet (``queue_core.worker.fleet``) uses the same queue for its own stop requests.
"""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def call_on_signals(callback: Callable[[int], None], signals: Iterable[int] = STOP_SIGNALS) -> None:
    """Run ``callback(signum)`` on a thread of its own for each of ``signals`` the process
    receives. Call from the main thread (only it may install signal handlers)."""
    received: queue.SimpleQueue[int] = queue.SimpleQueue()

    def handler(signum: int, frame: FrameType | None) -> None:
        received.put(signum)  # reentrant: takes no lock the interrupted code may hold

    def relay() -> None:
        while True:
            callback(received.get())

    for sig in signals:
        signal.signal(sig, handler)  # first: raises ValueError off the main thread
    threading.Thread(target=relay, name="stop-signals", daemon=True).start()


def set_on_signals(event: threading.Event, signals: Iterable[int] = STOP_SIGNALS) -> None:
    """Set ``event`` when one of ``signals`` arrives (see ``call_on_signals``)."""
    call_on_signals(lambda _signum: event.set(), signals)
