"""Edited replays against real Redis (single server and the session's Redis Cluster):
the script's refusals, nothing changed by a refusal, and settling."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
import redis

from queue_core.connection import Client
from queue_core.edited_replays import (
    dead_letter_edit_replay,
    edited_replays_read,
    edited_replays_settle,
)
from queue_core.keys import stream_keys
from queue_core.services import dlq_delete, dlq_replay, entry_dead_letter
from queue_core.types import ActionRefused


def dead_letter(r: Client, stream: str) -> tuple[str, str]:
    with contextlib.suppress(redis.ResponseError):
        r.xgroup_create(stream, "g", id="0", mkstream=True)
    origin = r.xadd(stream, {"payload": "bad"})
    origin_id = origin.decode() if isinstance(origin, bytes) else str(origin)
    r.xreadgroup("g", "c", {stream: ">"})
    moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=origin_id, reason="x")
    assert moved is not None
    return origin_id, moved.dlq_id


def replay(r: Client, stream: str, dlq_id: str, **kw: Any) -> Any:
    return dead_letter_edit_replay(
        client=r, stream=stream, dlq_id=dlq_id, fields=[(b"payload", b"good")], operator="o", **kw
    )


class RefusalTests:
    def test_refusals_change_nothing(self, r: redis.Redis, stream: str) -> None:
        _, dlq_id = dead_letter(r, stream)
        length = r.xlen(stream)
        cases: list[tuple[dict[str, Any], str]] = [
            ({"dlq_id": "1-1"}, "does not exist"),
            ({"fields": []}, "no field left"),
            ({"fields": [(b"ackboard.replay-group", b"other")]}, "reserved"),
        ]
        for overrides, says in cases:
            args: dict[str, Any] = {
                "client": r,
                "stream": stream,
                "dlq_id": dlq_id,
                "fields": [(b"payload", b"x")],
                "operator": "o",
                **overrides,
            }
            with pytest.raises(ActionRefused, match=says):
                dead_letter_edit_replay(**args)
        r.xgroup_destroy(stream, "g")
        with pytest.raises(ActionRefused, match="no longer exists"):
            replay(r, stream, dlq_id)
        assert r.xlen(stream) == length
        assert not r.exists(stream_keys(stream).dlq_edits)
        with pytest.raises(ValueError):
            replay(r, stream, "nope")

    def test_awaiting_refused_unless_forced(self, r: redis.Redis, stream: str) -> None:
        _, dlq_id = dead_letter(r, stream)
        first = replay(r, stream, dlq_id)
        with pytest.raises(ActionRefused, match="awaits success"):
            replay(r, stream, dlq_id)
        second = replay(r, stream, dlq_id, force=True)
        assert second.previous_new_id == first.new_id
        record = edited_replays_read(client=r, stream=stream, dlq_ids=[dlq_id, "1-1"])
        assert list(record) == [dlq_id]
        assert record[dlq_id].new_id == second.new_id and record[dlq_id].state == "awaiting"
        assert record[dlq_id].operator == "o" and record[dlq_id].at_ms > 0

    def test_plain_replay_refused_while_an_edit_awaits(self, r: redis.Redis, stream: str) -> None:
        # A plain Replay (or a redrive) of the original while its edited replay awaits
        # success would run the job twice; once the edit failed again, it is allowed.
        _, dlq_id = dead_letter(r, stream)
        edited = replay(r, stream, dlq_id)
        length = r.xlen(stream)
        with pytest.raises(ActionRefused, match="awaits success"):
            dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        assert r.xlen(stream) == length and r.xlen(stream_keys(stream).dlq) == 1
        key = stream_keys(stream).dlq_edits
        record = json.loads(r.hget(key, dlq_id))
        r.hset(key, dlq_id, json.dumps({**record, "state": "failed"}))
        replayed = dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        assert replayed.new_id != edited.new_id
        assert r.xlen(stream_keys(stream).dlq) == 0 and not r.hexists(key, dlq_id)


class SettleTests:
    def test_deleted_dead_letter_drops_its_record(self, r: redis.Redis, stream: str) -> None:
        _, dlq_id = dead_letter(r, stream)
        replay(r, stream, dlq_id)
        dlq_delete(client=r, stream=stream, dlq_id=dlq_id)
        assert edited_replays_settle(r, stream) == 1
        assert not r.exists(stream_keys(stream).dlq_edits)

    def test_acked_by_someone_else_counts_only_for_its_group(
        self, r: redis.Redis, stream: str
    ) -> None:
        _, dlq_id = dead_letter(r, stream)
        r.xgroup_create(stream, "other", id="0")
        done = replay(r, stream, dlq_id)
        r.xreadgroup("other", "x", {stream: ">"})
        r.xack(stream, "other", done.new_id)  # another group's ack settles nothing
        assert edited_replays_settle(r, stream) == 0
        assert edited_replays_settle(r, "no-such-stream") == 0
        r.xreadgroup("g", "c", {stream: ">"})
        r.xack(stream, "g", done.new_id)
        assert edited_replays_settle(r, stream) == 1
        assert r.xlen(stream_keys(stream).dlq) == 0


class ClusterTests:
    def test_replay_and_settle_on_a_cluster(self, rc: Client, cprefix: str) -> None:
        for stream in (cprefix + "orders", "{" + cprefix + "t}orders"):
            _, dlq_id = dead_letter(rc, stream)
            done = replay(rc, stream, dlq_id)
            state = json.loads(rc.hget(stream_keys(stream).dlq_edits, dlq_id) or b"{}")
            assert state["new_id"] == done.new_id
            rc.xreadgroup("g", "c", {stream: ">"})
            rc.xack(stream, "g", done.new_id)
            assert edited_replays_settle(rc, stream) == 1
            assert rc.xlen(stream_keys(stream).dlq) == 0
