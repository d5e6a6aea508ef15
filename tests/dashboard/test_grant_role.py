"""``manage.py grant_role``: the two roles of migration 0002, one at a time, and what they allow."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from dashboard.access.permissions import ACTION_PERMISSIONS, VIEW_QUEUES
from dashboard.management.commands.grant_role import ROLES

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("migration_data")]


def _grant(*args: str) -> str:
    out = StringIO()
    call_command("grant_role", *args, stdout=out)
    return out.getvalue()


def _user(name: str = "bob") -> object:
    return get_user_model().objects.create_user(username=name, password="pw-" + "x" * 12)


def _fresh(name: str = "bob") -> object:
    # has_perm caches permissions on the instance: read the user again.
    return get_user_model().objects.get(username=name)


def _groups(name: str = "bob") -> set[str]:
    return set(get_user_model().objects.get(username=name).groups.values_list("name", flat=True))


class GrantRoleTests:
    def test_role_names_are_the_migrations_groups(self) -> None:
        assert set(ROLES) == {"read-only", "operator"}
        assert Group.objects.filter(name__in=ROLES.values()).count() == 2

    def test_operator_may_view_and_act(self) -> None:
        _user()
        assert "bob now has the operator role" in _grant("bob", "operator")
        user = _fresh()
        assert user.has_perm(VIEW_QUEUES)  # type: ignore[attr-defined]
        assert all(user.has_perm(p) for p in ACTION_PERMISSIONS.values())  # type: ignore[attr-defined]

    def test_read_only_may_view_only(self) -> None:
        _user()
        _grant("bob", "read-only")
        user = _fresh()
        assert user.has_perm(VIEW_QUEUES)  # type: ignore[attr-defined]
        assert not any(user.has_perm(p) for p in ACTION_PERMISSIONS.values())  # type: ignore[attr-defined]

    def test_one_role_at_a_time(self) -> None:
        _user()
        _grant("bob", "operator")
        _grant("bob", "read-only")
        assert _groups() == {ROLES["read-only"]}
        assert not _fresh().has_perm(ACTION_PERMISSIONS["retry"])  # type: ignore[attr-defined]

    def test_revoke_takes_the_role_away(self) -> None:
        _user()
        _grant("bob", "operator")
        assert "no longer has the operator role" in _grant("bob", "operator", "--revoke")
        assert _groups() == set()
        assert not _fresh().has_perm(VIEW_QUEUES)  # type: ignore[attr-defined]

    def test_granting_twice_is_harmless(self) -> None:
        _user()
        _grant("bob", "operator")
        _grant("bob", "operator")
        assert _groups() == {ROLES["operator"]}

    def test_unknown_user_is_refused_unless_created(self) -> None:
        with pytest.raises(CommandError, match="no user 'carol'"):
            _grant("carol", "operator")
        assert not get_user_model().objects.filter(username="carol").exists()
        out = _grant("carol", "read-only", "--create")
        assert "changepassword carol" in out
        carol = _fresh("carol")
        assert carol.is_active and not carol.has_usable_password()  # type: ignore[attr-defined]
        assert _groups("carol") == {ROLES["read-only"]}

    def test_revoke_never_creates(self) -> None:
        with pytest.raises(CommandError, match="no user"):
            _grant("dave", "operator", "--revoke", "--create")
        assert not get_user_model().objects.filter(username="dave").exists()

    def test_unknown_role_is_refused(self) -> None:
        _user()
        with pytest.raises(CommandError, match="invalid choice"):
            _grant("bob", "admin")
        assert _groups() == set()

    def test_a_superuser_is_told_the_role_changes_nothing(self) -> None:
        get_user_model().objects.create_superuser(username="root", password="pw-" + "x" * 12)
        assert "superuser" in _grant("root", "read-only")
