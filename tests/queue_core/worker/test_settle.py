"""Settlement writes (queue_core.worker.settle): a dead-letter Redis refuses.

The entry must stay pending, logged as an error, and ``process_entry`` must say so
(DEAD_LETTER_FAILED, not NOT_PENDING: nobody else took it).
"""

from __future__ import annotations

import logging

import pytest
import redis

from queue_core import Job, Outcome, PermanentFailure, process_entry
from queue_core.keys import stream_keys
from tests.factories import make_pending
from tests.queue_core.worker.helpers import pending_count


class DeadLetterRefusedByRedisTests:
    def test_a_dlq_key_of_another_type_is_logged_as_an_error(
        self, r: redis.Redis, stream: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "w1", 1)
        r.set(stream_keys(stream).dlq, "not a stream")

        def handler(job: Job) -> None:
            raise PermanentFailure("never")

        with caplog.at_level(logging.INFO, logger="queue_core.worker"):
            process_entry(
                client=r, stream=stream, group="g", consumer="w1", entry_id=entry_id,
                fields={b"n": b"0"}, handler=handler,
            )  # fmt: skip

        assert pending_count(r, stream) == 1  # not lost: it stays pending
        errors = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
        assert errors and entry_id in errors[0].getMessage()

    def test_process_entry_says_the_entry_is_still_pending(
        self, r: redis.Redis, stream: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "w1", 1)
        r.set(stream_keys(stream).dlq, "not a stream")

        def handler(job: Job) -> None:
            raise PermanentFailure("never")

        outcome = process_entry(
            client=r, stream=stream, group="g", consumer="w1", entry_id=entry_id,
            fields={b"n": b"0"}, handler=handler,
        )  # fmt: skip

        # Not NOT_PENDING ("someone else took it first"): it is still here, in our name.
        assert outcome is Outcome.DEAD_LETTER_FAILED
        assert pending_count(r, stream) == 1
