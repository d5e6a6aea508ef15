"""Logging filters: a Redis outage seen by a library is one line, not a traceback a second.

Owns ``LibraryOutage``, installed on the ``channels_redis`` logger by ``settings.LOGGING``.
channels-redis's pub/sub layer (the ``shared`` layer, which carries logout notices between
web processes) logs "Unexpected exception in receive task" with a full traceback every
second while Redis is unreachable, then reconnects by itself. An outage is expected and
already reported by Ackboard's own banner, /healthz and the live indicator; a traceback
per second hides real errors in the log. The filter turns a record whose exception is a
Redis connection or timeout error (or an OSError) into one WARNING line without the
traceback, at most one per ``every_s`` seconds (the next one says how many it folded).
Any other exception keeps its traceback. Costs one isinstance check per record.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

OUTAGE_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


class LibraryOutage(logging.Filter):
    """One WARNING line per ``every_s`` for a library's Redis connection errors."""

    def __init__(self, every_s: float = 10.0) -> None:
        super().__init__()
        self.every_s = every_s
        self._lock = threading.Lock()
        self._last = float("-inf")
        self._folded = 0

    def filter(self, record: logging.LogRecord) -> bool:
        info = record.exc_info
        if not info or not isinstance(info[1], OUTAGE_ERRORS):
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._last < self.every_s:
                self._folded += 1
                return False
            folded, self._folded, self._last = self._folded, 0, now
        error = info[1]
        more = f" ({folded} more since the last line)" if folded else ""
        said = record.getMessage()
        record.msg = "%s: Redis unreachable (%s: %s); it retries by itself%s"
        record.args = (said, type(error).__name__, error, more)
        record.exc_info = None
        record.exc_text = None
        record.levelno = logging.WARNING
        record.levelname = "WARNING"
        return True
