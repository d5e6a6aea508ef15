"""The binding of ``dlq_replay.lua``: put one dead letter back for its original group."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from queue_core.keys import (
    ORIGIN_GROUP_FIELD,
    ORIGIN_ID_FIELD,
    ORIGIN_STREAM_FIELD,
    PAYLOAD_MISSING_FIELD,
    REPLAY_GROUP_FIELD,
    REPLAY_OF_FIELD,
    RESERVED_PREFIX,
    stream_keys,
)
from queue_core.results import Replayed
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, text


class DlqReplayScript(LuaScript[Replayed | Refusal]):
    def call(self, *, stream: str, dlq_id: str) -> ScriptCall[Replayed | Refusal]:
        """XADD the entry's own fields plus the replay fields to ``stream``, XDEL it from
        ``{S}:dlq``. Refusals: not-found, edit-awaiting, wrong-stream, no-origin,
        payload-missing, no-group, too-many-fields. Raises CrossSlotName for a stream whose
        DLQ cannot share its slot."""
        keys = stream_keys(stream)
        return self.bind(
            keys=[keys.stream, keys.dlq, keys.dlq_edits],
            args=[
                dlq_id,
                RESERVED_PREFIX,
                REPLAY_GROUP_FIELD,
                REPLAY_OF_FIELD,
                ORIGIN_STREAM_FIELD,
                ORIGIN_GROUP_FIELD,
                ORIGIN_ID_FIELD,
                PAYLOAD_MISSING_FIELD,
            ],
            parse=partial(_parse, stream=stream, dlq_id=dlq_id),
            stream=keys.dlq,
        )


def _parse(reply: Sequence[Any], *, stream: str, dlq_id: str) -> Replayed | Refusal:
    if reply[0]:
        new_id, group, origin_id = (text(v) for v in reply)
        return Replayed(dlq_id=dlq_id, new_id=new_id, group=group, origin_id=origin_id)
    kind = text(reply[1])
    if kind == "too-many-fields":
        fields, limit = int(reply[2]), int(reply[3])
        message = (
            f"dead-letter entry {dlq_id} has {fields} fields; a replay copies at most "
            f"{limit} in one atomic step, so nothing was changed. Copy what you need with "
            "redis-cli XRANGE and delete it instead."
        )
        return Refusal(kind, message, fields=fields, limit=limit)
    if kind == "not-found":
        message = f"dead-letter entry {dlq_id} does not exist (replayed or deleted?)"
    elif kind == "edit-awaiting":
        message = (
            f"dead-letter entry {dlq_id} was replayed edited as {text(reply[2]) or '?'}, "
            "which awaits success: replaying the original too would run the job twice. "
            "Nothing was changed."
        )
    elif kind == "payload-missing":
        message = (
            f"dead-letter entry {dlq_id} has no payload: it was deleted from the stream "
            "before it was dead-lettered, so there is nothing to replay"
        )
    elif kind == "no-group":
        message = (
            f"cannot replay {dlq_id}: its group {text(reply[2])!r} no longer exists "
            f"on stream {stream!r}"
        )
    elif kind == "wrong-stream":
        message = f"dead-letter entry {dlq_id} came from stream {text(reply[2])!r}, not {stream!r}"
    else:
        message = f"dead-letter entry {dlq_id} has no origin group or id to replay to"
    return Refusal(kind, message)


DLQ_REPLAY = DlqReplayScript("dlq_replay")
