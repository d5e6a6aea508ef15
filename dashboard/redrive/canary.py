"""The canary's outcomes: what became of each entry a redrive's canary replayed.

Each canary replay is a new stream entry for its origin group. Its outcome, read now:

- **failed again, dead-lettered**: a dead letter names it as its origin id (it is back
  in ``{S}:dlq``; the job never replays it again: it is newer than the job's ``upto_id``);
- **failed again**: the failure index holds a failure of it (``IndexedFailure.entry_id``,
  written by the worker as ``ackboard.replay-of`` names the original); it may still be
  retrying;
- **processed**: its group acknowledged it (not pending, and at or before the group's
  last-delivered id);
- **in progress**: delivered, pending; **waiting**: not delivered yet.

It never writes. Cost: one pipeline (XINFO GROUPS, one XPENDING per canary entry, one
XRANGE of at most ``DLQ_LOOK`` dead letters from the canary's first replay), and one
indexed SQL query. Called by the job panel, so only while a canary is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from dashboard.models import IndexedFailure
from dashboard.redrive.models import RedriveJob
from queue_core.connection import Client
from queue_core.keys import stream_keys
from queue_core.selectors.dead_letters import dead_letter_row

#: Dead letters looked at for the canary's entries coming back.
DLQ_LOOK = 2000

PROCESSED = "processed"
FAILED = "failed again"
DEAD = "failed again, dead-lettered"
PENDING = "in progress"
WAITING = "waiting"


@dataclass(frozen=True, slots=True)
class CanaryRow:
    dlq_id: str
    new_id: str
    group: str
    origin_id: str
    outcome: str
    error: str = ""

    @property
    def bad(self) -> bool:
        return self.outcome in (FAILED, DEAD)


def _key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def outcomes(client: Client, job: RedriveJob) -> list[CanaryRow]:
    replays = list(job.canary_replays)
    if not replays:
        return []
    stream = job.stream
    pipe = client.pipeline(transaction=False)
    pipe.xinfo_groups(stream)
    for c in replays:
        pipe.xpending_range(stream, c["group"], min=c["new_id"], max=c["new_id"], count=1)
    # From the first replay's own id: Redis stamped it before any worker could fail it, on
    # the clock it stamps the dead letters with. (Not the runner's ``at_ms``, taken after
    # the replay returned: a worker can dead-letter the entry in between, and that dead
    # letter would fall before the window.)
    first_ms = min(_key(c["new_id"])[0] for c in replays)
    pipe.xrange(stream_keys(stream).dlq, f"{first_ms}-0", "+", count=DLQ_LOOK)
    replies = pipe.execute(raise_on_error=False)
    groups = replies[0] if not isinstance(replies[0], Exception) else []
    last_delivered = {
        _text(g.get("name") or g.get(b"name")): _text(
            g.get("last-delivered-id") or g.get(b"last-delivered-id")
        )
        for g in groups
        if isinstance(g, dict)
    }
    new_ids = {c["new_id"] for c in replays}
    dead: dict[str, str] = {}
    raw_dlq = replies[-1]
    if not isinstance(raw_dlq, redis.RedisError | Exception):
        for item in raw_dlq:
            row = dead_letter_row(item)
            if row.origin_id in new_ids:
                dead[row.origin_id] = row.last_error or row.reason
    failed: dict[str, str] = {}
    for entry_id, error_type, message in (
        IndexedFailure.objects.filter(stream=stream, entry_id__in=sorted(new_ids))
        .order_by("failed_at", "id")
        .values_list("entry_id", "error_type", "message")
    ):
        failed[entry_id] = f"{error_type}: {message}"[:300]
    rows = []
    for c, pending in zip(replays, replies[1:-1], strict=True):
        new_id = c["new_id"]
        delivered_to = last_delivered.get(c["group"], "")
        is_pending = bool(pending) and not isinstance(pending, Exception)
        if new_id in dead:
            outcome, error = DEAD, dead[new_id]
        elif new_id in failed:
            outcome, error = FAILED, failed[new_id]
        elif is_pending:
            outcome, error = PENDING, ""
        elif delivered_to and _key(delivered_to) >= _key(new_id):
            outcome, error = PROCESSED, ""
        else:
            outcome, error = WAITING, ""
        rows.append(CanaryRow(c["dlq_id"], new_id, c["group"], c.get("origin_id", ""),
                              outcome, error))  # fmt: skip
    return rows
