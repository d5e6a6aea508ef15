"""The action table is the source of its permissions: ``migrate`` creates each row's
permission (``dashboard.access.grants``, a post_migrate receiver), grants it to the
operators' role once, and fails closed."""

from __future__ import annotations

import importlib

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command

from dashboard.access.grants import declared_permissions, permission_name
from dashboard.access.permissions import EDIT_REPLAY, VIEW_QUEUES, action_permissions, may_act
from dashboard.models import AuditEvent
from dashboard.views.actions import ACTIONS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("migration_data")]

OPERATORS = importlib.import_module("dashboard.migrations.0002_roles").OPERATORS


def _codenames(perms: set[str]) -> set[str]:
    return {p.split(".", 1)[1] for p in perms}


def _operators() -> set[str]:
    return set(Group.objects.get(name=OPERATORS).permissions.values_list("codename", flat=True))


def _migrate() -> None:
    call_command("migrate", verbosity=0, interactive=False)


class DeclaredPermissionTests:
    def test_every_row_permission_exists_after_migrate_on_the_audit_model(self) -> None:
        rows = _codenames({row.permission for row in ACTIONS.values()})
        found = set(
            Permission.objects.filter(
                content_type__app_label="dashboard",
                content_type__model="auditevent",
                codename__in=rows,
            ).values_list("codename", flat=True)
        )
        assert found == rows
        assert set(declared_permissions()) == rows

    def test_meta_holds_only_what_no_row_declares(self) -> None:
        meta = {code for code, _ in AuditEvent._meta.permissions}
        rows = set(declared_permissions())
        assert not meta & rows
        every = _codenames({*action_permissions().values(), VIEW_QUEUES, EDIT_REPLAY})
        assert meta | rows == every

    def test_names_come_from_the_rows(self) -> None:
        assert permission_name([("retry", "pending")]) == "Can retry pending entries"
        assert (
            permission_name([("delete", "dead-letter"), ("purge", "dead-letters")])
            == "Can delete dead-lettered entries and purge dead-letter streams"
        )
        assert (
            permission_name([("pause", "group"), ("resume", "group")])
            == "Can pause and resume consumer groups"
        )
        assert declared_permissions()["trim_stream"] == "Can trim streams"


class MigrateCreatesTests:
    def test_a_missing_permission_is_created_and_granted_once(self) -> None:
        Permission.objects.filter(codename="trim_stream").delete()
        assert "trim_stream" not in _operators()
        _migrate()
        made = Permission.objects.get(codename="trim_stream")
        assert (made.content_type.app_label, made.name) == ("dashboard", "Can trim streams")
        assert "trim_stream" in _operators()

    def test_a_permission_taken_from_the_role_stays_taken(self) -> None:
        role = Group.objects.get(name=OPERATORS)
        role.permissions.remove(Permission.objects.get(codename="retry_entry"))
        _migrate()
        assert "retry_entry" not in _operators()
        assert "claim_entry" in _operators()

    def test_until_it_exists_a_permission_grants_nothing(
        self, django_user_model: type[User]
    ) -> None:
        Permission.objects.filter(codename="trim_stream").delete()
        op = django_user_model.objects.create_user(username="op")
        op.groups.add(Group.objects.get(name=OPERATORS))
        assert not may_act(django_user_model.objects.get(pk=op.pk), "trim")
        assert may_act(django_user_model.objects.get(pk=op.pk), "retry")
        _migrate()
        assert may_act(django_user_model.objects.get(pk=op.pk), "trim")

    def test_the_read_role_gets_none(self) -> None:
        Permission.objects.filter(codename="trim_stream").delete()
        _migrate()
        read_only = Group.objects.get(name="Ackboard read-only")
        assert set(read_only.permissions.values_list("codename", flat=True)) == {"view_queues"}

    def test_the_operators_role_holds_every_row_permission(self) -> None:
        assert set(declared_permissions()) <= _operators()
