"""Connection settings for Redis or Valkey. Never imports Django.

The URL comes from ``VALKEY_URL``, then ``REDIS_URL``, then the local default: the
same order as the workshop worker this project grew from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import redis

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def redis_url(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("VALKEY_URL") or env.get("REDIS_URL") or DEFAULT_URL


def connect(
    url: str | None = None,
    *,
    socket_timeout: float | None = 5.0,
    connect_timeout: float = 2.0,
    client_name: str | None = None,
) -> redis.Redis:
    """A client that returns raw bytes (payloads may be binary).

    ``socket_timeout`` bounds every command; blocking reads must pass a BLOCK shorter
    than it. The dashboard uses a short one so a slow Redis gives an error banner
    rather than a hung page.
    """
    client: redis.Redis = redis.Redis.from_url(
        url or redis_url(),
        decode_responses=False,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        health_check_interval=30,
        client_name=client_name,
    )
    return client
