"""The Failures page (dashboard.views.failure_search): rows, links, paging, bad input."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.insight.failure_index import FailureFilter, failure_search
from tests.factories import indexed_failure

pytestmark = pytest.mark.django_db


HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class FailurePageTests:
    url = "/failures/"

    def test_route_name(self) -> None:
        assert reverse("dashboard:failure-search") == self.url

    def test_login_and_view_permission_required(self, django_user_model: type[User]) -> None:
        indexed_failure()
        anonymous = Client().get(self.url)
        assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
        nobody = django_user_model.objects.create_user(username="nobody", password="pw")
        client = Client()
        client.force_login(nobody)
        assert client.get(self.url).status_code == 403

    def test_lists_rows_with_links_and_details(self, viewer: Client) -> None:
        indexed_failure(entry_id="17-3", consumer="worker-9", attempt=4, message="card declined")
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
        indexed_failure(message="z" * 300 + " TAIL-OF-MESSAGE")
        html = viewer.get(self.url).content.decode()
        assert '<pre class="message">' + "z" * 300 + " TAIL-OF-MESSAGE</pre>" in html

    def test_hostile_text_is_escaped(self, viewer: Client) -> None:
        indexed_failure(
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
        indexed_failure(entry_id="", group="", error_type="Malformed", message="missing entry_id")
        html = viewer.get(self.url).content.decode()
        assert "missing entry_id" in html and "/entries/" not in html

    def test_htmx_gets_the_table_partial(self, viewer: Client) -> None:
        indexed_failure(message="partial row")
        response = viewer.get(self.url, headers={"HX-Request": "true"})
        html = response.content.decode()
        assert response.status_code == 200
        assert html.lstrip().startswith('<div id="failure-table">') and "<html" not in html
        assert "partial row" in html

    def test_pages_older_and_newer(self, viewer: Client) -> None:
        for i in range(55):
            indexed_failure(message=f"row-{i:02d}", minutes=i)
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
            indexed_failure(message="y" * 100, minutes=i)
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
        indexed_failure(message="recent one", failed_at=now - timedelta(minutes=5))
        indexed_failure(message="ancient one", failed_at=now - timedelta(days=3))
        html = viewer.get(self.url, {"window": "24h"}).content.decode()
        assert "recent one" in html and "ancient one" not in html
