"""Redrive dead letters: the ``RedriveJob`` table and its permission.

``redrive_dead_letters`` is declared on AuditEvent with the other action permissions and
granted to the "Ackboard operators" role as 0006_fleet_permissions does (created here,
since permissions are normally created after all migrations). See
``dashboard.redrive.models`` for the job's states, lease and why "never twice" holds.
Reversing drops the table and removes the permission from the group.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations, models

OPERATORS = "Ackboard operators"
CODENAMES = ["redrive_dead_letters"]


def grant(apps, schema_editor):
    app_config = apps.get_app_config("dashboard")
    app_config.models_module = True
    create_permissions(app_config, verbosity=0, apps=apps, using=schema_editor.connection.alias)
    app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name=OPERATORS)
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="dashboard", codename__in=CODENAMES)
    )


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group = Group.objects.filter(name=OPERATORS).first()
    if group is not None:
        group.permissions.remove(
            *Permission.objects.filter(content_type__app_label="dashboard", codename__in=CODENAMES)
        )


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0008_failure_fingerprint")]

    operations = [
        migrations.CreateModel(
            name="RedriveJob",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("stream", models.CharField(max_length=1024)),
                ("created_by", models.CharField(max_length=150)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("origin_group", models.CharField(blank=True, max_length=1024)),
                ("fingerprint", models.CharField(blank=True, max_length=64)),
                ("reason_contains", models.CharField(blank=True, max_length=500)),
                (
                    "since_ms",
                    models.BigIntegerField(help_text="Dead-lettered at or after (ms)", null=True),
                ),
                (
                    "until_ms",
                    models.BigIntegerField(help_text="Dead-lettered at or before (ms)", null=True),
                ),
                (
                    "upto_id",
                    models.CharField(help_text="Newest dead-letter id at creation", max_length=41),
                ),
                ("canary", models.PositiveIntegerField(default=0)),
                ("rate", models.FloatField(help_text="Replays per second")),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("canary", "canary running"),
                            ("waiting", "waiting for the operator"),
                            ("running", "running"),
                            ("paused", "paused"),
                            ("cancelled", "cancelled"),
                            ("done", "done"),
                            ("failed", "failed"),
                        ],
                        max_length=10,
                    ),
                ),
                (
                    "matched",
                    models.PositiveIntegerField(default=0, help_text="The dry run's count"),
                ),
                ("replayed", models.PositiveIntegerField(default=0)),
                (
                    "gone",
                    models.PositiveIntegerField(default=0, help_text="Already replayed or deleted"),
                ),
                (
                    "refused",
                    models.PositiveIntegerField(default=0, help_text="Refused by the script"),
                ),
                (
                    "cursor",
                    models.CharField(
                        blank=True, help_text="Last dead-letter id seen", max_length=41
                    ),
                ),
                ("canary_replays", models.JSONField(default=list)),
                ("last_error", models.TextField(blank=True)),
                ("finished_at", models.DateTimeField(null=True)),
                ("lease_owner", models.CharField(blank=True, max_length=200)),
                ("lease_until", models.FloatField(default=0.0, help_text="Epoch seconds")),
            ],
            options={
                "ordering": ["-id"],
                "default_permissions": (),
                "indexes": [models.Index(fields=["stream", "state"], name="redrive_stream_state")],
            },
        ),
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
                ],
            },
        ),
        migrations.RunPython(grant, revoke),
    ]
