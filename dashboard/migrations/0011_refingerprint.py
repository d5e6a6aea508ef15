"""Failure fingerprints under the second normalization (``queue_core.fingerprint``,
``NORMALIZATION_VERSION`` 2: e-mail addresses, URL query strings and IP addresses are
values): every stored row whose fingerprint differs is given the new one
(``dashboard.insight.failure_index.backfill``), so old and new attempts of one cause share it.

No schema change. Reversing leaves the new fingerprints (the old rules are gone).
"""

from typing import Any

from django.db import migrations

from dashboard.insight.failure_index.backfill import fingerprints_refresh


def refingerprint(apps: Any, schema_editor: Any) -> None:
    fingerprints_refresh(
        model=apps.get_model("dashboard", "IndexedFailure"),
        using=schema_editor.connection.alias,
    )


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0010_edit_replay")]

    operations = [migrations.RunPython(refingerprint, migrations.RunPython.noop, elidable=True)]
