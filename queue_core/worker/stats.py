"""WorkerStats: the counters of one Worker run, which ``Worker.run()`` returns.

Owns nothing but the numbers (entries, not commands); the loop and its intake count
into one shared instance, which tests and tools may read while the worker runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WorkerStats:
    """Counters of one Worker run (entries, not commands). Times are perf_counter()."""

    read: int = 0
    #: Handler calls that returned (their entries are acked or on the way).
    processed: int = 0
    acked: int = 0
    failed: int = 0
    dead_lettered: int = 0
    skipped: int = 0
    reclaimed: int = 0
    payload_missing: int = 0
    ack_errors: int = 0
    outages: int = 0
    unfinished: int = 0
    first_read_at: float | None = None
    last_ack_at: float | None = None
