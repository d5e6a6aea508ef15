"""What the CLI and API tests share (test_cli.py, test_api.py): one seeded world per test
(a pending entry, a dead letter, a second pending entry), one ``Case`` per action saying
how it is aimed and how its change shows in Redis, and a snapshot of the Redis state to
prove that a refused request changed nothing. Their fixtures (``remote_world``, ``olga``,
``rita``) are in conftest.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from dashboard.models import AuditEvent
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.factories import make_pending


@dataclass(frozen=True)
class World:
    stream: str
    entry_id: str  # pending in group "g", held by "c1"
    other_id: str  # pending too, never aimed at
    dlq_id: str  # a dead letter whose origin was pending in "g"
    seeded_ms: int  # when the entries were delivered (epoch ms)


def seed(r: redis.Redis, stream: str) -> World:
    seeded_ms = int(time.time() * 1000)
    first, entry_id, other_id = make_pending(r, stream, "g", "c1", 3)
    moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=first, reason="x")
    assert moved is not None
    return World(
        stream=stream,
        entry_id=entry_id,
        other_id=other_id,
        dlq_id=moved.dlq_id,
        seeded_ms=seeded_ms,
    )


def state(r: redis.Redis, w: World) -> dict[str, Any]:
    """Everything an action could change: the PEL (owner, deliveries, whether it was made
    due), the stream's and the dead-letter stream's ids."""
    rows = r.xpending_range(w.stream, "g", min="-", max="+", count=100)
    # Made due: idle well beyond the time since delivery (Retry adds 60 s at once; a slow
    # test only ages the entries, which an absolute threshold took for a Retry).
    aged_ms = int(time.time() * 1000) - w.seeded_ms
    return {
        "pel": [
            (
                row["message_id"].decode(),
                row["consumer"].decode(),
                row["times_delivered"],
                row["time_since_delivered"] - aged_ms >= 30_000,
            )
            for row in rows
        ],
        "stream": [i.decode() for i, _ in r.xrange(w.stream)],
        "dlq": [i.decode() for i, _ in r.xrange(stream_keys(w.stream).dlq)],
    }


@dataclass(frozen=True)
class Case:
    """One action as a remote request aims it: at the pending entry, the dead letter or
    the whole dead-letter stream; ``fields`` are what it needs beyond the target."""

    action: str
    on: str  # "entry", "dead-letter", "dead-letters"
    fields: dict[str, str]
    #: Whether the action took effect, from the state before and after.
    done: Callable[[World, dict[str, Any], dict[str, Any]], bool]


def _retried(w: World, before: dict[str, Any], after: dict[str, Any]) -> bool:
    pel = {row[0]: row for row in after["pel"]}
    return bool(pel[w.entry_id][3]) and pel[w.entry_id][1] == "c1"


def _claimed(w: World, before: dict[str, Any], after: dict[str, Any]) -> bool:
    pel = {row[0]: row for row in after["pel"]}
    return bool(pel[w.entry_id][1] == "ackboard-operator" and pel[w.entry_id][2] == 2)


def _dead_lettered(w: World, before: dict[str, Any], after: dict[str, Any]) -> bool:
    gone = w.entry_id not in {row[0] for row in after["pel"]}
    return gone and len(after["dlq"]) == len(before["dlq"]) + 1


def _acknowledged(w: World, before: dict[str, Any], after: dict[str, Any]) -> bool:
    gone = w.entry_id not in {row[0] for row in after["pel"]}
    return gone and after["dlq"] == before["dlq"]


def _replayed(w: World, before: dict[str, Any], after: dict[str, Any]) -> bool:
    return w.dlq_id not in after["dlq"] and len(after["stream"]) == len(before["stream"]) + 1


def _deleted(w: World, before: dict[str, Any], after: dict[str, Any]) -> bool:
    return w.dlq_id not in after["dlq"] and after["stream"] == before["stream"]


def _purged(w: World, before: dict[str, Any], after: dict[str, Any]) -> bool:
    return bool(before["dlq"]) and not after["dlq"]


CASES = [
    Case("retry", "entry", {}, _retried),
    Case("claim", "entry", {}, _claimed),
    Case("dead-letter", "entry", {"reason": "poison"}, _dead_lettered),
    Case("acknowledge", "entry", {"reason": "handled by hand"}, _acknowledged),
    Case("replay", "dead-letter", {}, _replayed),
    Case("delete", "dead-letter", {}, _deleted),
    Case("purge", "dead-letters", {}, _purged),
]
CASE_IDS = [c.action for c in CASES]


def audit_rows() -> list[AuditEvent]:
    return list(AuditEvent.objects.order_by("id"))
