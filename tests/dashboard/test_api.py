"""The JSON API on real Redis: every action as a token's user, with the buttons' permission,
guards and audit rows (channel "api"), bulk's dry run and steps, token auth (revoked,
bad, session-only: 401), JSON errors with their status codes, and the admin's tokens."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis
from django.db import connection
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.access.api_tokens import token_issue, token_revoke
from dashboard.models import ApiToken, AuditEvent
from queue_core.keys import stream_keys
from tests.dashboard.remote_helpers import CASE_IDS, CASES, Case, World, audit_rows, state
from tests.factories import make_pending
from tests.redis_server import free_port

pytestmark = pytest.mark.django_db

#: Statuses a hostile request may get: never a 500, never HTML.
FINE = {200, 400, 401, 403, 404, 405, 409}


def bearer(user: Any) -> dict[str, str]:
    _, token = token_issue(user=user, name="tests")
    return {"Authorization": f"Bearer {token}"}


def post(path: str, body: Any, headers: dict[str, str], client: Client | None = None) -> Any:
    client = client or Client(raise_request_exception=False)
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(path, data, content_type="application/json", headers=headers)


def action_path(action: str) -> str:
    return reverse("dashboard:api-action", args=[action])


def bulk_path(action: str) -> str:
    return reverse("dashboard:api-bulk", args=[action])


def body_for(case: Case, w: World, r: redis.Redis, *, target: str = "") -> dict[str, Any]:
    """The body that aims ``case`` at the world (or at ``target`` instead)."""
    if case.on == "entry":
        return {"stream": w.stream, "group": "g", "id": target or w.entry_id, **case.fields}
    if case.on == "dead-letter":
        return {"stream": w.stream, "id": target or w.dlq_id, **case.fields}
    length = len(state(r, w)["dlq"])
    return {"stream": target or w.stream, "confirm": True, "expected_length": length}


def answer(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == "application/json", response.content[:200]
    payload: dict[str, Any] = response.json()
    return payload


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
class EveryActionTests:
    def test_permitted_user_acts_and_is_audited_under_their_name(
        self, case: Case, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        response = post(action_path(case.action), body_for(case, remote_world, r), bearer(olga))
        got = answer(response)
        assert response.status_code == 200, got
        assert got["ok"] is True and got["result"] == "ok" and got["channel"] == "api"
        assert case.done(remote_world, before, state(r, remote_world))
        [event] = audit_rows()
        assert (event.action, event.result, event.username) == (case.action, "ok", "olga")
        assert (event.channel, event.user_id) == ("api", olga.pk)

    def test_reader_is_denied_and_nothing_changes(
        self, case: Case, remote_world: World, rita: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        response = post(action_path(case.action), body_for(case, remote_world, r), bearer(rita))
        assert response.status_code == 403
        assert answer(response)["message"] == f"You do not have permission to {case.action}."
        assert state(r, remote_world) == before
        assert [(e.result, e.username, e.channel) for e in audit_rows()] == [
            ("refused", "rita", "api")
        ]

    def test_unknown_target_is_404(
        self, case: Case, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        target = "elsewhere:orders" if case.on == "dead-letters" else "1-1"
        body = body_for(case, remote_world, r, target=target)
        response = post(action_path(case.action), body, bearer(olga))
        assert response.status_code == 404
        assert answer(response)["ok"] is False
        assert state(r, remote_world) == before
        assert AuditEvent.objects.filter(result="ok").count() == 0

    def test_revoked_token_is_401_and_changes_nothing(
        self, case: Case, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        row, token = token_issue(user=olga, name="old")
        token_revoke(key_id=row.key_id)
        before = state(r, remote_world)
        headers = {"Authorization": f"Bearer {token}"}
        response = post(action_path(case.action), body_for(case, remote_world, r), headers)
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert answer(response)["ok"] is False
        assert state(r, remote_world) == before and AuditEvent.objects.count() == 0

    def test_redis_down_is_503(
        self,
        case: Case,
        remote_world: World,
        olga: Any,
        r: redis.Redis,
        settings: SettingsWrapper,
    ) -> None:
        body = body_for(case, remote_world, r)
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        response = post(action_path(case.action), body, bearer(olga))
        assert response.status_code == 503
        assert answer(response) == {
            "ok": False,
            "result": "error",
            "message": "Redis is unreachable.",
        }
        assert AuditEvent.objects.exclude(result="error").count() == 0


class AuthTests:
    def test_no_bad_or_session_only_credentials_are_401(
        self, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        body = {"stream": remote_world.stream, "group": "g", "id": remote_world.entry_id}
        _, token = token_issue(user=olga, name="x")
        session = Client(raise_request_exception=False)
        session.force_login(olga)
        for headers, client in (
            ({}, None),
            ({"Authorization": "Bearer nope"}, None),
            ({"Authorization": f"Basic {token}"}, None),
            ({"Authorization": f"Bearer {token[:-1]}x"}, None),
            ({}, session),  # logged in to the dashboard: the API never uses the session
        ):
            response = post(action_path("retry"), body, headers, client)
            assert response.status_code == 401, headers
            assert answer(response)["ok"] is False
        assert state(r, remote_world) == before and AuditEvent.objects.count() == 0

    def test_inactive_users_token_is_401(self, remote_world: World, olga: Any) -> None:
        headers = bearer(olga)
        olga.is_active = False
        olga.save()
        body = {"stream": remote_world.stream, "group": "g", "id": remote_world.entry_id}
        assert post(action_path("retry"), body, headers).status_code == 401

    def test_no_csrf_token_needed_with_a_bearer_token(self, remote_world: World, olga: Any) -> None:
        client = Client(enforce_csrf_checks=True, raise_request_exception=False)
        body = {"stream": remote_world.stream, "group": "g", "id": remote_world.entry_id}
        assert post(action_path("retry"), body, bearer(olga), client).status_code == 200

    def test_last_used_is_recorded(self, remote_world: World, olga: Any) -> None:
        headers = bearer(olga)
        assert ApiToken.objects.get().last_used_at is None
        response = Client().get(reverse("dashboard:api-whoami"), headers=headers)
        assert answer(response)["user"] == "olga"
        assert "retry" in answer(response)["actions"]
        assert ApiToken.objects.get().last_used_at is not None


class JsonErrorTests:
    def test_bad_input_unknown_routes_and_methods_answer_json(
        self, remote_world: World, olga: Any
    ) -> None:
        headers = bearer(olga)
        client = Client(raise_request_exception=False)
        cases = [
            (post(action_path("retry"), "{not json", headers), 400),
            (post(action_path("retry"), "[1, 2]", headers), 400),
            (post(action_path("retry"), {"group": "g", "id": "1-0"}, headers), 400),
            (
                post(action_path("retry"), {"stream": remote_world.stream, "id": "1-0"}, headers),
                400,
            ),
            (post(action_path("launch"), {"stream": remote_world.stream}, headers), 404),
            (post(bulk_path("claim"), {"stream": remote_world.stream, "group": "g"}, headers), 404),
            (post("/api/v2/anything", {}, headers), 404),
            (client.get(action_path("retry"), headers=headers), 405),
            (post(reverse("dashboard:api-whoami"), {}, headers), 405),
        ]
        for response, status in cases:
            assert response.status_code == status, response.content[:200]
            assert answer(response)["ok"] is False

    def test_acknowledge_without_reason_is_400_and_audited_as_refused(
        self, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        before = state(r, remote_world)
        body = {"stream": remote_world.stream, "group": "g", "id": remote_world.entry_id}
        response = post(action_path("acknowledge"), body, bearer(olga))
        assert response.status_code == 400 and "needs a reason" in answer(response)["message"]
        assert state(r, remote_world) == before
        assert [(e.action, e.result, e.channel) for e in audit_rows()] == [
            ("acknowledge", "refused", "api")
        ]

    # the renames must not poison a test transaction
    @pytest.mark.django_db(transaction=True)
    def test_database_down_is_503_json(self, remote_world: World, olga: Any) -> None:
        headers = bearer(olga)
        body = {"stream": remote_world.stream, "group": "g", "id": remote_world.entry_id}
        no_raise = Client(raise_request_exception=False)
        renamed: list[tuple[str, str]] = []

        def table_gone(table: str) -> None:  # a real database error, not a mock
            with connection.cursor() as cursor:
                cursor.execute(f"ALTER TABLE {table} RENAME TO gone_{table}")
            renamed.append((f"gone_{table}", table))

        try:
            table_gone(AuditEvent._meta.db_table)
            response = post(action_path("retry"), body, headers, no_raise)
            assert response.status_code == 503
            assert answer(response)["message"] == (
                "the database is unavailable; the action may have run unaudited"
            )
            table_gone(ApiToken._meta.db_table)
            response = post(action_path("retry"), body, headers, no_raise)
            assert response.status_code == 503
            assert answer(response)["message"] == "the database is unavailable; nothing was done"
        finally:
            with connection.cursor() as cursor:
                for gone, table in renamed:
                    cursor.execute(f"ALTER TABLE {gone} RENAME TO {table}")

    def test_changed_since_is_409(self, remote_world: World, olga: Any, r: redis.Redis) -> None:
        body = {
            "stream": remote_world.stream,
            "group": "g",
            "id": remote_world.entry_id,
            "seen_idle_ms": 0,
            "seen_consumer": "someone-else",
        }
        response = post(action_path("claim"), body, bearer(olga))
        assert response.status_code == 409, answer(response)
        assert audit_rows()[0].result == "refused"

    @pytest.mark.timeout(300)  # 714 requests: over a minute on a busy two-core machine
    def test_hostile_bodies_never_500(self, remote_world: World, olga: Any, r: redis.Redis) -> None:
        before = state(r, remote_world)
        headers = bearer(olga)
        values: list[Any] = [
            None, True, 1.5, -1, 10**30, [], {}, ["1-0"], "", "x" * 100_000, "\x00",
            "{braces}", "a}b{", "1-1", "18446744073709551615-18446744073709551615", "*", "$",
        ]  # fmt: skip
        keys = ["stream", "group", "id", "reason", "consumer", "seen_idle_ms", "ids", "cursor",
                "snapshot_id", "scope", "min_idle_ms", "expected_length", "newest_id",
                "confirm"]  # fmt: skip
        bad = []
        for path in (action_path("dead-letter"), action_path("purge"), bulk_path("retry")):
            for key in keys:
                for value in values:
                    body: dict[str, Any] = {
                        "stream": remote_world.stream,
                        "group": "g",
                        "id": "1-1",
                    }
                    body[key] = value
                    if key != "confirm":
                        body["confirm"] = True
                    response = post(path, body, headers)
                    if response.status_code not in FINE or "json" not in response["Content-Type"]:
                        bad.append((path, key, repr(value)[:30], response.status_code))
        assert bad == []
        after = state(r, remote_world)
        assert after["pel"] == before["pel"] and after["stream"] == before["stream"]


class BulkTests:
    def test_dry_run_changes_nothing_then_confirm_and_continue(
        self, remote_world: World, olga: Any, r: redis.Redis, settings: SettingsWrapper
    ) -> None:
        settings.ACKBOARD_BULK_CAP = 1
        headers = bearer(olga)
        before = state(r, remote_world)
        scope = {"stream": remote_world.stream, "group": "g", "scope": "filter"}
        dry = answer(post(bulk_path("dead-letter"), scope, headers))
        assert dry["dry_run"] is True and dry["count"] == 1 and dry["complete"] is False
        assert dry["snapshot_id"] == remote_world.other_id and dry["cap"] == 1
        assert state(r, remote_world) == before and AuditEvent.objects.count() == 0
        [late] = make_pending(r, remote_world.stream, "g", "c1", 1, create=False)
        step = {**scope, "snapshot_id": dry["snapshot_id"], "confirm": True, "reason": "bad"}
        done: list[str] = []
        for _ in range(4):
            got = answer(post(bulk_path("dead-letter"), step, headers))
            assert got["ok"] is True and got["dry_run"] is False, got
            done += got["done"]
            if got["complete"]:
                break
            step.update(cursor=got["next_cursor"], done_before=got["done_total"])
        assert done == [remote_world.entry_id, remote_world.other_id]
        assert got["done_total"] == 2
        # The entry that arrived after the dry run is still pending; the rest moved.
        assert [row[0] for row in state(r, remote_world)["pel"]] == [late]
        assert r.xlen(stream_keys(remote_world.stream).dlq) == 3
        events = audit_rows()
        assert {(e.action, e.username, e.channel) for e in events} == {
            ("bulk-dead-letter", "olga", "api")
        }

    def test_selected_ids_and_confirm_needs_the_snapshot(
        self, remote_world: World, olga: Any, r: redis.Redis
    ) -> None:
        headers = bearer(olga)
        body = {"stream": remote_world.stream, "group": "g", "ids": [remote_world.entry_id]}
        response = post(bulk_path("retry"), {**body, "confirm": True}, headers)
        assert response.status_code == 400 and "snapshot" in answer(response)["message"]
        dry = answer(post(bulk_path("retry"), body, headers))
        assert dry["count"] == 1 and dry["scope"] == "selected"
        got = answer(
            post(bulk_path("retry"), {**body, "confirm": True, "snapshot_id": dry["snapshot_id"]},
                 headers)
        )  # fmt: skip
        assert got["done"] == [remote_world.entry_id] and got["complete"] is True
        pel = {row[0]: row for row in state(r, remote_world)["pel"]}
        assert pel[remote_world.entry_id][3] and not pel[remote_world.other_id][3]

    def test_reader_is_denied(self, remote_world: World, rita: Any, r: redis.Redis) -> None:
        before = state(r, remote_world)
        body = {"stream": remote_world.stream, "group": "g", "scope": "filter"}
        for extra in ({}, {"confirm": True, "snapshot_id": remote_world.other_id}):
            response = post(
                bulk_path("acknowledge"), {**body, **extra, "reason": "r"}, bearer(rita)
            )
            assert response.status_code == 403
        assert state(r, remote_world) == before
        assert {e.result for e in audit_rows()} == {"refused"}

    def test_redis_down_is_503(
        self, remote_world: World, olga: Any, settings: SettingsWrapper
    ) -> None:
        headers = bearer(olga)
        settings.ACKBOARD_REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
        body = {"stream": remote_world.stream, "group": "g", "scope": "filter"}
        for extra in ({}, {"confirm": True, "snapshot_id": remote_world.other_id}):
            response = post(bulk_path("retry"), {**body, **extra}, headers)
            assert response.status_code == 503
            assert answer(response)["message"] == "Redis is unreachable."


class AdminTokenTests:
    def test_admin_issues_a_token_shown_once_and_revokes_it(
        self, django_user_model: Any, olga: Any, remote_world: World
    ) -> None:
        admin = django_user_model.objects.create_superuser("root", password="pw")
        client = Client()
        client.force_login(admin)
        response = client.post(
            reverse("admin:dashboard_apitoken_add"), {"user": olga.pk, "name": "pager"}
        )
        assert response.status_code == 200
        html = response.content.decode()
        row = ApiToken.objects.get()
        [token] = re.findall(r'value="(ackb_[^"]+)"', html)
        assert token.startswith(f"ackb_{row.key_id}_") and row.secret_hash not in html
        assert token not in json.dumps(list(ApiToken.objects.values()), default=str)
        headers = {"Authorization": f"Bearer {token}"}
        assert Client().get(reverse("dashboard:api-whoami"), headers=headers).status_code == 200
        # The change page never shows it again.
        change = client.get(reverse("admin:dashboard_apitoken_change", args=[row.pk]))
        assert token not in change.content.decode()
        response = client.post(
            reverse("admin:dashboard_apitoken_changelist"),
            {"action": "revoke", "_selected_action": [row.pk]},
        )
        assert response.status_code == 302
        assert Client().get(reverse("dashboard:api-whoami"), headers=headers).status_code == 401
