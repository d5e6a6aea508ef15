"""The ack contract's decisions (queue_core.worker.contract), and that both paths share them.

The pure decisions are tested without Redis; the tests that drive ``process_entry`` and
``Worker`` side by side prove both paths reach the same verdict through the one home.
"""

from __future__ import annotations

from typing import Any

import redis

from queue_core import PermanentFailure, UnparseableEntry, process_entry
from queue_core.failures import MAX_MESSAGE
from queue_core.keys import stream_keys
from queue_core.parsing import PAYLOAD_MISSING_REASON
from queue_core.worker.contract import (
    REPLAY_KEY,
    RUN,
    SKIP,
    Admission,
    Settlement,
    entry_admit,
    handler_failed_settle,
    payload_missing_settle,
    unparseable_settle,
)
from tests.factories import make_pending
from tests.queue_core.worker.helpers import new_worker


def dead_letter_fields(r: redis.Redis, stream: str) -> dict[str, dict[str, str]]:
    """origin id -> the DLQ entry's metadata, decoded."""
    return {
        fields[b"ackboard.origin-id"].decode(): {k.decode(): v.decode() for k, v in fields.items()}
        for _, fields in r.xrange(stream_keys(stream).dlq)
    }


class UnparseableEntryTests:
    def test_both_paths_truncate_the_reason_and_last_error_the_same_way(
        self, r: redis.Redis, redis_url: str, stream: str
    ) -> None:
        message = "no such job kind " + "x" * 5000

        def parser(raw: Any) -> dict[str, str]:
            raise UnparseableEntry(message)

        [once_id] = make_pending(r, stream, "g", "w1", 1)
        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="w1", entry_id=once_id,
            fields={b"n": b"0"}, handler=print, parser=parser,
        )  # fmt: skip
        loop_id = r.xadd(stream, {"n": "1"}).decode()
        stats = new_worker(redis_url, stream, print, parser=parser).run(drain=True)

        assert outcome == "dead-lettered" and stats.dead_lettered == 1
        dead = dead_letter_fields(r, stream)
        once, loop = dead[once_id], dead[loop_id]
        assert once["ackboard.reason"] == loop["ackboard.reason"]
        assert once["ackboard.last-error"] == loop["ackboard.last-error"]
        assert len(once["ackboard.reason"]) == 2000
        assert once["ackboard.reason"].startswith("unparseable: no such job kind xxx")
        assert len(once["ackboard.last-error"]) == 2000


class EntryAdmitTests:
    def admit(self, raw: dict[bytes, bytes] | None, count: int = 1) -> Admission:
        return entry_admit(entry_id="1-0", raw=raw, delivery_count=count, group="g",
                           max_deliveries=3)  # fmt: skip

    def test_a_replay_for_another_group_is_skipped_before_anything_else(self) -> None:
        # Even past max deliveries: it is not this group's entry to dead-letter.
        assert self.admit({REPLAY_KEY: b"other", b"n": b"1"}, count=9) is SKIP

    def test_a_replay_for_this_group_runs(self) -> None:
        assert self.admit({REPLAY_KEY: b"g", b"n": b"1"}) is RUN
        assert self.admit({b"n": b"1"}) is RUN
        assert self.admit(None) is RUN  # the parser decides what a missing payload is

    def test_past_max_deliveries_it_is_dead_lettered_without_running(self) -> None:
        assert self.admit({b"n": b"1"}, count=3) is RUN
        admission = self.admit({b"n": b"1"}, count=4)
        assert admission.settle is not None and not admission.skip
        assert admission.settle.attempt == 4 and admission.settle.record is None
        assert admission.settle.dead_letter_reason == (
            "delivered 4 times (max 3) without an outcome; "
            "the handler may have crashed its worker each time"
        )


class HandlerFailedSettleTests:
    def settle(self, exc: BaseException, count: int) -> Settlement:
        return handler_failed_settle(entry_id="1-0", delivery_count=count, exc=exc,
                                     duration_ms=1.5, failed_at_ms=7, max_deliveries=3)  # fmt: skip

    def test_a_failure_before_the_last_delivery_stays_pending(self) -> None:
        item = self.settle(ValueError("card declined"), 2)
        assert item.dead_letter_reason is None
        assert item.last_error == "ValueError: card declined"
        assert (item.attempt, item.duration_ms, item.failed_at_ms) == (2, 1.5, 7)

    def test_the_last_delivery_is_dead_lettered(self) -> None:
        item = self.settle(ValueError("card declined"), 3)
        assert item.dead_letter_reason == "handler failed on delivery 3 of max 3"

    def test_a_permanent_failure_is_dead_lettered_with_a_bounded_reason(self) -> None:
        item = self.settle(PermanentFailure("550 " + "x" * 3000), 1)
        assert item.dead_letter_reason is not None
        assert item.dead_letter_reason.startswith("permanent failure: 550 xxx")
        assert len(item.dead_letter_reason) == MAX_MESSAGE
        assert len(item.last_error) == MAX_MESSAGE


class UnparseableSettleTests:
    def settle(self, message: str, *, raw_missing: bool = False) -> Settlement:
        return unparseable_settle(
            entry_id="1-0", raw_missing=raw_missing, delivery_count=2,
            exc=UnparseableEntry(message), group="g", consumer="w1", failed_at_ms=7,
        )  # fmt: skip

    def test_reason_and_last_error_are_cut_to_the_message_limit(self) -> None:
        item = self.settle("bad " + "x" * 5000)
        assert item.dead_letter_reason is not None
        assert item.dead_letter_reason.startswith("unparseable: bad xxx")
        assert len(item.dead_letter_reason) == MAX_MESSAGE
        assert item.last_error == ("bad " + "x" * 5000)[:MAX_MESSAGE]

    def test_the_record_names_the_rejection(self) -> None:
        item = self.settle("entry has no fields")
        assert item.record is not None
        assert (item.record.error_type, item.record.message) == (
            "UnparseableEntry", "entry has no fields",
        )  # fmt: skip
        assert (item.record.attempt, item.record.consumer, item.record.failed_at_ms) == (2, "w1", 7)
        assert self.settle("gone", raw_missing=True).record.error_type == "PayloadMissing"


class PayloadMissingSettleTests:
    def test_only_an_entry_still_pending_is_dead_lettered(self) -> None:
        gone = payload_missing_settle(entry_id="1-0", attempt=0, group="g", consumer="w1",
                                      failed_at_ms=7, still_pending=False)  # fmt: skip
        kept = payload_missing_settle(entry_id="2-0", attempt=3, group="g", consumer="w1",
                                      failed_at_ms=7, still_pending=True)  # fmt: skip
        assert gone.dead_letter_reason is None
        assert kept.dead_letter_reason == PAYLOAD_MISSING_REASON
        assert gone.record is not None and gone.record.error_type == "PayloadMissing"
        assert kept.record is not None and kept.record.attempt == 3
