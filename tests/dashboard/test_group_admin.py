"""Group administration over HTTP, the CLI and the API, on real Redis: Create
group, Delete group, Reset position (dry run, confirm, undo) and Trim (dry run, floor,
force). Each test checks the answer, Redis and the audit row."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from dashboard.access.api_tokens import token_issue
from dashboard.models import AuditEvent
from dashboard.views.admin_actions import entries_words as _entries
from dashboard.views.admin_forms import trim_minid
from queue_core.keys import stream_keys
from tests.dashboard.action_helpers import HTMX, MakeClient, last_audit
from tests.factories import add_entries, make_group, make_pending, make_user
from tests.health_scenario import engine
from tests.html import element_text, labelled_text
from tests.redis_server import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]

ADMIN = ("view_queues", "administer_group", "trim_stream")


def stream_url(stream: str, action: str) -> str:
    return reverse("dashboard:stream-action", args=[stream, action])


def group_url(stream: str, action: str, group: str = "g") -> str:
    return reverse("dashboard:group-action", args=[stream, group, action])


def groups(r: redis.Redis, stream: str) -> dict[str, dict[str, Any]]:
    return {g["name"].decode(): g for g in r.xinfo_groups(stream)}


def delivered_and_acked(r: redis.Redis, stream: str, n: int, group: str = "g") -> list[str]:
    """``n`` entries, all delivered to group ``group`` and acknowledged; the consumer that
    read them is gone (a consumer seen just now would count as live and block a reset)."""
    make_group(r, stream, group)
    ids = add_entries(r, stream, n)
    r.xreadgroup(group, "w1", {stream: ">"}, count=n)
    r.xack(stream, group, *ids)
    r.xgroup_delconsumer(stream, group, "w1")
    return ids


def admin_client(make_client: MakeClient, **kwargs: bool) -> Client:
    return make_client("olga", *ADMIN, **kwargs)


def fixed_ids(r: redis.Redis, stream: str) -> list[str]:
    """Five entries at 1000-0 … 5000-0 (times 1 s to 5 s after the epoch)."""
    return [r.xadd(stream, {"n": str(i)}, id=f"{i}000-0").decode() for i in range(1, 6)]


# --- create group -----------------------------------------------------------------------


class CreateGroupTests:
    def test_creates_at_the_start_and_audits(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        add_entries(r, stream, 3)
        response = admin_client(make_client).post(
            stream_url(stream, "create-group"), {"name": "fresh", "position": "start"}, headers=HTMX
        )
        assert response.status_code == 200, response.content
        assert response["HX-Refresh"] == "true"
        g = groups(r, stream)["fresh"]
        assert g["last-delivered-id"] == b"0-0" and g["lag"] == 3
        event = last_audit()
        assert (event.action, event.result, event.group) == ("create-group", "ok", "fresh")
        assert event.stream == stream and event.state_before["created_last_id"] == "0-0"

    def test_a_time_without_a_zone_is_utc(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        fixed_ids(r, stream)
        response = admin_client(make_client).post(
            stream_url(stream, "create-group"),
            {"name": "t", "position": "time", "at": "1970-01-01T00:00:03"},
            headers=HTMX,
        )
        assert response.status_code == 200, response.content
        g = groups(r, stream)["t"]
        # Entries added at 3 s or later are delivered: 3000-0, 4000-0, 5000-0.
        assert g["last-delivered-id"] == f"2999-{2**64 - 1}".encode() and g["lag"] == 3

    def test_at_an_id(self, r: redis.Redis, stream: str, make_client: MakeClient) -> None:
        ids = fixed_ids(r, stream)
        response = admin_client(make_client).post(
            stream_url(stream, "create-group"),
            {"name": "i", "position": "id", "at": ids[1]},
            headers=HTMX,
        )
        assert response.status_code == 200
        g = groups(r, stream)["i"]
        assert g["last-delivered-id"] == ids[1].encode() and g["entries-read"] == 2

    def test_an_existing_group_is_refused(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_group(r, stream, "g")
        response = admin_client(make_client).post(
            stream_url(stream, "create-group"), {"name": "g", "position": "end"}, headers=HTMX
        )
        assert response.status_code == 409
        assert "already a consumer group" in element_text(response.content.decode(), "messages")
        event = last_audit()
        assert (event.action, event.result, event.group) == ("create-group", "refused", "g")

    @pytest.mark.parametrize(
        ("fields", "says"),
        [
            ({"position": "id", "at": "abc"}, "is not start, end, a stream id"),
            ({"position": "time", "at": "yesterday-ish"}, "not start, end"),
            ({"position": "time", "at": "1700000000000-0"}, "is not a time"),
            ({"position": "id", "at": ""}, "Give an id"),
            ({"position": ""}, "Choose where the group starts"),
            ({"name": "", "position": "end"}, "Give the new group a name"),
        ],
    )
    def test_bad_input_is_a_400_that_says_why(
        self,
        r: redis.Redis,
        stream: str,
        make_client: MakeClient,
        fields: dict[str, str],
        says: str,
    ) -> None:
        add_entries(r, stream, 1)
        response = admin_client(make_client).post(
            stream_url(stream, "create-group"), {"name": "x", **fields}, headers=HTMX
        )
        assert response.status_code == 400
        assert says in element_text(response.content.decode(), "messages")
        assert r.xinfo_groups(stream) == []
        assert last_audit().result == "refused"

    def test_unknown_stream_is_404(self, stream: str, make_client: MakeClient) -> None:
        response = admin_client(make_client).post(
            stream_url(stream, "create-group"), {"name": "x", "position": "end"}, headers=HTMX
        )
        assert response.status_code == 404

    def test_needs_the_permission_and_audits_the_refusal(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        add_entries(r, stream, 1)
        reader = make_client("rita", "view_queues", "trim_stream")
        response = reader.post(
            stream_url(stream, "create-group"), {"name": "x", "position": "end"}, headers=HTMX
        )
        assert response.status_code == 403
        assert r.xinfo_groups(stream) == []
        event = last_audit()
        assert (event.username, event.action, event.result) == ("rita", "create-group", "refused")

    def test_needs_the_csrf_token(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        add_entries(r, stream, 1)
        client = admin_client(make_client, enforce_csrf_checks=True)
        response = client.post(stream_url(stream, "create-group"), {"name": "x", "position": "end"})
        assert response.status_code == 403
        assert r.xinfo_groups(stream) == []

    def test_stream_page_offers_it_and_trim(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        add_entries(r, stream, 1)
        page = admin_client(make_client).get(reverse("dashboard:stream-detail", args=[stream]))
        html = page.content.decode()
        assert "Create group" in element_text(html, "create-group")
        assert "Preview trim" in element_text(html, "stream-trim")
        reader = make_client("rita", "view_queues")
        html = reader.get(reverse("dashboard:stream-detail", args=[stream])).content.decode()
        assert 'id="create-group"' not in html and 'id="stream-trim"' not in html


class HostileInputTests:
    def test_any_group_name_the_pages_can_open_is_created_as_typed(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        add_entries(r, stream, 1)
        name = "ünï/cødé {x} <b>"
        client = admin_client(make_client)
        response = client.post(
            stream_url(stream, "create-group"), {"name": name, "position": "end"}, headers=HTMX
        )
        assert response.status_code == 200, response.content
        assert name in groups(r, stream)
        url = reverse("dashboard:group-detail", args=[stream, name])
        assert client.get(url).status_code == 200

    def test_a_name_the_pages_cannot_open_is_refused(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        add_entries(r, stream, 1)
        response = admin_client(make_client).post(
            stream_url(stream, "create-group"), {"name": "a\x00b", "position": "end"}, headers=HTMX
        )
        assert response.status_code == 400
        assert "NUL" in element_text(response.content.decode(), "messages")
        assert r.xinfo_groups(stream) == []

    def test_redis_down_is_a_503_never_a_500(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: Any
    ) -> None:
        delivered_and_acked(r, stream, 1)
        client = admin_client(make_client)
        client.raise_request_exception = False
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        posts = [
            (reverse("dashboard:reset-preview", args=[stream, "g"]), {"position": "start"}),
            (reverse("dashboard:trim-preview", args=[stream]), {"minid": "1-0"}),
            (stream_url(stream, "create-group"), {"name": "x", "position": "end"}),
            (stream_url(stream, "trim"), {"minid": "1-0", "confirm": "1"}),
        ]
        for url, data in posts:
            assert client.post(url, data, headers=HTMX).status_code == 503, url


# --- delete group -----------------------------------------------------------------------


class DeleteGroupTests:
    def test_deletes_an_idle_group_and_returns_to_the_stream(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        delivered_and_acked(r, stream, 2)
        response = admin_client(make_client).post(
            group_url(stream, "delete-group"),
            {"confirm_name": "g", "expected_pending": "0", "next": "/elsewhere/"},
        )
        assert response.status_code == 303
        assert response["Location"] == reverse("dashboard:stream-detail", args=[stream])
        assert r.xinfo_groups(stream) == [] and r.xlen(stream) == 2
        event = last_audit()
        assert (event.action, event.result, event.group) == ("delete-group", "ok", "g")
        assert event.state_before["pending"] == 0

    def test_with_htmx_the_browser_goes_to_the_stream_page(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_group(r, stream, "g")
        response = admin_client(make_client).post(
            group_url(stream, "delete-group"),
            {"confirm_name": "g", "expected_pending": "0"},
            headers=HTMX,
        )
        assert response.status_code == 200
        assert response["HX-Redirect"] == reverse("dashboard:stream-detail", args=[stream])
        assert r.xinfo_groups(stream) == []

    def test_the_typed_name_must_match(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_group(r, stream, "g")
        response = admin_client(make_client).post(
            group_url(stream, "delete-group"),
            {"confirm_name": "G", "expected_pending": "0"},
            headers=HTMX,
        )
        assert response.status_code == 400
        assert "Type the group's name" in element_text(response.content.decode(), "messages")
        assert "g" in groups(r, stream)

    def test_refused_while_entries_are_pending(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        response = admin_client(make_client).post(
            group_url(stream, "delete-group"),
            {"confirm_name": "g", "expected_pending": "2"},
            headers=HTMX,
        )
        assert response.status_code == 409
        assert "2 entries are pending" in element_text(response.content.decode(), "messages")
        assert "g" in groups(r, stream)
        assert last_audit().result == "refused"

    def test_acknowledging_needs_a_reason(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        response = admin_client(make_client).post(
            group_url(stream, "delete-group"),
            {"confirm_name": "g", "expected_pending": "2", "acknowledge": "1"},
            headers=HTMX,
        )
        assert response.status_code == 400
        assert "needs a reason" in element_text(response.content.decode(), "messages")
        assert "g" in groups(r, stream)

    def test_acknowledged_pending_entries_are_dropped_with_the_group(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        make_group(r, stream, "other")
        response = admin_client(make_client).post(
            group_url(stream, "delete-group"),
            {
                "confirm_name": "g",
                "expected_pending": "2",
                "acknowledge": "1",
                "reason": "retired app",
            },
        )
        assert response.status_code == 303
        assert list(groups(r, stream)) == ["other"]
        event = last_audit()
        assert event.result == "ok" and event.reason == "retired app"
        assert event.state_before["pending_dropped"] == 2

    def test_a_pending_count_that_changed_is_409(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        make_pending(r, stream, "g", "w1", 1, create=False)  # one more since the page loaded
        response = admin_client(make_client).post(
            group_url(stream, "delete-group"),
            {"confirm_name": "g", "expected_pending": "2", "acknowledge": "1", "reason": "x"},
            headers=HTMX,
        )
        assert response.status_code == 409
        assert "changed since you looked" in element_text(response.content.decode(), "messages")
        assert "g" in groups(r, stream)

    def test_unknown_group_is_404(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        add_entries(r, stream, 1)
        response = admin_client(make_client).post(
            group_url(stream, "delete-group", group="nope"),
            {"confirm_name": "nope", "expected_pending": "0"},
            headers=HTMX,
        )
        assert response.status_code == 404

    def test_group_page_dialog_asks_to_acknowledge_the_pending_count(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        url = reverse("dashboard:group-detail", args=[stream, "g"])
        html = admin_client(make_client).get(url).content.decode()
        dialog = labelled_text(html, "Delete the consumer group")
        assert "Acknowledge the 2 pending entries" in dialog
        assert '<input type="hidden" name="expected_pending" value="2">' in html
        reader = make_client("rita", "view_queues")
        assert 'id="group-admin"' not in reader.get(url).content.decode()

    def test_needs_the_permission(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_group(r, stream, "g")
        response = make_client("rita", "view_queues", "trim_stream").post(
            group_url(stream, "delete-group"), {"confirm_name": "g", "expected_pending": "0"}
        )
        assert response.status_code == 403
        assert "g" in groups(r, stream)
        assert (last_audit().action, last_audit().result) == ("delete-group", "refused")


# --- reset position ---------------------------------------------------------------------


def preview(client: Client, stream: str, data: dict[str, str], group: str = "g") -> Any:
    url = reverse("dashboard:reset-preview", args=[stream, group])
    return client.post(url, data, headers=HTMX)


class ResetPositionTests:
    def test_dry_run_counts_entries_delivered_again_and_changes_nothing(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 5)
        audited = AuditEvent.objects.count()
        response = preview(admin_client(make_client), stream, {"position": "id", "at": ids[1]})
        assert response.status_code == 200, response.content
        assert response["HX-Retarget"] == "#reset-result"
        html = response.content.decode()
        assert element_text(html, "reset-effect") == "3 entries would be delivered again."
        positions = element_text(html, "reset-positions")
        assert f"before {ids[4]} (entries read 5)" in positions
        assert f"after {ids[1]} (entries read 2)" in positions
        assert groups(r, stream)["g"]["last-delivered-id"] == ids[4].encode()
        assert AuditEvent.objects.count() == audited

    def test_dry_run_forward_counts_skipped_entries(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        make_group(r, stream, "g")
        add_entries(r, stream, 4)
        response = preview(admin_client(make_client), stream, {"position": "end"})
        html = response.content.decode()
        assert element_text(html, "reset-effect") == (
            "4 entries would be skipped (never delivered)."
        )

    def test_counts_cut_at_the_budget_say_more_than(self) -> None:
        assert _entries(10_001, exact=False) == "more than 10000 entries"
        assert _entries(1) == "1 entry"

    def test_confirm_resets_with_entries_read_and_keeps_the_position_before(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 5)
        response = admin_client(make_client).post(
            group_url(stream, "reset-position"),
            {"position": ids[1], "expected_before_id": ids[4], "confirm": "1"},
            headers=HTMX,
        )
        assert response.status_code == 200, response.content
        g = groups(r, stream)["g"]
        assert g["last-delivered-id"] == ids[1].encode()
        assert g["entries-read"] == 2 and g["lag"] == 3
        event = last_audit()
        assert (event.action, event.result) == ("reset-position", "ok")
        assert event.state_before["before_id"] == ids[4]
        assert event.state_before["before_entries_read"] == 5
        assert f"To undo, reset it to {ids[4]}" in event.detail

    def test_undo_is_a_dry_run_then_a_reset_back(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 5)
        client = admin_client(make_client)
        client.post(
            group_url(stream, "reset-position"),
            {"position": "start", "expected_before_id": ids[4], "confirm": "1"},
            headers=HTMX,
        )
        assert groups(r, stream)["g"]["last-delivered-id"] == b"0-0"
        page = client.get(reverse("dashboard:group-detail", args=[stream, "g"])).content.decode()
        undo = element_text(page, "reset-undo")
        assert f"from {ids[4]} (entries read 5) to 0-0" in undo
        # The Undo form posts the position before to the dry run.
        response = preview(client, stream, {"position": ids[4]})
        html = response.content.decode()
        assert element_text(html, "reset-effect") == (
            "5 entries would be skipped (never delivered)."
        )
        response = client.post(
            group_url(stream, "reset-position"),
            {"position": ids[4], "expected_before_id": "0-0", "confirm": "1"},
            headers=HTMX,
        )
        assert response.status_code == 200
        g = groups(r, stream)["g"]
        assert g["last-delivered-id"] == ids[4].encode() and g["entries-read"] == 5
        assert g["lag"] == 0

    def test_a_group_that_moved_since_the_dry_run_is_409(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 5)
        response = admin_client(make_client).post(
            group_url(stream, "reset-position"),
            {"position": "start", "expected_before_id": ids[2], "confirm": "1"},
            headers=HTMX,
        )
        assert response.status_code == 409
        assert "changed since you looked" in element_text(response.content.decode(), "messages")
        assert groups(r, stream)["g"]["last-delivered-id"] == ids[4].encode()
        assert last_audit().result == "refused"

    def test_refused_while_consumers_are_live_unless_paused(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "w1", 3)  # w1 read just now: live
        client = admin_client(make_client)
        html = preview(client, stream, {"position": "start"}).content.decode()
        assert "live consumers (w1)" in element_text(html, "reset-refusal")
        data = {"position": "0-0", "expected_before_id": ids[2], "confirm": "1"}
        response = client.post(group_url(stream, "reset-position"), data, headers=HTMX)
        assert response.status_code == 409
        assert "live consumers" in element_text(response.content.decode(), "messages")
        assert groups(r, stream)["g"]["last-delivered-id"] == ids[2].encode()
        event = last_audit()
        assert (event.action, event.result) == ("reset-position", "refused")
        # An Ackboard worker (a live heartbeat) that confirmed a pause: the reset goes ahead.
        keys = stream_keys(stream)
        now = int(time.time() * 1000)
        r.hset(keys.workers("g"), "w1", json.dumps({"consumer": "w1", "seen_ms": now}))
        r.set(keys.pause("g"), json.dumps({"by": "olga", "reason": "reset", "at_ms": now}))
        response = client.post(group_url(stream, "reset-position"), data, headers=HTMX)
        assert response.status_code == 200, response.content
        assert groups(r, stream)["g"]["last-delivered-id"] == b"0-0"

    def test_confirm_without_the_dry_run_is_refused(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 2)
        response = admin_client(make_client).post(
            group_url(stream, "reset-position"), {"position": "start"}, headers=HTMX
        )
        assert response.status_code == 400
        assert "dry run first" in element_text(response.content.decode(), "messages")
        assert groups(r, stream)["g"]["last-delivered-id"] == ids[1].encode()

    @pytest.mark.parametrize(
        ("data", "status"),
        [
            ({"position": "time", "at": "2026-13-45T00:00:00Z"}, 400),
            ({"position": "id", "at": "1-2-3"}, 400),
            ({"position": "sideways"}, 400),
        ],
    )
    def test_bad_positions_are_400(
        self,
        r: redis.Redis,
        stream: str,
        make_client: MakeClient,
        data: dict[str, str],
        status: int,
    ) -> None:
        delivered_and_acked(r, stream, 1)
        response = preview(admin_client(make_client), stream, data)
        assert response.status_code == status
        assert element_text(response.content.decode(), "messages")

    def test_unknown_group_is_404(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        add_entries(r, stream, 1)
        response = preview(admin_client(make_client), stream, {"position": "end"}, group="nope")
        assert response.status_code == 404

    def test_dry_run_and_confirm_need_the_permission(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 2)
        reader = make_client("rita", "view_queues", "trim_stream")
        assert preview(reader, stream, {"position": "start"}).status_code == 403
        assert (last_audit().action, last_audit().result) == ("reset-position", "refused")
        response = reader.post(
            group_url(stream, "reset-position"),
            {"position": "start", "expected_before_id": ids[1], "confirm": "1"},
            headers=HTMX,
        )
        assert response.status_code == 403
        assert groups(r, stream)["g"]["last-delivered-id"] == ids[1].encode()

    def test_dry_run_needs_the_csrf_token(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        delivered_and_acked(r, stream, 1)
        client = admin_client(make_client, enforce_csrf_checks=True)
        url = reverse("dashboard:reset-preview", args=[stream, "g"])
        assert client.post(url, {"position": "start"}).status_code == 403

    def test_dry_run_without_htmx_is_a_page_with_the_confirm_form(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 3)
        url = reverse("dashboard:reset-preview", args=[stream, "g"])
        response = admin_client(make_client).post(url, {"position": "start"})
        assert response.status_code == 200
        html = response.content.decode()
        assert element_text(html, "reset-effect") == "3 entries would be delivered again."
        assert f'name="expected_before_id" value="{ids[2]}"' in html


# --- trim ---------------------------------------------------------------------------------


def trim_preview(client: Client, stream: str, minid: str) -> Any:
    url = reverse("dashboard:trim-preview", args=[stream])
    return client.post(url, {"minid": minid}, headers=HTMX)


class TrimTests:
    def test_dry_run_counts_and_confirm_trims(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 10)
        client = admin_client(make_client)
        html = trim_preview(client, stream, ids[5]).content.decode()
        assert element_text(html, "trim-count").startswith("5 entries older than")
        assert "group g" in element_text(html, "trim-floor")
        assert 'id="trim-past-floor"' not in html
        assert r.xlen(stream) == 10
        response = client.post(
            stream_url(stream, "trim"), {"minid": ids[5], "confirm": "1"}, headers=HTMX
        )
        assert response.status_code == 200, response.content
        assert r.xlen(stream) == 5 and r.xrange(stream, count=1)[0][0].decode() == ids[5]
        event = last_audit()
        assert (event.action, event.result) == ("trim", "ok")
        assert event.state_before["deleted"] == 5 and event.state_before["would_delete"] == 5

    def test_a_time_in_utc_trims_what_was_added_before_it(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        fixed_ids(r, stream)
        html = trim_preview(
            admin_client(make_client), stream, "1970-01-01T00:00:03Z"
        ).content.decode()
        assert element_text(html, "trim-count").startswith("2 entries older than 3000-0")
        assert trim_minid("1970-01-01T00:00:03") == "3000-0"

    def test_refused_past_the_floor_unless_forced_with_the_name(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 3)
        pending = make_pending(r, stream, "g", "w1", 3, create=False)
        client = admin_client(make_client)
        html = trim_preview(client, stream, pending[2]).content.decode()
        assert 'id="trim-past-floor"' in html
        assert f"The floor is {pending[0]}: group g (its oldest pending entry)" in element_text(
            html, "trim-floor"
        )
        data = {"minid": pending[2], "confirm": "1"}
        response = client.post(stream_url(stream, "trim"), data, headers=HTMX)
        assert response.status_code == 409
        assert "past the floor" in element_text(response.content.decode(), "messages")
        assert r.xlen(stream) == 6
        forced = {**data, "force": "1", "confirm_name": "wrong"}
        response = client.post(stream_url(stream, "trim"), forced, headers=HTMX)
        assert response.status_code == 400
        assert r.xlen(stream) == 6
        forced["confirm_name"] = stream
        response = client.post(stream_url(stream, "trim"), forced, headers=HTMX)
        assert response.status_code == 200, response.content
        assert r.xlen(stream) == 1
        assert ids  # trimmed along with the first two pending entries

    def test_dry_run_without_htmx_is_a_page_with_the_confirm_form(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 3)
        url = reverse("dashboard:trim-preview", args=[stream])
        response = admin_client(make_client).post(url, {"minid": ids[1]})
        assert response.status_code == 200
        html = response.content.decode()
        assert element_text(html, "trim-count").startswith("1 entry older than")
        assert f'name="minid" value="{ids[1]}"' in html
        assert r.xlen(stream) == 3

    def test_confirm_without_the_dry_run_is_refused(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 3)
        response = admin_client(make_client).post(
            stream_url(stream, "trim"), {"minid": ids[2]}, headers=HTMX
        )
        assert response.status_code == 400
        assert r.xlen(stream) == 3

    @pytest.mark.parametrize("minid", ["abc", "start", "2026-02-30T00:00:00Z", ""])
    def test_bad_minid_is_400(
        self, r: redis.Redis, stream: str, make_client: MakeClient, minid: str
    ) -> None:
        delivered_and_acked(r, stream, 1)
        response = trim_preview(admin_client(make_client), stream, minid)
        assert response.status_code == 400
        assert element_text(response.content.decode(), "messages")

    def test_unknown_stream_is_404(self, stream: str, make_client: MakeClient) -> None:
        assert trim_preview(admin_client(make_client), stream, "1-0").status_code == 404

    def test_needs_its_own_permission(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = delivered_and_acked(r, stream, 3)
        client = make_client("ada", "view_queues", "administer_group")
        assert trim_preview(client, stream, ids[2]).status_code == 403
        response = client.post(
            stream_url(stream, "trim"), {"minid": ids[2], "confirm": "1"}, headers=HTMX
        )
        assert response.status_code == 403
        assert r.xlen(stream) == 3
        assert (last_audit().action, last_audit().result) == ("trim", "refused")


# --- the CLI and the API ------------------------------------------------------------------


def ackboard(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("ackboard", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), str(exc)
    return 0, out.getvalue(), err.getvalue()


class CliTests:
    @pytest.fixture(autouse=True)
    def _olga(self, django_user_model: Any) -> None:
        make_user(django_user_model, "olga", *ADMIN)

    def test_create_and_delete_group(self, r: redis.Redis, stream: str) -> None:
        add_entries(r, stream, 2)
        code, out, _ = ackboard(
            "create-group", stream, "c", "--position", "start", "--user", "olga"
        )
        assert code == 0 and "Group c created" in out
        assert groups(r, stream)["c"]["lag"] == 2
        assert last_audit().channel == "cli"
        code, _, err = ackboard("create-group", stream, "c", "--user", "olga")
        assert code == 1 and "already a consumer group" in err
        code, out, _ = ackboard("delete-group", stream, "c", "--user", "olga")
        assert code == 0 and "deleted" in out and r.xinfo_groups(stream) == []

    def test_reset_position_dry_run_prints_how_to_act(self, r: redis.Redis, stream: str) -> None:
        ids = delivered_and_acked(r, stream, 4)
        code, out, _ = ackboard("reset-position", stream, "g", "start", "--user", "olga")
        assert code == 0 and "4 entries would be delivered again" in out
        assert f"--yes --expected-before-id {ids[3]}" in out
        assert groups(r, stream)["g"]["last-delivered-id"] == ids[3].encode()
        args = ("reset-position", stream, "g", "0-0", "--yes", "--expected-before-id", ids[3])
        code, out, _ = ackboard(*args, "--user", "olga")
        assert code == 0 and f"To undo, reset it to {ids[3]}" in out
        assert groups(r, stream)["g"]["last-delivered-id"] == b"0-0"
        code, _, err = ackboard(*args, "--user", "olga")  # moved since: 409
        assert code == 1 and "changed since you looked" in err

    def test_trim_dry_run_then_yes(self, r: redis.Redis, stream: str) -> None:
        ids = delivered_and_acked(r, stream, 4)
        code, out, _ = ackboard("trim", stream, ids[2], "--user", "olga", "--json")
        payload = json.loads(out)
        assert code == 0 and payload["dry_run"] and payload["would_delete"] == 2
        assert r.xlen(stream) == 4
        code, out, _ = ackboard("trim", stream, ids[2], "--yes", "--user", "olga")
        assert code == 0 and "Trimmed 2 entries" in out and r.xlen(stream) == 2

    def test_delete_group_with_pending_entries_needs_the_count(
        self, r: redis.Redis, stream: str
    ) -> None:
        make_pending(r, stream, "g", "w1", 2)
        code, _, err = ackboard("delete-group", stream, "g", "--user", "olga")
        assert code == 1 and "2 entries are pending" in err
        args = ("delete-group", stream, "g", "--acknowledge", "3", "--reason", "gone")
        code, _, err = ackboard(*args, "--user", "olga")
        assert code == 1 and "changed since you looked" in err
        code, out, _ = ackboard(
            *args[:3], "--acknowledge", "2", "--reason", "gone", "--user", "olga"
        )
        assert code == 0 and "2 entries pending in it were dropped" in out
        assert r.xinfo_groups(stream) == []
        assert last_audit().reason == "gone"

    def test_bad_position_is_exit_2(self, r: redis.Redis, stream: str) -> None:
        delivered_and_acked(r, stream, 1)
        code, _, err = ackboard("reset-position", stream, "g", "sideways", "--user", "olga")
        assert code == 2 and "position" in err


class ApiTests:
    def test_create_group_and_trim_dry_run(
        self, r: redis.Redis, stream: str, django_user_model: Any
    ) -> None:
        user = make_user(django_user_model, "olga", *ADMIN)
        _, token = token_issue(user=user, name="tests")
        headers = {"Authorization": f"Bearer {token}"}
        ids = add_entries(r, stream, 3)
        client = Client()
        body = {"stream": stream, "name": "api", "position": "start"}
        response = client.post(
            "/api/v1/actions/create-group", json.dumps(body), "application/json", headers=headers
        )
        assert response.status_code == 200, response.content
        assert groups(r, stream)["api"]["lag"] == 3
        assert last_audit().channel == "api"
        body = {"stream": stream, "minid": ids[2]}
        response = client.post(
            "/api/v1/actions/trim", json.dumps(body), "application/json", headers=headers
        )
        # A dry run: group api has delivered nothing, so this is past the floor.
        assert response.status_code == 200, response.content
        payload = response.json()
        assert payload["dry_run"] and payload["would_delete"] == 2 and payload["past_floor"]
        response = client.post(
            "/api/v1/actions/trim",
            json.dumps({**body, "confirm": True}),
            "application/json",
            headers=headers,
        )
        assert response.status_code == 409
        assert "past the floor" in response.json()["message"]
        assert r.xlen(stream) == 3


# --- Redis 6.2: no ENTRIESREAD, so entries-read and lag are unknown, said, not crashed ------


@pytest.fixture(scope="module")
def url62() -> Iterator[str]:
    with engine("redis-6.2") as url:
        yield url


class Redis62Tests:
    def test_create_and_reset_say_entries_read_is_unknown(
        self, url62: str, make_client: MakeClient, settings: Any
    ) -> None:
        settings.ACKBOARD_REDIS_URL = url62
        r62 = redis.Redis.from_url(url62)
        stream = f"s62-{uuid.uuid4().hex[:6]}"
        ids = add_entries(r62, stream, 3)
        client = admin_client(make_client)
        response = client.post(
            stream_url(stream, "create-group"), {"name": "g", "position": "start"}, headers=HTMX
        )
        assert response.status_code == 200, response.content
        assert "lag" not in last_audit().detail  # unknown, so not claimed
        html = preview(client, stream, {"position": "id", "at": ids[1]}).content.decode()
        assert "entries read unknown" in element_text(html, "reset-positions")
        assert element_text(html, "reset-effect") == "2 entries would be skipped (never delivered)."
        r62.close()
