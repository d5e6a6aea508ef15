"""dashboard.middleware.PermissionsMiddleware: the user's permissions in one query, the
same set Django's ModelBackend gathers, read afresh on every request."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.urls import reverse

from dashboard.middleware import permissions_load
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


def _request_of(client: Client) -> Any:
    """A request carrying ``client``'s session (a fresh SessionStore, as middleware makes)."""
    from importlib import import_module

    from django.conf import settings
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    engine = import_module(settings.SESSION_ENGINE)
    request.session = engine.SessionStore(client.session.session_key)
    return request


def _fields(user: Any) -> dict[str, tuple[type, Any]]:
    return {
        f.attname: (type(getattr(user, f.attname)), getattr(user, f.attname))
        for f in User._meta.concrete_fields
    }


class SessionUserTests:
    """``session_user``: ``django.contrib.auth.get_user``'s answer, with the user's row
    and its permissions read by one statement; every rule of ``get_user`` kept, and
    nothing kept between requests."""

    def test_the_same_user_as_get_user_from_one_query(
        self, mixed: User, django_assert_num_queries: Any
    ) -> None:
        from django.contrib import auth

        from dashboard.middleware import session_user

        mixed.last_login = None
        client = Client()
        client.force_login(mixed)  # sets last_login: an aware datetime to convert back
        request = _request_of(client)
        request.session.get("_")  # the session's own read is not the user's
        with django_assert_num_queries(1):
            user = session_user(request)
            assert user.has_perm("dashboard.claim_entry")
            assert user.has_perm("auth.view_group")
            assert not user.has_perm("dashboard.acknowledge_entry")
        expected = auth.get_user(_request_of(client))
        assert user == expected and _fields(user) == _fields(expected)
        assert user.last_login is not None and user.last_login.tzinfo is not None
        assert user._state.adding is False and user._state.db == "default"
        assert user._perm_cache == ModelBackend().get_all_permissions(User.objects.get(pk=mixed.pk))

    def test_a_user_without_permissions(self, django_user_model: type[User]) -> None:
        from dashboard.middleware import session_user

        client = Client()
        client.force_login(make_user(django_user_model, "nobody"))
        user = session_user(_request_of(client))
        assert user.is_authenticated and user._perm_cache == set()

    def test_a_superuser_has_every_permission_without_a_cache(
        self, django_user_model: type[User], django_assert_num_queries: Any
    ) -> None:
        from dashboard.middleware import request_user

        root = make_user(django_user_model, "root")
        root.is_superuser = True
        root.save()
        client = Client()
        client.force_login(root)
        request = _request_of(client)
        request.session.get("_")
        with django_assert_num_queries(1):
            user = request_user(request)
            assert user.has_perm("dashboard.acknowledge_entry") and user.is_superuser
        assert not hasattr(user, "_perm_cache")
        assert client.get(reverse("dashboard:audit")).status_code == 200

    def test_a_deactivated_user_is_logged_out_on_the_next_request(self, mixed: User) -> None:
        client = Client()
        client.force_login(mixed)
        url = reverse("dashboard:audit")
        assert client.get(url).status_code == 200
        User.objects.filter(pk=mixed.pk).update(is_active=False)
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login")
        User.objects.filter(pk=mixed.pk).update(is_active=True)
        assert client.get(url).status_code == 200  # the session was not flushed, as in Django

    def test_a_deleted_user_is_logged_out(self, mixed: User) -> None:
        client = Client()
        client.force_login(mixed)
        url = reverse("dashboard:audit")
        assert client.get(url).status_code == 200
        User.objects.filter(pk=mixed.pk).delete()
        assert client.get(url).status_code == 302

    def test_a_password_change_logs_the_other_sessions_out(self, mixed: User) -> None:
        from django.contrib import auth

        client, other = Client(), Client()
        client.force_login(mixed)
        other.force_login(mixed)
        url = reverse("dashboard:audit")
        assert client.get(url).status_code == 200 and other.get(url).status_code == 200
        user = User.objects.get(pk=mixed.pk)
        user.set_password("new password")
        user.save()
        # The other session: logged out, and its session emptied (get_user flushes it).
        response = other.get(url)
        assert response.status_code == 302
        assert auth.SESSION_KEY not in other.session
        # A session whose hash is the new password's goes on.
        client.force_login(user)
        assert client.get(url).status_code == 200

    def test_a_session_without_its_hash_is_logged_out(self, mixed: User) -> None:
        from django.contrib import auth

        client = Client()
        client.force_login(mixed)
        session = client.session
        del session[auth.HASH_SESSION_KEY]
        session.save()
        assert client.get(reverse("dashboard:audit")).status_code == 302

    def test_a_fallback_secret_keeps_the_session_under_a_new_key(
        self, mixed: User, settings: Any
    ) -> None:
        from django.contrib import auth

        client = Client()
        client.force_login(mixed)
        old_key = client.session.session_key
        old_hash = client.session[auth.HASH_SESSION_KEY]
        settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
        settings.SECRET_KEY = "a-new-secret-" + "x" * 50
        assert client.get(reverse("dashboard:audit")).status_code == 200
        assert client.session.session_key != old_key  # cycled, as get_user does
        assert client.session[auth.HASH_SESSION_KEY] not in ("", old_hash)
        settings.SECRET_KEY_FALLBACKS = []
        assert client.get(reverse("dashboard:audit")).status_code == 200  # the new hash holds

    def test_a_session_of_an_unconfigured_backend_is_anonymous(self, mixed: User) -> None:
        from django.contrib import auth

        client = Client()
        client.force_login(mixed)
        session = client.session
        session[auth.BACKEND_SESSION_KEY] = "django.contrib.auth.backends.RemoteUserBackend"
        session.save()
        assert client.get(reverse("dashboard:audit")).status_code == 302

    def test_another_backend_goes_through_get_user(self, mixed: User, settings: Any) -> None:
        from django.contrib import auth

        from dashboard.middleware import session_user

        client = Client()
        client.force_login(mixed)
        path = "django.contrib.auth.backends.AllowAllUsersModelBackend"  # a subclass
        settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, path]
        session = client.session
        session[auth.BACKEND_SESSION_KEY] = path
        session.save()
        User.objects.filter(pk=mixed.pk).update(is_active=False)
        user = session_user(_request_of(client))
        # That backend lets inactive users in; the one-query path would not have.
        assert user.pk == mixed.pk and not hasattr(user, "_perm_cache")
