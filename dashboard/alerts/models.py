"""The webhooks alerts are sent to: one ``AlertWebhook`` row each, edited in the admin.

Owns the table and its validation. Why a model and not a setting: receivers change
(a new Slack channel, a rotated URL, one muted for maintenance) without a redeploy, each
change has an audit row with its author (``dashboard.admin``), and each webhook has its
own cool-down and its own test button. The URL is a secret of sorts (Slack's carry their
token): only staff with the model's permissions see it. Never touches Redis.
"""

from __future__ import annotations

from django.core.validators import URLValidator
from django.db import models


class AlertWebhook(models.Model):
    """One receiver: ``generic`` gets the breach as JSON, ``slack`` a ``{"text": …}``."""

    class Kind(models.TextChoices):
        GENERIC = "generic", "generic JSON"
        SLACK = "slack", "Slack-compatible"

    name = models.CharField(max_length=100, unique=True)
    url = models.CharField(
        max_length=2000,
        validators=[URLValidator(schemes=["http", "https"])],
        help_text="Where alerts are POSTed (http:// or https://).",
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.GENERIC)
    enabled = models.BooleanField(default=True)
    cooldown_s = models.PositiveIntegerField(
        "cool-down (seconds)",
        default=3600,
        help_text="While a breach lasts, it is sent again at most once per this many seconds.",
    )

    class Meta:
        app_label = "dashboard"
        ordering = ["name"]
        permissions = [("test_alertwebhook", "Can send a test alert to a webhook")]

    def __str__(self) -> str:
        return self.name


#: The audit rows' actions of the webhooks' admin pages (``dashboard.admin``).
AUDIT_ACTIONS = (
    "alert-webhook-add",
    "alert-webhook-change",
    "alert-webhook-delete",
    "alert-webhook-test",
)
