"""The binding of ``acknowledge.lua``: XACK one pending entry, reporting its state before."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from queue_core.results import Acknowledged
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, entry_refusal, guard, text


class AcknowledgeScript(LuaScript[Acknowledged | Refusal]):
    def call(
        self,
        *,
        stream: str,
        group: str,
        entry_id: str,
        expected_consumer: str = "",
        min_idle_ms: int | None = None,
    ) -> ScriptCall[Acknowledged | Refusal]:
        """Acknowledge the entry. Guards: owned by ``expected_consumer`` and idle at least
        ``min_idle_ms`` (when given). Refusals: not-pending, owner-changed, idle-changed."""
        return self.bind(
            keys=[stream],
            args=[group, entry_id, expected_consumer, guard(min_idle_ms)],
            parse=partial(_parse, entry_id=entry_id),
            stream=stream,
            group=group,
        )


def _parse(reply: Sequence[Any], *, entry_id: str) -> Acknowledged | Refusal:
    if not reply[0]:
        return entry_refusal(reply, entry_id)
    _, owner, deliveries, idle = reply
    return Acknowledged(
        entry_id=entry_id,
        was_pending=True,
        consumer=text(owner),
        deliveries=int(deliveries),
        idle_ms=int(idle),
    )


ACKNOWLEDGE = AcknowledgeScript("acknowledge")
