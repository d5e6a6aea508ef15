"""Logging filters: a Redis outage seen by a library, or a refused request, is one line.

Owns ``LibraryOutage``, installed on the ``channels_redis`` logger by ``settings.LOGGING``.
channels-redis's pub/sub layer (the ``shared`` layer, which carries logout notices between
web processes) logs "Unexpected exception in receive task" with a full traceback every
second while Redis is unreachable, then reconnects by itself. An outage is expected and
already reported by Ackboard's own banner, /healthz and the live indicator; a traceback
per second hides real errors in the log. The filter turns a record whose exception is a
Redis connection or timeout error (or an OSError) into one WARNING line without the
traceback, at most one per ``every_s`` seconds (the next one says how many it folded).
Any other exception keeps its traceback. Costs one isinstance check per record.

Owns ``ClientErrorLine`` too, installed on Django's ``django.request`` logger. Django logs
each 4xx it answers for an exception (``PermissionDenied`` as "Forbidden (Permission
denied)", ``BadRequest``) with the exception's full traceback: a read-only user clicking
a button, or a scanner, wrote ~30 lines per request. A 4xx is the request's fault and the
traceback says nothing the line does not: the record keeps its level (WARNING) and
message, gains the exception's type and text, and loses the traceback. 5xx records keep
theirs. Costs one attribute read per record.
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


class ClientErrorLine(logging.Filter):
    """A 4xx answer's record as one line: the exception's type and text, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        info = record.exc_info
        if not isinstance(status, int) or not 400 <= status < 500 or not info or not info[1]:
            return True
        error = info[1]
        detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        record.msg = f"{record.getMessage()} ({detail})"
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        return True
