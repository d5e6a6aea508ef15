"""The binding of ``dead_letter.lua``, and the move the worker and the operator share.

A worker runs ``DEAD_LETTER.call`` for an entry it gives up on (``worker.settle``, on a
sync or an asyncio client); the operator's ``services.entry_dead_letter`` is ``move``,
the same script plus an ``action`` event.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from queue_core.connection import Client
from queue_core.keys import DEAD_LETTER_FIELDS, stream_keys
from queue_core.results import DeadLettered
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, entry_refusal, guard, text
from queue_core.validation import entry_id_check, idle_check


class DeadLetterScript(LuaScript[DeadLettered | Refusal]):
    def call(
        self,
        *,
        stream: str,
        group: str,
        entry_id: str,
        reason: str,
        last_error: str = "",
        operator: str = "",
        expected_consumer: str = "",
        min_idle_ms: int | None = None,
    ) -> ScriptCall[DeadLettered | Refusal]:
        """Copy the entry and its metadata (``keys.DEAD_LETTER_FIELDS``) to ``{S}:dlq``
        and XACK it. Guards: owned by ``expected_consumer`` and idle at least
        ``min_idle_ms`` (when given). Refusals: not-pending, owner-changed, idle-changed,
        too-many-fields. Raises CrossSlotName for names that cannot be moved atomically.
        """
        keys = stream_keys(stream)
        args = [group, entry_id, reason, last_error, operator, expected_consumer]
        return self.bind(
            keys=[keys.stream, keys.dlq, keys.later(group)],
            args=[*args, guard(min_idle_ms), *DEAD_LETTER_FIELDS],
            parse=partial(_parse, entry_id=entry_id),
            stream=stream,
            group=group,
        )

    def move(
        self,
        *,
        client: Client,
        stream: str,
        group: str,
        entry_id: str,
        reason: str,
        last_error: str = "",
        operator: str = "",
        expected_consumer: str = "",
        seen_idle_ms: int | None = None,
    ) -> DeadLettered | None:
        """Move a pending entry to ``{S}:dlq`` with origin metadata and XACK it, atomically.

        Returns None when the entry is no longer pending in ``group`` (someone else acked
        or dead-lettered it first), so doing it twice leaves one copy. Raises ValueError
        for a malformed id, ActionRefused when another consumer than ``expected_consumer``
        owns it or it was delivered again since it was seen ``seen_idle_ms`` idle, or when
        Redis refuses (NOGROUP, WRONGTYPE: the refusal's ``__cause__``); TooManyFields
        (an ActionRefused) when it has more fields than the script can copy, and
        CrossSlotName for names that cannot be moved atomically. The entry then stays
        pending. One round trip; O(fields) in Redis. Publishes nothing.
        """
        entry_id_check(entry_id)
        if seen_idle_ms is not None:
            idle_check(seen_idle_ms, "seen_idle_ms")
        moved = self.call(
            stream=stream,
            group=group,
            entry_id=entry_id,
            reason=reason,
            last_error=last_error,
            operator=operator,
            expected_consumer=expected_consumer,
            min_idle_ms=seen_idle_ms,
        ).run(client)
        if isinstance(moved, Refusal):
            if moved.kind == "not-pending":
                return None
            raise moved.error()
        return moved


def _parse(reply: Sequence[Any], *, entry_id: str) -> DeadLettered | Refusal:
    if not reply[0]:
        if text(reply[1]) == "too-many-fields":
            return _too_many_fields(int(reply[2]), int(reply[3]), entry_id)
        return entry_refusal(reply, entry_id)
    dlq_id, owner, deliveries, missing = reply
    return DeadLettered(
        entry_id=entry_id,
        dlq_id=text(dlq_id),
        consumer=text(owner),
        deliveries=int(deliveries),
        payload_missing=bool(int(missing)),
    )


def _too_many_fields(fields: int, limit: int, entry_id: str) -> Refusal:
    return Refusal(
        "too-many-fields",
        f"entry {entry_id} has {fields} fields; a dead-letter move copies at most {limit} in "
        "one atomic step, so nothing was changed and it stays pending. Acknowledge it with a "
        "reason instead (copy what you need with redis-cli XRANGE first), or have the "
        "producer send fewer fields.",
        fields=fields,
        limit=limit,
    )


DEAD_LETTER = DeadLetterScript("dead_letter")
