"""The live layer's log: repeated problems are logged briefly, at most once a minute each.

Owns the one rate rule of ``ackboard.live`` (and of the failure ingestor, which logs
through its own logger with the same rule): a problem that repeats every tick or on every
socket (a surface that fails to render, Redis or the database away) is logged at most
once per ``LOG_EVERY_S`` per key, so it cannot flood the log. Never raises and never
decides what to do about a problem. Cost: a dict lookup per report.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

log = logging.getLogger("ackboard.live")

#: A key (a surface, the cycle, a kind of warning) is logged at most this often.
LOG_EVERY_S = 60.0
#: Characters of an exception's message kept in a failure's log line.
FAILURE_MESSAGE_CHARS = 200


class FailureLog:
    """Logs repeated failures briefly: per key, at most once per ``LOG_EVERY_S``, with the
    traceback only the first time and, later, how many failures were not logged.
    Thread-safe enough for its callers (the loop and the render thread): a lost count
    under a race costs one number in a log line."""

    #: Keys remembered; the oldest are forgotten past this (a key is a few hundred bytes).
    MAX_KEYS = 1024

    def __init__(self, logger: logging.Logger | None = None) -> None:
        #: Where its lines go: ``ackboard.live`` unless another process's log is given.
        self.log = logger or log
        self._logged_at: dict[Any, float] = {}
        self._unlogged: Counter[Any] = Counter()
        self._traced: set[Any] = set()

    def due(self, key: Any) -> bool:
        """Whether ``key`` may be logged now (and if so, it counts as logged now)."""
        now = time.monotonic()
        last = self._logged_at.get(key)
        if last is not None and now - last < LOG_EVERY_S:
            self._unlogged[key] += 1
            return False
        if len(self._logged_at) >= self.MAX_KEYS:
            oldest = min(self._logged_at, key=self._logged_at.__getitem__)
            self._logged_at.pop(oldest, None)
            self._unlogged.pop(oldest, None)
            self._traced.discard(oldest)
        self._logged_at[key] = now
        return True

    def warn(self, key: Any, message: str, *args: Any) -> None:
        """``log.warning(message, *args)``, unless ``key`` was logged within the minute."""
        if self.due(key):
            self._unlogged.pop(key, None)
            self.log.warning(message, *args)

    def report(self, key: Any, what: str, exc: BaseException, *, traced: bool = True) -> None:
        """Log ``what`` failed; ``traced=False`` (a Redis outage: the message says it all)
        logs a warning without a traceback."""
        if not self.due(key):
            return
        unlogged = self._unlogged.pop(key, 0)
        message = str(exc)[:FAILURE_MESSAGE_CHARS]
        line = f"{what} failed ({type(exc).__name__}: {message}); skipped"
        if unlogged:
            line += f", and {unlogged} more time{'s' if unlogged != 1 else ''} since last logged"
        if not traced:
            self.log.warning("%s", line)
        elif key in self._traced:
            self.log.error("%s", line)
        else:
            self._traced.add(key)
            self.log.error("%s; traceback (shown once):", line, exc_info=exc)


#: The process's warnings about sockets (the database or the shared layer away): once a
#: minute per kind of warning, not once per socket and retry.
socket_warnings = FailureLog()
