"""Re-fingerprinting stored failures when the normalization changes.

Owns ``fingerprints_refresh``: every row's fingerprint recomputed with the current
``queue_core.fingerprint`` rules, and written back only where it differs, in chunks of
``CHUNK`` rows by id (one SELECT and, for the changed rows only, one UPDATE batch per
chunk), so a table of millions never sits in memory nor in one statement. The data
migrations that come with a change of the rules call it with their historical model
(``0011_refingerprint``); it reads and writes that model only, through the alias given.

Idempotent: a second run changes nothing. Cost: one regular-expression pass per row
(a few µs, ``queue_core.fingerprint``), plus the writes for the rows whose cause changed.
It never touches Redis.
"""

from __future__ import annotations

from typing import Any

from queue_core.fingerprint import fingerprint

#: Rows read per step.
CHUNK = 2000


def fingerprints_refresh(*, model: Any, using: str = "default", chunk: int | None = None) -> int:
    """Give every row of ``model`` (``IndexedFailure``, or a migration's historical copy)
    its current fingerprint, ``chunk`` rows at a time (default ``CHUNK``); returns how
    many rows changed."""
    chunk = chunk or CHUNK
    rows = model.objects.using(using).order_by("id")
    last, changed = 0, 0
    while True:
        batch = list(
            rows.filter(id__gt=last).only(
                "id", "error_type", "message", "traceback", "fingerprint"
            )[:chunk]
        )
        if not batch:
            return changed
        stale = []
        for row in batch:
            new = fingerprint(row.error_type, row.message, row.traceback)
            if new != row.fingerprint:
                row.fingerprint = new
                stale.append(row)
        if stale:
            model.objects.using(using).bulk_update(stale, ["fingerprint"], batch_size=500)
            changed += len(stale)
        last = batch[-1].id
