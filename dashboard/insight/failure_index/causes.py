"""The Failures page's "by cause" view: failed attempts grouped by fingerprint.

Owns ``causes`` (one row per fingerprint: a sample message, how many attempts, first and
last seen, the groups affected, and how many entries are still pending with it as their
last failure), ``cause_match`` (the bulk scope "pending entries whose last failure has
this fingerprint", for ``queue_core.bulk``) and ``cause_pending_ids``.

Cost, capped like the search:

- one grouped SQL query over the rows the filters leave, ``(fingerprint, stream, group)``
  with count, first, last and newest id, served by the covering ``failure_cause`` index
  and run under the search's statement budget (``SearchTooBroad`` past it); at most
  ``GROUP_ROWS`` result rows are read (``truncated`` says when there were more);
- one query for the shown causes' sample messages (by primary key);
- "pending now": for at most ``PENDING_GROUPS`` groups, the pending list read through
  ``queue_core.selectors.pending_page`` (ids only, 1,000 per XPENDING), at most
  ``PENDING_SCAN`` ids in all, and the last failure's fingerprint of each id read (one
  indexed query per 500 ids). A group whose list is longer is counted on what was read,
  and the page says the counts are capped.

It never writes, to SQL or to Redis.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Max, Min

from dashboard.insight.failure_index.queries import last_fingerprints
from dashboard.insight.failure_index.search import (
    FailureFilter,
    failure_filter_queryset,
    search_budget_ms,
    statement_budget,
)
from dashboard.models import IndexedFailure
from queue_core import bulk, selectors
from queue_core.bulk import Match
from queue_core.connection import Client
from queue_core.results import BulkScope

#: Causes shown, most attempts first.
CAUSES_SHOWN = 50
#: Most (fingerprint, stream, group) rows the grouped query reads.
GROUP_ROWS = 20_000
#: Groups named per cause.
GROUPS_NAMED = 5
#: Groups whose pending lists are read for "pending now".
PENDING_GROUPS = 20
#: Pending ids read in all for "pending now" (each group's first ids, in id order).
PENDING_SCAN = 2_000


@dataclass(frozen=True, slots=True)
class Cause:
    """One fingerprint's failed attempts (within the filters)."""

    fingerprint: str
    error_type: str
    #: The newest attempt's message (a sample: the others differ only in values).
    message: str
    count: int
    first_seen: datetime
    last_seen: datetime
    #: (stream, group) pairs affected, most attempts first, at most ``GROUPS_NAMED``.
    groups: tuple[tuple[str, str], ...]
    #: How many (stream, group) pairs in all.
    group_count: int
    #: Entries still pending whose last failure has this cause (in the groups read).
    pending_now: int = 0


@dataclass(frozen=True, slots=True)
class CausesPage:
    """The by-cause view: causes, most attempts first, and how complete the counts are."""

    causes: tuple[Cause, ...]
    #: More causes or group rows existed than were read.
    truncated: bool = False
    #: Some pending list was longer than what was read: "pending now" is a lower bound.
    pending_capped: bool = False
    pending_scanned: int = 0
    elapsed_ms: float = field(default=0.0, compare=False)


def causes(
    *,
    filters: FailureFilter,
    client: Client | None = None,
    budget_ms: int | None = None,
    limit: int | None = None,
    pending_scan: int | None = None,
    group_rows: int = GROUP_ROWS,
) -> CausesPage:
    """The causes of the failures matching ``filters``, most attempts first.

    With ``client``, each cause also counts the entries still pending whose last failure
    has it (read as the module says, capped by ``pending_scan`` ids, default
    ``PENDING_SCAN``). Raises
    ``SearchTooBroad`` when the grouped query runs past ``budget_ms`` (default: the
    search's budget).
    """
    started = time.perf_counter()
    budget = budget_ms if budget_ms is not None else search_budget_ms()
    ranked, truncated = _ranked(
        filters=filters, budget=budget, group_rows=group_rows,
        shown_cap=CAUSES_SHOWN if limit is None else limit,
    )  # fmt: skip
    newest = {fp: max(r[5] for r in parts) for fp, parts in ranked}
    samples = {
        pk: (error_type, message)
        for pk, error_type, message in IndexedFailure.objects.filter(
            id__in=list(newest.values())
        ).values_list("id", "error_type", "message")
    }
    pending, capped, scanned = (
        _pending_now(client, ranked, PENDING_SCAN if pending_scan is None else pending_scan)
        if client is not None
        else ({}, False, 0)
    )
    shown = [
        _cause(fp, parts, samples.get(newest[fp], ("", "")), pending.get(fp, 0))
        for fp, parts in ranked
    ]
    return CausesPage(
        causes=tuple(shown),
        truncated=truncated,
        pending_capped=capped,
        pending_scanned=scanned,
        elapsed_ms=(time.perf_counter() - started) * 1000,
    )


#: One (stream, group) row of a cause: stream, group, attempts, first, last, newest id.
_Part = tuple[str, str, int, datetime, datetime, int]


def _ranked(
    *, filters: FailureFilter, budget: int, group_rows: int, shown_cap: int
) -> tuple[list[tuple[str, list[_Part]]], bool]:
    """The causes' (stream, group) rows, most attempts first, at most ``shown_cap``
    causes from at most ``group_rows`` rows (one grouped query under ``budget``), and
    whether either cap cut some off."""
    rows_qs = (
        failure_filter_queryset(filters=filters)
        .order_by()
        .values_list("fingerprint", "stream", "group")
        .annotate(n=Count("id"), first=Min("failed_at"), last=Max("failed_at"), top=Max("id"))
    )
    with statement_budget(budget):
        rows = list(rows_qs[: group_rows + 1])
    truncated = len(rows) > group_rows
    per_cause: dict[str, list[_Part]] = {}
    for fp, stream, group, n, first, last, top in rows[:group_rows]:
        per_cause.setdefault(fp, []).append((stream, group, n, first, last, top))
    ranked = sorted(per_cause.items(), key=lambda kv: (-sum(r[2] for r in kv[1]), kv[0]))
    return ranked[:shown_cap], truncated or len(ranked) > shown_cap


def _cause(fp: str, parts: list[_Part], sample: tuple[str, str], pending_now: int) -> Cause:
    """One cause from its (stream, group) rows (sorted here, most attempts first) and the
    error type and message of its newest attempt."""
    parts.sort(key=lambda r: -r[2])
    error_type, message = sample
    return Cause(
        fingerprint=fp,
        error_type=error_type,
        message=message,
        count=sum(r[2] for r in parts),
        first_seen=min(r[3] for r in parts),
        last_seen=max(r[4] for r in parts),
        groups=tuple((r[0], r[1]) for r in parts[:GROUPS_NAMED]),
        group_count=len(parts),
        pending_now=pending_now,
    )


def _pending_now(
    client: Client,
    ranked: Sequence[tuple[str, Sequence[tuple[str, str, int, datetime, datetime, int]]]],
    scan: int,
) -> tuple[Counter[str], bool, int]:
    """Entries pending now per cause, over the groups the shown causes name (most attempts
    first, at most ``PENDING_GROUPS``): (counts, capped, ids read)."""
    weight: Counter[tuple[str, str]] = Counter()
    for _, parts in ranked:
        for stream, group, n, *_ in parts:
            weight[(stream, group)] += n
    groups = [g for g, _ in weight.most_common()]
    capped = len(groups) > PENDING_GROUPS
    counts: Counter[str] = Counter()
    scanned = 0
    for stream, group in groups[:PENDING_GROUPS]:
        start: str | None = None
        more = True
        while more and scanned < scan:
            page = selectors.pending_page(
                client=client,
                stream=stream,
                group=group,
                start=start,
                count=min(1000, scan - scanned),
                with_entries=False,
            )
            if page is None or not page.rows:
                more = False
                break
            ids = [row.id for row in page.rows]
            scanned += len(ids)
            counts.update(last_fingerprints(stream=stream, group=group, entry_ids=ids).values())
            start = page.next_start
            more = start is not None
        if more:  # this group's list (and any group after it) was not read to its end
            capped = True
            break
    return counts, capped, scanned


def cause_match(*, stream: str, group: str, fingerprint: str) -> Match:
    """The bulk filter "last failure has ``fingerprint``": for each window of pending ids,
    the ones whose newest failure in ``group`` has it (one indexed query per 500 ids)."""

    def match(ids: Sequence[str]) -> list[str]:
        found = last_fingerprints(stream=stream, group=group, entry_ids=ids)
        return [i for i in ids if found.get(i) == fingerprint]

    return match


def cause_pending_ids(
    *,
    client: Client,
    stream: str,
    group: str,
    fingerprint: str,
    snapshot_id: str,
    limit: int = bulk.MAX_LIMIT,
    cursor: str | None = None,
) -> BulkScope:
    """Pending entries of ``group`` up to ``snapshot_id`` whose last failure has
    ``fingerprint``, from ``cursor`` on: ``queue_core.bulk``'s bounded PEL read with
    ``cause_match`` (at most ``bulk.MAX_SCAN`` pending rows per call; ``next_cursor``
    continues)."""
    return bulk.pending_ids_matching(
        client=client,
        stream=stream,
        group=group,
        snapshot_id=snapshot_id,
        start_id=cursor,
        limit=limit,
        match=cause_match(stream=stream, group=group, fingerprint=fingerprint),
    )
