"""``manage.py grant_role <user> read-only|operator [--revoke] [--create]``: give a user a role.

A role is one of the two auth Groups that migration 0002 ships: "Ackboard read-only"
(view every page) and "Ackboard operators" (view, and every action). A user holds one
role at a time, so granting one takes the other away: ``grant_role bob read-only``
turns an operator into a viewer. ``--revoke`` takes the named role away. ``--create``
makes the user first (active, no password until ``manage.py changepassword``). It
writes only group memberships (and the new user); it never touches Redis.
"""

from __future__ import annotations

import importlib
from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

# The group names have one spelling: the migration that creates them.
_roles_migration = importlib.import_module("dashboard.migrations.0002_roles")
#: Role name on the command line -> the auth Group that carries its permissions.
ROLES: dict[str, str] = {
    "read-only": _roles_migration.READ_ONLY,
    "operator": _roles_migration.OPERATORS,
}


class Command(BaseCommand):
    help = (
        "Give a user the read-only or the operator role (one at a time), or take it away "
        "with --revoke."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("username")
        parser.add_argument("role", choices=sorted(ROLES))
        parser.add_argument("--revoke", action="store_true", help="take the role away")
        parser.add_argument(
            "--create",
            action="store_true",
            help="create the user if missing (no password: set one with changepassword)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["username"]
        role: str = options["role"]
        groups = {name: self._group(group) for name, group in ROLES.items()}
        user_model = get_user_model()
        with transaction.atomic():
            user = user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).first()
            created = False
            if user is None:
                if not options["create"] or options["revoke"]:
                    raise CommandError(
                        f"no user {username!r}: add --create, or create one with "
                        "createsuperuser or the admin site"
                    )
                user = user_model.objects.create_user(**{user_model.USERNAME_FIELD: username})
                user.set_unusable_password()
                user.save()
                created = True
            if options["revoke"]:
                user.groups.remove(groups[role])
                self.stdout.write(f"{username} no longer has the {role} role.")
            else:
                user.groups.remove(*(g for name, g in groups.items() if name != role))
                user.groups.add(groups[role])
                self.stdout.write(f"{username} now has the {role} role.")
        if created:
            self.stdout.write(
                f"Created user {username} without a password: set one with "
                f"manage.py changepassword {username}"
            )
        if getattr(user, "is_superuser", False):
            self.stdout.write(
                f"Note: {username} is a superuser, who may do everything whatever the role."
            )

    @staticmethod
    def _group(name: str) -> Group:
        try:
            return Group.objects.get(name=name)
        except Group.DoesNotExist:
            raise CommandError(
                f"the group {name!r} is missing: run manage.py migrate first"
            ) from None
