"""queue_core.clock: the one wall clock, and the frozen one tests put in its place.

The frozen clock is what makes an age, a staleness or a due time the same answer at any
second of any date: these tests check that it reaches the code that judges them (a
failure record's time, a relative position, a worker's heartbeats and their staleness)
and that it goes away with its block.
"""

from __future__ import annotations

import time

import pytest
import redis

from queue_core import clock as queue_clock
from queue_core.admin import position_parse
from queue_core.control import HEARTBEAT_STALE_MS, heartbeats_read
from queue_core.failures import failure_from_exception
from tests.clock import FIXED_MS, FrozenClock, frozen_clock
from tests.factories import add_entries
from tests.queue_core.worker.helpers import new_worker, running, wait_until


class ClockTests:
    def test_the_system_clock_is_read_when_nothing_is_frozen(self) -> None:
        before = time.time_ns() // 1_000_000
        now = queue_clock.now_ms()
        after = time.time_ns() // 1_000_000
        assert before <= now <= after
        assert before / 1000 <= queue_clock.now_s() <= time.time()
        assert queue_clock.now_utc().tzinfo is not None

    def test_a_frozen_clock_is_read_everywhere_until_its_block_ends(self) -> None:
        with frozen_clock() as frozen:
            assert queue_clock.now_ms() == FIXED_MS == frozen.ms
            assert queue_clock.now_s() == FIXED_MS / 1000
            assert queue_clock.now_utc() == frozen.utc
            assert f"{frozen.utc:%Y-%m-%d %H:%M:%S}" == "2026-03-14 15:09:26"
            with frozen_clock(1_000) as inner:
                assert queue_clock.now_ms() == 1_000
                inner.advance(5, s=2)
                assert queue_clock.now_ms() == 3_005
            assert queue_clock.now_ms() == FIXED_MS  # the outer one is back
            frozen.advance(s=60)
            assert queue_clock.now_ms() == FIXED_MS + 60_000
        before = time.time_ns() // 1_000_000
        assert queue_clock.now_ms() >= before  # the system's clock again

    def test_it_only_moves_forward(self, clock: FrozenClock) -> None:
        with pytest.raises(ValueError, match="only moves forward"):
            clock.advance(-1)
        assert clock.ms == FIXED_MS
        assert clock.entry_id_at(ago_ms=2_000, seq=3) == f"{FIXED_MS - 2_000}-3"


class FrozenReadersTests:
    """Each reader of the time of day answers from the frozen clock."""

    def test_a_failure_record_is_stamped_with_the_clock(self, clock: FrozenClock) -> None:
        record = failure_from_exception(ValueError("no"), group="g", entry_id="1-0",
                                        consumer="c", attempt=1, duration_ms=1.0)  # fmt: skip
        assert record.fields()["failed_at_ms"] == str(FIXED_MS)

    def test_a_relative_position_counts_back_from_the_clock(self, clock: FrozenClock) -> None:
        assert position_parse("-15m").time_ms == FIXED_MS - 15 * 60_000
        assert position_parse("now").time_ms == FIXED_MS
        clock.advance(s=1)
        assert position_parse("-1d").time_ms == FIXED_MS + 1_000 - 86_400_000

    def test_a_workers_heartbeat_is_stale_exactly_past_the_limit(
        self, r: redis.Redis, redis_url: str, stream: str, clock: FrozenClock
    ) -> None:
        add_entries(r, stream, 1)
        worker = new_worker(redis_url, stream, lambda job: None)
        with running(worker):
            [beat] = wait_until(lambda: heartbeats_read(client=r, stream=stream, group="g"),
                                what="the worker's first heartbeat")  # fmt: skip
            assert (beat.started_ms, beat.seen_ms) == (FIXED_MS, FIXED_MS)
            # Staleness is judged against the reader's clock: live up to the limit.
            assert beat.live(queue_clock.now_ms())
            clock.advance(HEARTBEAT_STALE_MS)
            assert beat.live(queue_clock.now_ms())
            clock.advance(1)
            assert not beat.live(queue_clock.now_ms())
        [last] = heartbeats_read(client=r, stream=stream, group="g")
        assert last.stopped_ms == last.seen_ms == clock.ms  # its last beat, on the way out
