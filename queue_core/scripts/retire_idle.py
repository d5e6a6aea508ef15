"""The binding of ``retire_idle.lua``: delete one consumer that is idle, holds nothing
and has no live heartbeat, re-checked in the same run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, text


class RetireIdleScript(LuaScript[bool | Refusal]):
    def call(
        self,
        *,
        stream: str,
        workers_key: str,
        group: str,
        consumer: str,
        idle_ms: int,
        now_ms: int,
        stale_ms: int,
    ) -> ScriptCall[bool | Refusal]:
        """True when deleted. Refusals: no-such-consumer, holds-entries (pending),
        not-idle (idle), live-heartbeat (seen_ms)."""
        return self.bind(
            keys=[stream, workers_key],
            args=[group, consumer, idle_ms, now_ms, stale_ms],
            parse=_parse,
            stream=stream,
            group=group,
        )


def _parse(reply: Sequence[Any]) -> bool | Refusal:
    if not reply[0]:
        return Refusal(text(reply[1]), " ".join(text(v) for v in reply[2:]))
    return True


RETIRE_IDLE = RetireIdleScript("retire_idle")
