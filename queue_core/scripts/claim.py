"""The binding of ``claim.lua``: compare-and-set XCLAIM of one pending entry."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from queue_core.results import Claimed
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, entry_refusal, text


class ClaimScript(LuaScript[Claimed | Refusal]):
    def call(
        self,
        *,
        stream: str,
        group: str,
        entry_id: str,
        consumer: str,
        seen_idle_ms: int,
        seen_deliveries: int | None = None,
        seen_consumer: str | None = None,
    ) -> ScriptCall[Claimed | Refusal]:
        """Hand the entry to ``consumer`` if it is as the operator saw it: idle at least
        ``seen_idle_ms``, and (when given) delivered ``seen_deliveries`` times and owned by
        ``seen_consumer``. Refusals: not-pending, idle-changed, deliveries-changed,
        owner-changed, payload-missing; each means "changed since you looked"."""
        seen = "" if seen_deliveries is None else str(seen_deliveries)
        return self.bind(
            keys=[stream],
            args=[group, entry_id, consumer, seen_idle_ms, seen, seen_consumer or ""],
            parse=partial(_parse, entry_id=entry_id, consumer=consumer),
            stream=stream,
            group=group,
        )


def _parse(reply: Sequence[Any], *, entry_id: str, consumer: str) -> Claimed | Refusal:
    if not reply[0]:
        refusal = entry_refusal(reply, entry_id)
        if refusal.kind == "not-pending":
            return Refusal(refusal.kind, f"changed since you looked: {refusal.message}")
        return refusal
    _, previous, deliveries, idle_before = reply
    return Claimed(
        entry_id=entry_id,
        consumer=consumer,
        previous_consumer=text(previous),
        deliveries=int(deliveries),
        idle_before_ms=int(idle_before),
    )


CLAIM = ClaimScript("claim")
