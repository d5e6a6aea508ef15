"""The dead-letter stream against real Redis: the move, replay, delete and purge."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytest
import redis

from queue_core.jobs import Job, Outcome, PermanentFailure
from queue_core.keys import REPLAY_GROUP_FIELD, REPLAY_OF_FIELD, stream_keys
from queue_core.services import (
    dlq_delete,
    dlq_purge,
    dlq_replay,
    entry_dead_letter,
)
from queue_core.types import ActionRefused, TooManyFields
from queue_core.worker import process_entry
from tests.factories import add_entries, make_group, make_pending


def dead_letter_one(r: redis.Redis, stream: str, group: str = "g") -> tuple[str, str]:
    """A pending entry of ``group`` moved to the DLQ: (origin id, dlq id)."""
    [entry_id] = make_pending(r, stream, group, "c1", 1)
    moved = entry_dead_letter(client=r, stream=stream, group=group, entry_id=entry_id, reason="x")
    assert moved is not None
    return entry_id, moved.dlq_id


def read_new(r: redis.Redis, stream: str, group: str) -> list[tuple[str, dict[bytes, bytes]]]:
    reply: Any = r.xreadgroup(group, group + "-worker", {stream: ">"}, count=100)
    return [(i.decode(), f) for i, f in reply[0][1]] if reply else []


def handled_by(group: str, fields: dict[bytes, bytes]) -> bool:
    """What a worker of ``group`` does with an entry: run it, or ack a replay meant for another."""
    target = fields.get(REPLAY_GROUP_FIELD.encode())
    return target is None or target == group.encode()


class EntryDeadLetterTests:
    def test_moves_fields_and_metadata_and_acks(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        moved = entry_dead_letter(
            client=r,
            stream=stream,
            group="g",
            entry_id=entry_id,
            reason="poison",
            last_error="boom",
        )
        assert moved is not None and moved.consumer == "c1" and moved.deliveries == 1
        assert r.xpending(stream, "g")["pending"] == 0
        [(dlq_id, fields)] = r.xrange(stream_keys(stream).dlq)
        assert dlq_id.decode() == moved.dlq_id
        assert fields[b"n"] == b"0"
        assert fields[b"ackboard.origin-id"] == entry_id.encode()
        assert fields[b"ackboard.reason"] == b"poison"
        assert fields[b"ackboard.last-error"] == b"boom"
        assert fields[b"ackboard.payload-missing"] == b"0"

    def test_twice_leaves_one_copy(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        first = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
        second = entry_dead_letter(
            client=r, stream=stream, group="g", entry_id=entry_id, reason="x"
        )
        assert first is not None and second is None
        assert r.xlen(stream_keys(stream).dlq) == 1

    def test_stored_metadata_keeps_its_names_values_and_order(
        self, r: redis.Redis, stream: str
    ) -> None:
        # The names now reach the script through ARGV (queue_core.keys): entries already
        # stored must read the same, so the wire format is spelled out here, not imported.
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        moved = entry_dead_letter(
            client=r, stream=stream, group="g", entry_id=entry_id, reason="poison",
            last_error="boom", operator="alice",
        )  # fmt: skip
        assert moved is not None
        [(_, fields)] = r.xrange(stream_keys(stream).dlq)  # a dict in the reply's order
        names, values = list(fields), list(fields.values())
        assert names == [
            b"n", b"payload",
            b"ackboard.origin-stream", b"ackboard.origin-group", b"ackboard.origin-id",
            b"ackboard.consumer", b"ackboard.deliveries", b"ackboard.last-error",
            b"ackboard.reason", b"ackboard.operator", b"ackboard.dead-lettered-at",
            b"ackboard.payload-missing",
        ]  # fmt: skip
        assert values[:10] == [
            b"0", b'{"n": 0}', stream.encode(), b"g", entry_id.encode(), b"c1", b"1",
            b"boom", b"poison", b"alice",
        ]  # fmt: skip
        assert values[10].isdigit() and values[11] == b"0"


def wide_pending(r: redis.Redis, stream: str, n_fields: int, group: str = "g") -> str:
    """A pending entry of ``group`` with ``n_fields`` fields."""
    with contextlib.suppress(redis.ResponseError):  # BUSYGROUP: it exists already
        make_group(r, stream, group)
    entry_id = r.xadd(stream, {f"f{i}": "v" for i in range(n_fields)}).decode()
    r.xreadgroup(group, "c1", {stream: ">"}, count=1)
    return entry_id


class TooManyFieldsTests:
    """Lua's unpack() returns at most ~8,000 values: a wider entry cannot be copied by one
    script. That is a certain refusal (409), not an outage (503 "may have run")."""

    def test_an_entry_too_wide_to_copy_is_refused_and_stays_pending(
        self, r: redis.Redis, stream: str
    ) -> None:
        entry_id = wide_pending(r, stream, 4_000)
        with pytest.raises(TooManyFields) as refused:
            entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
        assert isinstance(refused.value, ActionRefused)
        assert refused.value.fields == 4_000 and refused.value.limit < 4_000
        message = str(refused.value)
        assert f"entry {entry_id} has 4000 fields" in message
        assert f"at most {refused.value.limit}" in message and "Acknowledge it" in message
        assert r.xpending(stream, "g")["pending"] == 1
        assert r.exists(stream_keys(stream).dlq) == 0

    def test_the_widest_entry_allowed_moves_and_replays(self, r: redis.Redis, stream: str) -> None:
        probe = wide_pending(r, stream, 5_000)
        with pytest.raises(TooManyFields) as refused:
            entry_dead_letter(client=r, stream=stream, group="g", entry_id=probe, reason="x")
        limit = refused.value.limit
        entry_id = wide_pending(r, stream, limit)
        moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
        assert moved is not None
        [(_, fields)] = r.xrange(stream_keys(stream).dlq)
        assert len(fields) == limit + 10  # the entry's fields and Ackboard's metadata
        replayed = dlq_replay(client=r, stream=stream, dlq_id=moved.dlq_id)
        [(_, back)] = r.xrange(stream, replayed.new_id, replayed.new_id)
        assert len(back) == limit + 2  # and the replay's target group and origin id

    def test_worker_says_a_too_wide_entry_is_still_pending(
        self, r: redis.Redis, stream: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        entry_id = wide_pending(r, stream, 4_000)
        [(_, fields)] = r.xrange(stream, entry_id, entry_id)

        def handler(job: Job) -> None:
            raise PermanentFailure("bad order")

        with caplog.at_level(logging.INFO, logger="queue_core.worker"):
            outcome = process_entry(
                client=r, stream=stream, group="g", consumer="c1", entry_id=entry_id,
                fields=fields, handler=handler,
            )  # fmt: skip
        # Not NOT_PENDING ("another consumer took it"): it is still here, in our name.
        assert outcome is Outcome.DEAD_LETTER_FAILED
        assert r.xpending(stream, "g")["pending"] == 1
        assert r.exists(stream_keys(stream).dlq) == 0
        errors = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert any(entry_id in m and "4000 fields" in m for m in errors), errors

    def test_replay_of_a_dead_letter_too_wide_to_copy_is_refused_and_kept(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "g")
        fields = {f"f{i}": "v" for i in range(4_000)}
        fields |= {
            "ackboard.origin-stream": stream,
            "ackboard.origin-group": "g",
            "ackboard.origin-id": "1-0",
        }
        dlq_id = r.xadd(stream_keys(stream).dlq, fields).decode()  # as a producer might
        with pytest.raises(TooManyFields, match="has 4000 fields"):
            dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        assert r.xlen(stream_keys(stream).dlq) == 1
        assert r.xlen(stream) == 0


class DlqReplayTests:
    def test_adds_original_fields_for_origin_group_and_removes_from_dlq(
        self, r: redis.Redis, stream: str
    ) -> None:
        origin_id, dlq_id = dead_letter_one(r, stream)
        replayed = dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        assert replayed.group == "g" and replayed.origin_id == origin_id
        assert replayed.dlq_id == dlq_id and replayed.new_id != origin_id
        assert r.xlen(stream_keys(stream).dlq) == 0
        [(new_id, fields)] = r.xrange(stream, replayed.new_id, replayed.new_id)
        assert fields == {
            b"n": b"0",
            b"payload": b'{"n": 0}',
            REPLAY_GROUP_FIELD.encode(): b"g",
            REPLAY_OF_FIELD.encode(): origin_id.encode(),
        }

    def test_runs_once_in_the_right_group_on_a_two_group_stream(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "billing")
        make_group(r, stream, "emails")
        add_entries(r, stream, 1)
        # Both groups handle the original; billing fails it until it is dead-lettered.
        [(origin_id, _)] = read_new(r, stream, "billing")
        [(emails_id, _)] = read_new(r, stream, "emails")
        r.xack(stream, "emails", emails_id)  # emails handled the original once, successfully
        moved = entry_dead_letter(
            client=r, stream=stream, group="billing", entry_id=origin_id, reason="poison"
        )
        assert moved is not None
        replayed = dlq_replay(client=r, stream=stream, dlq_id=moved.dlq_id)

        runs = {}
        for group in ("billing", "emails"):
            [(entry_id, fields)] = read_new(r, stream, group)
            assert entry_id == replayed.new_id
            runs[group] = handled_by(group, fields)
            r.xack(stream, group, entry_id)  # both ack: one after running, one without
        assert runs == {"billing": True, "emails": False}
        assert r.xpending(stream, "billing")["pending"] == 0
        assert r.xpending(stream, "emails")["pending"] == 0

    def test_replay_of_a_replay_keeps_one_target_field(self, r: redis.Redis, stream: str) -> None:
        _, dlq_id = dead_letter_one(r, stream)
        first = dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        [(entry_id, _)] = read_new(r, stream, "g")
        moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
        second = dlq_replay(client=r, stream=stream, dlq_id=moved.dlq_id)
        [(_, fields)] = r.xrange(stream, second.new_id, second.new_id)
        assert fields[REPLAY_OF_FIELD.encode()] == first.new_id.encode()
        assert list(fields).count(REPLAY_GROUP_FIELD.encode()) == 1

    def test_twice_is_refused_and_adds_one_entry(self, r: redis.Redis, stream: str) -> None:
        _, dlq_id = dead_letter_one(r, stream)
        dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        with pytest.raises(ActionRefused, match="does not exist"):
            dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        assert r.xlen(stream) == 2  # the original and one replay

    def test_payload_missing_entry_is_refused_and_kept(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        r.xdel(stream, entry_id)
        moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="x")
        with pytest.raises(ActionRefused, match="no payload"):
            dlq_replay(client=r, stream=stream, dlq_id=moved.dlq_id)
        assert r.xlen(stream_keys(stream).dlq) == 1
        assert r.xlen(stream) == 0

    def test_deleted_group_is_refused_and_kept(self, r: redis.Redis, stream: str) -> None:
        _, dlq_id = dead_letter_one(r, stream)
        r.xgroup_destroy(stream, "g")
        with pytest.raises(ActionRefused, match="no longer exists"):
            dlq_replay(client=r, stream=stream, dlq_id=dlq_id)
        assert r.xlen(stream_keys(stream).dlq) == 1

    def test_unknown_and_malformed_ids(self, r: redis.Redis, stream: str) -> None:
        dead_letter_one(r, stream)
        with pytest.raises(ActionRefused, match="does not exist"):
            dlq_replay(client=r, stream=stream, dlq_id="1-0")
        with pytest.raises(ValueError, match="not a stream id"):
            dlq_replay(client=r, stream=stream, dlq_id="1-0; DEL x")
        assert r.xlen(stream_keys(stream).dlq) == 1


class DlqDeleteTests:
    def test_deletes_one_and_reports_its_origin(self, r: redis.Redis, stream: str) -> None:
        origin_id, dlq_id = dead_letter_one(r, stream)
        _, other = dead_letter_one(r, stream)
        result = dlq_delete(client=r, stream=stream, dlq_id=dlq_id)
        assert result.deleted and result.origin_group == "g" and result.origin_id == origin_id
        assert [i.decode() for i, _ in r.xrange(stream_keys(stream).dlq)] == [other]

    def test_twice_reports_nothing_deleted(self, r: redis.Redis, stream: str) -> None:
        _, dlq_id = dead_letter_one(r, stream)
        dlq_delete(client=r, stream=stream, dlq_id=dlq_id)
        again = dlq_delete(client=r, stream=stream, dlq_id=dlq_id)
        assert not again.deleted and again.origin_id == ""

    def test_malformed_id_is_a_value_error(self, r: redis.Redis, stream: str) -> None:
        dead_letter_one(r, stream)
        with pytest.raises(ValueError):
            dlq_delete(client=r, stream=stream, dlq_id="-")
        assert r.xlen(stream_keys(stream).dlq) == 1


class DlqPurgeTests:
    def test_empties_the_dlq_when_unchanged(self, r: redis.Redis, stream: str) -> None:
        dead_letter_one(r, stream)
        _, newest = dead_letter_one(r, stream)
        result = dlq_purge(client=r, stream=stream, expected_length=2, newest_id=newest)
        assert result.deleted == 2
        assert r.exists(stream_keys(stream).dlq) == 0
        assert r.xlen(stream) == 2  # the stream itself is untouched

    def test_refuses_when_something_arrived_since(self, r: redis.Redis, stream: str) -> None:
        _, newest = dead_letter_one(r, stream)
        dead_letter_one(r, stream)  # dead-lettered after the operator looked
        with pytest.raises(ActionRefused, match="^changed since you looked.*2 entries"):
            dlq_purge(client=r, stream=stream, expected_length=1, newest_id=newest)
        assert r.xlen(stream_keys(stream).dlq) == 2

    def test_same_length_but_different_newest_is_refused(self, r: redis.Redis, stream: str) -> None:
        first_origin, first = dead_letter_one(r, stream)
        dlq_delete(client=r, stream=stream, dlq_id=first)
        dead_letter_one(r, stream)
        with pytest.raises(ActionRefused, match="changed since you looked"):
            dlq_purge(client=r, stream=stream, expected_length=1, newest_id=first)
        assert r.xlen(stream_keys(stream).dlq) == 1

    def test_empty_dlq_purges_nothing(self, r: redis.Redis, stream: str) -> None:
        result = dlq_purge(client=r, stream=stream, expected_length=0)
        assert result.deleted == 0

    @pytest.mark.parametrize("length", [-1, True])
    def test_bad_expected_length(self, r: redis.Redis, stream: str, length: int) -> None:
        dead_letter_one(r, stream)
        with pytest.raises(ValueError):
            dlq_purge(client=r, stream=stream, expected_length=length)
        assert r.xlen(stream_keys(stream).dlq) == 1
