"""The rates history: ``RateSample``, one row per tier, stream, group and time.

See ``dashboard.insight.rates.models`` for the tiers and why the history lives in the database.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0006_fleet_permissions"),
    ]

    operations = [
        migrations.CreateModel(
            name="RateSample",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tier", models.PositiveSmallIntegerField()),
                ("stream", models.CharField(max_length=1024)),
                ("group", models.CharField(blank=True, max_length=1024)),
                ("at", models.FloatField(help_text="Epoch seconds of the sample")),
                ("entries_added", models.BigIntegerField(null=True)),
                ("entries_read", models.BigIntegerField(null=True)),
                ("lag", models.BigIntegerField(null=True)),
                ("pending", models.BigIntegerField(null=True)),
                ("oldest_pending_age_s", models.FloatField(null=True)),
                ("oldest_undelivered_age_s", models.FloatField(null=True)),
                ("dead_letters", models.BigIntegerField(null=True)),
                (
                    "failures",
                    models.IntegerField(
                        help_text="Failures indexed in this row's interval", null=True
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["tier", "stream", "group", "at"], name="rate_series"),
                    models.Index(fields=["tier", "at"], name="rate_tier_time"),
                ],
            },
        ),
    ]
