"""Which dead letters a redrive filter picks, read in id order, and the dry run's count.

Owns ``RedriveFilter`` (origin group, fingerprint, reason contains, time range) and the
scan over ``{S}:dlq``: XRANGE pages of ``PAGE`` entries between the job's cursor and its
``upto_id`` (the time range narrows the id range itself: a dead-letter id is the
millisecond it was dead-lettered). The fingerprint is the one of the origin entry's LAST
failure, read from the failure index (``IndexedFailure.fingerprint``, migration 0008):
one indexed SQL query per page, and only when the filter names a fingerprint. It never
writes, to Redis or SQL.

Cost: the dry run reads at most ``DRY_RUN_BUDGET`` entries (O(n) XRANGE pages of 500,
one round trip each); past that it says "at least". The runner reads one page at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from dashboard.models import IndexedFailure
from queue_core.connection import Client
from queue_core.keys import stream_keys
from queue_core.selectors.dead_letters import dead_letter_row
from queue_core.types import DeadLetterRow
from queue_core.validation import ID_PART_MAX, entry_id_after, entry_id_key

#: Entries per XRANGE page.
PAGE = 500
#: The dry run reads at most this many dead letters, then answers "at least".
DRY_RUN_BUDGET = 200_000


@dataclass(frozen=True, slots=True)
class RedriveFilter:
    """What a redrive picks; empty values match every dead letter."""

    group: str = ""
    fingerprint: str = ""
    reason_contains: str = ""
    since_ms: int | None = None
    until_ms: int | None = None

    def describe(self) -> str:
        """The filter in words, for the audit row and the panel."""
        parts = []
        if self.group:
            parts.append(f"group {self.group!r}")
        if self.fingerprint:
            parts.append(f"fingerprint {self.fingerprint}")
        if self.reason_contains:
            parts.append(f"reason contains {self.reason_contains!r}")
        if self.since_ms is not None:
            parts.append(f"since {self.since_ms} ms")
        if self.until_ms is not None:
            parts.append(f"until {self.until_ms} ms")
        return ", ".join(parts) or "all dead letters"

    def as_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "fingerprint": self.fingerprint,
            "reason_contains": self.reason_contains,
            "since_ms": self.since_ms,
            "until_ms": self.until_ms,
        }


def id_range(filt: RedriveFilter, *, cursor: str, upto_id: str) -> tuple[str, str] | None:
    """The XRANGE bounds (inclusive) still to read, or None when nothing is left."""
    start = f"{filt.since_ms}-0" if filt.since_ms is not None else "0-0"
    if cursor:
        after = entry_id_after(cursor)
        if entry_id_key(after) > entry_id_key(start):
            start = after
    end = upto_id
    until = f"{filt.until_ms}-{ID_PART_MAX}" if filt.until_ms is not None else None
    if until is not None and entry_id_key(until) < entry_id_key(end):
        end = until
    if not end or entry_id_key(start) > entry_id_key(end):
        return None
    return start, end


def newest_id(client: Client, stream: str) -> str:
    """The newest dead-letter id now ("" for an empty or missing DLQ): one XREVRANGE."""
    raw = client.xrevrange(stream_keys(stream).dlq, "+", "-", count=1)
    if not raw:
        return ""
    entry_id = raw[0][0]
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


def last_fingerprints(stream: str, rows: list[DeadLetterRow]) -> dict[tuple[str, str], str]:
    """{(origin group, origin id): fingerprint of its last indexed failure}: one query."""
    ids = sorted({row.origin_id for row in rows if row.origin_id})
    if not ids:
        return {}
    found: dict[tuple[str, str], str] = {}
    failures = (
        IndexedFailure.objects.filter(stream=stream, entry_id__in=ids)
        .order_by("failed_at", "id")
        .values_list("group", "entry_id", "fingerprint")
    )
    for group, entry_id, fp in failures:
        found[(group, entry_id)] = fp or ""  # later rows win: the last failure's
    return found


def matches(
    filt: RedriveFilter, row: DeadLetterRow, fingerprints: dict[tuple[str, str], str]
) -> bool:
    if filt.group and row.group != filt.group:
        return False
    if filt.reason_contains and filt.reason_contains.lower() not in row.reason.lower():
        return False
    if row.payload_missing:  # nothing to replay: the script would refuse it
        return False
    return not filt.fingerprint or fingerprints.get((row.group, row.origin_id)) == filt.fingerprint


def pages(
    client: Client,
    stream: str,
    filt: RedriveFilter,
    *,
    cursor: str,
    upto_id: str,
    count: int = PAGE,
) -> Iterator[tuple[list[DeadLetterRow], str, int]]:
    """Pages of (matching rows, last id read, entries read) from ``cursor`` (exclusive) to
    ``upto_id``."""
    dlq = stream_keys(stream).dlq
    while True:
        bounds = id_range(filt, cursor=cursor, upto_id=upto_id)
        if bounds is None:
            return
        raw = client.xrange(dlq, bounds[0], bounds[1], count=count)
        if not raw:
            return
        rows = [dead_letter_row(item) for item in raw]
        fps = last_fingerprints(stream, rows) if filt.fingerprint else {}
        cursor = rows[-1].id
        yield [row for row in rows if matches(filt, row, fps)], cursor, len(rows)
        if len(raw) < count:
            return


@dataclass(frozen=True, slots=True)
class DryRun:
    """How many dead letters a redrive would replay now."""

    count: int
    scanned: int
    complete: bool  # False: the budget ran out; ``count`` is "at least"
    upto_id: str

    @property
    def text(self) -> str:
        n = f"{self.count}" if self.complete else f"at least {self.count}"
        noun = "dead letter" if self.count == 1 else "dead letters"
        return f"{n} {noun} would be replayed"


def dry_run(
    client: Client, stream: str, filt: RedriveFilter, *, budget: int = DRY_RUN_BUDGET
) -> DryRun:
    upto = newest_id(client, stream)
    count = scanned = 0
    complete = True
    if upto:
        page = max(1, min(PAGE, budget))
        for rows, last, read in pages(client, stream, filt, cursor="", upto_id=upto, count=page):
            count += len(rows)
            scanned += read
            if scanned >= budget and last != upto:
                complete = False
                break
    return DryRun(count=count, scanned=scanned, complete=complete, upto_id=upto)
