"""Regression tests from the correctness review of queue_core.bulk: a bulk request that
has already changed entries must report them, whatever happens to the rest."""

from __future__ import annotations

import redis

from queue_core.bulk import bulk_dead_letter
from queue_core.keys import stream_keys
from queue_core.types import BulkOutcome
from tests.factories import make_group


class BulkPartialErrorTests:
    def test_a_script_error_on_one_entry_still_reports_the_ones_moved(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_group(r, stream, "g")
        first = r.xadd(stream, {"n": "1"}).decode()
        # More fields than one Lua call can pass on (unpack's limit): its move is refused.
        huge = r.xadd(stream, {f"f{i}": "v" for i in range(5000)}).decode()
        last = r.xadd(stream, {"n": "3"}).decode()
        r.xreadgroup("g", "w1", {stream: ">"})

        result = bulk_dead_letter(
            client=r, stream=stream, group="g", snapshot_id=last,
            reason="cleanup", operator="alice", ids=[first, huge, last],
        )  # fmt: skip

        assert result.done == (first, last)  # moved, so the audit must name them
        [refused] = result.skipped
        assert refused.entry_id == huge and refused.outcome is BulkOutcome.REFUSED
        assert f"entry {huge} has 5000 fields" in refused.detail
        rows = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert [row["message_id"].decode() for row in rows] == [huge]  # not lost
        assert r.xlen(stream_keys(stream).dlq) == 2
