"""Ackboard's queue core: the ack contract for Redis Streams consumer groups.

The worker, the reads (selectors) and the writes (services) that the dashboard uses.
This package never imports Django; workers need no database.
"""

from queue_core.types import ActionRefused, Job, Outcome, PermanentFailure, UnparseableEntry
from queue_core.worker import Worker, WorkerConfig, process_entry, reclaim_stale

__all__ = [
    "ActionRefused",
    "Job",
    "Outcome",
    "PermanentFailure",
    "UnparseableEntry",
    "Worker",
    "WorkerConfig",
    "process_entry",
    "reclaim_stale",
]
