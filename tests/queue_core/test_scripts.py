"""The script bindings: registered once, run on a client or pipelined, replies parsed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import queue_core.scripts
from queue_core.bulk import bulk_retry
from queue_core.results import Acknowledged, Retried
from queue_core.scripts import ACKNOWLEDGE, RETRY, Refusal, calls_pipelined
from queue_core.scripts.binding import script_source
from queue_core.types import ActionRefused, TooManyFields
from tests.factories import make_pending
from tests.redis_server import RedisServer


@pytest.fixture
def own(own_redis: RedisServer) -> Iterator[redis.Redis]:
    """A client on a server of its own: SCRIPT FLUSH and command counts would disturb,
    or be disturbed by, other tests on a shared one."""
    client = redis.Redis.from_url(own_redis.url)
    try:
        yield client
    finally:
        client.close()


def calls_of(client: redis.Redis, command: str) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


class LuaScriptTests:
    def test_registered_once_and_reused_by_every_client(self, redis_url: str) -> None:
        first, second = (redis.Redis.from_url(redis_url) for _ in range(2))
        try:
            assert RETRY.registered(first) is RETRY.registered(second)
            assert RETRY.registered(first) is not ACKNOWLEDGE.registered(first)
        finally:
            first.close()
            second.close()

    def test_run_parses_success_and_refusal(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        call = RETRY.call(stream=stream, group="g", entry_id=entry_id, idle_ms=5_000)
        done = call.run(r)
        assert isinstance(done, Retried) and done.consumer == "c1" and done.idle_ms >= 5_000
        refused = RETRY.call(stream=stream, group="g", entry_id="1-1", idle_ms=0).run(r)
        assert isinstance(refused, Refusal) and refused.kind == "not-pending"
        assert "entry 1-1 is not pending" in refused.message

    def test_run_turns_a_missing_group_into_a_refusal(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        call = ACKNOWLEDGE.call(stream=stream, group="nope", entry_id=entry_id)
        with pytest.raises(ActionRefused, match="no consumer group 'nope'") as refused:
            call.run(r)
        assert isinstance(refused.value.__cause__, redis.ResponseError)

    def test_run_loads_the_script_again_after_a_flush(self, own: redis.Redis) -> None:
        [entry_id] = make_pending(own, "s", "g", "c1", 1)
        ACKNOWLEDGE.call(stream="s", group="g", entry_id="1-1").run(own)
        own.script_flush()
        done = ACKNOWLEDGE.call(stream="s", group="g", entry_id=entry_id).run(own)
        assert isinstance(done, Acknowledged) and done.was_pending


class RefusalTests:
    def test_a_too_wide_entry_is_its_own_refusal(self) -> None:
        wide = Refusal("too-many-fields", "entry 1-0 has 9000 fields", fields=9000, limit=3985)
        error = wide.error()
        assert isinstance(error, TooManyFields) and (error.fields, error.limit) == (9000, 3985)
        other = Refusal("owner-changed", "changed since you looked").error()
        assert type(other) is ActionRefused and str(other) == "changed since you looked"


class CallsPipelinedTests:
    def test_one_pipeline_and_one_script_check_for_many_calls(self, own: redis.Redis) -> None:
        ids = make_pending(own, "s", "g", "c1", 3)
        calls = [RETRY.call(stream="s", group="g", entry_id=i, idle_ms=1) for i in ids]
        calls_pipelined(own, calls)  # the first time loads the script
        before = calls_of(own, "evalsha"), calls_of(own, "script|exists")
        replies = calls_pipelined(
            own, [*calls, RETRY.call(stream="s", group="g", entry_id="1-1", idle_ms=1)]
        )
        assert [type(reply) for reply in replies] == [Retried, Retried, Retried, Refusal]
        after = calls_of(own, "evalsha"), calls_of(own, "script|exists")
        assert (after[0] - before[0], after[1] - before[1]) == (4, 1)

    def test_error_replies_come_back_in_place(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        ok = ACKNOWLEDGE.call(stream=stream, group="g", entry_id=entry_id)
        missing = ACKNOWLEDGE.call(stream=stream, group="nope", entry_id=entry_id)
        first, second = calls_pipelined(r, [missing, ok])
        assert isinstance(first, redis.ResponseError) and "NOGROUP" in str(first)
        assert isinstance(second, Acknowledged) and second.was_pending

    def test_no_calls_no_round_trip(self, own: redis.Redis) -> None:
        before = calls_of(own, "script|exists")
        assert calls_pipelined(own, []) == []
        assert calls_of(own, "script|exists") == before

    def test_reloads_scripts_after_a_script_flush(self, own: redis.Redis) -> None:
        ids = make_pending(own, "s", "g", "c1", 3)
        bulk_retry(client=own, stream="s", group="g", snapshot_id=ids[-1], ids=ids[:1])
        own.script_flush()
        result = bulk_retry(client=own, stream="s", group="g", snapshot_id=ids[-1], ids=ids)
        assert result.done == tuple(ids)


class PreludeTests:
    """The helpers several scripts use are written once, in prelude.lua (the scripts that
    use them are tested by behaviour in test_admin.py)."""

    SCRIPTS = sorted(
        p for p in (Path(queue_core.scripts.__file__).parent).glob("*.lua") if p.stem != "prelude"
    )

    def test_each_script_runs_behind_the_prelude_and_opens_with_its_header(self) -> None:
        prelude = (self.SCRIPTS[0].parent / "prelude.lua").read_text()
        helpers = re.findall(r"^local function (\w+)", prelude, re.MULTILINE)
        assert helpers == ["map", "numcmp", "idcmp", "group_of"]
        for path in self.SCRIPTS:
            own = path.read_text()
            assert script_source(path.stem).decode() == prelude + own
            assert own.startswith("-- ") and "-- returns" in own, path.name
            for name in helpers:
                assert f"local function {name}(" not in own, (path.name, name)
