"""The binding of ``group_delete.lua``: XGROUP DESTROY, refused while entries are
pending unless the operator acknowledged exactly the count that is pending."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, text


class GroupDeleteScript(LuaScript[int | Refusal]):
    def call(
        self,
        *,
        stream: str,
        pause_key: str,
        workers_key: str,
        group: str,
        expected_pending: int,
        acknowledge: bool,
        now_ms: int,
        stale_ms: int,
    ) -> ScriptCall[int | Refusal]:
        """The pending count dropped. Refusals: no-group, pending (n), pending-changed (n),
        live-workers (names, comma-separated in the message)."""
        return self.bind(
            keys=[stream, pause_key, workers_key],
            args=[group, expected_pending, "1" if acknowledge else "", now_ms, stale_ms],
            parse=_parse,
            stream=stream,
            group=group,
        )


def _parse(reply: Sequence[Any]) -> int | Refusal:
    if not reply[0]:
        return Refusal(text(reply[1]), ", ".join(text(v) for v in reply[2:]))
    return int(reply[1])


GROUP_DELETE = GroupDeleteScript("group_delete")
