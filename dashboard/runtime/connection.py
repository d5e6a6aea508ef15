"""The dashboard's Redis client: one pool per process, short timeouts.

Standalone or Cluster, decided by the server (``queue_core.connection.connect``). A
failed first connection is not cached: the next request tries again.
"""

from __future__ import annotations

from functools import cache

from django.conf import settings

from queue_core.connection import Client, connect


@cache
def _client(url: str, timeout: float) -> Client:
    return connect(url, socket_timeout=timeout, connect_timeout=timeout, client_name="ackboard-web")


def get_redis() -> Client:
    """The client for ``settings.ACKBOARD_REDIS_URL`` (tests override the setting)."""
    return _client(settings.ACKBOARD_REDIS_URL, settings.ACKBOARD_REDIS_TIMEOUT)
