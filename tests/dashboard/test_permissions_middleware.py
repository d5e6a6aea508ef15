"""dashboard.runtime.middleware.PermissionsMiddleware: the user's permissions in one query, the
same set Django's ModelBackend gathers, read afresh on every request."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from dashboard.runtime.middleware import permissions_load
from tests.factories import make_user

pytestmark = pytest.mark.django_db


def _perm(app: str, codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label=app, codename=codename)


@pytest.fixture
def mixed(django_user_model: type[User]) -> User:
    """Own permissions in two apps, and two groups' (one shared with the user's own)."""
    user = make_user(django_user_model, "mia", "view_queues", "retry_entry")
    user.user_permissions.add(_perm("auth", "view_user"))
    readers = Group.objects.create(name="readers")
    readers.permissions.add(_perm("dashboard", "view_queues"), _perm("auth", "view_group"))
    fixers = Group.objects.create(name="fixers")
    fixers.permissions.add(_perm("dashboard", "claim_entry"))
    Group.objects.create(name="empty").user_set.add(user)
    user.groups.add(readers, fixers)
    return User.objects.get(pk=user.pk)


class PermissionsLoadTests:
    def test_same_set_as_model_backend(self, mixed: User) -> None:
        expected = ModelBackend().get_all_permissions(User.objects.get(pk=mixed.pk))
        assert expected == {
            "dashboard.view_queues",
            "dashboard.retry_entry",
            "dashboard.claim_entry",
            "auth.view_user",
            "auth.view_group",
        }
        loaded = permissions_load(User.objects.get(pk=mixed.pk))
        assert loaded._perm_cache == expected

    def test_one_query_answers_every_check(
        self, mixed: User, django_assert_num_queries: Any
    ) -> None:
        user = User.objects.get(pk=mixed.pk)
        with django_assert_num_queries(1):
            permissions_load(user)
            assert user.has_perm("dashboard.claim_entry")
            assert user.has_perm("auth.view_group")
            assert not user.has_perm("dashboard.acknowledge_entry")
            assert user.has_module_perms("auth")

    def test_no_permissions_is_an_empty_set(self, django_user_model: type[User]) -> None:
        user = permissions_load(django_user_model.objects.create_user("nobody"))
        assert user._perm_cache == set()
        assert not user.has_perm("dashboard.view_queues")

    @pytest.mark.parametrize("flag", ["is_superuser", "is_active"])
    def test_users_django_answers_without_the_backend_are_left_alone(
        self, mixed: User, flag: str, django_assert_num_queries: Any
    ) -> None:
        setattr(mixed, flag, flag == "is_superuser")  # a superuser; an inactive user
        mixed.save()
        user = User.objects.get(pk=mixed.pk)
        with django_assert_num_queries(0):
            permissions_load(user)
        assert not hasattr(user, "_perm_cache")
        assert user.has_perm("dashboard.acknowledge_entry") is (flag == "is_superuser")


class PermissionsMiddlewareTests:
    def test_a_request_reads_permissions_once(
        self, mixed: User, django_assert_max_num_queries: Any
    ) -> None:
        client = Client()
        client.force_login(mixed)
        # Session (database in tests), user, permissions, then the audit page's own reads.
        with django_assert_max_num_queries(6) as captured:
            assert client.get(reverse("dashboard:audit")).status_code == 200
        tables = [q["sql"] for q in captured.captured_queries]
        assert sum("auth_permission" in sql for sql in tables) == 1

    def test_a_revoked_permission_is_gone_on_the_next_request(self, mixed: User) -> None:
        client = Client()
        client.force_login(mixed)
        url = reverse("dashboard:audit")
        assert client.get(url).status_code == 200
        mixed.user_permissions.remove(_perm("dashboard", "view_queues"))
        assert client.get(url).status_code == 200  # still granted through "readers"
        mixed.groups.remove(Group.objects.get(name="readers"))
        assert client.get(url).status_code == 403
        Group.objects.get(name="fixers").permissions.add(_perm("dashboard", "view_queues"))
        assert client.get(url).status_code == 200
