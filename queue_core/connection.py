"""Connection settings for Redis or Valkey, standalone or Cluster. Never imports Django.

The URL comes from ``VALKEY_URL``, then ``REDIS_URL``, then the local default: the
same order as the workshop worker this project grew from. The same URL names a
standalone server or any one node of a Redis Cluster: ``connect`` asks the server
(``INFO cluster`` → ``cluster_enabled:1``, one round trip) and returns the matching
client, so there is no extra setting to keep in step with the deployment.

``Client`` is the one type the rest of the code takes for "either client". On a cluster:

- MOVED and ASK redirects are followed by redis-py (``RedisCluster``), which patches
  its slot map on MOVED and re-reads the whole topology on connection errors.
- READONLY replies are treated as a stale topology, not as an ordinary error. A node
  answers READONLY when it was demoted to a replica while this client still thought it
  a primary (after a failover, when the old primary comes back). redis-py 8 raises it as
  a plain ``ResponseError``; here it re-reads ``CLUSTER SLOTS`` and retries, for single
  commands and for the commands of a pipeline. Retrying is safe: a READONLY reply
  means the command (or the script, at its first write) changed nothing.
- Pipelines are non-transactional and split by node; each command or script still
  addresses one slot (companions share the stream's slot, ``queue_core.keys``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeAlias

import redis
from redis.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import ReadOnlyError, RedisClusterException

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def redis_url(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("VALKEY_URL") or env.get("REDIS_URL") or DEFAULT_URL


class _RefreshOnReadOnly:
    """Re-read the cluster topology when a node answers READONLY, then let the caller's
    retry loop send the command again (READONLY is in ``ERRORS_ALLOW_RETRY``)."""

    nodes_manager: Any

    def _execute_command(self, target_node: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._execute_command(target_node, *args, **kwargs)  # type: ignore[misc]
        except ReadOnlyError:
            self.nodes_manager.initialize()
            raise


class ClusterClient(_RefreshOnReadOnly, RedisCluster):
    """``RedisCluster`` whose commands and pipelines survive a READONLY reply."""

    ERRORS_ALLOW_RETRY = (*RedisCluster.ERRORS_ALLOW_RETRY, ReadOnlyError)  # type: ignore[assignment]  # redis-py types the tuple's exact length

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterClientPipeline:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        return ClusterClientPipeline(
            nodes_manager=self.nodes_manager,
            commands_parser=self.commands_parser,
            startup_nodes=self.nodes_manager.startup_nodes,
            result_callbacks=self.result_callbacks,
            cluster_response_callbacks=self.cluster_response_callbacks,
            read_from_replicas=self.read_from_replicas,
            load_balancing_strategy=self.load_balancing_strategy,
            reinitialize_steps=self.reinitialize_steps,
            retry=self.retry,
            lock=self._lock,
            transaction=transaction,
            event_dispatcher=self._event_dispatcher,
        )


class ClusterClientPipeline(_RefreshOnReadOnly, ClusterPipeline):
    """A cluster pipeline whose READONLY replies are sent again after a topology refresh.

    redis-py re-sends a pipeline's MOVED/ASK/connection failures one by one through the
    client; it returns a READONLY reply as is. This does the same for READONLY: one
    ``CLUSTER SLOTS`` read, then each refused command once more, on its own.
    """

    ERRORS_ALLOW_RETRY = (*ClusterPipeline.ERRORS_ALLOW_RETRY, ReadOnlyError)  # type: ignore[assignment]  # as above

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = sorted(self._execution_strategy.command_queue, key=lambda c: c.position)
        replies: list[Any] = super().execute(raise_on_error=False)
        refused = [i for i, reply in enumerate(replies) if isinstance(reply, ReadOnlyError)]
        if refused:
            self.nodes_manager.initialize()
            for i in refused:
                command = stack[i]
                try:
                    replies[i] = self.parent_execute_command(*command.args, **command.options)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                except redis.RedisError as exc:
                    replies[i] = exc
        if raise_on_error:
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        return replies


#: Either client: what every selector, service and script binding takes.
Client: TypeAlias = redis.Redis | RedisCluster


def cluster_enabled(url: str, *, connect_timeout: float = 2.0, timeout: float = 5.0) -> bool:
    """Whether the server at ``url`` is a Redis Cluster node (one ``INFO cluster``).

    Raises the ``RedisError`` when the server cannot be reached.
    """
    probe = redis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=connect_timeout
    )
    try:
        info = probe.info("cluster")
    finally:
        probe.close()
    return bool(int(info.get("cluster_enabled", 0)))


def connect(
    url: str | None = None,
    *,
    socket_timeout: float | None = 5.0,
    connect_timeout: float = 2.0,
    client_name: str | None = None,
) -> Client:
    """A client that returns raw bytes (payloads may be binary): a ``ClusterClient`` when
    the server says it is a cluster node, else a plain ``redis.Redis``.

    One round trip (``INFO cluster``), plus a ``CLUSTER SLOTS`` on a cluster; raises the
    ``RedisError`` when the server cannot be reached. ``socket_timeout`` bounds every
    command; blocking reads must pass a BLOCK shorter than it. The dashboard uses a
    short one so a slow Redis gives an error banner rather than a hung page.
    """
    url = url or redis_url()
    if cluster_enabled(url, connect_timeout=connect_timeout, timeout=socket_timeout or 5.0):
        cluster: RedisCluster = ClusterClient.from_url(
            url,
            decode_responses=False,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            health_check_interval=30,
            client_name=client_name,
            # A primary that is down (before its replica is promoted) must not stop
            # the client from serving the slots that are still up.
            require_full_coverage=False,
        )
        return cluster
    client: redis.Redis = redis.Redis.from_url(
        url,
        decode_responses=False,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        health_check_interval=30,
        client_name=client_name,
    )
    return client


def publisher(client: Client, key: str) -> redis.Redis:
    """A plain client that can pipeline PUBLISH: ``client`` itself, or on a cluster the
    primary that serves ``key`` (redis-py refuses PUBLISH in a cluster pipeline; a classic
    PUBLISH on any node reaches the subscribers of every node)."""
    if isinstance(client, RedisCluster):
        node: redis.Redis = client.get_redis_connection(client.get_node_from_key(key))  # type: ignore[no-untyped-call]
        return node
    return client
