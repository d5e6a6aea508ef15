"""The data the migrations ship (the role groups), put back after another file's flush.

A transactional test (``django_db(transaction=True)``) empties every table when it ends;
post_migrate then recreates permissions and content types, but not the data migrations'
rows: the "Ackboard read-only" and "Ackboard operators" groups. In one process
pytest-django runs transactional tests last, so nothing noticed; with the suite's files
spread over xdist processes, a file may run after another file's flush. Tests that read
the role groups ask for the ``migration_data`` fixture, which runs the dashboard
migrations' own RunPython functions again (in order, on the final migration state) when
the groups are gone, then grants the operators' role every action permission, as
``migrate``'s post_migrate receiver does on a fresh database
(``dashboard.access.grants``). The groups still come from the migrations' and the
receiver's code, never from a copy here, so a broken data migration still fails those
tests.
"""

from __future__ import annotations

from types import SimpleNamespace

from django.contrib.auth.models import Group
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.operations import RunPython

from dashboard.access.grants import action_permissions_create
from dashboard.management.commands.grant_role import ROLES


def migration_data_restore() -> bool:
    """Run the dashboard data migrations again if the role groups are gone; True if it did."""
    if Group.objects.filter(name__in=ROLES.values()).count() == len(ROLES):
        return False
    loader = MigrationExecutor(connection).loader
    [leaf] = loader.graph.leaf_nodes("dashboard")
    apps = loader.project_state(leaf).apps
    editor = SimpleNamespace(connection=connection)
    for app, name in loader.graph.forwards_plan(leaf):
        if app != "dashboard":
            continue
        for operation in loader.get_migration(app, name).operations:
            if isinstance(operation, RunPython):
                operation.code(apps, editor)
    action_permissions_create(using=connection.alias, role_created=True)
    return True
