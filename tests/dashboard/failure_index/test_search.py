"""dashboard.insight.failure_index.search: filters, keyset pages, forged cursors, the time
budget."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dashboard.insight.failure_index import BadCursor, FailureFilter, SearchTooBroad, failure_search
from dashboard.models import IndexedFailure
from tests.factories import FAILURE_T0 as T0
from tests.factories import indexed_failure

pytestmark = pytest.mark.django_db


def search(**filters: Any) -> list[str]:
    return [f.message for f in failure_search(filters=FailureFilter(**filters)).rows]


class FailureSearchTests:
    def test_filters_by_stream_group_type_text_and_time(self) -> None:
        indexed_failure(message="a", minutes=1)
        indexed_failure(message="b", stream="payments", minutes=2)
        indexed_failure(message="c", group="audit", minutes=3)
        indexed_failure(message="d", error_type="TimeoutError", minutes=4)
        indexed_failure(message="e", traceback="...\nKeyError: 'SKU-42'", minutes=5)
        indexed_failure(message="Gateway TIMEOUT after 30 s", minutes=6)
        assert search(stream="payments") == ["b"]
        assert search(stream="orders", group="audit") == ["c"]
        assert search(error_type="TimeoutError") == ["d"]
        assert search(text="sku-42") == ["e"]  # traceback, any case
        assert search(text="gateway timeout") == ["Gateway TIMEOUT after 30 s"]
        since, until = T0 + timedelta(minutes=2), T0 + timedelta(minutes=4)
        assert search(since=since, until=until) == ["c", "b"]  # since inclusive, until not
        assert search(stream="orders", text="nothing like this") == []

    def test_keyset_pages_cover_every_row_once_even_on_ties(self) -> None:
        for i in range(7):
            indexed_failure(message=f"m{i}", minutes=i // 3)  # three rows share each instant
        seen: list[str] = []
        page = failure_search(filters=FailureFilter(), page_size=3)
        pages = [page]
        while page.older:
            page = failure_search(filters=FailureFilter(), before=page.older, page_size=3)
            pages.append(page)
        seen = [f.message for p in pages for f in p.rows]
        assert seen == ["m6", "m5", "m4", "m3", "m2", "m1", "m0"]
        assert pages[0].newer is None and pages[-1].older is None
        # Back one page from the last: the same rows as the middle page.
        back = failure_search(filters=FailureFilter(), after=pages[-1].newer, page_size=3)
        assert [f.message for f in back.rows] == ["m3", "m2", "m1"]
        assert back.newer is not None and back.older is not None

    def test_rejects_a_forged_cursor(self) -> None:
        for bad in ("x", "1.2.3", "-5.1", "9" * 60 + ".1", "99999999999999999999.1"):
            with pytest.raises(BadCursor):
                failure_search(filters=FailureFilter(), before=bad)

    def test_cost_cap_stops_a_broad_scan(self) -> None:
        IndexedFailure.objects.bulk_create(
            IndexedFailure(
                failures_key="{orders}:failures",
                source_id=f"{i}-0",
                stream="orders",
                group="billing",
                entry_id=f"{i}-0",
                consumer="c",
                attempt=1,
                error_type="ValueError",
                message="x" * 200,
                failed_at=T0,
            )
            for i in range(2000)
        )
        with pytest.raises(SearchTooBroad):
            failure_search(filters=FailureFilter(text="needle"), budget_ms=0)
        # The same search with a budget finishes (and finds nothing).
        assert failure_search(filters=FailureFilter(text="needle"), budget_ms=5000).rows == ()
