"""SQL state: the operator audit trail and the searchable index of failed handler attempts.

Queue state lives in Redis only; nothing here is a copy of it that could drift, except
the failure index, which is an append-only log ingested from ``{S}:failures``.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models


class AuditEvent(models.Model):
    """One operator action, successful or refused. Rows are never updated or deleted."""

    class Result(models.TextChoices):
        OK = "ok", "ok"
        REFUSED = "refused", "refused"
        ERROR = "error", "error"

    class Channel(models.TextChoices):
        """Where the action came from: a dashboard button, ``manage.py ackboard``, the API."""

        BUTTON = "button", "button"
        CLI = "cli", "cli"
        API = "api", "api"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150, db_index=True)
    action = models.CharField(max_length=40, db_index=True)
    stream = models.CharField(max_length=1024, db_index=True)
    group = models.CharField(max_length=1024, blank=True)
    entry_ids = models.JSONField(default=list)
    reason = models.TextField(blank=True)
    result = models.CharField(max_length=10, choices=Result.choices)
    detail = models.TextField(blank=True)
    state_before = models.JSONField(default=dict)
    new_ids = models.JSONField(default=list)
    channel = models.CharField(max_length=10, choices=Channel.choices, default=Channel.BUTTON)

    class Meta:
        ordering = ["-created_at", "-id"]
        # The permissions that are not an action row's: the read-only role's, the redrive
        # job's and Edit & replay's. Each action row declares its own, which
        # dashboard.access.grants creates after every migrate (migration 0012).
        permissions = [
            ("view_queues", "Can view streams, groups, entries and failures"),
            ("redrive_dead_letters", "Can redrive dead letters (replay many, throttled)"),
            # Not granted to any role by default (migration 0010_edit_replay).
            ("edit_replay_dead_letter", "Can edit dead-lettered entries and replay them"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.username} {self.action} {self.result}"


class IndexedFailure(models.Model):
    """One failed handler attempt as a row of the failure index
    (``dashboard.insight.failure_index``).

    The ingestor copies it from a ``{S}:failures`` record, which a worker wrote from a
    ``queue_core.failures.FailureRecord``; the row outlives the stream's cap.
    ``(failures_key, source_id)`` is unique, which makes ingestion idempotent on redelivery.
    """

    failures_key = models.CharField(max_length=1100)
    source_id = models.CharField(max_length=41)
    stream = models.CharField(max_length=1024)
    group = models.CharField(max_length=1024)
    entry_id = models.CharField(max_length=41)
    consumer = models.CharField(max_length=255)
    attempt = models.PositiveIntegerField()
    error_type = models.CharField(max_length=255)
    message = models.TextField()
    traceback = models.TextField(blank=True)
    duration_ms = models.FloatField(null=True)
    failed_at = models.DateTimeField()
    #: The attempt's cause (``queue_core.fingerprint``): attempts differing only in ids,
    #: numbers or quoted values share it. Set by the ingestor; "" on rows not yet backfilled.
    fingerprint = models.CharField(max_length=16, blank=True, default="")
    #: The OpenTelemetry trace the attempt ran in (32 hex digits), "" when none.
    trace_id = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["-failed_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["failures_key", "source_id"], name="failure_unique_src")
        ]
        indexes = [
            models.Index(fields=["stream", "entry_id"], name="failure_entry"),
            models.Index(fields=["stream", "group", "failed_at"], name="failure_group_time"),
            models.Index(fields=["error_type", "failed_at"], name="failure_type_time"),
            models.Index(fields=["failed_at"], name="failure_time"),
            # Failures per stream in the last hour (overview): a covering range per stream.
            models.Index(fields=["stream", "failed_at"], name="failure_stream_time"),
            # The Failures page's by-cause view: counts, times and groups per fingerprint
            # from the index alone (covering), and one cause's rows.
            models.Index(
                fields=["fingerprint", "stream", "group", "failed_at"], name="failure_cause"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.stream} {self.entry_id} #{self.attempt} {self.error_type}"


class ApiToken(models.Model):
    """A user's secret for the JSON API (``dashboard.access.api_tokens``), issued and revoked by an
    admin. Only a SHA-256 of the secret is stored; ``key_id`` is its public, unique part,
    which finds the row and names the token in lists. A revoked token stays, for the record.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, help_text="What it is for, e.g. 'on-call scripts'.")
    key_id = models.CharField(max_length=24, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        state = " (revoked)" if self.revoked_at is not None else ""
        return f"{self.name} [{self.key_id}] of {self.user}{state}"


def _pattern_valid(value: str) -> None:
    from dashboard.access.scopes import pattern_check

    try:
        pattern_check(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class StreamScope(models.Model):
    """One stream pattern a role (a Django group) reaches (``dashboard.access.scopes``).

    A group without scopes grants its permissions on every stream; with scopes, only on
    the streams one of its patterns matches. Edited on the group's admin page.
    """

    group = models.ForeignKey("auth.Group", on_delete=models.CASCADE, related_name="stream_scopes")
    pattern = models.CharField(
        max_length=1024,
        validators=[_pattern_valid],
        help_text="Stream names this role reaches: * is any run of characters, ? one "
        "character (orders:*, billing:invoices). Case-sensitive.",
    )

    class Meta:
        ordering = ["group", "pattern"]
        constraints = [
            models.UniqueConstraint(fields=["group", "pattern"], name="stream_scope_unique")
        ]

    def __str__(self) -> str:
        return f"{self.group} on {self.pattern}"
