"""dashboard.auth.UserBackend: Django's ModelBackend, the session's user read by one
prepared statement; every answer is ModelBackend's."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from dashboard import auth
from dashboard.auth import UserBackend, user_by_pk
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_statement() -> Iterator[None]:
    auth._user_select.cache_clear()
    yield
    auth._user_select.cache_clear()


def _fields(user: Any) -> dict[str, Any]:
    return {f.attname: getattr(user, f.attname) for f in User._meta.concrete_fields}


def test_it_is_the_configured_backend_after_axes() -> None:
    assert settings.AUTHENTICATION_BACKENDS == [
        "axes.backends.AxesStandaloneBackend",
        "dashboard.auth.UserBackend",
    ]


def test_the_user_is_the_one_the_orm_reads_field_for_field(
    django_user_model: type[User], django_assert_num_queries: Any
) -> None:
    user = make_user(django_user_model, "olga", "view_queues")
    user.first_name, user.last_name, user.email = "Olga", "Ö'Brien", "o@example.com"
    user.last_login = datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)
    user.is_staff = True
    user.save()
    with django_assert_num_queries(1):
        fast = user_by_pk(user.pk)
    orm = User.objects.get(pk=user.pk)
    assert _fields(fast) == _fields(orm)
    assert fast.last_login.tzinfo is not None and fast.is_staff is True
    assert fast.is_active is True and fast.is_superuser is False
    assert fast._state.adding is False and fast._state.db == "default"
    assert fast.get_session_auth_hash() == orm.get_session_auth_hash()
    assert fast.has_perm("dashboard.view_queues")


def test_an_unknown_or_malformed_key_is_no_user(django_user_model: type[User]) -> None:
    user = make_user(django_user_model, "olga")
    assert user_by_pk(user.pk + 1000) is None
    assert user_by_pk("not-a-number") is None
    assert UserBackend().get_user(user.pk + 1000) is None


def test_an_inactive_user_is_refused_as_model_backend_refuses_it(
    django_user_model: type[User],
) -> None:
    user = make_user(django_user_model, "olga")
    user.is_active = False
    user.save()
    assert ModelBackend().get_user(user.pk) is None
    assert UserBackend().get_user(user.pk) is None
    assert user_by_pk(user.pk) is not None  # read, then refused by the backend's rule


def test_a_default_manager_that_filters_is_read_through_the_orm(
    django_user_model: type[User],
) -> None:
    user = make_user(django_user_model, "olga")
    hidden = make_user(django_user_model, "hidden")
    filtered = User.objects.exclude(pk=hidden.pk)
    with mock.patch.object(User._default_manager, "get_queryset", return_value=filtered):
        assert auth._user_select(User, "default", "sqlite") is None
        assert user_by_pk(hidden.pk) is None
        found = user_by_pk(user.pk)
        assert found is not None and found.username == "olga"


def test_a_user_model_over_several_tables_is_read_through_the_orm(
    django_user_model: type[User],
) -> None:
    user = make_user(django_user_model, "olga")
    with mock.patch.object(User._meta, "parents", {object(): None}):
        assert auth._user_select(User, "default", "sqlite") is None
        found = user_by_pk(user.pk)
    assert found is not None and _fields(found) == _fields(User.objects.get(pk=user.pk))


def test_a_login_is_kept_by_it_and_pages_load_their_user_through_it(
    django_user_model: type[User],
) -> None:
    user = make_user(django_user_model, "olga", "view_queues")
    user.set_password("a long pass phrase 42")
    user.save()
    client = Client()
    page = client.get(reverse("login"))
    assert page.status_code == 200
    done = client.post(reverse("login"), {"username": "olga", "password": "a long pass phrase 42"})
    assert done.status_code == 302
    assert client.session[BACKEND_SESSION_KEY] == "dashboard.auth.UserBackend"
    with mock.patch.object(UserBackend, "get_user", wraps=UserBackend().get_user) as loads:
        assert client.get(reverse("dashboard:failure-search")).status_code == 200
    loads.assert_called_once_with(user.pk)


def test_a_session_made_before_it_logs_in_once_more(django_user_model: type[User]) -> None:
    """Sessions made before UserBackend name ModelBackend's path, which is no longer
    configured: Django treats them as logged out (the README says so)."""
    user = make_user(django_user_model, "olga", "view_queues")
    client = Client()
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    page = client.get(reverse("dashboard:failure-search"))
    assert page.status_code == 302 and page["Location"].startswith(reverse("login"))
    client.force_login(user)  # the configured backend
    assert client.get(reverse("dashboard:failure-search")).status_code == 200
