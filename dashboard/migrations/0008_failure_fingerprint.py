"""Failure fingerprints: ``IndexedFailure.fingerprint``, its backfill, its index.

The column is added empty, every existing row is given its fingerprint in chunks of
``CHUNK`` rows by id (one SELECT and one UPDATE batch per chunk, so a table of millions
never sits in memory nor in one statement), then the ``failure_cause`` index is built
once over the filled column (cheaper than maintaining it through the backfill).
Reversing drops the index and the column.
"""

from typing import Any

from django.db import migrations, models

from queue_core.fingerprint import fingerprint

#: Rows read and updated per step of the backfill.
CHUNK = 2000


def backfill(apps: Any, schema_editor: Any) -> None:
    failure = apps.get_model("dashboard", "IndexedFailure")
    rows = failure.objects.using(schema_editor.connection.alias).order_by("id")
    last = 0
    while True:
        chunk = list(
            rows.filter(id__gt=last).only("id", "error_type", "message", "traceback")[:CHUNK]
        )
        if not chunk:
            return
        for row in chunk:
            row.fingerprint = fingerprint(row.error_type, row.message, row.traceback)
        failure.objects.using(schema_editor.connection.alias).bulk_update(
            chunk, ["fingerprint"], batch_size=500
        )
        last = chunk[-1].id


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0007_ratesample")]

    operations = [
        migrations.AddField(
            model_name="indexedfailure",
            name="fingerprint",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="indexedfailure",
            index=models.Index(
                fields=["fingerprint", "stream", "group", "failed_at"], name="failure_cause"
            ),
        ),
    ]
