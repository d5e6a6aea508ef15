"""The binding of ``position_reset.lua``: guarded XGROUP SETID ... ENTRIESREAD."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from queue_core.scripts.binding import LuaScript, ScriptCall, text
from queue_core.scripts.group_create import optional_int


@dataclass(frozen=True, slots=True)
class PositionSet:
    """The group's position before and after, as XINFO GROUPS reported them."""

    before_id: str
    before_entries_read: int | None
    after_id: str
    after_entries_read: int | None
    lag: int | None


@dataclass(frozen=True, slots=True)
class PositionRefusal:
    """A refusal with the names or id it is about."""

    kind: str
    values: tuple[str, ...]


class PositionResetScript(LuaScript[PositionSet | PositionRefusal]):
    def call(
        self,
        *,
        stream: str,
        pause_key: str,
        workers_key: str,
        group: str,
        expected_before_id: str,
        mode: str,
        entry_id: str,
        entries_read: int | None,
        seen_max_deleted: str,
        now_ms: int,
        stale_ms: int,
        seen_within_ms: int,
        never_live: tuple[str, str, str],
    ) -> ScriptCall[PositionSet | PositionRefusal]:
        """Refusals: no-group, moved (id), live (names), not-pausable (names)."""
        return self.bind(
            keys=[stream, pause_key, workers_key],
            args=[
                group,
                expected_before_id,
                mode,
                entry_id,
                "" if entries_read is None else entries_read,
                seen_max_deleted,
                now_ms,
                stale_ms,
                seen_within_ms,
                *never_live,
            ],
            parse=_parse,
            stream=stream,
            group=group,
        )


def _parse(reply: Sequence[Any]) -> PositionSet | PositionRefusal:
    if not reply[0]:
        return PositionRefusal(text(reply[1]), tuple(text(v) for v in reply[2:]))
    _, before_id, before_read, after_id, after_read, lag = reply
    return PositionSet(
        text(before_id),
        optional_int(before_read),
        text(after_id),
        optional_int(after_read),
        optional_int(lag),
    )


POSITION_RESET = PositionResetScript("position_reset")
