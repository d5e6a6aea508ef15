"""What every script binding shares: registering, running, pipelining, and refusals.

A binding (one per ``*.lua`` in this folder) turns a request into a ``ScriptCall``: the
keys, the args and the parser of one run. A call runs on a client (``run``: one EVALSHA;
redis-py loads the script on NOSCRIPT) or is queued on a pipeline (``queue``; redis-py
sends one SCRIPT EXISTS before a pipeline that runs scripts, and SCRIPT LOAD for any the
server lacks). A script's ``{false, kind, …}`` reply parses to a ``Refusal``, a value:
each service decides which refusals are errors for its caller.

Bindings never build key names (``queue_core.keys`` does), never read Redis error text
(``queue_core.errors`` does) and never publish events (services do).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Generic, TypeVar

import redis
from redis.client import Pipeline
from redis.cluster import ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from queue_core.connection import Client
from queue_core.errors import action_refusal
from queue_core.types import ActionRefused, TooManyFields

R = TypeVar("R")


def text(value: Any) -> str:
    """A name or id from a script reply as text (invalid UTF-8 replaced)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A script's ``{false, kind, …}`` reply: a guard refused, and nothing was changed.

    ``message`` is for the operator, as is. ``fields`` and ``limit`` are set for
    ``too-many-fields`` only.
    """

    kind: str
    message: str
    fields: int = 0
    limit: int = 0

    def error(self) -> ActionRefused:
        """The exception a service raises for it (TooManyFields for a too-wide entry)."""
        if self.kind == "too-many-fields":
            return TooManyFields(self.message, fields=self.fields, limit=self.limit)
        return ActionRefused(self.message)


def script_source(name: str) -> bytes:
    """``<name>.lua`` as Redis runs it: the shared helpers of ``prelude.lua``, then the
    script. Its SHA is that of these bytes, whatever the client's encoding."""
    files = resources.files(__package__)
    return files.joinpath("prelude.lua").read_bytes() + files.joinpath(f"{name}.lua").read_bytes()


class LuaScript(Generic[R]):
    """One ``<name>.lua``, registered once and reused, as redis-py's ``Lock`` does.

    The script is registered from its bytes on first use, so its SHA does not depend on a
    client's encoding, and every run names its client: one registration serves every
    client and server of the process. ``R`` is what its parser returns.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._script: Script | None = None

    def registered(self, client: Client) -> Script:
        if self._script is None:
            # A race between threads registers twice; both objects are the same script.
            self._script = client.register_script(script_source(self.name))
        return self._script

    def bind(
        self,
        *,
        keys: Sequence[str],
        args: Sequence[str | int],
        parse: Callable[[Any], R],
        stream: str,
        group: str = "",
    ) -> ScriptCall[R]:
        """One run of this script. ``stream`` and ``group`` name what a Redis refusal
        (NOGROUP, WRONGTYPE) is about."""
        return ScriptCall(self, tuple(keys), tuple(args), parse, stream, group)


@dataclass(frozen=True, slots=True)
class ScriptCall(Generic[R]):
    """The keys, args and parser of one run of a script."""

    script: LuaScript[R]
    keys: tuple[str, ...]
    args: tuple[str | int, ...]
    parse: Callable[[Any], R]
    stream: str
    group: str

    def run(self, client: Client) -> R:
        """One round trip. A missing group or a key that is not a stream raises
        ActionRefused (``from`` the Redis error); any other error reply propagates."""
        try:
            reply = self.script.registered(client)(keys=self.keys, args=self.args, client=client)
        except redis.ResponseError as exc:
            raise action_refusal(exc, stream=self.stream, group=self.group) from exc
        return self.parse(reply)

    def queue(self, pipe: Pipeline | ClusterPipeline) -> None:
        """Add the run to ``pipe``; parse its reply from ``pipe.execute()`` with ``parse``.

        Does what ``Script.__call__`` does for a pipeline, without its per-call import:
        registering the script with ``pipe.scripts`` makes redis-py check (and load) it
        before the pipeline runs. Measured: 2 µs a call instead of 6 (``benchmarks/
        bulk_scope.py``; a bulk request queues up to 1,000). A cluster pipeline has no
        such check: ``calls_pipelined`` loads and runs again what came back NOSCRIPT.
        """
        script = self.script.registered(pipe)
        if isinstance(pipe, Pipeline):
            pipe.scripts.add(script)
            pipe.evalsha(script.sha, len(self.keys), *self.keys, *self.args)
        else:
            # redis-py blocks ``evalsha`` on a cluster pipeline; the raw command is routed
            # by its keys like any other (they share one slot: ``queue_core.keys``).
            pipe.execute_command("EVALSHA", script.sha, len(self.keys), *self.keys, *self.args)  # type: ignore[no-untyped-call]


def _pipelined(client: Client, calls: Sequence[ScriptCall[Any]]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for call in calls:
        call.queue(pipe)
    replies: list[Any] = pipe.execute(raise_on_error=False)
    return replies


def calls_pipelined(client: Client, calls: Sequence[ScriptCall[R]]) -> list[R | Exception]:
    """Run every call in one pipelined round trip (plus redis-py's SCRIPT EXISTS).

    Each script stays atomic on its own; the pipeline only saves round trips. An error
    reply comes back in its place as the exception object, for the caller to judge with
    ``queue_core.errors``; connection errors and timeouts raise. A NOSCRIPT reply (the
    server flushed its scripts between redis-py's check and the run) means that call
    did nothing. No calls, no round trip.

    On a cluster the pipeline is split by node, one round trip to each primary that
    serves one of the calls' streams, with no SCRIPT EXISTS first: the calls that come
    back NOSCRIPT (a primary that never ran the script, or a replica promoted since)
    did nothing, so their scripts are loaded on every primary and those calls run
    once more.
    """
    if not calls:
        return []
    replies = _pipelined(client, calls)
    if isinstance(client, RedisCluster):
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            for script in {calls[i].script.name: calls[i].script for i in missing}.values():
                client.script_load(script.registered(client).script)
            for i, reply in zip(
                missing, _pipelined(client, [calls[i] for i in missing]), strict=True
            ):
                replies[i] = reply
    return [
        reply if isinstance(reply, Exception) else call.parse(reply)
        for call, reply in zip(calls, replies, strict=True)
    ]


def entry_refusal(reply: Sequence[Any], entry_id: str) -> Refusal:
    """The refusal of a script that guards one pending entry (``{false, kind, …}``).

    The kinds the pending-entry scripts share; a script with kinds of its own reads those
    first.
    """
    kind = text(reply[1])
    extra = [text(v) if isinstance(v, bytes) else v for v in reply[2:]]
    if kind == "not-pending":
        message = f"entry {entry_id} is not pending in this group (acknowledged or moved already)"
    elif kind == "payload-missing":
        message = (
            f"entry {entry_id} was deleted from the stream while pending (payload missing); "
            "dead-letter or acknowledge it instead"
        )
    elif kind == "owner-changed":
        message = f"changed since you looked: entry {entry_id} is now owned by {extra[0]}"
    elif kind == "idle-changed":
        message = (
            f"changed since you looked: entry {entry_id} was delivered again "
            f"(idle {extra[0]} ms now)"
        )
    elif kind == "deliveries-changed":
        message = (
            f"changed since you looked: entry {entry_id} has a delivery count of {extra[0]} now"
        )
    else:
        message = f"entry {entry_id}: {kind}"
    return Refusal(kind, message)


def guard(min_idle_ms: int | None) -> str:
    """An optional idle-time guard as a script argument (``''`` for none)."""
    return "" if min_idle_ms is None else str(min_idle_ms)
