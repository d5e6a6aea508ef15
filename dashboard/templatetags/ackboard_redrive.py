"""``{% redrive_panel stream %}``: the dead-letter page's redrive jobs.

Renders ``dashboard/_redrive_panel.html`` with the stream's jobs that are not finished,
plus the newest finished one (its outcome stays visible), and the canary's outcomes of
each job still showing a canary (``dashboard.redrive.canary``). Used inside the live
partial "redrive-panel" of dlq.html, so a page load and every live push render it the
same way. Costs: one SELECT of at most ``SHOWN`` jobs, and the canary's reads for a job
that has one; a Redis error is shown in the panel, never raised.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis
from django import template

from dashboard.redrive import canary
from dashboard.redrive.models import RedriveJob
from dashboard.redrive.service import PERMISSION
from dashboard.runtime.connection import get_redis

register = template.Library()

SHOWN = 5


def _utc(ms: int | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _left(job: RedriveJob) -> str:
    """About how long the rest takes at the job's rate ("" unless it is running)."""
    if job.state != RedriveJob.State.RUNNING or job.rate <= 0:
        return ""
    seconds = max(0, job.matched - job.processed) / job.rate
    if seconds < 60:
        return f"about {max(1, round(seconds))} s left"
    minutes, rest = divmod(round(seconds), 60)
    return (
        f"about {minutes} min {rest} s left"
        if minutes < 60
        else f"about {minutes // 60} h {minutes % 60} min left"
    )


@register.inclusion_tag("dashboard/_redrive_panel.html", takes_context=True)
def redrive_panel(context: template.Context, stream: str) -> dict[str, Any]:
    jobs = list(
        RedriveJob.objects.filter(stream=stream).exclude(state__in=RedriveJob.FINAL)[:SHOWN]
    )
    last_final = RedriveJob.objects.filter(stream=stream, state__in=RedriveJob.FINAL).first()
    if last_final is not None:
        jobs.append(last_final)
    shown = []
    for job in jobs:
        rows: list[canary.CanaryRow] = []
        problem = ""
        if job.canary_replays and job.state in (job.State.CANARY, job.State.WAITING):
            try:
                rows = canary.outcomes(get_redis(), job)
            except redis.RedisError as exc:
                problem = f"canary outcomes unavailable: {exc}"
        shown.append({
            "job": job, "canary_rows": rows, "canary_problem": problem,
            "since": _utc(job.since_ms), "until": _utc(job.until_ms), "left": _left(job),
            "bad": sum(1 for r in rows if r.bad),
            "processed": sum(1 for r in rows if r.outcome == canary.PROCESSED),
        })  # fmt: skip
    perms = context.get("perms")
    return {
        "stream": stream,
        "jobs": shown,
        # The page's perms: those that reach its stream (dashboard.access.scopes).
        "may_redrive": bool(perms is not None and PERMISSION in perms),
    }
