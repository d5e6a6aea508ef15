"""Ackboard's queue core: the ack contract for Redis Streams consumer groups.

The worker, the reads (selectors) and the writes (services) that the dashboard uses, and
``recording``: failure records and dead-letters for workers that are not Ackboard's.
This package never imports Django; workers need no database.
"""

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
from queue_core.worker import Worker, WorkerConfig, process_entry, reclaim_stale

__all__ = [
    "ActionRefused",
    "Job",
    "Outcome",
    "PermanentFailure",
    "UnparseableEntry",
    "Worker",
    "WorkerConfig",
    "entry_pending",
    "entry_pending_async",
    "failed_attempt_record",
    "failed_attempt_record_async",
    "failed_entry_dead_letter",
    "failed_entry_dead_letter_async",
    "failure_recorded",
    "failure_recorded_async",
    "process_entry",
    "reclaim_stale",
]
