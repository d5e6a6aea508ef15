"""Small change announcements on a pub/sub channel, for the dashboard's live updates.

Events are hints, never state: a lost event only delays a refresh until the next tick.
Publishing never raises into the caller's control flow; a failure is logged.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis

from queue_core.connection import Client
from queue_core.keys import EVENTS_CHANNEL

log = logging.getLogger("queue_core.events")


def event_message(*, type: str, stream: str, group: str = "", **data: Any) -> str:
    """The JSON text of one event (for callers that pipeline their PUBLISHes)."""
    return json.dumps({"type": type, "stream": stream, "group": group, **data})


def event_publish(*, client: Client, type: str, stream: str, group: str = "", **data: Any) -> None:
    """PUBLISH ``{"type": type, "stream": stream, "group": group, ...}``. O(subscribers)."""
    message = event_message(type=type, stream=stream, group=group, **data)
    try:
        client.publish(EVENTS_CHANNEL, message)
    except redis.RedisError as exc:
        log.warning("could not publish %s event for %s: %s", type, stream, exc)
