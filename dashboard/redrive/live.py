"""The dead-letter page's live signature part for redrive jobs (``redrive_stamp``).

The "dlq" surface (``dashboard.live.registry``) is re-rendered when its signature
changes; this adds the stream's redrive jobs' progress to it (state, counts, canary
replays), and while a job shows a canary, the current second, so its outcomes (acks
and failures of the canary entries, which move neither the DLQ nor the job's row) are
re-read about once a second. One indexed SELECT of at most six rows; never Redis.
"""

from __future__ import annotations

from typing import Any

from dashboard.redrive.models import RedriveJob
from queue_core import clock


def redrive_stamp(stream: str) -> Any:
    rows = list(
        RedriveJob.objects.filter(stream=stream)
        .order_by("-id")
        .values_list("id", "state", "replayed", "gone", "refused", "updated_at")[:6]
    )
    showing_canary = any(
        state in (RedriveJob.State.CANARY, RedriveJob.State.WAITING) for _, state, *_ in rows
    )
    return (tuple(rows), int(clock.now_s()) if showing_canary else None)
