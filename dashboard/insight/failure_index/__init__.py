"""The failure index: the SQL copy of every ``{S}:failures`` record, and the reads over it.

Workers write one record per failed attempt to a capped ``{S}:failures`` stream
(``queue_core.failures``); this package keeps them after the stream is trimmed, as rows of
``dashboard.models.IndexedFailure``, so pages can show an entry's history and operators
can search every failure. One module per job:

- ``records``: one stream record parsed into an unsaved row (pure; malformed is kept).
- ``ingestor``: the consumer group that moves records into rows under the ack contract.
- ``retention``: pruning old rows.
- ``queries``: the small reads other pages use (latest failure per entry, history, counts).
- ``search``: the Failures page's bounded, keyset-paged search.
- ``causes``: the Failures page's "by cause" view (failures grouped by fingerprint, with
  the entries still pending per cause) and the bulk scope "last failure has this cause".

It never writes to the queue streams themselves and never acks a failure record before
the row holding it is committed: a crash or a database error leaves the record pending,
to be reclaimed and stored again (idempotent through the unique source key).
"""

from __future__ import annotations

from dashboard.insight.failure_index.causes import (
    Cause,
    CausesPage,
    cause_match,
    cause_pending_ids,
    causes,
)
from dashboard.insight.failure_index.ingestor import (
    INGEST_BATCH,
    INGEST_GROUP,
    RECLAIM_IDLE_MS,
    FailureIngestor,
    failure_sources_discover,
    failures_ingest,
    failures_ingest_loop,
)
from dashboard.insight.failure_index.queries import (
    failure_history,
    failures_count_by_group,
    failures_count_capped,
    failures_count_since,
    last_failures,
    last_fingerprints,
)
from dashboard.insight.failure_index.records import MALFORMED, failure_record_parse
from dashboard.insight.failure_index.retention import failures_prune, failures_prune_expired
from dashboard.insight.failure_index.search import (
    SEARCH_BUDGET_MS,
    SEARCH_PAGE_SIZE,
    BadCursor,
    FailureFilter,
    FailurePage,
    SearchTooBroad,
    failure_search,
    search_budget_ms,
)

__all__ = [
    "INGEST_BATCH",
    "INGEST_GROUP",
    "MALFORMED",
    "RECLAIM_IDLE_MS",
    "SEARCH_BUDGET_MS",
    "SEARCH_PAGE_SIZE",
    "BadCursor",
    "Cause",
    "CausesPage",
    "FailureFilter",
    "FailureIngestor",
    "FailurePage",
    "SearchTooBroad",
    "cause_match",
    "cause_pending_ids",
    "causes",
    "failure_history",
    "failure_record_parse",
    "failure_search",
    "failure_sources_discover",
    "failures_count_by_group",
    "failures_count_capped",
    "failures_count_since",
    "failures_ingest",
    "failures_ingest_loop",
    "failures_prune",
    "failures_prune_expired",
    "last_failures",
    "last_fingerprints",
    "search_budget_ms",
]
