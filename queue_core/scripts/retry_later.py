"""The bindings of ``retry_later.lua`` (park one pending entry until it is due) and
``later_release.lua`` (one bounded window of a group's due times: keep parked, release
or drop)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from queue_core.keys import stream_keys
from queue_core.scripts.binding import LuaScript, Refusal, ScriptCall, entry_refusal, text


@dataclass(frozen=True, slots=True)
class RetriedLater:
    """An entry parked until ``due_ms``: its owner, delivery count and idle time before."""

    entry_id: str
    due_ms: int
    previous_consumer: str
    deliveries: int
    idle_before_ms: int


@dataclass(frozen=True, slots=True)
class LaterWindow:
    """What one release run did: entries looked at, kept parked, released, dropped.
    ``group_gone``: the group no longer exists (its due times were deleted)."""

    looked: int
    kept: int
    released: int
    dropped: int
    group_gone: bool = False


class RetryLaterScript(LuaScript[RetriedLater | Refusal]):
    def call(
        self,
        *,
        stream: str,
        group: str,
        entry_id: str,
        parking: str,
        due_ms: int,
        max_parked: int,
        expected_consumer: str = "",
    ) -> ScriptCall[RetriedLater | Refusal]:
        """Park the entry on ``parking`` (XCLAIM JUSTID IDLE 0) and record ``due_ms``.
        Guard: owned by ``expected_consumer`` (when given). Refusals: not-pending,
        owner-changed, payload-missing, too-many-parked. Raises CrossSlotName for names
        whose due times cannot share the stream's slot."""
        return self.bind(
            keys=[stream, stream_keys(stream).later(group)],
            args=[group, entry_id, parking, due_ms, max_parked, expected_consumer],
            parse=partial(_parse, entry_id=entry_id, due_ms=due_ms),
            stream=stream,
            group=group,
        )


def _parse(reply: Sequence[Any], *, entry_id: str, due_ms: int) -> RetriedLater | Refusal:
    if not reply[0]:
        if text(reply[1]) == "too-many-parked":
            return Refusal(
                "too-many-parked",
                f"entry {entry_id}: this group already has {int(reply[2])} entries waiting "
                "to be retried later; retry some now or wait until they are due",
            )
        return entry_refusal(reply, entry_id)
    _, owner, deliveries, idle = reply
    return RetriedLater(
        entry_id=entry_id,
        due_ms=due_ms,
        previous_consumer=text(owner),
        deliveries=int(deliveries),
        idle_before_ms=int(idle),
    )


class LaterReleaseScript(LuaScript[LaterWindow]):
    def call(
        self,
        *,
        stream: str,
        group: str,
        parking: str,
        now_ms: int,
        due_idle_ms: int,
        first: int,
        count: int,
    ) -> ScriptCall[LaterWindow]:
        """One window of ``count`` due times from rank ``first``, judged at ``now_ms``."""
        return self.bind(
            keys=[stream, stream_keys(stream).later(group)],
            args=[group, parking, now_ms, due_idle_ms, first, count],
            parse=_window,
            stream=stream,
            group=group,
        )


def _window(reply: Sequence[Any]) -> LaterWindow:
    looked, kept, released, dropped = (int(v) for v in reply)
    if looked < 0:
        return LaterWindow(0, 0, 0, 0, group_gone=True)
    return LaterWindow(looked, kept, released, dropped)


RETRY_LATER = RetryLaterScript("retry_later")
LATER_RELEASE = LaterReleaseScript("later_release")
