"""The binding of ``dlq_purge.lua``: empty a dead-letter stream if it is as confirmed."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from queue_core.keys import stream_keys
from queue_core.results import DeadLettersPurged
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, text


class DlqPurgeScript(LuaScript[DeadLettersPurged | Refusal]):
    def call(
        self, *, stream: str, expected_length: int, newest_id: str | None = None
    ) -> ScriptCall[DeadLettersPurged | Refusal]:
        """UNLINK ``{S}:dlq`` if it still holds ``expected_length`` entries, the newest
        ``newest_id`` (when given). Refusal: changed. Raises CrossSlotName for a stream
        whose DLQ cannot share its slot."""
        dlq = stream_keys(stream).dlq
        return self.bind(
            keys=[dlq],
            args=[expected_length, newest_id or ""],
            parse=partial(_parse, stream=stream, expected_length=expected_length),
            stream=dlq,
        )


def _parse(
    reply: Sequence[Any], *, stream: str, expected_length: int
) -> DeadLettersPurged | Refusal:
    if reply[0]:
        return DeadLettersPurged(stream=stream, deleted=int(reply[1]))
    length, newest = int(reply[2]), text(reply[3])
    return Refusal(
        "changed",
        f"changed since you looked: the dead-letter stream of {stream!r} now holds "
        f"{length} entries (newest {newest or 'none'}), not {expected_length}; "
        "reload and confirm again",
    )


DLQ_PURGE = DlqPurgeScript("dlq_purge")
