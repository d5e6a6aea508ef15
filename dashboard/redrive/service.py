"""Create and control redrive jobs: the one path of the buttons, the CLI and the JSON API.

Owns the input rules (``parse``: a clear 400 for each bad field), the permission check
(``dashboard.redrive_dead_letters``, a denied attempt audited before the 403), the dry
run, creating a job (audited "redrive", its filter, canary and rate in the row) and the
operator's controls, each one conditional UPDATE of the job's state (so a click that
races the runner or another operator is a clear 409, never a lost change) and one audit
row ("redrive-pause", "-resume", "-cancel", "-continue", "-stop"):

- pause: canary or running -> paused (the runner stops before its next replay);
- resume: paused -> canary (its canary not complete) or running;
- continue: waiting (the canary done) -> running;
- stop: waiting -> cancelled (the canary's replays stay replayed);
- cancel: any state but a final one -> cancelled.

Answers are ``RedriveAnswer`` (an HTTP status, a one-line message, the job or the dry run).
Costs: the dry run's scan (``dashboard.redrive.selection``); a control is one UPDATE and
one INSERT.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction

from dashboard.access import scopes
from dashboard.access.audit import audit_record
from dashboard.display.converters import name_problem
from dashboard.redrive.models import RedriveJob
from dashboard.redrive.runner import max_rate
from dashboard.redrive.selection import DryRun, RedriveFilter, dry_run
from dashboard.views.action_runner import BadRequest, check_stream
from queue_core import clock
from queue_core.connection import Client

PERMISSION = "dashboard.redrive_dead_letters"
State = RedriveJob.State
MAX_CANARY = 1000
#: The rate a job gets when none is given (replays per second).
DEFAULT_RATE = 10.0
_FINGERPRINT = re.compile(r"^[0-9a-f]{4,64}$")
_MS = re.compile(r"^\d{1,15}$")

#: control -> (states it applies to, the state it sets; None: resume's choice).
CONTROLS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "pause": ((State.CANARY, State.RUNNING), State.PAUSED),
    "resume": ((State.PAUSED,), None),
    "continue": ((State.WAITING,), State.RUNNING),
    "stop": ((State.WAITING,), State.CANCELLED),
    "cancel": ((State.CANARY, State.WAITING, State.RUNNING, State.PAUSED), State.CANCELLED),
}

User = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class RedriveAnswer:
    status: int
    message: str
    job: RedriveJob | None = None
    dry: DryRun | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"ok": self.ok, "message": self.message}
        if self.dry is not None:
            body.update(would_replay=self.dry.count, complete=self.dry.complete,
                        upto_id=self.dry.upto_id)  # fmt: skip
        if self.job is not None:
            body["job"] = job_json(self.job)
        return body


def job_json(job: RedriveJob) -> dict[str, Any]:
    return {
        "id": job.pk, "stream": job.stream, "state": job.state, "matched": job.matched,
        "replayed": job.replayed, "gone": job.gone, "refused": job.refused,
        "canary": job.canary, "canary_replays": job.canary_replays, "rate": job.rate,
        "cursor": job.cursor, "upto_id": job.upto_id, "last_error": job.last_error,
        "filter": {"group": job.origin_group, "fingerprint": job.fingerprint,
                   "reason_contains": job.reason_contains, "since_ms": job.since_ms,
                   "until_ms": job.until_ms},
    }  # fmt: skip


def may_redrive(user: User | None, stream: str | None = None) -> bool:
    """Whether ``user`` may redrive ``stream``'s dead letters (some stream's when None)."""
    has_perm = getattr(user, "has_perm", None)  # AbstractBaseUser declares none
    if not (user is not None and user.is_authenticated and has_perm and has_perm(PERMISSION)):
        return False
    return stream is None or scopes.may(user, PERMISSION, stream)


def _time_ms(value: str, what: str) -> int | None:
    value = value.strip()
    if not value:
        return None
    if _MS.match(value):
        return int(value)
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(
            f"{what} must be a time (2026-12-01T21:00, UTC) or epoch milliseconds"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise BadRequest(f"{what} is before 1970")
    return ms


def _number(value: Any, what: str, *, default: float, low: float, high: float) -> float:
    text = str(value).strip() if value is not None else ""
    if not text:
        return default
    try:
        number = float(text)
    except ValueError:
        raise BadRequest(f"{what} must be a number") from None
    if not low <= number <= high:  # NaN fails this too
        raise BadRequest(f"{what} must be between {low:g} and {high:g}")
    return number


def parse(data: Mapping[str, Any]) -> tuple[RedriveFilter, int, float]:
    """(filter, canary, rate) from form, JSON or CLI fields; BadRequest (400) says why."""

    def text(name: str, limit: int) -> str:
        value = data.get(name)
        value = "" if value is None else str(value).strip()
        if len(value) > limit:
            raise BadRequest(f"{name} is longer than {limit} characters")
        if "\x00" in value:
            raise BadRequest(f"{name} holds a NUL character")
        return value

    group = text("group", 1024)
    if group and name_problem(group) is not None:
        raise BadRequest(f"that group name cannot be used here ({name_problem(group)})")
    fingerprint = text("fingerprint", 64).lower()
    if fingerprint and not _FINGERPRINT.match(fingerprint):
        raise BadRequest("fingerprint must be the hex digest the Failures page shows")
    since = _time_ms(text("since", 40), "since")
    until = _time_ms(text("until", 40), "until")
    if since is not None and until is not None and since > until:
        raise BadRequest("since is after until")
    canary = _number(data.get("canary"), "canary", default=0, low=0, high=MAX_CANARY)
    if canary != int(canary):
        raise BadRequest("canary must be a whole number")
    cap = max_rate()
    rate = _number(data.get("rate"), "rate", default=min(DEFAULT_RATE, cap), low=0.1, high=cap)
    filt = RedriveFilter(
        group=group, fingerprint=fingerprint, reason_contains=text("reason_contains", 500),
        since_ms=since, until_ms=until,
    )  # fmt: skip
    return filt, int(canary), rate


def _denied(user: User | None, action: str, stream: str, channel: str) -> RedriveAnswer:
    audit_record(
        user=user, action=action, stream=stream, result="refused", channel=channel,
        detail="permission denied (dashboard.redrive_dead_letters)",
    )  # fmt: skip
    return RedriveAnswer(403, "You may not redrive dead letters.")


def redrive(
    *,
    user: User | None,
    client: Client,
    stream: str,
    data: Mapping[str, Any],
    confirm: bool,
    channel: str = "button",
) -> RedriveAnswer:
    """The dry run (``confirm`` False: how many would be replayed, nothing changed), or a
    new job over the dead letters matching now (its ``upto_id``), audited."""
    # The permission first: a user who may not redrive gets 403 whatever the stream is
    # (an unknown or refused name answers 404 only to those who may act on it).
    if not may_redrive(user, stream):
        return _denied(user, "redrive", stream, channel)
    try:
        check_stream(stream)
    except BadRequest as exc:
        return RedriveAnswer(exc.status, str(exc))
    try:
        filt, canary, rate = parse(data)
    except BadRequest as exc:
        return RedriveAnswer(exc.status, str(exc))
    dry = dry_run(client, stream, filt)
    if not confirm:
        return RedriveAnswer(200, f"Dry run: {dry.text} ({filt.describe()}).", dry=dry)
    if dry.count == 0:
        audit_record(
            user=user, action="redrive", stream=stream, group=filt.group, result="refused",
            channel=channel, detail=f"nothing to redrive ({filt.describe()})",
        )  # fmt: skip
        return RedriveAnswer(
            409, f"Nothing to redrive: no dead letter matches ({filt.describe()})."
        )
    with transaction.atomic():
        job = RedriveJob.objects.create(
            stream=stream, created_by=user.get_username() if user else "",
            origin_group=filt.group, fingerprint=filt.fingerprint,
            reason_contains=filt.reason_contains, since_ms=filt.since_ms,
            until_ms=filt.until_ms, upto_id=dry.upto_id, canary=canary, rate=rate,
            state=State.CANARY if canary else State.RUNNING, matched=dry.count,
        )  # fmt: skip
        audit_record(
            user=user, action="redrive", stream=stream, group=filt.group, result="ok",
            channel=channel,
            detail=(f"redrive #{job.pk}: {dry.text} ({filt.describe()}); "
                    f"canary {canary}, {rate:g}/s"),
            state_before={"job": job.pk, "filter": filt.as_dict(), "canary": canary,
                          "rate": rate, "matched": dry.count, "upto_id": dry.upto_id},
        )  # fmt: skip
    first = f"a canary of {canary} first" if canary else "no canary"
    return RedriveAnswer(200, f"Redrive #{job.pk} started: {dry.count} dead letters, {first}, "
                        f"{rate:g}/s.", job=job, dry=dry)  # fmt: skip


#: Larger ids fit no database's integer column: no job has one.
_MAX_PK = 2**63 - 1


def job_pk(job_id: int | str) -> int | None:
    """The job id as a number; None for anything but ASCII digits."""
    text = str(job_id)
    return int(text) if re.fullmatch(r"[0-9]+", text) else None


def job_find(pk: int | None) -> RedriveJob | None:
    """The job with primary key ``pk``; None for no such job (or no number)."""
    if pk is None or pk > _MAX_PK:
        return None
    return RedriveJob.objects.filter(pk=pk).first()


def control(
    *, user: User | None, job_id: int | str, action: str, channel: str = "button"
) -> RedriveAnswer:
    """Pause, resume, continue, stop or cancel a job; audited "redrive-<action>".

    The permission is checked first: a user who may not redrive gets 403 for any job id
    and control, existing or not (the refusal's audit row names the job's stream when
    there is such a job)."""
    pk = job_pk(job_id)
    job = job_find(pk)
    if not may_redrive(user, job.stream if job is not None else None):
        audit_action = f"redrive-{action}" if action in CONTROLS else "redrive-control"
        return _denied(user, audit_action, job.stream if job is not None else "", channel)
    if action not in CONTROLS:
        return RedriveAnswer(
            400, f"unknown redrive control {action!r}: one of {', '.join(CONTROLS)}"
        )
    if pk is None:
        return RedriveAnswer(400, "the job id must be a number")
    if job is None:
        return RedriveAnswer(404, f"no redrive job #{job_id}")
    audit_action = f"redrive-{action}"
    allowed, target = CONTROLS[action]
    before = job.state
    if target is None:  # resume: back to the canary if it is not complete
        target = State.CANARY if len(job.canary_replays) < job.canary else State.RUNNING
    extra: dict[str, Any] = {}
    if target == State.CANCELLED:
        extra["finished_at"] = clock.now_utc()
    changed = RedriveJob.objects.filter(pk=pk, state__in=allowed).update(state=target, **extra)
    job.refresh_from_db()
    if not changed:
        audit_record(
            user=user, action=audit_action, stream=job.stream, group=job.origin_group,
            result="refused", channel=channel,
            detail=f"redrive #{pk} is {job.state}: {action} applies to {', '.join(allowed)}",
        )  # fmt: skip
        return RedriveAnswer(
            409, f"Redrive #{pk} is {job.get_state_display()}; cannot {action} it.", job=job
        )
    new_ids = [c["new_id"] for c in job.canary_replays] if action in ("continue", "stop") else []
    audit_record(
        user=user, action=audit_action, stream=job.stream, group=job.origin_group,
        result="ok", channel=channel, new_ids=new_ids,
        detail=f"redrive #{pk}: {before} -> {target}",
        state_before={"job": pk, "state": before, "replayed": job.replayed},
    )  # fmt: skip
    return RedriveAnswer(200, f"Redrive #{pk}: {job.get_state_display()}.", job=job)
