"""The redrive job: one row per "put these dead letters back" request.

Owns the ``RedriveJob`` table and its states. Rows are written by ``dashboard.redrive``
only: created and controlled (pause, resume, cancel, continue, stop) by
``dashboard.redrive.service``, advanced by the runner (``dashboard.redrive.runner``,
``manage.py run_jobs``) while it holds the row's lease. Nothing here touches Redis.

**Never twice.** Each replay is the atomic replay script (``dlq_replay.lua``), which
XADDs the new entry and XDELs the dead letter in one step: a dead letter that was
replayed is gone, so a second attempt (a runner restarted mid-batch, two runners racing)
is refused "not-found" and counted as ``gone``. ``cursor`` (the last dead-letter id
looked at) only saves re-reading; ``upto_id`` (the newest dead-letter id when the job was
created) keeps entries dead-lettered later, a canary failing again among them, out of
the job.

**One runner per job.** ``lease_owner``/``lease_until``: a runner takes a job with one
conditional UPDATE (free or expired lease), renews it between replays, and stops working
on it the moment a renewal finds it taken. A runner killed with SIGKILL holds its lease
until ``lease_until`` (``ACKBOARD_REDRIVE_LEASE_S``, 10 s by default).
"""

from __future__ import annotations

from django.db import models


class RedriveJob(models.Model):
    """A redrive of one stream's dead letters, matching a filter, up to ``upto_id``."""

    class State(models.TextChoices):
        CANARY = "canary", "canary running"
        WAITING = "waiting", "waiting for the operator"
        RUNNING = "running", "running"
        PAUSED = "paused", "paused"
        CANCELLED = "cancelled", "cancelled"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    #: States a runner works on; the others wait for an operator or are final.
    ACTIVE = (State.CANARY, State.RUNNING)
    FINAL = (State.CANCELLED, State.DONE, State.FAILED)

    stream = models.CharField(max_length=1024)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # The filter ("" / None: any).
    origin_group = models.CharField(max_length=1024, blank=True)
    fingerprint = models.CharField(max_length=64, blank=True)
    reason_contains = models.CharField(max_length=500, blank=True)
    since_ms = models.BigIntegerField(null=True, help_text="Dead-lettered at or after (ms)")
    until_ms = models.BigIntegerField(null=True, help_text="Dead-lettered at or before (ms)")
    upto_id = models.CharField(max_length=41, help_text="Newest dead-letter id at creation")
    canary = models.PositiveIntegerField(default=0)
    rate = models.FloatField(help_text="Replays per second")
    state = models.CharField(max_length=10, choices=State.choices)
    # Progress.
    matched = models.PositiveIntegerField(default=0, help_text="The dry run's count")
    replayed = models.PositiveIntegerField(default=0)
    gone = models.PositiveIntegerField(default=0, help_text="Already replayed or deleted")
    refused = models.PositiveIntegerField(default=0, help_text="Refused by the script")
    cursor = models.CharField(max_length=41, blank=True, help_text="Last dead-letter id seen")
    #: The canary's replays: [{"dlq_id", "new_id", "group", "origin_id"}].
    canary_replays = models.JSONField(default=list)
    last_error = models.TextField(blank=True)
    finished_at = models.DateTimeField(null=True)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_until = models.FloatField(default=0.0, help_text="Epoch seconds")

    class Meta:
        ordering = ["-id"]
        default_permissions = ()
        indexes = [models.Index(fields=["stream", "state"], name="redrive_stream_state")]

    def __str__(self) -> str:
        return f"redrive #{self.pk} {self.stream} {self.state}"

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE

    @property
    def final(self) -> bool:
        return self.state in self.FINAL

    @property
    def processed(self) -> int:
        return self.replayed + self.gone + self.refused

    @property
    def percent(self) -> int:
        if not self.matched:
            return 100 if self.final else 0
        return min(100, round(100 * self.processed / self.matched))
