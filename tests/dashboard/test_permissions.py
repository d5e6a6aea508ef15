"""Who may act: permission per action, 403 on a forged POST, CSRF, and the shipped roles."""

from __future__ import annotations

import pytest
import redis
from django.contrib.auth.models import AnonymousUser, User
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings as SettingsWrapper

from dashboard.access.grants import declared_permissions
from dashboard.access.permissions import ACTION_PERMISSIONS, may_act
from dashboard.models import AuditEvent
from queue_core.keys import stream_keys
from queue_core.services import entry_dead_letter
from tests.factories import make_pending, make_user

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def _redis_settings(settings: SettingsWrapper, redis_url: str) -> None:
    settings.ACKBOARD_REDIS_URL = redis_url


def _client(user: User, **kwargs: bool) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


class PermissionMapTests:
    def test_every_action_permission_is_declared_by_its_row_or_the_model(self) -> None:
        """A row's permission is created by ``migrate`` from the rows (test_grants.py); the
        others (the read role's, the redrive job's) are the model's."""
        declared = {f"dashboard.{code}" for code, _ in AuditEvent._meta.permissions}
        declared |= {f"dashboard.{code}" for code in declared_permissions()}
        assert set(ACTION_PERMISSIONS.values()) <= declared
        assert "dashboard.view_queues" in declared

    def test_may_act_needs_exactly_that_permission(self, django_user_model: type[User]) -> None:
        retrier = make_user(django_user_model, "r", "retry_entry")
        assert may_act(retrier, "retry")
        assert not may_act(retrier, "dead-letter")
        assert not may_act(retrier, "no-such-action")
        assert not may_act(AnonymousUser(), "retry")


class ForgedPostTests:
    @pytest.mark.parametrize("action", ["retry", "claim", "dead-letter", "acknowledge"])
    def test_reader_gets_403_and_nothing_changes(
        self, r: redis.Redis, stream: str, django_user_model: type[User], action: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        before = r.xpending_range(stream, "g", min="-", max="+", count=10)
        client = _client(make_user(django_user_model, "reader", "view_queues"))
        url = reverse("dashboard:entry-action", args=[stream, "g", entry_id, action])
        response = client.post(
            url, {"reason": "forged", "seen_idle_ms": "0", "consumer": "x"}, headers=HTMX
        )
        assert response.status_code == 403
        assert "permission" in response.content.decode()
        after = r.xpending_range(stream, "g", min="-", max="+", count=10)
        assert [(p["consumer"], p["times_delivered"]) for p in after] == [
            (p["consumer"], p["times_delivered"]) for p in before
        ]
        assert r.xlen(stream_keys(stream).dlq) == 0
        event = AuditEvent.objects.get()
        assert (event.username, event.action, event.result) == ("reader", action, "refused")
        assert event.entry_ids == [entry_id]

    def test_other_action_permission_is_not_enough(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = _client(make_user(django_user_model, "retrier", "view_queues", "retry_entry"))
        url = reverse("dashboard:entry-action", args=[stream, "g", entry_id, "acknowledge"])
        assert client.post(url, {"reason": "x"}).status_code == 403
        assert r.xpending(stream, "g")["pending"] == 1

    @pytest.mark.parametrize("action", ["replay", "delete"])
    def test_dlq_actions_need_their_permission(
        self, r: redis.Redis, stream: str, django_user_model: type[User], action: str
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        moved = entry_dead_letter(client=r, stream=stream, group="g", entry_id=entry_id, reason="")
        assert moved is not None
        client = _client(make_user(django_user_model, "reader", "view_queues"))
        url = reverse("dashboard:dlq-action", args=[stream, moved.dlq_id, action])
        assert client.post(url, headers=HTMX).status_code == 403
        purge = reverse("dashboard:dlq-purge", args=[stream])
        response = client.post(purge, {"confirm_name": stream, "expected_length": "1"})
        assert response.status_code == 403
        assert r.xlen(stream_keys(stream).dlq) == 1
        assert list(AuditEvent.objects.values_list("result", flat=True)) == ["refused"] * 2

    def test_anonymous_post_goes_to_login(self, r: redis.Redis, stream: str) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        url = reverse("dashboard:entry-action", args=[stream, "g", entry_id, "dead-letter"])
        response = Client().post(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
        assert r.xlen(stream_keys(stream).dlq) == 0


class CsrfTests:
    def test_post_without_token_is_rejected(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        operator = make_user(django_user_model, "op", "view_queues", "dead_letter_entry")
        client = _client(operator, enforce_csrf_checks=True)
        url = reverse("dashboard:entry-action", args=[stream, "g", entry_id, "dead-letter"])
        assert client.post(url, headers=HTMX).status_code == 403
        assert r.xlen(stream_keys(stream).dlq) == 0
        assert not AuditEvent.objects.exists()

    def test_htmx_header_token_is_accepted(
        self, r: redis.Redis, stream: str, django_user_model: type[User]
    ) -> None:
        [entry_id] = make_pending(r, stream, "g", "c1", 1)
        client = Client(enforce_csrf_checks=True)
        client.get(reverse("login"))  # sets the csrftoken cookie, as a page load does
        token = client.cookies["csrftoken"].value
        client.force_login(make_user(django_user_model, "op", "view_queues", "dead_letter_entry"))
        url = reverse("dashboard:entry-action", args=[stream, "g", entry_id, "dead-letter"])
        response = client.post(url, headers={**HTMX, "X-CSRFToken": token})
        assert response.status_code == 200
        assert r.xlen(stream_keys(stream).dlq) == 1


@pytest.mark.usefixtures("migration_data")
class RoleGroupsTests:
    def test_read_only_and_operator_groups_ship_as_data(self) -> None:
        from django.contrib.auth.models import Group

        read_only = Group.objects.get(name="Ackboard read-only")
        operators = Group.objects.get(name="Ackboard operators")
        assert set(read_only.permissions.values_list("codename", flat=True)) == {"view_queues"}
        assert set(operators.permissions.values_list("codename", flat=True)) == {
            "view_queues",
            "retry_entry",
            "claim_entry",
            "dead_letter_entry",
            "acknowledge_entry",
            "replay_entry",
            "delete_dead_letter",
            # 0006_fleet_permissions
            "pause_group",
            "retire_consumer",
            "administer_group",
            "trim_stream",
            # 0009_redrive_job
            "redrive_dead_letters",
            # dashboard.access.grants, from the action table (Produce and Duplicate, Retry later)
            "produce_entries",
            "retry_later_entry",
        }

    def test_operator_group_member_may_act_and_reader_may_not(
        self, django_user_model: type[User]
    ) -> None:
        from django.contrib.auth.models import Group

        op = django_user_model.objects.create_user(username="op")
        op.groups.add(Group.objects.get(name="Ackboard operators"))
        reader = django_user_model.objects.create_user(username="reader")
        reader.groups.add(Group.objects.get(name="Ackboard read-only"))
        op, reader = (django_user_model.objects.get(pk=u.pk) for u in (op, reader))
        assert all(may_act(op, a) for a in ACTION_PERMISSIONS)
        assert not any(may_act(reader, a) for a in ACTION_PERMISSIONS)
        assert reader.has_perm("dashboard.view_queues")
