"""The failure index's model is IndexedFailure: FailureRecord is the core's dataclass.

A rename only: the table becomes ``dashboard_indexedfailure`` with every row, index and
constraint kept (their names are explicit); contenttypes renames its row for it.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0002_roles")]

    operations = [migrations.RenameModel(old_name="FailureRecord", new_name="IndexedFailure")]
