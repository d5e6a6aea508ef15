"""The binding of ``dlq_delete.lua``: delete one dead letter, reporting its origin."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from queue_core.keys import ORIGIN_GROUP_FIELD, ORIGIN_ID_FIELD, stream_keys
from queue_core.results import DeadLetterDeleted
from queue_core.scripts.binding import LuaScript, ScriptCall, text


class DlqDeleteScript(LuaScript[DeadLetterDeleted]):
    def call(self, *, stream: str, dlq_id: str) -> ScriptCall[DeadLetterDeleted]:
        """XDEL the entry from ``{S}:dlq``; a missing one is ``deleted=False``, never a
        refusal. Raises CrossSlotName for a stream whose DLQ cannot share its slot."""
        dlq = stream_keys(stream).dlq
        return self.bind(
            keys=[dlq],
            args=[dlq_id, ORIGIN_GROUP_FIELD, ORIGIN_ID_FIELD],
            parse=partial(_parse, dlq_id=dlq_id),
            stream=dlq,
        )


def _parse(reply: Sequence[Any], *, dlq_id: str) -> DeadLetterDeleted:
    if not reply[0]:
        return DeadLetterDeleted(dlq_id=dlq_id, deleted=False)
    _, group, origin_id = reply
    return DeadLetterDeleted(
        dlq_id=dlq_id, deleted=True, origin_group=text(group), origin_id=text(origin_id)
    )


DLQ_DELETE = DlqDeleteScript("dlq_delete")
