"""Edit & replay: the ``edit_replay_dead_letter`` permission.

Declared on AuditEvent with the other action permissions, and granted to NO role: an
edited entry runs code paths its producer never sent, so each person who may do it is
chosen one by one (the admin site's user permissions, docs/failure-loop.md "Edit & replay"). The
permission row is created here, as 0006 does, so it exists before the first request.
Reversing leaves it (as Django does with permissions).
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations


def create(apps, schema_editor):
    app_config = apps.get_app_config("dashboard")
    # Historical app configs have no models module, which makes create_permissions skip them.
    app_config.models_module = True
    create_permissions(app_config, verbosity=0, apps=apps, using=schema_editor.connection.alias)
    app_config.models_module = None


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0009_redrive_job")]

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
                    ("redrive_dead_letters", "Can redrive dead letters (replay many, throttled)"),
                    (
                        "edit_replay_dead_letter",
                        "Can edit dead-lettered entries and replay them",
                    ),
                ],
            },
        ),
        migrations.RunPython(create, migrations.RunPython.noop),
    ]
