"""The action permissions leave ``AuditEvent.Meta``: each action row declares its own.

From here on an action's permission is created after every ``migrate`` from the action
table (``dashboard.access.grants``, a post_migrate receiver) and granted to the
"Ackboard operators" role when created, so a new action needs no migration. The rows
the earlier migrations created stay as they are (Django never deletes a permission that
leaves ``Meta``), with their names and grants. ``Meta`` keeps the permissions that are not
an action row's: view_queues, redrive_dead_letters, edit_replay_dead_letter.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0011_refingerprint")]

    operations = [
        migrations.AlterModelOptions(
            name="auditevent",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    ("view_queues", "Can view streams, groups, entries and failures"),
                    ("redrive_dead_letters", "Can redrive dead letters (replay many, throttled)"),
                    ("edit_replay_dead_letter", "Can edit dead-lettered entries and replay them"),
                ],
            },
        ),
    ]
