"""The bindings of ``edit_replay.lua`` (replay a dead letter with edited fields, keeping
it) and ``edit_replay_settle.lua`` (delete it once the replay succeeded)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from queue_core.keys import (
    ORIGIN_GROUP_FIELD,
    ORIGIN_ID_FIELD,
    ORIGIN_STREAM_FIELD,
    REPLAY_GROUP_FIELD,
    REPLAY_OF_FIELD,
    RESERVED_PREFIX,
    stream_keys,
)
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, text

#: The new entry of an edited replay carries ``ackboard.edited=1`` and the dead letter's
#: id in ``ackboard.edited-from`` (``ackboard.replay-of`` holds the origin id, as for a
#: plain replay, so a replay dead-lettered again links to the entry first dead-lettered).
EDITED_FIELD = RESERVED_PREFIX + "edited"
EDITED_FROM_FIELD = RESERVED_PREFIX + "edited-from"


@dataclass(frozen=True, slots=True)
class EditReplayed:
    dlq_id: str
    new_id: str
    group: str
    origin_id: str
    #: The new id of an earlier edited replay of the same dead letter ("" if none).
    previous_new_id: str


class EditReplayScript(LuaScript[EditReplayed | Refusal]):
    def call(
        self,
        *,
        stream: str,
        dlq_id: str,
        fields: Sequence[tuple[bytes, bytes]],
        force: bool,
        operator: str,
    ) -> ScriptCall[EditReplayed | Refusal]:
        """XADD ``fields`` plus the replay fields to ``stream``, record the dead letter as
        awaiting success. Refusals: not-found, wrong-stream, no-origin, no-fields,
        reserved, awaiting, no-group, too-many-fields."""
        keys = stream_keys(stream)
        flat: list[Any] = []
        for name, value in fields:
            flat += [name, value]
        return self.bind(
            keys=[keys.stream, keys.dlq, keys.dlq_edits],
            args=[
                dlq_id,
                RESERVED_PREFIX,
                REPLAY_GROUP_FIELD,
                REPLAY_OF_FIELD,
                EDITED_FIELD,
                EDITED_FROM_FIELD,
                ORIGIN_STREAM_FIELD,
                ORIGIN_GROUP_FIELD,
                ORIGIN_ID_FIELD,
                "1" if force else "0",
                operator,
                *flat,
            ],
            parse=partial(_parse, stream=stream, dlq_id=dlq_id),
            stream=keys.dlq,
        )


def _parse(reply: Sequence[Any], *, stream: str, dlq_id: str) -> EditReplayed | Refusal:
    if reply[0]:
        new_id, group, origin_id, previous = (text(v) for v in reply)
        return EditReplayed(dlq_id, new_id, group, origin_id, previous)
    kind = text(reply[1])
    messages = {
        "not-found": f"dead-letter entry {dlq_id} does not exist (replayed or deleted?)",
        "no-origin": f"dead-letter entry {dlq_id} has no origin group or id to replay to",
        "no-fields": "the edited entry has no field left: nothing to replay",
    }
    if kind == "too-many-fields":
        fields, limit = int(reply[2]), int(reply[3])
        message = f"the edited entry has {fields} fields; one replay copies at most {limit}"
        return Refusal(kind, message, fields=fields, limit=limit)
    if kind == "awaiting":
        message = (
            f"dead-letter entry {dlq_id} was already replayed as {text(reply[2])}, which awaits "
            "success: tick 'replay again anyway' to replay it once more"
        )
    elif kind == "reserved":
        message = f"field {text(reply[2])!r} is reserved for Ackboard (ackboard.*)"
    elif kind == "no-group":
        message = (
            f"cannot replay {dlq_id}: its group {text(reply[2])!r} no longer exists "
            f"on stream {stream!r}"
        )
    elif kind == "wrong-stream":
        message = f"dead-letter entry {dlq_id} came from stream {text(reply[2])!r}, not {stream!r}"
    else:
        message = messages.get(kind, f"refused: {kind}")
    return Refusal(kind, message)


class EditReplaySettleScript(LuaScript[bool]):
    def call(
        self, *, stream: str, dlq_id: str, new_id: str, outcome: str, failed_as: str = ""
    ) -> ScriptCall[bool]:
        """Settle one record: ``outcome`` is "ok", "failed" or "gone"."""
        keys = stream_keys(stream)
        return self.bind(
            keys=[keys.dlq, keys.dlq_edits],
            args=[dlq_id, new_id, outcome, failed_as],
            parse=lambda reply: bool(reply),
            stream=keys.dlq,
        )


EDIT_REPLAY = EditReplayScript("edit_replay")
EDIT_REPLAY_SETTLE = EditReplaySettleScript("edit_replay_settle")
