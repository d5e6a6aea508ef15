"""The payload search and jump-to-time views: the forms on the stream, group
and dead-letter pages, one budgeted slice per request with progress and Continue, clear
400s, redaction, hostile payloads escaped."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import redis
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.views.find import time_to_ms
from queue_core.services import entry_dead_letter
from tests.dashboard.action_helpers import HTMX, MakeClient
from tests.html import element_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


def find(client: Client, stream: str, htmx: bool = True, **params: str) -> tuple[int, str]:
    url = reverse("dashboard:payload-find", args=[stream]) + "?" + urlencode(params)
    response = client.get(url, headers=HTMX if htmx else {})
    return response.status_code, response.content.decode()


def match_ids(body: str) -> list[str]:
    """The ids of the matches: the first cell of each match row."""
    return [cells[0] for cells in table_rows(body, "find-").values()]


def progress(body: str) -> str:
    found = re.search(r'id="(find-progress-[a-z]+)"', body)
    assert found
    return element_text(body, found[1])


def continue_params(body: str) -> dict[str, str] | None:
    found = re.search(r'class="btn small find-continue" href="([^"]+)"', body)
    if not found:
        return None
    query = urlsplit(html.unescape(found[1])).query
    return {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}


def fill(r: redis.Redis, stream: str, n: int) -> list[str]:
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"payload": f'{{"customer": {{"id": "c-{i % 4}"}}}}', "n": str(i)})
    return [i.decode() for i in pipe.execute()]


class SearchViewTests:
    def test_pages_carry_the_forms(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        fill(r, stream, 1)
        r.xgroup_create(stream, "g", id="0")
        client = make_client("rita", "view_queues")
        for url, where in (
            (reverse("dashboard:stream-detail", args=[stream]), "stream"),
            (reverse("dashboard:group-detail", args=[stream, "g"]), "pending"),
            (reverse("dashboard:dlq", args=[stream]), "dlq"),
        ):
            body = client.get(url).content.decode()
            assert f'id="find-{where}"' in body, url
            assert f'<input type="hidden" name="where" value="{where}">' in body

    def test_json_path_with_continue_covers_everything_once(
        self, make_client: MakeClient, r: redis.Redis, stream: str, settings: SettingsWrapper
    ) -> None:
        settings.ACKBOARD_SEARCH_MAX_ENTRIES = 7
        ids = fill(r, stream, 30)
        client = make_client("rita", "view_queues")
        params: dict[str, str] | None = {
            "where": "stream",
            "field": "payload",
            "op": "json",
            "path": "$.customer.id",
            "value": "c-1",
        }
        seen: list[str] = []
        slices = 0
        body = ""
        while params is not None:
            status, body = find(client, stream, **params)
            assert status == 200
            seen += match_ids(body)
            params = continue_params(body)
            slices += 1
        assert slices == 5
        assert progress(body) == "Scanned 30 of about 30 entries, up to id " + ids[0] + ": done."
        assert seen == [i for n, i in reversed(list(enumerate(ids))) if n % 4 == 1]

    def test_progress_says_which_budget_stopped_it(
        self, make_client: MakeClient, r: redis.Redis, stream: str, settings: SettingsWrapper
    ) -> None:
        settings.ACKBOARD_SEARCH_MAX_ENTRIES = 10
        ids = fill(r, stream, 25)
        status, body = find(
            make_client("rita", "view_queues"), stream, field="n", op="equals", value="3"
        )
        assert status == 200
        text = progress(body)
        assert f"Scanned 10 of about 25 entries, up to id {ids[15]}" in text
        assert "stopped by the entry budget (10)" in text
        assert continue_params(body) is not None

    def test_pending_and_dead_letters(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        r.xgroup_create(stream, "g", id="0", mkstream=True)
        ids = fill(r, stream, 8)
        r.xreadgroup("g", "c", {stream: ">"})
        entry_dead_letter(client=r, stream=stream, group="g", entry_id=ids[2], reason="bad")
        client = make_client("rita", "view_queues")
        status, body = find(
            client, stream, where="pending", group="g", field="n", op="equals", value="5"
        )
        assert status == 200 and match_ids(body) == [ids[5]]
        assert "of about 7 pending entries" in progress(body)
        status, body = find(client, stream, where="dlq", field="n", op="equals", value="2")
        assert status == 200 and len(match_ids(body)) == 1
        status, _ = find(client, stream, where="pending", group="nope", field="n", value="1")
        assert status == 404

    def test_without_htmx_it_is_a_page(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        ids = fill(r, stream, 3)
        status, body = find(
            make_client("rita", "view_queues"), stream, htmx=False, field="n", value="1"
        )
        assert status == 200
        assert "<title>Find" in body and match_ids(body) == [ids[1]]

    @pytest.mark.parametrize(
        ("params", "says"),
        [
            ({"field": "n", "op": "regex", "value": "x"}, "unknown match"),
            ({"field": "", "value": "x"}, "which field"),
            (
                {"field": "payload", "op": "json", "path": "customer.id", "value": "x"},
                "starts with $",
            ),
            ({"field": "n", "where": "elsewhere", "value": "x"}, "Search where"),
            ({"field": "n", "where": "pending", "value": "x"}, "which group"),
            ({"field": "n", "value": "x", "after": "nope"}, "not a stream id"),
            ({"field": "password", "value": "x"}, "redacted"),
            ({"field": "payload", "op": "json", "path": "$.api_token", "value": "x"}, "redacted"),
        ],
    )
    def test_bad_input_is_a_clear_400(
        self,
        make_client: MakeClient,
        r: redis.Redis,
        stream: str,
        params: dict[str, str],
        says: str,
    ) -> None:
        fill(r, stream, 1)
        status, body = find(make_client("rita", "view_queues"), stream, htmx=False, **params)
        assert status == 400
        assert says in body

    def test_partly_redacted_field_never_matches(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        r.xadd(stream, {"payload": '{"user": "ann", "password": "hunter2"}'})
        ann = r.xadd(stream, {"payload": '{"user": "ann"}'}).decode()
        client = make_client("rita", "view_queues")
        status, body = find(client, stream, field="payload", op="contains", value="hunter2")
        assert status == 200 and match_ids(body) == []
        status, body = find(client, stream, field="payload", op="contains", value="ann")
        assert match_ids(body) == [ann]

    def test_hostile_payload_escaped_and_cut(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        r.xadd(stream, {"k": "<script>alert(1)</script>" + "x" * 100_000, "b": b"\xff\x00<i>"})
        client = make_client("rita", "view_queues")
        status, body = find(client, stream, field="k", op="contains", value="<script>")
        assert status == 200 and len(match_ids(body)) == 1
        assert "<script>alert" not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
        assert len(body) < 20_000
        status, body = find(client, stream, field="b", op="contains", value="<i>")
        assert len(match_ids(body)) == 1 and "<i>" not in body

    def test_reader_needs_view_queues(self, make_client: MakeClient, stream: str) -> None:
        status, _ = find(make_client("nobody", "retry_entry"), stream, field="a", value="b")
        assert status == 403


class JumpTests:
    def test_time_to_ms(self) -> None:
        assert time_to_ms("1970-01-01T00:00") == 0
        assert time_to_ms("2026-12-01T21:30:05.25Z") == 1796160605250
        assert time_to_ms("2026-12-01 21:30") == 1796160600000
        assert time_to_ms("1796160600000-3") == 1796160600000
        for bad in ("yesterday", "2026-13-01T00:00", "2026-02-30T00:00", "", "1e9"):
            with pytest.raises(ValueError):
                time_to_ms(bad)

    def test_redirects_to_the_pages_position(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        r.xgroup_create(stream, "g", id="0", mkstream=True)
        old = r.xadd(stream, {"a": "1"}, id="1796160500000-0").decode()
        r.xadd(stream, {"a": "2"}, id="1796160700000-0")
        client = make_client("rita", "view_queues")
        jump = reverse("dashboard:time-jump", args=[stream])
        at = "2026-12-01T21:30"
        response = client.get(jump, {"where": "stream", "at": at})
        assert response.status_code == 302
        assert response["Location"] == (
            reverse("dashboard:stream-detail", args=[stream])
            + "?before=1796160600000-0#entry-table"
        )
        page = client.get(response["Location"]).content.decode()
        table = element_text(page, "entry-table")
        assert old in table and "1796160700000-0" not in table
        response = client.get(jump, {"where": "dlq", "at": at})
        assert response["Location"].endswith("/dlq/?before=1796160600000-0#dlq-table")
        response = client.get(jump, {"where": "pending", "group": "g", "at": at})
        assert response["Location"] == (
            reverse("dashboard:group-detail", args=[stream, "g"])
            + "?start=1796160599999-18446744073709551615#pending-table"
        )
        assert client.get(response["Location"]).status_code == 200

    def test_bad_time_is_400(self, make_client: MakeClient, stream: str) -> None:
        jump = reverse("dashboard:time-jump", args=[stream])
        response = make_client("rita", "view_queues").get(jump, {"at": "soon"})
        assert response.status_code == 400
        assert "UTC time like" in response.content.decode()


class HostileTests:
    def test_hostile_names_ids_and_values_never_500(
        self, make_client: MakeClient, r: redis.Redis, stream: str
    ) -> None:
        from tests.dashboard.test_safety import FINE, HOSTILE_IDS, HOSTILE_NAMES, _raw, _seg

        r.xgroup_create(stream, "g", id="0", mkstream=True)
        r.xadd(stream, {"a": "b"})
        client = make_client("root", "view_queues", "edit_replay_dead_letter")
        client.raise_request_exception = False
        bad = []
        for name in HOSTILE_NAMES:
            for seg in (_seg(name), _raw(name)):
                for url in (
                    f"/streams/{seg}/find/?field=a&value=b",
                    f"/streams/{seg}/find/?where=pending&group=g&field=a",
                    f"/streams/{seg}/find/?where=dlq&field=a",
                    f"/streams/{_seg(stream)}/find/?where=pending&group={seg}&field=a",
                    f"/streams/{seg}/jump/?at=2026-01-01T00:00",
                    f"/streams/{seg}/dlq/1-1/edit/",
                ):
                    status = client.get(url).status_code
                    if status not in FINE:
                        bad.append((url, status))
                status = client.post(f"/streams/{seg}/dlq/1-1/edit-replay/", {}).status_code
                if status not in FINE:
                    bad.append((seg, status))
        for value in HOSTILE_IDS + HOSTILE_NAMES + ["x" * 100_000]:
            for params in (
                {"field": "a", "after": value},
                {"field": value, "value": value, "op": "json", "path": value},
                {"at": value},
            ):
                url = f"/streams/{_seg(stream)}/find/?" + urlencode(params)
                if "at" in params:
                    url = f"/streams/{_seg(stream)}/jump/?" + urlencode(params)
                status = client.get(url).status_code
                if status not in FINE:
                    bad.append((url[:100], status))
        assert bad == []
