"""What every part of group administration shares: the refusal, the liveness constants,
stream-id arithmetic, the clock and the ``action`` event.

The bottom of the package: it imports no other module of ``queue_core.admin``, and every
other one may import it. Reads nothing from Redis (``reads`` does); the one write is the
event that ``action_publish`` sends. Never imports Django.
"""

from __future__ import annotations

import re

from queue_core import clock
from queue_core.connection import Client
from queue_core.events import event_publish
from queue_core.services import OWN_CONSUMERS
from queue_core.types import ActionRefused
from queue_core.validation import entry_id_key

#: The dashboard's default ``ACKBOARD_STUCK_AFTER_MS``: a consumer without a live
#: heartbeat whose ``idle`` is below it is taken as live (``queue_core.health``).
SEEN_WITHIN_MS = 60_000
#: Ackboard's own consumers (operator claims, the parking place): never live.
NEVER_LIVE = OWN_CONSUMERS
#: The largest sequence part of a stream id.
U64 = 2**64 - 1
#: A bare millisecond part, which Redis reads as ``<ms>-0``.
MS_ONLY = re.compile(r"\A\d{1,20}\Z")


class Refused(ActionRefused):
    """A guard refused the action; the message is for the operator, as is (409)."""


def action_publish(client: Client, *, action: str, stream: str, group: str) -> None:
    """The ``action`` event of a write that changed something, so open pages update
    (as ``queue_core.services`` publishes its own). One PUBLISH."""
    event_publish(client=client, type="action", stream=stream, group=group, action=action, ids=[])


def now_or_clock(now_ms: int | None) -> int:
    """The caller's clock, or the wall clock when the caller passed none."""
    return clock.now_ms() if now_ms is None else now_ms


def id_lt(a: str, b: str) -> bool:
    """Whether stream id ``a`` sorts before ``b``."""
    return entry_id_key(a) < entry_id_key(b)
