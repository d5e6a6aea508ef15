"""Ackboard's queue core: the ack contract for Redis Streams consumer groups.

The worker, the reads (selectors) and the writes (services) that the dashboard uses, and
``recording``: failure records and dead-letters for workers that are not Ackboard's.
This package never imports Django; workers need no database.

``__all__`` is the public worker API, the one a worker project imports from the
``ackboard`` wheel: Ackboard's own worker (``Worker``, ``WorkerConfig``, ``process_entry``,
``reclaim_stale``), the recording calls for a loop of your own (sync and asyncio), and the
pause and heartbeat calls that let such a loop honour a pause and show up as a worker.
Everything else (selectors, services, scripts) is the dashboard's and may change without
notice. A change to these names is noted in ``CHANGELOG.md``. ``__version__`` is the
installed distribution's version.
"""

from queue_core.connection import Client, connect, redis_url
from queue_core.control import (
    HEARTBEAT_INTERVAL_MS,
    HEARTBEAT_STALE_MS,
    Heartbeat,
    Pause,
    ackboard_version,
    heartbeat_send,
    pause_read,
)
from queue_core.jobs import Job, Outcome, PermanentFailure, UnparseableEntry
from queue_core.recording import (
    entry_pending,
    entry_pending_async,
    failed_attempt_record,
    failed_attempt_record_async,
    failed_entry_dead_letter,
    failed_entry_dead_letter_async,
    failure_recorded,
    failure_recorded_async,
)
from queue_core.types import ActionRefused
from queue_core.worker import (
    Worker,
    WorkerConfig,
    WorkerConfigError,
    WorkerStats,
    process_entry,
    reclaim_stale,
)

__version__ = ackboard_version()

__all__ = [
    "HEARTBEAT_INTERVAL_MS",
    "HEARTBEAT_STALE_MS",
    "ActionRefused",
    "Client",
    "Heartbeat",
    "Job",
    "Outcome",
    "Pause",
    "PermanentFailure",
    "UnparseableEntry",
    "Worker",
    "WorkerConfig",
    "WorkerConfigError",
    "WorkerStats",
    "__version__",
    "connect",
    "entry_pending",
    "entry_pending_async",
    "failed_attempt_record",
    "failed_attempt_record_async",
    "failed_entry_dead_letter",
    "failed_entry_dead_letter_async",
    "failure_recorded",
    "failure_recorded_async",
    "heartbeat_send",
    "pause_read",
    "process_entry",
    "reclaim_stale",
    "redis_url",
]
