"""The dashboard's Redis client: one pool per process, short timeouts."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings

from queue_core.connection import connect


@cache
def _client(url: str, timeout: float) -> redis.Redis:
    return connect(url, socket_timeout=timeout, connect_timeout=timeout, client_name="ackboard-web")


def get_redis() -> redis.Redis:
    """The client for ``settings.ACKBOARD_REDIS_URL`` (tests override the setting)."""
    return _client(settings.ACKBOARD_REDIS_URL, settings.ACKBOARD_REDIS_TIMEOUT)
