"""dashboard.insight.failure_index.records: every record is stored, a malformed one as ``Malformed``
with what was wrong, through the ingestor on real Redis."""

from __future__ import annotations

import pytest
import redis

from dashboard.insight.failure_index import MALFORMED, failures_ingest
from dashboard.models import IndexedFailure
from queue_core.keys import stream_keys
from tests.factories import add_failure, ingest_pending

# The ingestor scans the whole server; the allowlist keeps it to this test's keys.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("ingest_allowlist")]


class MalformedRecordTests:
    def test_missing_and_unparseable_fields_are_stored_as_malformed(
        self, r: redis.Redis, stream: str
    ) -> None:
        add_failure(r, stream, "1-0", attempt="three", duration_ms="fast")
        add_failure(r, stream, "2-0", consumer=None, failed_at_ms=None, error_type="Boom")
        add_failure(r, stream, "not-an-id")
        r.xadd(stream_keys(stream).failures, {"junk": "x"})

        assert failures_ingest(client=r, once=True) == 4
        assert ingest_pending(r, stream) == 0  # acked: stored, not lost
        rows = list(IndexedFailure.objects.order_by("source_id"))
        assert [f.error_type for f in rows] == [MALFORMED] * 4
        bad_attempt, missing, bad_id, junk = rows
        assert "attempt 'three' is not a count" in bad_attempt.message
        assert "duration_ms 'fast' is not a number" in bad_attempt.message
        assert bad_attempt.attempt == 0 and bad_attempt.duration_ms is None
        assert bad_attempt.entry_id == "1-0" and bad_attempt.group == "billing"
        assert "missing consumer, failed_at_ms" in missing.message
        assert "original: Boom: bad total" in missing.message
        # The record's own id time stands in for the missing failure time.
        assert int(missing.failed_at.timestamp() * 1000) == int(missing.source_id.split("-")[0])
        assert "entry_id 'not-an-id' is not a stream id" in bad_id.message
        assert bad_id.entry_id == ""
        assert "junk = 'x'" in junk.traceback and "missing group" in junk.message

    def test_non_utf8_bytes_and_nul_are_kept_safely(self, r: redis.Redis, stream: str) -> None:
        add_failure(r, stream, "1-0", message=b"caf\xe9 \x00 done")
        assert failures_ingest(client=r, once=True) == 1
        row = IndexedFailure.objects.get()
        assert row.error_type == MALFORMED
        assert "message is not UTF-8" in row.message
        assert "\x00" not in row.message + row.traceback

    def test_payload_missing_record_is_an_ordinary_failure(
        self, r: redis.Redis, stream: str
    ) -> None:
        add_failure(r, stream, error_type="PayloadMissing", message="trimmed", duration_ms="")
        assert failures_ingest(client=r, once=True) == 1
        row = IndexedFailure.objects.get()
        assert (row.error_type, row.message, row.duration_ms) == ("PayloadMissing", "trimmed", None)

    def test_oversized_values_are_capped(self, r: redis.Redis, stream: str) -> None:
        add_failure(r, stream, consumer="c" * 400, traceback="x" * 50_000 + "END")
        assert failures_ingest(client=r, once=True) == 1
        row = IndexedFailure.objects.get()
        assert len(row.consumer) == 255 and len(row.traceback) == 16_000
        assert row.traceback.endswith("END")  # the tail is what names the error
