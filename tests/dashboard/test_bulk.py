"""Bulk actions over HTTP, on real Redis: the dry run, capped confirmed steps, the snapshot
scope, the form's refusals, and the audit row of each step."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.access.permissions import ACTION_PERMISSIONS
from dashboard.models import AuditEvent
from dashboard.views.actions import ACTIONS
from dashboard.views.bulk import BULK_ACTIONS
from queue_core.keys import stream_keys
from tests.dashboard.action_helpers import HTMX, MakeClient, bulk_url, last_audit, pending_ids
from tests.factories import make_pending
from tests.redis_server import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


class BulkActionTableTests:
    def test_each_bulk_action_is_a_pending_entry_action_with_its_permission(self) -> None:
        for name, row in BULK_ACTIONS.items():
            assert ACTIONS[name].on == "pending"
            assert row.permission == ACTION_PERMISSIONS[name]
        assert "claim" not in BULK_ACTIONS  # its guard is one row's state


class BulkTests:
    def test_dry_run_counts_and_changes_nothing(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        response = make_client().post(
            bulk_url(stream, "dead-letter"),
            {"snapshot_id": ids[-1], "scope": "selected", "ids": ids[:2]},
            headers=HTMX,
        )
        assert response.status_code == 200
        body = response.content.decode()
        assert 'id="bulk-result"' in body and "2 entries" in body
        assert 'name="confirm" value="1"' in body
        assert pending_ids(r, stream) == ids
        assert not AuditEvent.objects.exists()

    def test_confirm_applies_to_selected_and_audits(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        response = make_client().post(
            bulk_url(stream, "acknowledge"),
            {"snapshot_id": ids[-1], "ids": ids[:2], "reason": "bad batch", "confirm": "1"},
            headers=HTMX,
        )
        assert response.status_code == 200
        assert (response["HX-Retarget"], response["HX-Reswap"]) == ("#bulk-result", "outerHTML")
        body = response.content.decode()
        for gone in ids[:2]:  # the acknowledged rows leave the table
            assert f'<tr id="pending-{gone}" hx-swap-oob="delete">' in body
        assert f'id="pending-{ids[2]}"' not in body
        assert pending_ids(r, stream) == ids[2:]
        event = last_audit()
        assert (event.action, event.result, event.reason) == ("bulk-acknowledge", "ok", "bad batch")
        assert event.entry_ids == ids[:2]

    def test_filter_scope_never_touches_entries_newer_than_the_snapshot(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        seen = make_pending(r, stream, "g", "c1", 3)
        newer = make_pending(r, stream, "g", "c1", 2, create=False)
        response = make_client().post(
            bulk_url(stream, "dead-letter"),
            {"snapshot_id": seen[-1], "scope": "filter", "confirm": "1", "reason": "drain"},
            headers=HTMX,
        )
        assert response.status_code == 200
        assert pending_ids(r, stream) == newer
        moved = [f[b"ackboard.origin-id"].decode() for _, f in r.xrange(stream_keys(stream).dlq)]
        assert moved == seen
        event = last_audit()
        assert event.entry_ids == seen and len(event.new_ids) == 3

    def test_selected_ids_newer_than_the_snapshot_are_skipped(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        seen = make_pending(r, stream, "g", "c1", 2)
        [newer] = make_pending(r, stream, "g", "c1", 1, create=False)
        make_client().post(
            bulk_url(stream, "acknowledge"),
            {"snapshot_id": seen[-1], "ids": [*seen, newer], "reason": "x", "confirm": "1"},
            headers=HTMX,
        )
        assert pending_ids(r, stream) == [newer]
        skipped = last_audit().state_before["skipped"]
        assert skipped == [[newer, "skipped-newer-than-snapshot"]]

    def test_capped_per_request_with_continue(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        settings.ACKBOARD_BULK_CAP = 2
        ids = make_pending(r, stream, "g", "c1", 5)
        client = make_client()
        data = {"snapshot_id": ids[-1], "scope": "filter", "confirm": "1"}
        first = client.post(bulk_url(stream, "retry"), data, headers=HTMX)
        body = first.content.decode()
        assert "Continue" in body and 'name="cursor"' in body
        retried = [
            p["message_id"].decode()
            for p in r.xpending_range(stream, "g", min="-", max="+", count=10)
            if p["time_since_delivered"] >= 60_000
        ]
        assert retried == ids[:2]
        cursor = body.split('name="cursor" value="', 1)[1].split('"', 1)[0]
        second = client.post(
            bulk_url(stream, "retry"),
            {**data, "cursor": cursor, "done_before": "2"},
            headers=HTMX,
        )
        assert "4 done" in second.content.decode()
        assert [e.entry_ids for e in AuditEvent.objects.order_by("id")] == [ids[:2], ids[2:4]]

    def test_bulk_acknowledge_asks_for_the_reason_before_the_dry_run(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        response = make_client().post(
            bulk_url(stream, "acknowledge"), {"snapshot_id": ids[-1], "ids": ids}, headers=HTMX
        )
        assert response.status_code == 400 and "needs a reason" in response.content.decode()
        assert pending_ids(r, stream) == ids

    def test_too_many_selected_is_400(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        settings.ACKBOARD_BULK_CAP = 2
        ids = make_pending(r, stream, "g", "c1", 3)
        response = make_client().post(
            bulk_url(stream, "retry"), {"snapshot_id": ids[-1], "ids": ids}, headers=HTMX
        )
        assert response.status_code == 400

    def test_needs_a_snapshot_and_a_known_action(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 1)
        client = make_client()
        assert client.post(bulk_url(stream, "retry"), {"ids": ids}).status_code == 400
        assert client.post(bulk_url(stream, "claim"), {"ids": ids}).status_code == 404
        unknown_group = bulk_url(stream, "retry", group="nope")
        assert client.post(unknown_group, {"snapshot_id": ids[-1], "ids": ids}).status_code == 404
        assert pending_ids(r, stream) == ids

    def test_reader_cannot_bulk(self, r: redis.Redis, stream: str, make_client: MakeClient) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        response = make_client("reader", "view_queues").post(
            bulk_url(stream, "dead-letter"),
            {"snapshot_id": ids[-1], "ids": ids, "confirm": "1"},
            headers=HTMX,
        )
        assert response.status_code == 403
        assert pending_ids(r, stream) == ids
        assert last_audit().result == "refused"


class BulkFormOrderTests:
    def test_the_first_problem_in_check_order_is_the_answer(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        client = make_client()

        def refusal(**form: Any) -> str:
            response = client.post(bulk_url(stream, "retry"), form, headers=HTMX)
            assert response.status_code == 400, form
            return response.content.decode()

        assert "no snapshot id" in refusal(ids="abc", cursor="bad")
        assert "entry id &#x27;abc&#x27;" in refusal(snapshot_id=ids[-1], ids="abc", cursor="x")
        assert "Select some entries first" in refusal(snapshot_id=ids[-1], cursor="bad")
        assert "min_idle_ms must be a whole number" in refusal(
            snapshot_id=ids[-1], scope="filter", min_idle_ms="soon", done_before="x"
        )
        # The filter's idle time means nothing for a selection: not checked.
        selected = client.post(
            bulk_url(stream, "retry"),
            {"snapshot_id": ids[-1], "ids": ids, "min_idle_ms": "soon"},
            headers=HTMX,
        )
        assert selected.status_code == 200 and "2 entries" in selected.content.decode()
        assert pending_ids(r, stream) == ids


class BulkRedisDownTests:
    def test_bulk_confirm_with_redis_down_is_audited_as_error(
        self, r: redis.Redis, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        response = make_client().post(
            bulk_url(stream, "retry"),
            {"snapshot_id": ids[-1], "ids": ids, "confirm": "1"},
            headers=HTMX,
        )
        assert response.status_code == 503
        assert response["HX-Retarget"] == "#messages"
        assert pending_ids(r, stream) == ids
        event = last_audit()
        assert (event.action, event.result) == ("bulk-retry", "error")


class BulkPlainPostTests:
    def test_bulk_without_htmx_confirms_on_a_page_then_applies(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        client = make_client()
        data = {"snapshot_id": ids[-1], "ids": ids, "reason": "cleanup"}
        dry = client.post(bulk_url(stream, "acknowledge"), data)
        assert dry.status_code == 200
        assert "Confirm acknowledge of 2" in dry.content.decode()
        assert pending_ids(r, stream) == ids
        done = client.post(bulk_url(stream, "acknowledge"), {**data, "confirm": "1"})
        assert done.status_code == 200 and "2 done" in done.content.decode()
        assert pending_ids(r, stream) == []
