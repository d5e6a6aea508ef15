"""The binding of ``retire.lua``: move one chunk of a consumer's pending entries to
another consumer, and delete the consumer once it holds nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, text


@dataclass(frozen=True, slots=True)
class RetireChunk:
    """One run: entries moved, entries left because their payload was deleted, where the
    next chunk starts ('' when this pass over the consumer's entries is done), whether
    the consumer was deleted, and how many entries it still holds."""

    moved: int
    payload_missing: int
    cursor: str
    deleted: bool
    held: int


class RetireScript(LuaScript[RetireChunk | Refusal]):
    def call(
        self,
        *,
        stream: str,
        workers_key: str,
        group: str,
        consumer: str,
        to_consumer: str,
        parking_consumer: str,
        due_idle_ms: int,
        now_ms: int,
        stale_ms: int,
        cursor: str,
        chunk: int,
    ) -> ScriptCall[RetireChunk | Refusal]:
        """``to_consumer`` '' makes the entries due (parked on ``parking_consumer`` with
        idle at least ``due_idle_ms``). Refusals: no-such-consumer, no-such-target,
        live-heartbeat (seen_ms)."""
        return self.bind(
            keys=[stream, workers_key],
            args=[
                group,
                consumer,
                to_consumer,
                parking_consumer,
                due_idle_ms,
                now_ms,
                stale_ms,
                cursor,
                chunk,
            ],  # fmt: skip
            parse=_parse,
            stream=stream,
            group=group,
        )


def _parse(reply: Sequence[Any]) -> RetireChunk | Refusal:
    if not reply[0]:
        kind = text(reply[1])
        return Refusal(kind, " ".join(text(v) for v in reply[2:]))
    _, moved, missing, cursor, deleted, held = reply
    return RetireChunk(int(moved), int(missing), text(cursor), bool(deleted), int(held))


RETIRE = RetireScript("retire")
