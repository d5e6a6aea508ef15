"""Lua scripts in ``queue_core/scripts``, registered through redis-py.

``register_script`` already handles EVALSHA with a NOSCRIPT fallback. Keys reach a
script only through KEYS, which keeps every script cluster-safe.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

import redis
from redis.commands.core import Script


@cache
def source(name: str) -> str:
    return resources.files("queue_core").joinpath("scripts", f"{name}.lua").read_text("utf-8")


def script(client: redis.Redis, name: str) -> Script:
    """The script ``scripts/<name>.lua`` bound to ``client`` (hashing it is microseconds)."""
    return client.register_script(source(name))
