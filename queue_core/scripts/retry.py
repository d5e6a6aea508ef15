"""The binding of ``retry.lua``: make one pending entry due again in its own group."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from queue_core.results import Retried
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, entry_refusal, guard, text


class RetryScript(LuaScript[Retried | Refusal]):
    def call(
        self,
        *,
        stream: str,
        group: str,
        entry_id: str,
        idle_ms: int,
        expected_consumer: str = "",
        min_idle_ms: int | None = None,
    ) -> ScriptCall[Retried | Refusal]:
        """Set the entry's idle time to at least ``idle_ms``, keeping owner and count.

        Guards: owned by ``expected_consumer`` and idle at least ``min_idle_ms`` (when
        given). Refusals: not-pending, payload-missing, owner-changed, idle-changed.
        """
        return self.bind(
            keys=[stream],
            args=[group, entry_id, idle_ms, expected_consumer, guard(min_idle_ms)],
            parse=partial(_parse, entry_id=entry_id),
            stream=stream,
            group=group,
        )


def _parse(reply: Sequence[Any], *, entry_id: str) -> Retried | Refusal:
    if not reply[0]:
        return entry_refusal(reply, entry_id)
    _, owner, deliveries, idle_before, idle_after = reply
    return Retried(
        entry_id=entry_id,
        consumer=text(owner),
        deliveries=int(deliveries),
        idle_before_ms=int(idle_before),
        idle_ms=int(idle_after),
    )


RETRY = RetryScript("retry")
