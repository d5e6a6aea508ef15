"""The binding of ``group_create.lua``: XGROUP CREATE at a position, with ENTRIESREAD
where the server has it and the count is known."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, text


@dataclass(frozen=True, slots=True)
class GroupMade:
    """The new group as XINFO GROUPS reports it (None: the server did not say)."""

    last_id: str
    entries_read: int | None
    lag: int | None


class GroupCreateScript(LuaScript[GroupMade | Refusal]):
    def call(
        self,
        *,
        stream: str,
        group: str,
        mode: str,
        entry_id: str,
        entries_read: int | None,
        seen_max_deleted: str,
        mkstream: bool,
    ) -> ScriptCall[GroupMade | Refusal]:
        """``mode`` is start, end or id. Refusals: no-stream, wrong-type, exists."""
        return self.bind(
            keys=[stream],
            args=[
                group,
                mode,
                entry_id,
                "" if entries_read is None else entries_read,
                seen_max_deleted,
                "1" if mkstream else "",
            ],  # fmt: skip
            parse=_parse,
            stream=stream,
            group=group,
        )


def optional_int(value: Any) -> int | None:
    """A script's ``false`` (Redis's nil) is None."""
    return None if value is None or value is False else int(value)


def _parse(reply: Sequence[Any]) -> GroupMade | Refusal:
    if not reply[0]:
        return Refusal(text(reply[1]), "")
    _, last_id, read, lag = reply
    return GroupMade(text(last_id), optional_int(read), optional_int(lag))


GROUP_CREATE = GroupCreateScript("group_create")
