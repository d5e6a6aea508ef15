"""What ``queue_core.connection`` relies on inside redis-py, checked against the installed
release, so that a redis-py upgrade that changes it fails here rather than in production.

``ClusterClient.pipeline`` builds its pipeline with the same arguments as redis-py's own
``RedisCluster.pipeline`` (some of them private), and ``ClusterClientPipeline.execute``
reads the pipeline's queued commands (the READONLY retries themselves are tested in
test_cluster.py). pyproject.toml pins the redis range these tests pass on.
"""

from __future__ import annotations

from typing import Any

from redis.cluster import ClusterPipeline, RedisCluster

from queue_core.connection import Client, ClusterClient, ClusterClientPipeline


def _state(pipe: Any) -> dict[str, Any]:
    """A pipeline's attributes, by identity for shared objects and by value for the rest."""
    return {
        name: (type(value).__name__, value if isinstance(value, bool | int | str) else None)
        for name, value in vars(pipe).items()
    }


class RedisPyContractTests:
    def test_our_pipeline_is_built_as_redis_py_builds_its_own(self, rc: Client) -> None:
        assert isinstance(rc, ClusterClient)
        ours = rc.pipeline()
        stock = RedisCluster.pipeline(rc)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        assert type(stock) is ClusterPipeline
        assert isinstance(ours, ClusterClientPipeline)
        # Every attribute redis-py sets, set alike: a new argument upstream shows up here.
        assert _state(ours) == _state(stock)
        for shared in ("nodes_manager", "commands_parser", "retry", "_lock"):
            assert getattr(ours, shared) is getattr(stock, shared), shared

    def test_queued_commands_carry_position_args_and_options(
        self, rc: Client, cprefix: str
    ) -> None:
        pipe = rc.pipeline()
        pipe.set(f"{cprefix}a", "1")
        pipe.get(f"{cprefix}a")
        queue = pipe._execution_strategy.command_queue
        assert [c.position for c in queue] == [0, 1]
        assert queue[1].args == ("GET", f"{cprefix}a")
        assert isinstance(queue[1].options, dict)
        assert callable(pipe.parent_execute_command)
        assert pipe.execute() == [True, b"1"]
