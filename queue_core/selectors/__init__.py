"""Reads: what the dashboard shows about streams, groups, consumers and pending entries.

Owns every Redis read the pages make, and their cost. Each selector is keyword-only,
returns frozen dataclasses from ``queue_core.types`` (raw replies never leave this
package), and makes a fixed number of pipelined round trips whatever the number of
streams, groups or rows. It never writes, never calls ``XINFO STREAM FULL`` (it returns
whole PELs) and never runs an unbounded ``XPENDING … IDLE`` scan.

Costs on a 1,000,000-entry PEL (docs/running-at-scale.md, benchmarks/dashboard_scale.py): XINFO
STREAM/GROUPS, XLEN and the XPENDING summary are O(1) or O(groups/consumers); XPENDING
extended form is O(log n + rows) from any start id, so pages go by start id, never by
offset. A missing stream or group is ``None`` from the selector, never an exception;
connection errors and timeouts propagate (the dashboard shows a banner).

On a Redis Cluster (``queue_core.connection``) a pipeline is non-transactional and split
by node: its commands are written to every primary involved, then read, so a "round
trip" is one per primary in parallel, never one per stream. Each command names one
stream or a companion in the stream's slot.

The modules, by what they read (each imports only ``_common`` and the ones above it):
``overview`` (discovery and the overview rows), ``streams`` (one stream's page),
``entries`` (entries by id, one entry across groups), ``pending`` (pending pages and
summaries), ``groups`` (the group page, which reads a pending page too),
``dead_letters`` (the dead-letter stream), ``live_stamps`` (the live pages' change
stamps), ``counters`` (the rates sampler's reads) and ``_common`` (reply readers and
helpers they share). Callers import from ``queue_core.selectors``, not from a module.
"""

from queue_core.selectors.counters import stream_counters
from queue_core.selectors.dead_letters import (
    DLQ_PAGE_SIZE,
    ENTRY_DLQ_BUDGET,
    ENTRY_DLQ_BYTES,
    ENTRY_DLQ_CHUNK,
    ENTRY_DLQ_FIRST,
    dead_letter_fetch,
    dead_letter_page,
    entry_dead_letters,
)
from queue_core.selectors.entries import entries_fetch, entry_detail
from queue_core.selectors.groups import GroupPage, group_detail, group_page
from queue_core.selectors.live_stamps import stream_stamps
from queue_core.selectors.overview import (
    SCAN_COUNT,
    stream_discover,
    stream_overview,
    stream_summaries,
)
from queue_core.selectors.pending import (
    IDLE_SCAN_BUDGET,
    IDLE_SCAN_WINDOW,
    PENDING_PAGE_SIZE,
    pending_entry_fetch,
    pending_page,
    pending_summary,
)
from queue_core.selectors.streams import ENTRY_PAGE_SIZE, stream_detail

__all__ = [
    "DLQ_PAGE_SIZE",
    "ENTRY_DLQ_BUDGET",
    "ENTRY_DLQ_BYTES",
    "ENTRY_DLQ_CHUNK",
    "ENTRY_DLQ_FIRST",
    "ENTRY_PAGE_SIZE",
    "IDLE_SCAN_BUDGET",
    "IDLE_SCAN_WINDOW",
    "PENDING_PAGE_SIZE",
    "SCAN_COUNT",
    "GroupPage",
    "dead_letter_fetch",
    "dead_letter_page",
    "entries_fetch",
    "entry_dead_letters",
    "entry_detail",
    "group_detail",
    "group_page",
    "pending_entry_fetch",
    "pending_page",
    "pending_summary",
    "stream_counters",
    "stream_detail",
    "stream_discover",
    "stream_overview",
    "stream_stamps",
    "stream_summaries",
]
