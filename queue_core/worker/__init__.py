"""The ack contract: consume one consumer group of one stream, acking only what succeeded.

The package's public names, re-exported from the modules that own them.
"""

from __future__ import annotations

from queue_core.worker.loop import (
    SAME_STOP_S,
    Handler,
    Worker,
    WorkerConfigError,
    WorkerStats,
    consumer_name_default,
    handler_load,
    process_entry,
    reclaim_stale,
)

__all__ = [
    "SAME_STOP_S",
    "Handler",
    "Worker",
    "WorkerConfigError",
    "WorkerStats",
    "consumer_name_default",
    "handler_load",
    "process_entry",
    "reclaim_stale",
]
