"""The redrive runner: the loop of ``manage.py run_jobs`` that replays a job's dead letters.

Owns taking a job (``claim``: one conditional UPDATE on its lease, so two runners never
work one job at once), the token bucket (``TokenBucket``: the job's rate, capped by
``ACKBOARD_REDRIVE_MAX_RATE``), and one job's work (``work``): read the dead letters the
filter picks after the job's cursor, replay each with the atomic replay script
(``queue_core.scripts.dlq_replay``: XADD the new entry and XDEL the dead letter in one
step), save the progress and renew the lease after each, and stop at the canary's
count (state "waiting"), at the end (state "done"), when an operator paused or cancelled
the job, when the lease was lost, or when the process is stopping.

**Exactly once.** The script deletes the dead letter in the step that adds its replay, so
a dead letter is replayed at most once whatever happens to a runner (killed between the
script and the progress save, or racing another runner after a lease expired): the
second attempt finds it gone ("not-found", counted as ``gone``). The cursor saves re-reading
only. An operator's Pause or Cancel is seen before the next replay (at most the replay
under way finishes).

Costs per replay: one EVALSHA (O(fields + groups)), one PUBLISH (the live pages' event),
one UPDATE and one SELECT on the job's row, one audit INSERT (a row per replayed entry, naming
the original and the new id). Per page of 500 dead letters: one XRANGE,
plus one indexed SQL query when the filter names a fingerprint.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections, transaction
from django.db.models import Q

from dashboard.access.audit import audit_record
from dashboard.redrive.models import RedriveJob
from dashboard.redrive.selection import RedriveFilter, pages
from queue_core import clock
from queue_core.connection import Client
from queue_core.events import event_publish
from queue_core.scripts.binding import Refusal
from queue_core.scripts.dlq_replay import DLQ_REPLAY

log = logging.getLogger("ackboard.redrive")

State = RedriveJob.State


def max_rate() -> float:
    """``ACKBOARD_REDRIVE_MAX_RATE``: the highest rate a job may ask for (replays/s)."""
    return float(settings.ACKBOARD_REDRIVE_MAX_RATE)


def lease_s() -> float:
    """``ACKBOARD_REDRIVE_LEASE_S``: how long a runner's lease lasts without renewal."""
    return float(settings.ACKBOARD_REDRIVE_LEASE_S)


def runner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; ``take`` waits for one."""

    rate: float
    burst: float = 1.0
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(default=1.0)
    at: float = field(default=-1.0)

    def delay(self) -> float:
        """Seconds until a token is there (0: take it now)."""
        now = self.clock()
        if self.at < 0:
            self.at = now
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate

    def take(self) -> None:
        self.tokens -= 1


def claim(
    owner: str, *, job_id: int | None = None, lease: float | None = None
) -> RedriveJob | None:
    """Take the oldest job a runner should work on whose lease is free or expired (or
    ``job_id``'s), or None. One conditional UPDATE per candidate: atomic on SQLite and
    PostgreSQL, so two runners never both take one job."""
    now = clock.now_s()
    lease = lease_s() if lease is None else lease
    candidates = RedriveJob.objects.filter(state__in=RedriveJob.ACTIVE).filter(
        Q(lease_until__lt=now) | Q(lease_owner=owner)
    )
    if job_id is not None:
        candidates = candidates.filter(pk=job_id)
    for pk in candidates.order_by("id").values_list("pk", flat=True)[:20]:
        taken = (
            RedriveJob.objects.filter(pk=pk, state__in=RedriveJob.ACTIVE)
            .filter(Q(lease_until__lt=now) | Q(lease_owner=owner))
            .update(lease_owner=owner, lease_until=now + lease)
        )
        if taken:
            return RedriveJob.objects.get(pk=pk)
    return None


def release(owner: str) -> int:
    """Give up every lease ``owner`` holds (a runner stopping), so another takes over now."""
    return RedriveJob.objects.filter(lease_owner=owner).update(lease_owner="", lease_until=0.0)


def job_filter(job: RedriveJob) -> RedriveFilter:
    return RedriveFilter(
        group=job.origin_group,
        fingerprint=job.fingerprint,
        reason_contains=job.reason_contains,
        since_ms=job.since_ms,
        until_ms=job.until_ms,
    )


class LeaseLost(Exception):  # noqa: N818
    """Another runner holds the job now: stop working on it at once."""


@dataclass
class _Work:
    job: RedriveJob
    owner: str
    lease: float
    saved_at: float = 0.0

    def save(self, **extra: object) -> None:
        """Progress and a renewed lease, while we still hold it (else LeaseLost)."""
        job = self.job
        fields: dict[str, object] = {
            "replayed": job.replayed,
            "gone": job.gone,
            "refused": job.refused,
            "cursor": job.cursor,
            "canary_replays": job.canary_replays,
            "last_error": job.last_error,
            "lease_until": clock.now_s() + self.lease,
            "updated_at": clock.now_utc(),
            **extra,
        }
        if not RedriveJob.objects.filter(pk=job.pk, lease_owner=self.owner).update(**fields):
            raise LeaseLost(f"redrive #{job.pk}: lease taken by another runner")

    def state(self) -> str:
        """The job's state now (an operator may have paused or cancelled it)."""
        return str(RedriveJob.objects.filter(pk=self.job.pk).values_list("state", flat=True)[0])


def replay_one(client: Client, job: RedriveJob, dlq_id: str) -> str:
    """Replay one dead letter with the atomic script: "replayed", "gone" or "refused"."""
    result = DLQ_REPLAY.call(stream=job.stream, dlq_id=dlq_id).run(client)
    if isinstance(result, Refusal):
        if result.kind == "not-found":
            job.gone += 1
            return "gone"
        job.refused += 1
        job.last_error = result.message[:2000]
        audit_record(
            user=None, action="redrive-replay", stream=job.stream, group=job.origin_group,
            result="refused", channel="cli",
            detail=f"redrive #{job.pk} (started by {job.created_by}) could not replay dead "
            f"letter {dlq_id}: {result.message[:500]}",
            state_before={"job": job.pk, "dlq_id": dlq_id},
        )  # fmt: skip
        return "refused"
    job.replayed += 1
    # One audit row per replayed entry, on the original entry's and the new entry's
    # audit history: "what happened to entry X" has an answer (one INSERT per replay).
    audit_record(
        user=None, action="redrive-replay", stream=job.stream, group=result.group,
        result="ok", channel="cli", entry_ids=[result.origin_id], new_ids=[result.new_id],
        detail=f"redrive #{job.pk} (started by {job.created_by}) replayed dead letter "
        f"{dlq_id} (entry {result.origin_id}) as {result.new_id}",
        state_before={"job": job.pk, "dlq_id": dlq_id, "started_by": job.created_by},
    )  # fmt: skip
    if job.state == State.CANARY:
        job.canary_replays = [
            *job.canary_replays,
            {"dlq_id": dlq_id, "new_id": result.new_id, "group": result.group,
             "origin_id": result.origin_id, "at_ms": clock.now_ms()},
        ]  # fmt: skip
    event_publish(
        client=client, type="action", stream=job.stream, group=result.group,
        action="replay", ids=[result.new_id],
    )  # fmt: skip
    return "replayed"


def _finish(work: _Work, state: str, detail: str) -> None:
    with transaction.atomic():
        work.save(state=state, finished_at=clock.now_utc(), lease_owner="", lease_until=0.0)
    job = work.job
    audit_record(
        user=None, action="redrive-finished", stream=job.stream, group=job.origin_group,
        result="ok", channel="cli",
        detail=f"redrive #{job.pk} {state}: {detail} (runner {work.owner})",
        state_before={"job": job.pk, "replayed": job.replayed, "gone": job.gone,
                      "refused": job.refused},
    )  # fmt: skip


def work(
    client: Client,
    job: RedriveJob,
    owner: str,
    *,
    stopping: threading.Event,
    lease: float | None = None,
    sleep: Callable[[float], object] | None = None,
) -> str:
    """Work on ``job`` (whose lease ``owner`` holds) until it stops; answers why:
    "waiting" (canary done), "done", "paused", "cancelled", "stopping" or "lost"."""
    w = _Work(job, owner, lease_s() if lease is None else lease)
    wait = sleep or stopping.wait
    bucket = TokenBucket(rate=min(job.rate, max_rate()))
    filt = job_filter(job)
    try:
        for rows, last, _ in pages(
            client, job.stream, filt, cursor=job.cursor, upto_id=job.upto_id
        ):
            for row in rows:
                while (delay := bucket.delay()) > 0:
                    if stopping.is_set():
                        return "stopping"
                    wait(min(delay, 0.5))
                    w.save()  # renews the lease through long waits (low rates)
                now_state = w.state()
                if now_state != job.state:
                    return now_state
                if stopping.is_set():
                    return "stopping"
                bucket.take()
                replay_one(client, job, row.id)
                job.cursor = row.id
                w.save()
                if job.state == State.CANARY and len(job.canary_replays) >= job.canary:
                    moved = RedriveJob.objects.filter(pk=job.pk, state=State.CANARY).update(
                        state=State.WAITING, lease_owner="", lease_until=0.0
                    )
                    return "waiting" if moved else w.state()
            job.cursor = last
            w.save()
        if w.state() != job.state:
            return w.state()
        _finish(w, State.DONE, f"{job.replayed} replayed, {job.gone} already gone, "
                               f"{job.refused} refused")  # fmt: skip
        return "done"
    except LeaseLost:
        return "lost"


def run_loop(
    client_factory: Callable[[], Client],
    *,
    owner: str,
    stopping: threading.Event,
    poll_s: float = 0.5,
    lease: float | None = None,
    once: bool = False,
) -> None:
    """Take jobs and work on them until ``stopping`` is set; then release the leases."""
    try:
        while not stopping.is_set():
            job: RedriveJob | None = None
            try:
                job = claim(owner, lease=lease)
                if job is None:
                    if once:
                        return
                    stopping.wait(poll_s)
                    continue
                log.info("redrive #%s: %s takes it (%s)", job.pk, owner, job.state)
                why = work(client_factory(), job, owner, stopping=stopping, lease=lease)
                log.info("redrive #%s: stopped (%s)", job.pk, why)
            except redis.RedisError as exc:
                log.warning("redrive runner: Redis error, retrying in 1 s: %s", exc)
                stopping.wait(1.0)
            except DatabaseError as exc:
                # A locked SQLite file or a database restart: transient, so the job is
                # kept (its lease still names this runner, which takes it back).
                log.warning("redrive runner: database error, retrying in 1 s: %s", exc)
                close_old_connections()
                stopping.wait(1.0)
            except Exception as exc:
                # A bug or a database error: the job is marked failed (an operator sees
                # why on its panel) rather than retried forever.
                log.exception("redrive runner: unexpected error")
                if job is not None:
                    RedriveJob.objects.filter(pk=job.pk, lease_owner=owner).update(
                        state=State.FAILED, last_error=f"{type(exc).__name__}: {exc}"[:2000],
                        lease_owner="", lease_until=0.0, finished_at=clock.now_utc(),
                    )  # fmt: skip
                stopping.wait(1.0)
    finally:
        release(owner)


def start_thread(client: Client, stopping: threading.Event) -> threading.Thread:
    """The runner on a daemon thread of this process (the demo's choice: one process
    less), until ``stopping`` is set; it releases its leases as it ends."""
    thread = threading.Thread(
        target=run_loop,
        args=(lambda: client,),
        kwargs={"owner": runner_name(), "stopping": stopping},
        name="redrive-runner",
        daemon=True,
    )
    thread.start()
    return thread
