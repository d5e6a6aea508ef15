"""The Failures page's "by cause" view and acting on a cause, on real Redis and SQL.

The view (counts, pending now, groups, caps, escaping), the ingestor storing the
fingerprint, the migration's backfill, and the bulk scope "pending entries whose last
failure has this cause": dry run, confirm, Continue, the audit row naming the
fingerprint, and 403 without the action's permission.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from django.db import connection
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.access.api_tokens import token_issue
from dashboard.insight.failure_index import (
    FailureFilter,
    cause_pending_ids,
    causes,
    failures_ingest,
    last_fingerprints,
)
from dashboard.models import AuditEvent, IndexedFailure
from queue_core.fingerprint import fingerprint
from tests.dashboard.action_helpers import HTMX, MakeClient, bulk_url, last_audit, pending_ids
from tests.dashboard.test_cli import ackboard
from tests.factories import add_failure, indexed_failure, make_pending
from tests.html import element_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("action_settings")]


@pytest.fixture(autouse=True)
def roomy_budget(settings: SettingsWrapper) -> None:
    """A stall of a loaded machine is not "too broad" (the budget's own test sets 0)."""
    settings.ACKBOARD_FAILURE_SEARCH_MS = 30_000


URL = "/failures/"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
TB = 'Traceback (most recent call last):\n  File "/app/handlers/pay.py", line 9, in charge\n'


def fail(stream: str, entry_id: str, error_type: str, message: str, group: str = "g") -> str:
    """One stored attempt of ``entry_id`` with its real fingerprint; returns it."""
    fp = fingerprint(error_type, message, TB)
    indexed_failure(
        stream=stream,
        group=group,
        entry_id=entry_id,
        error_type=error_type,
        message=message,
        traceback=TB,
        fingerprint=fp,
    )
    return fp


def three_causes(r: redis.Redis, stream: str) -> tuple[list[str], dict[str, str]]:
    """9 pending entries: 4 timeouts, 3 key errors, 2 declines; entry 0 first timed out,
    then was declined (its last failure is the decline)."""
    ids = make_pending(r, stream, "g", "c1", 9)
    fps = {}
    for i in range(4):
        fps["timeout"] = fail(stream, ids[i], "TimeoutError", f"gateway timed out after {i}0 s")
    for i in range(4, 7):
        fps["key"] = fail(stream, ids[i], "KeyError", f"'customer_{i}'")
    for i in (7, 8, 0):
        fps["decline"] = fail(stream, ids[i], "CardDeclined", f"card {i}234 declined")
    return ids, fps


def cause_rows(page: str) -> dict[str, list[str]]:
    return {k.removeprefix("cause-"): v for k, v in table_rows(page, "cause-").items()}


class CausesQueryTests:
    def test_counts_pending_now_groups_and_samples(self, r: redis.Redis, stream: str) -> None:
        ids, fps = three_causes(r, stream)
        page = causes(filters=FailureFilter(stream=stream), client=r)
        by_fp = {c.fingerprint: c for c in page.causes}
        assert set(by_fp) == set(fps.values())
        timeout, key, decline = by_fp[fps["timeout"]], by_fp[fps["key"]], by_fp[fps["decline"]]
        assert (timeout.count, key.count, decline.count) == (4, 3, 3)
        # Entry 0's last failure is the decline: it counts there, not under the timeout.
        assert (timeout.pending_now, key.pending_now, decline.pending_now) == (3, 3, 3)
        assert timeout.groups == ((stream, "g"),) and timeout.group_count == 1
        assert decline.message == "card 0234 declined" and decline.error_type == "CardDeclined"
        assert timeout.first_seen < timeout.last_seen
        assert [c.fingerprint for c in page.causes][0] == fps["timeout"]
        assert not page.truncated and not page.pending_capped

    def test_acked_entries_are_not_pending_now(self, r: redis.Redis, stream: str) -> None:
        ids, fps = three_causes(r, stream)
        r.xack(stream, "g", ids[4], ids[5])
        page = causes(filters=FailureFilter(stream=stream), client=r)
        assert {c.fingerprint: c.pending_now for c in page.causes}[fps["key"]] == 1

    def test_pending_scan_cap_is_said(self, r: redis.Redis, stream: str) -> None:
        three_causes(r, stream)
        page = causes(filters=FailureFilter(stream=stream), client=r, pending_scan=5)
        assert page.pending_capped and page.pending_scanned == 5
        assert sum(c.pending_now for c in page.causes) <= 5
        # Exactly the 9 pending entries: all read, not capped.
        exact = causes(filters=FailureFilter(stream=stream), client=r, pending_scan=9)
        assert not exact.pending_capped and exact.pending_scanned == 9
        assert sum(c.pending_now for c in exact.causes) == 9

    def test_cause_and_group_row_caps_are_said(self, r: redis.Redis, stream: str) -> None:
        three_causes(r, stream)
        assert causes(filters=FailureFilter(stream=stream), limit=2).truncated
        assert len(causes(filters=FailureFilter(stream=stream), limit=2).causes) == 2
        assert causes(filters=FailureFilter(stream=stream), group_rows=1).truncated

    def test_cause_pending_ids_and_snapshot(self, r: redis.Redis, stream: str) -> None:
        ids, fps = three_causes(r, stream)
        found = cause_pending_ids(
            client=r, stream=stream, group="g", fingerprint=fps["timeout"], snapshot_id=ids[-1]
        )
        assert list(found.ids) == ids[1:4] and found.complete
        # The snapshot bounds it: nothing after ids[2].
        found = cause_pending_ids(
            client=r, stream=stream, group="g", fingerprint=fps["timeout"], snapshot_id=ids[2]
        )
        assert list(found.ids) == ids[1:3]
        limited = cause_pending_ids(
            client=r,
            stream=stream,
            group="g",
            fingerprint=fps["timeout"],
            snapshot_id=ids[-1],
            limit=2,
        )
        assert list(limited.ids) == ids[1:3] and limited.next_cursor is not None

    def test_last_fingerprints_many_ids(self, stream: str) -> None:
        fp = fail(stream, "5-0", "E", "x 1")
        ids = [f"{i}-0" for i in range(1200)]
        assert last_fingerprints(stream=stream, group="g", entry_ids=ids) == {"5-0": fp}


class IngestTests:
    def test_the_ingestor_stores_the_fingerprint(
        self, r: redis.Redis, stream: str, settings: SettingsWrapper, prefix: str
    ) -> None:
        settings.ACKBOARD_STREAMS = (prefix + "*",)
        add_failure(r, stream, "1-0", error_type="KeyError", message="'a1'", traceback=TB)
        add_failure(r, stream, "2-0", error_type="KeyError", message="'b2'", traceback=TB)
        add_failure(r, stream, "3-0", error_type="ValueError", message="'b2'", traceback=TB)
        assert failures_ingest(client=r) == 3
        fps = dict(
            IndexedFailure.objects.filter(stream=stream).values_list("entry_id", "fingerprint")
        )
        assert fps["1-0"] == fps["2-0"] == fingerprint("KeyError", "'x'", TB)
        assert fps["3-0"] != fps["1-0"] and len(fps["3-0"]) == 16


class BackfillTests:
    def test_backfill_fills_every_row_in_chunks(self) -> None:
        from importlib import import_module

        from django.apps import apps

        migration: Any = import_module("dashboard.migrations.0008_failure_fingerprint")
        rows = [indexed_failure(message=f"order {i} lost", error_type="E") for i in range(7)]
        IndexedFailure.objects.update(fingerprint="")
        old_chunk, migration.CHUNK = migration.CHUNK, 3
        try:
            # The backfill reads only the editor's connection.
            migration.backfill(apps, SimpleNamespace(connection=connection))
        finally:
            migration.CHUNK = old_chunk
        stored = set(IndexedFailure.objects.values_list("fingerprint", flat=True))
        assert stored == {fingerprint("E", "order 1 lost", rows[0].traceback)}

    def test_refingerprint_migration_joins_causes_split_per_address(self) -> None:
        # Rows stored under the first rules: one fingerprint per mailbox. The data
        # migration of the second rules gives them the one they share now, in chunks,
        # writing only the rows that differ, and a second run changes nothing.
        from importlib import import_module

        from django.apps import apps

        from dashboard.insight.failure_index import backfill

        migration: Any = import_module("dashboard.migrations.0011_refingerprint")
        addresses = ["X@example.invalid", "ann@example.invalid", "bob@mail.example"]
        rows = [
            indexed_failure(
                error_type="SMTPError",
                message=f"550 mailbox unavailable: {a}",
                fingerprint=f"{i:016x}",
            )
            for i, a in enumerate(addresses)
        ]
        current = indexed_failure(error_type="E", message="order 4 lost")
        current.fingerprint = fingerprint("E", "order 4 lost", current.traceback)
        current.save()
        old_chunk, backfill.CHUNK = backfill.CHUNK, 2
        try:
            migration.refingerprint(apps, SimpleNamespace(connection=connection))
        finally:
            backfill.CHUNK = old_chunk
        stored = set(
            IndexedFailure.objects.filter(error_type="SMTPError").values_list(
                "fingerprint", flat=True
            )
        )
        assert stored == {fingerprint("SMTPError", rows[0].message, rows[0].traceback)}
        assert backfill.fingerprints_refresh(model=IndexedFailure) == 0


class ViewTests:
    def test_by_cause_view_lists_causes(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids, fps = three_causes(r, stream)
        response = make_client().get(URL, {"view": "causes", "stream": stream})
        assert response.status_code == 200
        rows = cause_rows(response.content.decode())
        assert set(rows) == set(fps.values())
        timeout = rows[fps["timeout"]]
        assert timeout[0] == f"{fps['timeout']}TimeoutError"  # code, then a badge
        assert timeout[2:4] == ["4", "3"]  # attempts, pending now
        assert timeout[1] == "gateway timed out after 30 s"
        assert stream in timeout[5] and "Retry…" in timeout[5]

    def test_live_refresh_and_partial(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        three_causes(r, stream)
        client = make_client()
        page = client.get(URL, {"view": "causes", "stream": stream}).content.decode()
        assert 'hx-trigger="every 5s"' in page and "view=causes" in page
        partial = client.get(URL, {"view": "causes", "stream": stream}, headers=HTMX)
        body = partial.content.decode()
        assert body.lstrip().startswith('<div id="failure-table"') and "cause-table" in body
        assert "<html" not in body

    def test_tabs_keep_the_filters_and_by_cause_starts_on_the_last_day(
        self, stream: str, make_client: MakeClient
    ) -> None:
        import re

        client = make_client()
        page = client.get(URL, {"stream": stream}).content.decode()
        causes_link = re.search(r'href="\?([^"]*)"[^>]*id="view-causes"', page)
        assert causes_link is not None
        query = causes_link.group(1).replace("&amp;", "&")
        assert "view=causes" in query and "window=24h" in query and "stream=" in query
        back = client.get(URL, {"stream": stream, "view": "causes", "window": "7d"})
        attempts_link = re.search(r'href="\?([^"]*)"[^>]*id="view-attempts"', back.content.decode())
        assert attempts_link is not None
        assert "view=" not in attempts_link.group(1) and "window=7d" in attempts_link.group(1)

    def test_attempts_view_is_unchanged(self, stream: str, make_client: MakeClient) -> None:
        fail(stream, "1-0", "E", "x 1")
        page = make_client().get(URL, {"stream": stream}).content.decode()
        assert not cause_rows(page) and table_rows(page, "failure-")

    def test_hostile_messages_are_escaped(self, stream: str, make_client: MakeClient) -> None:
        fail(stream, "1-0", HOSTILE, HOSTILE)
        page = make_client().get(URL, {"view": "causes", "stream": stream}).content.decode()
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "&lt;script&gt;" in page

    def test_too_broad_is_said(
        self, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        fail(stream, "1-0", "E", "x 1")
        settings.ACKBOARD_FAILURE_SEARCH_MS = 0
        page = make_client().get(URL, {"view": "causes"}).content.decode()
        assert "too broad" in element_text(page, "failure-search-too-broad")

    def test_caps_are_said(
        self, r: redis.Redis, stream: str, make_client: MakeClient, monkeypatch: Any
    ) -> None:
        # The package's ``causes`` is the function; the module is in sys.modules.
        causes_module = sys.modules["dashboard.insight.failure_index.causes"]
        three_causes(r, stream)
        monkeypatch.setattr(causes_module, "PENDING_SCAN", 4)
        monkeypatch.setattr(causes_module, "CAUSES_SHOWN", 2)
        page = make_client().get(URL, {"view": "causes", "stream": stream}).content.decode()
        assert "capped" in element_text(page, "causes-pending-capped")
        assert "4 pending entries were read" in element_text(page, "cause-notes")
        assert "Only the causes" in element_text(page, "causes-truncated")
        assert len(cause_rows(page)) == 2

    def test_redis_down_still_shows_causes(
        self, stream: str, make_client: MakeClient, settings: SettingsWrapper
    ) -> None:
        from tests.redis_server import free_port

        fp = fail(stream, "1-0", "E", "x 1")
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        response = make_client().get(URL, {"view": "causes", "stream": stream})
        assert response.status_code == 200
        page = response.content.decode()
        assert cause_rows(page)[fp][3] == "?"
        assert "unknown" in element_text(page, "causes-pending-unknown")

    def test_view_needs_view_permission(self, make_client: MakeClient) -> None:
        assert make_client("nobody", "retry_entry").get(URL, {"view": "causes"}).status_code == 403

    def test_no_action_buttons_without_permissions(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        _, fps = three_causes(r, stream)
        page = make_client("vera", "view_queues").get(URL, {"view": "causes", "stream": stream})
        html = page.content.decode()
        assert "Retry…" not in cause_rows(html)[fps["key"]][5]
        assert 'id="cause-reason"' not in html


class ActOnCauseTests:
    def post(self, client: Client, stream: str, action: str, **data: Any) -> Any:
        return client.post(bulk_url(stream, action), data, headers=HTMX)

    def test_dry_run_counts_only_the_cause(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids, fps = three_causes(r, stream)
        response = self.post(
            make_client(),
            stream,
            "retry",
            snapshot_id=ids[-1],
            scope="filter",
            fingerprint=fps["key"],
        )
        assert response.status_code == 200
        text = element_text(response.content.decode(), "bulk-result")
        assert "3 entries whose last failure has cause " + fps["key"] in text
        assert f'name="fingerprint" value="{fps["key"]}"' in response.content.decode()
        assert not AuditEvent.objects.exists()
        assert pending_ids(r, stream) == ids

    def test_confirm_continue_and_audit(
        self,
        r: redis.Redis,
        stream: str,
        make_client: MakeClient,
        settings: SettingsWrapper,
    ) -> None:
        settings.ACKBOARD_BULK_CAP = 2
        ids, fps = three_causes(r, stream)
        client = make_client()
        first = self.post(
            client,
            stream,
            "acknowledge",
            snapshot_id=ids[-1],
            scope="filter",
            fingerprint=fps["key"],
            reason="fixed the customer lookup",
            confirm="1",
        )
        assert first.status_code == 200
        assert pending_ids(r, stream) == ids[:4] + ids[6:]
        row = last_audit()
        assert row.action == "bulk-acknowledge" and row.entry_ids == ids[4:6]
        assert row.state_before["fingerprint"] == fps["key"]
        assert fps["key"] in row.detail
        cursor = row.state_before["next_cursor"]
        assert cursor and 'name="cursor"' in first.content.decode()
        second = self.post(
            client,
            stream,
            "acknowledge",
            snapshot_id=ids[-1],
            scope="filter",
            fingerprint=fps["key"],
            reason="fixed the customer lookup",
            confirm="1",
            cursor=cursor,
            done_before="2",
        )
        assert second.status_code == 200
        assert "3 done" in element_text(second.content.decode(), "bulk-result")
        # Only the cause's entries: the timeouts and declines stay pending, untouched.
        assert pending_ids(r, stream) == ids[:4] + ids[7:]
        assert last_audit().entry_ids == [ids[6]]

    def test_retry_by_cause_leaves_others_alone(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids, fps = three_causes(r, stream)
        response = self.post(
            make_client(),
            stream,
            "retry",
            snapshot_id=ids[-1],
            scope="filter",
            fingerprint=fps["decline"],
            confirm="1",
        )
        assert response.status_code == 200
        row = last_audit()
        assert sorted(row.entry_ids) == sorted([ids[0], ids[7], ids[8]])
        # Retry makes an entry due (idle at least ACKBOARD_RETRY_IDLE_MS); the others
        # were delivered a moment ago.
        idle = {
            p["message_id"].decode(): p["time_since_delivered"]
            for p in r.xpending_range(stream, "g", "-", "+", 100)
        }
        assert all(idle[i] >= 60_000 for i in (ids[0], ids[7], ids[8]))
        assert all(idle[i] < 60_000 for i in ids[1:7])

    def test_permission_403(self, r: redis.Redis, stream: str, make_client: MakeClient) -> None:
        ids, fps = three_causes(r, stream)
        client = make_client("vera", "view_queues", "retry_entry")
        response = self.post(
            client,
            stream,
            "dead-letter",
            snapshot_id=ids[-1],
            scope="filter",
            fingerprint=fps["key"],
            confirm="1",
        )
        assert response.status_code == 403
        assert pending_ids(r, stream) == ids
        assert last_audit().result == "refused"

    @pytest.mark.parametrize("bad", ["zz" * 8, "abc", "<script>" * 2, "A" * 16])
    def test_bad_fingerprint_is_a_clear_400(
        self, r: redis.Redis, stream: str, make_client: MakeClient, bad: str
    ) -> None:
        ids, _ = three_causes(r, stream)
        response = self.post(
            make_client(), stream, "retry", snapshot_id=ids[-1], scope="filter", fingerprint=bad
        )
        assert response.status_code == 400
        assert "fingerprint must be 16 hex digits" in response.content.decode()
        assert pending_ids(r, stream) == ids


class RemoteByCauseTests:
    """``manage.py ackboard bulk --fingerprint`` and the API's ``fingerprint``: the same
    scope as the Failures page's buttons, dry run first."""

    def test_the_command_line_acts_on_one_cause(
        self, r: redis.Redis, stream: str, make_client: MakeClient
    ) -> None:
        ids, fps = three_causes(r, stream)
        make_client()  # olga, every action
        base = ["bulk", "acknowledge", stream, "g", "--user", "olga", "--reason", "fixed"]
        code, out, _ = ackboard(*base, "--fingerprint", fps["key"])
        assert code == 0
        assert "3 entries whose last failure has cause " + fps["key"] in out
        hint = f"run again with --fingerprint {fps['key']} --yes --snapshot-id {ids[-1]}."
        assert out.rstrip().endswith(hint), out
        assert pending_ids(r, stream) == ids and not AuditEvent.objects.exists()

        code, out, _ = ackboard(
            *base, "--fingerprint", fps["key"], "--yes", "--snapshot-id", ids[-1]
        )
        assert code == 0, out
        assert pending_ids(r, stream) == ids[:4] + ids[7:]
        row = last_audit()
        assert (row.action, row.channel, row.entry_ids) == ("bulk-acknowledge", "cli", ids[4:7])
        assert row.state_before["fingerprint"] == fps["key"]

        code, _, err = ackboard(*base, "--fingerprint", "<b>nope</b>")
        assert code == 2 and "fingerprint must be 16 hex digits" in err

    def test_the_api_acts_on_one_cause(
        self, r: redis.Redis, stream: str, make_client: MakeClient, django_user_model: Any
    ) -> None:
        ids, fps = three_causes(r, stream)
        make_client()
        _, token = token_issue(user=django_user_model.objects.get(username="olga"), name="t")
        body = {"stream": stream, "group": "g", "scope": "filter", "fingerprint": fps["decline"]}
        path = reverse("dashboard:api-bulk", args=["dead-letter"])
        headers = {"Authorization": f"Bearer {token}"}
        dry = Client().post(
            path, json.dumps(body), content_type="application/json", headers=headers
        )
        assert dry.status_code == 200 and dry.json()["dry_run"] is True
        assert dry.json()["count"] == 3  # 7, 8 and 0, whose last failure is the decline
        confirmed = {**body, "snapshot_id": dry.json()["snapshot_id"], "confirm": True}
        done = Client().post(
            path, json.dumps(confirmed), content_type="application/json", headers=headers
        )
        assert done.status_code == 200, done.content
        assert pending_ids(r, stream) == ids[1:7]
        row = last_audit()
        assert (row.action, row.channel) == ("bulk-dead-letter", "api")
        assert sorted(row.entry_ids) == sorted([ids[0], ids[7], ids[8]])
        assert row.state_before["fingerprint"] == fps["decline"]
