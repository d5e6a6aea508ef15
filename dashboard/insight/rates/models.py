"""The rates history: one row per (tier, stream, group, sample time).

Owns the ``RateSample`` table and the tiers' steps and retention. Rows are written only
by the sampler (``dashboard.insight.rates.sampler``) and read by
``dashboard.insight.rates.series`` and the /metrics collector; nothing here touches Redis.

Why the database and not a capped companion key in Redis: the history is the
dashboard's, not the queue's. At 500 streams with one group each, the three tiers hold
about 31,700 rows per series (8,640 + 10,080 + 12,960), some 32 million rows: gigabytes
of the queue server's memory if kept there, next to the jobs it exists for, but an
ordinary indexed table in SQLite or PostgreSQL. Workers still need no database: only the
dashboard writes and reads it. A chart reads one indexed range (tier, stream, group, at),
whatever the tier.

Tiers: 0 = every sampler tick (``ACKBOARD_SAMPLER_INTERVAL_S``, 10 s by default) kept
1 day; 1 = 1 minute kept 7 days; 2 = 10 minutes kept ``ACKBOARD_RATES_RETENTION_DAYS``
(90 by default). A tier-1/2 row is its bucket's LAST sample for counters and point-in-time
figures (entries added/read, lag, pending, dead letters), the MAX of the bucket for ages,
and the SUM for failures (a count per row's interval); its ``at`` is the time of that
last sample, so rates stay Δcounter / Δat between consecutive rows of any tier.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


@dataclass(frozen=True, slots=True)
class Tier:
    level: int
    step_s: int  # bucket width (tier 0: the sampler's interval, nominally 10 s)
    keep_s: int  # retention before ACKBOARD_RATES_RETENTION_DAYS caps it


DAY = 86_400
TIERS = (Tier(0, 10, DAY), Tier(1, 60, 7 * DAY), Tier(2, 600, 90 * DAY))


class RateSample(models.Model):
    """One sample of one stream (``group == ""``) or one group, in one tier.

    Counters are None when the server has none (Redis < 7: no ``entries-added`` or
    ``entries-read``); the pages then say "rates need Redis 7+", never a made-up figure.
    A group row carries its stream's ``entries_added`` too (the produce rate of its
    chart); a stream row has no ``entries_read``.
    """

    tier = models.PositiveSmallIntegerField()
    stream = models.CharField(max_length=1024)
    group = models.CharField(max_length=1024, blank=True)
    at = models.FloatField(help_text="Epoch seconds of the sample")
    entries_added = models.BigIntegerField(null=True)
    entries_read = models.BigIntegerField(null=True)
    lag = models.BigIntegerField(null=True)
    pending = models.BigIntegerField(null=True)
    oldest_pending_age_s = models.FloatField(null=True)
    oldest_undelivered_age_s = models.FloatField(null=True)
    dead_letters = models.BigIntegerField(null=True)
    failures = models.IntegerField(null=True, help_text="Failures indexed in this row's interval")

    class Meta:
        app_label = "dashboard"
        indexes = [
            models.Index(fields=["tier", "stream", "group", "at"], name="rate_series"),
            models.Index(fields=["tier", "at"], name="rate_tier_time"),
        ]

    def __str__(self) -> str:
        return f"{self.stream}/{self.group or '-'} t{self.tier} @{self.at:.0f}"
