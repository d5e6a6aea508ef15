"""The failure index reads: latest failure per entry, history, counts, search, pruning, page."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.failure_index import (
    BadCursor,
    FailureFilter,
    SearchTooBroad,
    failure_history,
    failure_search,
    failures_count_since,
    failures_prune,
    last_failures,
)
from dashboard.models import IndexedFailure

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
_seq = itertools.count(1)


def record(**overrides: Any) -> IndexedFailure:
    """Save one IndexedFailure with plausible defaults; ``minutes`` offsets failed_at from T0."""
    n = next(_seq)
    minutes = overrides.pop("minutes", n)
    values: dict[str, Any] = {
        "failures_key": "{orders}:failures",
        "source_id": f"{n}-0",
        "stream": "orders",
        "group": "billing",
        "entry_id": "1-0",
        "consumer": "c1",
        "attempt": 1,
        "error_type": "ValueError",
        "message": f"boom {n}",
        "traceback": "Traceback (most recent call last):\nValueError: boom",
        "duration_ms": 12.5,
        "failed_at": T0 + timedelta(minutes=minutes),
    }
    values.update(overrides)
    if "failures_key" not in overrides:
        values["failures_key"] = "{" + values["stream"] + "}:failures"
    return IndexedFailure.objects.create(**values)


class LastFailuresTests:
    def test_newest_message_per_entry_in_the_group(self) -> None:
        record(entry_id="1-0", message="first", minutes=1)
        record(entry_id="1-0", message="second", minutes=2)
        record(entry_id="2-0", message="only", minutes=1)
        record(entry_id="1-0", message="other group", group="audit", minutes=9)
        record(entry_id="1-0", message="other stream", stream="payments", minutes=9)
        got = last_failures(stream="orders", group="billing", entry_ids=["1-0", "2-0", "3-0"])
        assert got == {"1-0": "second", "2-0": "only"}

    def test_ties_on_time_go_to_the_later_row(self) -> None:
        record(entry_id="1-0", message="a", minutes=5)
        record(entry_id="1-0", message="b", minutes=5)
        assert last_failures(stream="orders", group="billing", entry_ids=["1-0"]) == {"1-0": "b"}

    def test_no_ids_no_query(self, django_assert_num_queries: Any) -> None:
        with django_assert_num_queries(0):
            assert last_failures(stream="orders", group="billing", entry_ids=[]) == {}

    def test_one_query(self, django_assert_num_queries: Any) -> None:
        for i in range(5):
            record(entry_id=f"{i}-0")
        with django_assert_num_queries(1):
            got = last_failures(
                stream="orders", group="billing", entry_ids=[f"{i}-0" for i in range(5)]
            )
        assert len(got) == 5


class FailureHistoryTests:
    def test_every_attempt_oldest_first_across_groups(self) -> None:
        record(entry_id="1-0", attempt=2, minutes=2)
        record(entry_id="1-0", attempt=1, minutes=1)
        record(entry_id="1-0", attempt=1, group="audit", minutes=3)
        record(entry_id="2-0", minutes=0)
        record(entry_id="1-0", stream="payments", minutes=0)
        history = failure_history(stream="orders", entry_id="1-0")
        assert [(h.group, h.attempt) for h in history] == [
            ("billing", 1),
            ("billing", 2),
            ("audit", 1),
        ]

    def test_limit_keeps_the_newest(self) -> None:
        for i in range(5):
            record(entry_id="1-0", attempt=i + 1, minutes=i)
        history = failure_history(stream="orders", entry_id="1-0", limit=2)
        assert [h.attempt for h in history] == [4, 5]


class FailuresCountSinceTests:
    def test_counts_per_stream_since_with_zeros(self, django_assert_num_queries: Any) -> None:
        record(stream="orders", minutes=10)
        record(stream="orders", minutes=20)
        record(stream="orders", minutes=-10)
        record(stream="payments", minutes=30)
        record(stream="hidden", minutes=30)
        with django_assert_num_queries(1):
            got = failures_count_since(streams=["orders", "payments", "empty"], since=T0)
        assert got == {"orders": 2, "payments": 1, "empty": 0}


def search(**filters: Any) -> list[str]:
    return [f.message for f in failure_search(filters=FailureFilter(**filters)).rows]


class FailureSearchTests:
    def test_filters_by_stream_group_type_text_and_time(self) -> None:
        record(message="a", minutes=1)
        record(message="b", stream="payments", minutes=2)
        record(message="c", group="audit", minutes=3)
        record(message="d", error_type="TimeoutError", minutes=4)
        record(message="e", traceback="...\nKeyError: 'SKU-42'", minutes=5)
        record(message="Gateway TIMEOUT after 30 s", minutes=6)
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
            record(message=f"m{i}", minutes=i // 3)  # three rows share each instant
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


class FailuresPruneTests:
    def test_deletes_only_older_rows_in_batches(self) -> None:
        for i in range(5):
            record(message=f"old{i}", minutes=-100 - i)
        record(message="new", minutes=0)
        assert failures_prune(older_than=T0, batch_size=2) == 5
        assert list(IndexedFailure.objects.values_list("message", flat=True)) == ["new"]

    def test_command_uses_retention_setting_or_days(
        self, settings: SettingsWrapper, capsys: pytest.CaptureFixture[str]
    ) -> None:
        now = timezone.now()
        record(message="10 days", failed_at=now - timedelta(days=10))
        record(message="40 days", failed_at=now - timedelta(days=40))
        record(message="today", failed_at=now)
        settings.ACKBOARD_FAILURE_RETENTION_DAYS = 30
        call_command("prune_failures")
        assert "Deleted 1 failure record " in capsys.readouterr().out
        call_command("prune_failures", "--days", "5", "--batch", "1")
        assert list(IndexedFailure.objects.values_list("message", flat=True)) == ["today"]


HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def viewer(django_user_model: type[User]) -> Client:
    user = django_user_model.objects.create_user(username="vera", password="pw")
    user.user_permissions.add(Permission.objects.get(codename="view_queues"))
    client = Client()
    client.force_login(user)
    return client


class FailurePageTests:
    url = "/failures/"

    def test_route_name(self) -> None:
        assert reverse("dashboard:failure-search") == self.url

    def test_login_and_view_permission_required(self, django_user_model: type[User]) -> None:
        record()
        anonymous = Client().get(self.url)
        assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
        nobody = django_user_model.objects.create_user(username="nobody", password="pw")
        client = Client()
        client.force_login(nobody)
        assert client.get(self.url).status_code == 403

    def test_lists_rows_with_links_and_details(self, viewer: Client) -> None:
        record(entry_id="17-3", consumer="worker-9", attempt=4, message="card declined")
        response = viewer.get(self.url, {"stream": "orders"})
        assert response.status_code == 200
        html = response.content.decode()
        entry_url = reverse(
            "dashboard:entry-detail", kwargs={"stream": "orders", "entry_id": "17-3"}
        )
        assert f'href="{entry_url}"' in html
        assert "worker-9" in html and "card declined" in html and "ValueError" in html
        assert "<details>" in html and "Traceback (most recent call last)" in html

    def test_long_message_is_whole_in_the_expandable_part(self, viewer: Client) -> None:
        record(message="z" * 300 + " TAIL-OF-MESSAGE")
        html = viewer.get(self.url).content.decode()
        assert '<pre class="message">' + "z" * 300 + " TAIL-OF-MESSAGE</pre>" in html

    def test_hostile_text_is_escaped(self, viewer: Client) -> None:
        record(
            stream=HOSTILE,
            group=HOSTILE,
            consumer=HOSTILE,
            error_type=HOSTILE,
            message=HOSTILE,
            traceback=HOSTILE,
        )
        html = viewer.get(self.url, {"q": "<script>"}).content.decode()
        assert "<script>alert" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html

    def test_malformed_row_without_entry_id_has_no_entry_link(self, viewer: Client) -> None:
        record(entry_id="", group="", error_type="Malformed", message="missing entry_id")
        html = viewer.get(self.url).content.decode()
        assert "missing entry_id" in html and "/entries/" not in html

    def test_htmx_gets_the_table_partial(self, viewer: Client) -> None:
        record(message="partial row")
        response = viewer.get(self.url, headers={"HX-Request": "true"})
        html = response.content.decode()
        assert response.status_code == 200
        assert html.lstrip().startswith('<div id="failure-table">') and "<html" not in html
        assert "partial row" in html

    def test_pages_older_and_newer(self, viewer: Client) -> None:
        for i in range(55):
            record(message=f"row-{i:02d}", minutes=i)
        first = viewer.get(self.url).content.decode()
        assert "row-54" in first and "row-05" in first and "row-04" not in first
        older = failure_search(filters=FailureFilter()).older
        assert older is not None and f"before={older}" in first
        second = viewer.get(self.url, {"before": older}).content.decode()
        assert "row-04" in second and "row-00" in second and "row-05" not in second
        assert "after=" in second

    def test_too_broad_search_explains_itself(
        self, viewer: Client, settings: SettingsWrapper
    ) -> None:
        for i in range(300):
            record(message="y" * 100, minutes=i)
        settings.ACKBOARD_FAILURE_SEARCH_MS = 0
        response = viewer.get(self.url, {"q": "needle"})
        assert response.status_code == 200
        assert "This search is too broad" in response.content.decode()

    def test_bad_input_is_a_400_with_the_reason(
        self, viewer: Client, settings: SettingsWrapper
    ) -> None:
        bad_date = viewer.get(self.url, {"since": "yesterday-ish"})
        assert (
            bad_date.status_code == 400 and "Enter a valid date/time" in bad_date.content.decode()
        )
        bad_cursor = viewer.get(self.url, {"before": "not-a-cursor"})
        assert bad_cursor.status_code == 400
        assert "That page link is not valid" in bad_cursor.content.decode()
        assert viewer.get(self.url, {"stream": "x" * 2000}).status_code == 400
        settings.ACKBOARD_STREAMS = ("orders*",)
        hidden = viewer.get(self.url, {"stream": "payroll"})
        assert hidden.status_code == 400 and "allowlist" in hidden.content.decode()

    def test_within_window_limits_to_recent_rows(self, viewer: Client) -> None:
        now = timezone.now()
        record(message="recent one", failed_at=now - timedelta(minutes=5))
        record(message="ancient one", failed_at=now - timedelta(days=3))
        html = viewer.get(self.url, {"window": "24h"}).content.decode()
        assert "recent one" in html and "ancient one" not in html
