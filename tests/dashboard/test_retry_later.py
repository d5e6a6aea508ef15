"""Retry later from the dashboard, a terminal and a script: it parks the entry in Redis,
is checked per action and per stream pattern, audited with its due time, shown as "due
at" in the pending table, and refuses hostile input with a clear 4xx."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from dashboard.access.api_tokens import token_issue
from dashboard.models import AuditEvent, StreamScope
from queue_core import clock
from queue_core.keys import LATER_INDEX_KEY, stream_keys
from queue_core.services import LATER_CONSUMER
from tests.dashboard.action_helpers import bulk_url, entry_url, pending
from tests.factories import make_pending, make_user
from tests.html import attribute_text, table_rows

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("remote_settings")]

PERMS = ("view_queues", "retry_later_entry")


@pytest.fixture(autouse=True)
def _index_cleanup(r: redis.Redis, stream: str) -> Any:
    yield
    r.srem(LATER_INDEX_KEY, json.dumps([stream, "g"]))


def due_of(r: redis.Redis, stream: str, entry_id: str) -> float | None:
    score: float | None = r.zscore(stream_keys(stream).later("g"), entry_id)
    return score


def web(django_user_model: type[User], *codenames: str, name: str = "lena") -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(make_user(django_user_model, name, *codenames))
    return client


def post(client: Client, stream: str, entry_id: str, **fields: str) -> Any:
    return client.post(
        entry_url(stream, entry_id, "retry-later"),
        {"place": "row", "seen_consumer": "c1", **fields},
        headers={"HX-Request": "true"},
    )


class RetryLaterWebTests:
    def test_parks_entry_audits_due_time_and_shows_due_at(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        [entry_id, other] = make_pending(r, stream, "g", "c1", 2)
        client = web(django_user_model, *PERMS)
        response = post(client, stream, entry_id, due_in="10m")
        assert response.status_code == 200, response.content[:300]
        row = pending(r, stream, entry_id)
        assert row is not None and row["consumer"].decode() == LATER_CONSUMER
        assert row["times_delivered"] == 1
        due = due_of(r, stream, entry_id)
        assert due is not None and abs(due - (clock.now_ms() + 600_000)) < 5000
        audit = AuditEvent.objects.filter(action="retry-later").get()
        assert (audit.username, audit.result, audit.entry_ids) == ("lena", "ok", [entry_id])
        assert audit.state_before["due_ms"] == int(due)
        assert audit.state_before["due_at"].endswith(" UTC")
        page = client.get(reverse("dashboard:group-detail", args=[stream, "g"]))
        html = page.content.decode()
        text = attribute_text(html, "data-due-ms", str(int(due)))
        assert text.startswith("due at ") and text.endswith(" UTC")
        rows = table_rows(html, "pending-")
        assert "due at" in rows[f"pending-{entry_id}"][3]
        assert "due at" not in rows[f"pending-{other}"][3]
        assert pending(r, stream, other) is not None and due_of(r, stream, other) is None

    def test_absolute_utc_time(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = web(django_user_model, *PERMS)
        # Past the 30-day limit: refused.
        assert post(client, stream, entry_id, due_at="2099-01-02T03:04").status_code == 400
        when = (clock.now_ms() // 1000 + 3600) * 1000
        # A naive time is UTC: the browser's datetime-local field sends one.
        iso = datetime.fromtimestamp(when / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        assert post(client, stream, entry_id, due_at=iso).status_code == 200
        assert due_of(r, stream, entry_id) == when

    def test_needs_its_permission(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = web(django_user_model, "view_queues", "retry_entry")
        assert post(client, stream, entry_id, due_in="10m").status_code == 403
        assert due_of(r, stream, entry_id) is None
        assert AuditEvent.objects.filter(action="retry-later", result="refused").count() == 1

    def test_scoped_role_reaches_only_its_streams(
        self, r: redis.Redis, stream: str, prefix: str, django_user_model: type[User]
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        role = Group.objects.create(name="later-elsewhere")
        role.permissions.set(Permission.objects.filter(codename__in=PERMS))
        StreamScope.objects.create(group=role, pattern=prefix + "billing:*")
        user = make_user(django_user_model, "sam")
        user.groups.add(role)
        client = Client(raise_request_exception=False)
        client.force_login(user)
        assert post(client, stream, entry_id, due_in="10m").status_code in (403, 404)
        assert due_of(r, stream, entry_id) is None
        StreamScope.objects.create(group=role, pattern=prefix + "*")
        assert post(client, stream, entry_id, due_in="10m").status_code == 200
        assert due_of(r, stream, entry_id) is not None

    @pytest.mark.parametrize(
        "fields",
        [
            {},
            {"due_in": "10m", "due_at": "2030-01-01T00:00"},
            {"due_in": "soon"},
            {"due_in": "-5m"},
            {"due_in": "9" * 30},
            {"due_in": "0m"},
            {"due_in": "31d"},
            {"due_at": "2000-01-01T00:00"},
            {"due_at": "<script>alert(1)</script>"},
            {"due_at": "9999-12-31T23:59:59+00:00"},
            {"due_at": "0001-01-01T00:00-23:59"},
            {"due_at": "x" * 100_000},
            {"due_at": "2030-01-01\x00"},
        ],
        ids=lambda f: ",".join(f"{k}={v[:12]!r}" for k, v in f.items()) or "none",
    )
    def test_bad_times_are_a_clear_400(
        self, r: redis.Redis, stream: str, django_user_model: type[User], fields: dict[str, str]
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        response = post(web(django_user_model, *PERMS), stream, entry_id, **fields)
        assert response.status_code == 400, response.content[:300]
        body = response.content.decode()
        assert "<script>" not in body
        assert due_of(r, stream, entry_id) is None
        row = pending(r, stream, entry_id)
        assert row is not None and row["consumer"] == b"c1"

    @pytest.mark.parametrize("bad_id", ["nope", "1-2-3", "99999999999999999999999-0"])
    def test_malformed_id_is_a_4xx(
        self, r: redis.Redis, stream: str, django_user_model: type[User], bad_id: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        url = entry_url(stream, entry_id, "retry-later").replace(entry_id, bad_id)
        client = web(django_user_model, *PERMS)
        response = client.post(url, {"due_in": "10m"}, headers={"HX-Request": "true"})
        assert 400 <= response.status_code < 500

    def test_entry_not_pending_or_owner_changed_is_a_409(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        [acked, moved] = make_pending(r, stream, "g", "c1", 2)
        r.xack(stream, "g", acked)
        client = web(django_user_model, *PERMS)
        assert post(client, stream, acked, due_in="10m").status_code in (404, 409)
        r.xclaim(stream, "g", "c2", 0, [moved], justid=True)
        response = post(client, stream, moved, due_in="10m")
        assert response.status_code == 409
        assert due_of(r, stream, moved) is None


class RetryLaterRemoteTests:
    def test_cli_at_and_in(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        [a, b] = make_pending(r, stream, "g", "c1", 2)
        make_user(django_user_model, "olga", *PERMS)
        out = StringIO()
        call_command("ackboard", "retry-later", stream, "g", a, "--in", "2h", "--user", "olga",
                     stdout=out, stderr=StringIO())  # fmt: skip
        assert "will be retried" in out.getvalue()
        due = due_of(r, stream, a)
        assert due is not None and abs(due - (clock.now_ms() + 7_200_000)) < 5000
        with pytest.raises(CommandError, match="not in the future"):
            call_command("ackboard", "retry-later", stream, "g", b, "--at",
                         "2001-01-01T00:00:00Z", "--user", "olga",
                         stdout=StringIO(), stderr=StringIO())  # fmt: skip
        with pytest.raises((CommandError, SystemExit)):
            call_command("ackboard", "retry-later", stream, "g", b, "--user", "olga",
                         stdout=StringIO(), stderr=StringIO())  # fmt: skip
        assert due_of(r, stream, b) is None
        channels = set(
            AuditEvent.objects.filter(action="retry-later").values_list("channel", flat=True)
        )
        assert channels == {"cli"}

    def test_api(self, r: redis.Redis, stream: str, django_user_model: type[User]) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        user = make_user(django_user_model, "api-user", *PERMS)
        _, token = token_issue(user=user, name="tests")
        client = Client(raise_request_exception=False)
        path = reverse("dashboard:api-action", args=["retry-later"])
        headers = {"Authorization": f"Bearer {token}"}
        body = {"stream": stream, "group": "g", "id": entry_id, "due_in": "<b>x</b>"}
        response = client.post(
            path, json.dumps(body), content_type="application/json", headers=headers
        )
        assert response.status_code == 400 and response.json()["ok"] is False
        body["due_in"] = "45m"
        response = client.post(
            path, json.dumps(body), content_type="application/json", headers=headers
        )
        assert response.status_code == 200, response.content[:300]
        assert response.json()["ok"] is True
        assert due_of(r, stream, entry_id) is not None
        audit = AuditEvent.objects.filter(action="retry-later", result="ok").get()
        assert audit.channel == "api"


class RetryLaterBulkTests:
    def test_dry_run_then_confirm_parks_the_selection_until_the_dry_runs_time(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 3)
        client = web(django_user_model, *PERMS)
        url = bulk_url(stream, "retry-later")
        scope = {"snapshot_id": ids[-1], "scope": "selected", "ids": ids[:2]}
        dry = client.post(url, {**scope, "due_in": "1h"}, headers={"HX-Request": "true"})
        assert dry.status_code == 200, dry.content[:300]
        body = dry.content.decode()
        assert "2 entries" in body and "would be retried later" in body
        assert all(due_of(r, stream, i) is None for i in ids)
        due_at = re.search(r'name="due_at" value="([^"]+)"', body)
        assert due_at is not None  # the confirmation carries the time the dry run showed
        done = client.post(
            url, {**scope, "due_at": due_at[1], "confirm": "1"}, headers={"HX-Request": "true"}
        )
        assert done.status_code == 200, done.content[:300]
        dues = [due_of(r, stream, i) for i in ids]
        assert dues[0] is not None and dues[0] == dues[1] and dues[2] is None
        assert abs(dues[0] - (clock.now_ms() + 3_600_000)) < 10_000
        for entry_id in ids[:2]:
            row = pending(r, stream, entry_id)
            assert row is not None and row["consumer"].decode() == LATER_CONSUMER
        audit = AuditEvent.objects.filter(action="bulk-retry-later", result="ok").get()
        assert sorted(audit.entry_ids) == sorted(ids[:2])

    @pytest.mark.parametrize("fields", [{}, {"due_in": "x"}, {"due_at": "1999-01-01T00:00"}])
    def test_bad_time_is_a_400_before_the_dry_run(
        self, r: redis.Redis, stream: str, django_user_model: type[User], fields: dict[str, str]
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        response = web(django_user_model, *PERMS).post(
            bulk_url(stream, "retry-later"),
            {"snapshot_id": ids[-1], "scope": "selected", "ids": ids, "confirm": "1", **fields},
            headers={"HX-Request": "true"},
        )
        assert response.status_code == 400
        assert all(due_of(r, stream, i) is None for i in ids)

    def test_needs_its_permission(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        ids = make_pending(r, stream, "g", "c1", 2)
        response = web(django_user_model, "view_queues", "retry_entry").post(
            bulk_url(stream, "retry-later"),
            {
                "snapshot_id": ids[-1],
                "scope": "selected",
                "ids": ids,
                "confirm": "1",
                "due_in": "5m",
            },
            headers={"HX-Request": "true"},
        )
        assert response.status_code == 403
        assert all(due_of(r, stream, i) is None for i in ids)
