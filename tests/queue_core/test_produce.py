"""Produce and Duplicate in queue_core (``queue_core.produce``), on the private Redis:
the new entry's fields and id, the refusals (missing stream, wrong type, bounds,
reserved names, unknown ids) with nothing changed, and the event each publishes."""

from __future__ import annotations

import json

import pytest
import redis

from queue_core.keys import EVENTS_CHANNEL, REPLAY_GROUP_FIELD, REPLAY_OF_FIELD
from queue_core.produce import (
    MAX_ENTRY_BYTES,
    MAX_FIELDS,
    MAX_NAME_BYTES,
    entry_duplicate,
    stream_produce,
)
from queue_core.types import ActionRefused
from tests.waiting import wait_until


def _entries(r: redis.Redis, stream: str) -> list[tuple[str, list[tuple[bytes, bytes]]]]:
    return [(i.decode(), list(f.items())) for i, f in r.xrange(stream)]


class StreamProduceTests:
    def test_adds_the_fields_in_their_order_and_returns_the_new_id(
        self, r: redis.Redis, stream: str
    ) -> None:
        r.xadd(stream, {"seed": "1"})
        fields = [(b"type", b"order.created"), (b"payload", b'{"order":7}'), (b"bin", b"\xff\x00")]
        done = stream_produce(client=r, stream=stream, fields=fields)
        assert _entries(r, stream)[-1] == (done.new_id, fields)
        assert done.stream == stream

    def test_a_missing_stream_is_refused_unless_created(self, r: redis.Redis, stream: str) -> None:
        with pytest.raises(ActionRefused, match="there is no stream"):
            stream_produce(client=r, stream=stream, fields=[(b"a", b"1")])
        assert not r.exists(stream)
        done = stream_produce(client=r, stream=stream, fields=[(b"a", b"1")], create=True)
        assert _entries(r, stream) == [(done.new_id, [(b"a", b"1")])]

    def test_a_key_that_is_not_a_stream_is_refused(self, r: redis.Redis, stream: str) -> None:
        r.set(stream, "x")
        with pytest.raises(ActionRefused, match="not a stream"):
            stream_produce(client=r, stream=stream, fields=[(b"a", b"1")], create=True)
        assert r.get(stream) == b"x"

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ([], "no field"),
            ([(b"", b"1")], "no name"),
            ([(b"ackboard.replay-group", b"g")], "reserved"),
            ([(b"a", b"1"), (b"a", b"2")], "appears twice"),
            ([(b"n" * (MAX_NAME_BYTES + 1), b"1")], "at most"),
            ([(f"f{i}".encode(), b"") for i in range(MAX_FIELDS + 1)], "at most"),
            ([(b"big", b"x" * MAX_ENTRY_BYTES)], "at most"),
        ],
        ids=["none", "no-name", "reserved", "twice", "long-name", "too-many", "too-big"],
    )
    def test_fields_past_a_bound_are_refused_before_redis(
        self, r: redis.Redis, stream: str, fields: list[tuple[bytes, bytes]], message: str
    ) -> None:
        r.xadd(stream, {"seed": "1"})
        with pytest.raises(ValueError, match=message):
            stream_produce(client=r, stream=stream, fields=fields)
        assert r.xlen(stream) == 1

    def test_publishes_an_action_event(self, r: redis.Redis, stream: str) -> None:
        r.xadd(stream, {"seed": "1"})
        sub = r.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        sub.subscribe(EVENTS_CHANNEL)
        wait_until(lambda: r.pubsub_numsub(EVENTS_CHANNEL)[0][1] >= 1, 5, "the subscription")
        done = stream_produce(client=r, stream=stream, fields=[(b"a", b"1")])
        seen: list[dict[str, object]] = []

        def got() -> bool:
            message = sub.get_message(timeout=0.2)
            if message is not None:
                seen.append(json.loads(message["data"]))
            return any(e.get("stream") == stream for e in seen)

        wait_until(got, 5, "the produce event")
        sub.close()
        event = next(e for e in seen if e.get("stream") == stream)
        assert event["action"] == "produce" and event["ids"] == [done.new_id]


class EntryDuplicateTests:
    def test_copies_the_entry_s_own_fields_to_a_new_entry(
        self, r: redis.Redis, stream: str
    ) -> None:
        source = r.xadd(
            stream,
            {"type": "a", "blob": b"\xff\xfe", REPLAY_GROUP_FIELD: "g", REPLAY_OF_FIELD: "1-0"},
        ).decode()
        r.xadd(stream, {"later": "1"})
        done = entry_duplicate(client=r, stream=stream, entry_id=source)
        assert (done.source_id, done.fields, done.left_out) == (source, 2, 2)
        assert _entries(r, stream)[-1] == (done.new_id, [(b"type", b"a"), (b"blob", b"\xff\xfe")])
        assert r.xlen(stream) == 3

    @pytest.mark.parametrize("missing", ["1-0", "deleted"])
    def test_an_unknown_or_deleted_id_is_refused(
        self, r: redis.Redis, stream: str, missing: str
    ) -> None:
        gone = r.xadd(stream, {"a": "1"}).decode()
        r.xadd(stream, {"b": "2"})
        r.xdel(stream, gone)
        entry_id = gone if missing == "deleted" else missing
        with pytest.raises(ActionRefused, match="no entry"):
            entry_duplicate(client=r, stream=stream, entry_id=entry_id)
        assert r.xlen(stream) == 1

    def test_a_missing_stream_is_refused(self, r: redis.Redis, stream: str) -> None:
        with pytest.raises(ActionRefused, match="no entry"):
            entry_duplicate(client=r, stream=stream, entry_id="1-0")
        assert not r.exists(stream)

    @pytest.mark.parametrize("bad", ["", "abc", "1-", "99999999999999999999999-0", "<b>1-0</b>"])
    def test_a_malformed_id_is_a_value_error(self, r: redis.Redis, stream: str, bad: str) -> None:
        with pytest.raises(ValueError, match="not a stream id"):
            entry_duplicate(client=r, stream=stream, entry_id=bad)

    def test_an_entry_of_only_ackboard_fields_has_nothing_to_copy(
        self, r: redis.Redis, stream: str
    ) -> None:
        source = r.xadd(stream, {REPLAY_GROUP_FIELD: "g"}).decode()
        with pytest.raises(ActionRefused, match="nothing to copy"):
            entry_duplicate(client=r, stream=stream, entry_id=source)
        assert r.xlen(stream) == 1
