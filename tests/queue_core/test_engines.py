"""The engine matrix: tests here run once on Redis 7 and once on Valkey 9, for real.

tests/conftest.py parametrizes every server-using test under tests/integration/ and
tests/queue_core/ with ``redis_engine``; these tests check that each copy talks to the
engine its id names and that ``RedisServer()`` follows it. tests/test_engine_switch.py
checks the switch itself, and that a missing Valkey fails the run instead of skipping.
"""

from __future__ import annotations

import os

import pytest
import redis

from tests.redis_server import RedisServer, current_engine

EXTERNAL = bool(os.environ.get("REDIS_TEST_URL") or os.environ.get("VALKEY_URL"))
PINNED = EXTERNAL or bool(os.environ.get("ACKBOARD_TEST_ENGINE"))


def _engine_of(info: dict[str, object]) -> str:
    if "valkey_version" in info:
        return "valkey" + str(info["valkey_version"]).split(".")[0]
    return "redis" + str(info["redis_version"]).split(".")[0]


class EngineMatrixTests:
    def test_the_test_server_is_the_engine_of_the_test_id(
        self, r: redis.Redis, redis_engine: str, request: pytest.FixtureRequest
    ) -> None:
        # An external server (REDIS_TEST_URL) is whatever it is; a private one is the engine.
        if not EXTERNAL:
            assert _engine_of(r.info("server")) == redis_engine
        assert redis_engine == current_engine()
        if not PINNED:
            assert f"[{redis_engine}]" in request.node.name

    def test_a_test_server_of_its_own_follows_the_engine(self, redis_engine: str) -> None:
        server = RedisServer().start()
        try:
            client = redis.Redis.from_url(server.url)
            assert _engine_of(client.info("server")) == redis_engine
            client.close()
        finally:
            server.cleanup()
