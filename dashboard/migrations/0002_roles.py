"""Ship the two roles as data: "Ackboard read-only" and "Ackboard operators".

Custom permissions are normally created after all migrations (post_migrate), so this
migration creates them itself first; create_permissions is idempotent.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

READ_ONLY = "Ackboard read-only"
OPERATORS = "Ackboard operators"
READ_ONLY_CODENAMES = ["view_queues"]
OPERATOR_CODENAMES = [
    "view_queues",
    "retry_entry",
    "claim_entry",
    "dead_letter_entry",
    "acknowledge_entry",
    "replay_entry",
    "delete_dead_letter",
]


def create_roles(apps, schema_editor):
    app_config = apps.get_app_config("dashboard")
    # Historical app configs have no models module, which makes create_permissions skip them.
    app_config.models_module = True
    create_permissions(app_config, verbosity=0, apps=apps, using=schema_editor.connection.alias)
    app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in ((READ_ONLY, READ_ONLY_CODENAMES), (OPERATORS, OPERATOR_CODENAMES)):
        group, _ = Group.objects.get_or_create(name=name)
        perms = Permission.objects.filter(
            content_type__app_label="dashboard", codename__in=codenames
        )
        group.permissions.add(*perms)


def remove_roles(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=[READ_ONLY, OPERATORS]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_roles, remove_roles)]
