"""The ack contract: consume one consumer group of one stream, acking only what succeeded.

A package around one pure module of decisions. Each module owns one part:

- ``contract``: what becomes of an entry (replay elsewhere, max deliveries, unparseable,
  handler failed), as pure functions that ``once`` and ``loop`` both call;
- ``settle``: writing those outcomes (failure records, dead-letters), returning a result;
- ``once``: ``process_entry`` and ``reclaim_stale``, one entry or one sweep, synchronous;
- ``config``: ``WorkerConfig``, its validation, the ``queue_worker`` flags, handler loading;
- ``lanes``: where handlers run (sync on daemon threads, async as tasks), a chunk at a time;
- ``inflight``: read-ahead and in-flight accounting (how many to hold, in what chunks);
- ``intake``: entries into Jobs, or to the acks and settlements: the per-entry hot path;
- ``wire``: the connections and the measured hot-path tricks (raw XREADGROUP/XACK, C packing),
  and on a cluster the route to the slot's primary (MOVED, ASK, READONLY, failover);
- ``stop``: stop requests and signals (the grace period, a second request, SAME_STOP_S);
- ``stats``: ``WorkerStats``, the counters a run returns;
- ``sweep``: the reclaim sweep's cursor, and which of its claims are new deliveries;
- ``heartbeat``: the worker's side of fleet control (its group's pause, its heartbeats);
- ``loop``: ``Worker``, the long-running loop behind ``manage.py queue_worker``.
- ``fleet``: N worker processes on one group (``queue_worker --processes N``), started,
  restarted and stopped as one.

Never imports Django; needs no database. These are the package's public names.
"""

from __future__ import annotations

from queue_core.worker.config import (
    WorkerConfig,
    WorkerConfigError,
    consumer_name_default,
    handler_load,
    worker_arguments_add,
    worker_argv,
    worker_config_from_options,
)
from queue_core.worker.lanes import Handler
from queue_core.worker.loop import Worker
from queue_core.worker.once import process_entry, reclaim_stale
from queue_core.worker.stats import WorkerStats
from queue_core.worker.stop import SAME_STOP_S

__all__ = [
    "SAME_STOP_S",
    "Handler",
    "Worker",
    "WorkerConfig",
    "WorkerConfigError",
    "WorkerStats",
    "consumer_name_default",
    "handler_load",
    "process_entry",
    "reclaim_stale",
    "worker_argv",
    "worker_arguments_add",
    "worker_config_from_options",
]
