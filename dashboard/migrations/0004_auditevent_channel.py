"""AuditEvent.channel: where an action came from (a button, ``manage.py ackboard``, the API).

Rows written before it were all from buttons, which is the default.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0003_indexedfailure")]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="channel",
            field=models.CharField(
                choices=[("button", "button"), ("cli", "cli"), ("api", "api")],
                default="button",
                max_length=10,
            ),
        ),
    ]
