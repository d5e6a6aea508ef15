"""Writes: operator actions and the worker's dead-letter move.

Each service is keyword-only, typed, atomic (a Lua script where it checks before it
acts or touches two keys), guarded and idempotent. Services never import Django and
never decide permissions; the dashboard wraps each one in a permission check and an
audit row.
"""

from __future__ import annotations

import redis

from queue_core.keys import stream_keys
from queue_core.lua import script
from queue_core.types import ActionRefused, DeadLettered


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def entry_dead_letter(
    *,
    client: redis.Redis,
    stream: str,
    group: str,
    entry_id: str,
    reason: str,
    last_error: str = "",
    operator: str = "",
    expected_consumer: str = "",
) -> DeadLettered | None:
    """Move a pending entry to ``{S}:dlq`` with origin metadata and XACK it, atomically.

    Returns None when the entry is no longer pending in ``group`` (someone else acked
    or dead-lettered it first), so doing it twice leaves one copy. One round trip;
    O(fields) in Redis. With ``expected_consumer`` it raises ActionRefused when another
    consumer owns the entry now. Raises CrossSlotName for names that cannot be moved
    atomically.
    """
    keys = stream_keys(stream)
    reply = script(client, "dead_letter")(
        keys=[keys.stream, keys.dlq],
        args=[group, entry_id, reason, last_error, operator, expected_consumer],
    )
    if not reply[0]:
        if _text(reply[1]) == "owner-changed":
            raise ActionRefused(
                f"changed since you looked: entry {entry_id} is now owned by {_text(reply[2])}"
            )
        return None
    dlq_id, owner, deliveries, missing = reply
    return DeadLettered(
        entry_id=entry_id,
        dlq_id=_text(dlq_id),
        consumer=_text(owner),
        deliveries=int(deliveries),
        payload_missing=bool(int(missing)),
    )
