"""The binding of ``dlq_find.lua``: the dead letters of one entry, by a bounded walk."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queue_core.keys import ORIGIN_GROUP_FIELD, ORIGIN_ID_FIELD
from queue_core.scripts.binding import LuaScript, ScriptCall, text
from queue_core.types import DeadLettersFound

#: Dead letters read per XRANGE inside the script: the most it holds at once.
CHUNK = 50


class DlqFindScript(LuaScript[DeadLettersFound]):
    def call(
        self, *, dlq: str, origin_id: str, start_id: str, budget: int
    ) -> ScriptCall[DeadLettersFound]:
        """Walk ``dlq`` (a stream's dead-letter companion, named by ``queue_core.keys``)
        from ``start_id``, looking at most at ``budget`` dead letters, for those whose
        origin id is ``origin_id``."""
        return self.bind(
            keys=[dlq],
            args=[start_id, ORIGIN_ID_FIELD, ORIGIN_GROUP_FIELD, origin_id, budget, CHUNK],
            parse=_parse,
            stream=dlq,
        )


def _parse(reply: Sequence[Any]) -> DeadLettersFound:
    scanned, complete, last, *pairs = reply
    return DeadLettersFound(
        found=tuple((text(pairs[i]), text(pairs[i + 1])) for i in range(0, len(pairs), 2)),
        scanned=int(scanned),
        complete=bool(complete),
        last_id=text(last) or None,
    )


DLQ_FIND = DlqFindScript("dlq_find")
