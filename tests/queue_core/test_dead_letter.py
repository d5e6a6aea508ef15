import redis

from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.factories import make_pending


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
