"""dashboard.insight.failure_index.queries: latest failure per entry, an entry's history, counts."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard.insight.failure_index import failure_history, failures_count_since, last_failures
from tests.factories import FAILURE_T0 as T0
from tests.factories import indexed_failure

pytestmark = pytest.mark.django_db


class LastFailuresTests:
    def test_newest_message_per_entry_in_the_group(self) -> None:
        indexed_failure(entry_id="1-0", message="first", minutes=1)
        indexed_failure(entry_id="1-0", message="second", minutes=2)
        indexed_failure(entry_id="2-0", message="only", minutes=1)
        indexed_failure(entry_id="1-0", message="other group", group="audit", minutes=9)
        indexed_failure(entry_id="1-0", message="other stream", stream="payments", minutes=9)
        got = last_failures(stream="orders", group="billing", entry_ids=["1-0", "2-0", "3-0"])
        assert got == {"1-0": "second", "2-0": "only"}

    def test_ties_on_time_go_to_the_later_row(self) -> None:
        indexed_failure(entry_id="1-0", message="a", minutes=5)
        indexed_failure(entry_id="1-0", message="b", minutes=5)
        assert last_failures(stream="orders", group="billing", entry_ids=["1-0"]) == {"1-0": "b"}

    def test_no_ids_no_query(self, django_assert_num_queries: Any) -> None:
        with django_assert_num_queries(0):
            assert last_failures(stream="orders", group="billing", entry_ids=[]) == {}

    def test_one_query(self, django_assert_num_queries: Any) -> None:
        for i in range(5):
            indexed_failure(entry_id=f"{i}-0")
        with django_assert_num_queries(1):
            got = last_failures(
                stream="orders", group="billing", entry_ids=[f"{i}-0" for i in range(5)]
            )
        assert len(got) == 5


class FailureHistoryTests:
    def test_every_attempt_oldest_first_across_groups(self) -> None:
        indexed_failure(entry_id="1-0", attempt=2, minutes=2)
        indexed_failure(entry_id="1-0", attempt=1, minutes=1)
        indexed_failure(entry_id="1-0", attempt=1, group="audit", minutes=3)
        indexed_failure(entry_id="2-0", minutes=0)
        indexed_failure(entry_id="1-0", stream="payments", minutes=0)
        history = failure_history(stream="orders", entry_id="1-0")
        assert [(h.group, h.attempt) for h in history] == [
            ("billing", 1),
            ("billing", 2),
            ("audit", 1),
        ]

    def test_limit_keeps_the_newest(self) -> None:
        for i in range(5):
            indexed_failure(entry_id="1-0", attempt=i + 1, minutes=i)
        history = failure_history(stream="orders", entry_id="1-0", limit=2)
        assert [h.attempt for h in history] == [4, 5]


class FailuresCountSinceTests:
    def test_counts_per_stream_since_with_zeros(self, django_assert_num_queries: Any) -> None:
        indexed_failure(stream="orders", minutes=10)
        indexed_failure(stream="orders", minutes=20)
        indexed_failure(stream="orders", minutes=-10)
        indexed_failure(stream="payments", minutes=30)
        indexed_failure(stream="hidden", minutes=30)
        with django_assert_num_queries(1):
            got = failures_count_since(streams=["orders", "payments", "empty"], since=T0)
        assert got == {"orders": 2, "payments": 1, "empty": 0}
