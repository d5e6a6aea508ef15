"""The bindings of ``stream_produce.lua`` (add an entry to a stream) and
``entry_duplicate.lua`` (add a copy of an entry's fields to its stream)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from queue_core.keys import RESERVED_PREFIX
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, text


@dataclass(frozen=True, slots=True)
class Produced:
    """The entry a produce added: its stream and its new id."""

    stream: str
    new_id: str


@dataclass(frozen=True, slots=True)
class Duplicated:
    """The copy a duplicate added: the source's id, the copy's, and how many fields were
    copied and left out (Ackboard's own ``ackboard.*`` fields)."""

    stream: str
    source_id: str
    new_id: str
    fields: int
    left_out: int


def _too_many(reply: Sequence[Any], what: str) -> Refusal:
    fields, limit = int(reply[2]), int(reply[3])
    message = f"{what} has {fields} fields; one entry takes at most {limit}"
    return Refusal("too-many-fields", message, fields=fields, limit=limit)


class StreamProduceScript(LuaScript[Produced | Refusal]):
    def call(
        self, *, stream: str, fields: Sequence[tuple[bytes, bytes]], create: bool
    ) -> ScriptCall[Produced | Refusal]:
        """XADD ``fields`` to ``stream``. Refusals: no-stream (unless ``create``),
        wrong-type, no-fields, reserved, too-many-fields."""
        flat: list[Any] = []
        for name, value in fields:
            flat += [name, value]
        return self.bind(
            keys=[stream],
            args=["1" if create else "", RESERVED_PREFIX, *flat],
            parse=partial(_parse_produce, stream=stream),
            stream=stream,
        )


def _parse_produce(reply: Sequence[Any], *, stream: str) -> Produced | Refusal:
    if reply[0]:
        return Produced(stream, text(reply[0]))
    kind = text(reply[1])
    if kind == "too-many-fields":
        return _too_many(reply, "the entry")
    if kind == "no-stream":
        message = (
            f"there is no stream {stream!r}: nothing was added (a typo would create a new "
            "stream; ask for it to be created if that is what you mean)"
        )
    elif kind == "wrong-type":
        message = f"key {stream!r} is a {text(reply[2])}, not a stream"
    elif kind == "reserved":
        message = f"field {text(reply[2])[:80]!r} is reserved for Ackboard ({RESERVED_PREFIX}*)"
    elif kind == "no-fields":
        message = "the entry has no field: nothing to add"
    else:
        message = f"refused: {kind}"
    return Refusal(kind, message)


class EntryDuplicateScript(LuaScript[Duplicated | Refusal]):
    def call(self, *, stream: str, entry_id: str) -> ScriptCall[Duplicated | Refusal]:
        """XADD a copy of entry ``entry_id``'s own fields to ``stream``. Refusals:
        not-found, no-fields, too-many-fields."""
        return self.bind(
            keys=[stream],
            args=[entry_id, RESERVED_PREFIX],
            parse=partial(_parse_duplicate, stream=stream, entry_id=entry_id),
            stream=stream,
        )


def _parse_duplicate(reply: Sequence[Any], *, stream: str, entry_id: str) -> Duplicated | Refusal:
    if reply[0]:
        return Duplicated(stream, entry_id, text(reply[0]), int(reply[1]), int(reply[2]))
    kind = text(reply[1])
    if kind == "too-many-fields":
        return _too_many(reply, f"entry {entry_id}")
    if kind == "not-found":
        message = f"no entry {entry_id} in stream {stream!r} (deleted or trimmed?): nothing to copy"
    elif kind == "no-fields":
        message = f"entry {entry_id} has no field but Ackboard's own: nothing to copy"
    else:
        message = f"refused: {kind}"
    return Refusal(kind, message)


STREAM_PRODUCE = StreamProduceScript("stream_produce")
ENTRY_DUPLICATE = EntryDuplicateScript("entry_duplicate")
