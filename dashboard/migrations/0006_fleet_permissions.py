"""The fleet controls' permissions, granted to the "Ackboard operators" role.

Four permissions: pause_group (Pause, Resume), retire_consumer (Retire, Retire idle
consumers), administer_group (Create group, Delete group, Reset position) and
trim_stream (Trim). As 0002_roles does, it creates them itself (they are normally
created after all migrations) and adds them to the operators' group, so an operator
keeps holding every action. The read-only role gets none. Reversing removes them from
the group (the permissions stay, as Django's do).
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

OPERATORS = "Ackboard operators"
FLEET_CODENAMES = ["pause_group", "retire_consumer", "administer_group", "trim_stream"]


def grant(apps, schema_editor):
    app_config = apps.get_app_config("dashboard")
    # Historical app configs have no models module, which makes create_permissions skip them.
    app_config.models_module = True
    create_permissions(app_config, verbosity=0, apps=apps, using=schema_editor.connection.alias)
    app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=OPERATORS)
    perms = Permission.objects.filter(
        content_type__app_label="dashboard", codename__in=FLEET_CODENAMES
    )
    group.permissions.add(*perms)


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.filter(name=OPERATORS).first()
    if group is not None:
        group.permissions.remove(
            *Permission.objects.filter(
                content_type__app_label="dashboard", codename__in=FLEET_CODENAMES
            )
        )


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0005_apitoken")]

    operations = [
        migrations.AlterModelOptions(
            name="auditevent",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    ("view_queues", "Can view streams, groups, entries and failures"),
                    ("retry_entry", "Can retry pending entries"),
                    ("claim_entry", "Can claim pending entries"),
                    ("dead_letter_entry", "Can dead-letter pending entries"),
                    ("acknowledge_entry", "Can acknowledge (discard) pending entries"),
                    ("replay_entry", "Can replay dead-lettered entries"),
                    ("delete_dead_letter", "Can delete and purge dead-lettered entries"),
                    ("pause_group", "Can pause and resume consumer groups"),
                    ("retire_consumer", "Can retire consumers (one, or the idle ones)"),
                    (
                        "administer_group",
                        "Can create and delete groups and reset their position",
                    ),
                    ("trim_stream", "Can trim streams"),
                ],
            },
        ),
        migrations.RunPython(grant, revoke),
    ]
