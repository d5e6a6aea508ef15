"""The permission rows the action table needs, created after every ``migrate``.

Owns ``declared_permissions`` (each action permission's codename and human name, from
the rows of ``dashboard.views.actions.ACTIONS``) and ``action_permissions_create``, the
``post_migrate`` receiver (Django's own hook: ``django.contrib.auth`` creates the
``Meta.permissions`` rows from it) that creates the ones missing. A permission it
creates is granted to the "Ackboard operators" role then, as migrations 0006 and 0009
granted theirs when they created them: the role holds every action. So a new action's
permission needs no migration, and no model ``Meta`` entry.

Fail closed: it never deletes, renames or re-grants a permission, and never grants
one it did not create (one an administrator took from the role stays taken). A
permission that is not there grants nothing: until ``migrate`` creates it, no user but a
superuser holds it, and the action is refused (403, audited). The read role gets none.
``AuditEvent.Meta.permissions`` keeps only the permissions that are not the rows':
``view_queues``, ``redrive_dead_letters``, ``edit_replay_dead_letter``.

Costs one SELECT per ``migrate`` (and a test database's flush), plus one INSERT and
one group insert when something is missing. It never touches Redis.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from django.apps import apps as global_apps
from django.apps.registry import Apps
from django.db import DEFAULT_DB_ALIAS, router

#: What each kind of row acts on, in a permission's human name.
_NOUNS = {
    "pending": "pending entries",
    "dead-letter": "dead-lettered entries",
    "dead-letters": "dead-letter streams",
    "group": "consumer groups",
    "consumer": "consumers",
    "stream": "streams",
    "entry": "stream entries",
}
#: ``auth.Permission.name``'s length.
_NAME_LENGTH = 255


def permission_name(rows: Iterable[tuple[str, str]]) -> str:
    """A permission's human name from the (action name, kind) of the rows that need it:
    "Can retry pending entries", "Can delete dead-lettered entries and purge dead-letter
    streams"."""
    by_kind: dict[str, list[str]] = {}
    for name, on in rows:
        by_kind.setdefault(on, []).append(name.replace("-", " "))
    parts = [f"{' and '.join(names)} {_NOUNS[on]}" for on, names in by_kind.items()]
    return ("Can " + " and ".join(parts))[:_NAME_LENGTH]


def declared_permissions() -> dict[str, str]:
    """Every action permission's codename (without the app label) and human name, in the
    action table's order."""
    from dashboard.views.actions import ACTIONS  # here: the table imports the views

    rows: dict[str, list[tuple[str, str]]] = {}
    for row in ACTIONS.values():
        codename = row.permission.split(".", 1)[1]
        rows.setdefault(codename, []).append((row.name, row.on))
    return {codename: permission_name(needed) for codename, needed in rows.items()}


def action_permissions_create(
    *,
    using: str = DEFAULT_DB_ALIAS,
    apps: Apps = global_apps,
    role_created: bool = False,
    **kwargs: Any,
) -> list[str]:
    """Create the action permissions that do not exist yet, and grant each to the
    operators' role (if the role exists); return the codenames created.

    The ``post_migrate`` receiver (``DashboardConfig.ready`` connects it; ``apps`` is the
    migrated state's). ``role_created``: the role was just made again as the migrations
    ship it (``tests/migration_data.py``, after a test's flush), so it gets every action
    permission, as on a fresh database.
    """
    try:
        content_types = apps.get_model("contenttypes", "ContentType")
        permissions = apps.get_model("auth", "Permission")
        groups = apps.get_model("auth", "Group")
        apps.get_model("dashboard", "AuditEvent")
    except LookupError:  # migrated backwards, before the models exist
        return []
    if not router.allow_migrate_model(using, permissions):
        return []
    declared = declared_permissions()
    content_type, _ = content_types.objects.db_manager(using).get_or_create(
        app_label="dashboard", model="auditevent"
    )
    on_model = permissions.objects.using(using).filter(content_type=content_type)
    existing = set(on_model.filter(codename__in=declared).values_list("codename", flat=True))
    created = [code for code in declared if code not in existing]
    permissions.objects.using(using).bulk_create(
        [
            permissions(codename=code, name=declared[code], content_type=content_type)
            for code in created
        ]
    )
    # The role's one spelling is the migration that ships it (as grant_role reads it).
    operators = importlib.import_module("dashboard.migrations.0002_roles").OPERATORS
    role = groups.objects.using(using).filter(name=operators).first()
    granted = list(declared) if role_created else created
    if role is not None and granted:
        role.permissions.add(*on_model.filter(codename__in=granted))
    return created
