"""The binding of ``stream_trim.lua``: one chunk of XTRIM MINID, refused past the floor
unless forced."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from queue_core.scripts.binding import LuaScript, ScriptCall, text


@dataclass(frozen=True, slots=True)
class TrimChunk:
    """One run: entries deleted, whether MINID is reached, and the floor it checked
    (None: the stream has no group)."""

    deleted: int
    done: bool
    floor_id: str | None
    floor_group: str | None
    floor_reason: str | None


@dataclass(frozen=True, slots=True)
class TrimRefusal:
    """no-stream, or past-floor with the floor id, its group and why ('pending' or
    'undelivered')."""

    kind: str
    floor_id: str = ""
    floor_group: str = ""
    floor_reason: str = ""


def _opt(value: Any) -> str | None:
    return None if value is None or value is False else text(value)


class StreamTrimScript(LuaScript[TrimChunk | TrimRefusal]):
    def call(
        self, *, stream: str, minid: str, force: bool, chunk: int
    ) -> ScriptCall[TrimChunk | TrimRefusal]:
        return self.bind(
            keys=[stream],
            args=[minid, "1" if force else "", chunk],
            parse=_parse,
            stream=stream,
        )


def _parse(reply: Sequence[Any]) -> TrimChunk | TrimRefusal:
    if not reply[0]:
        return TrimRefusal(text(reply[1]), *(text(v) for v in reply[2:5]))
    _, deleted, done, floor_id, group, reason = reply
    return TrimChunk(int(deleted), bool(done), _opt(floor_id), _opt(group), _opt(reason))


STREAM_TRIM = StreamTrimScript("stream_trim")
