"""Fleet control: Pause, Resume, Retire, Retire idle consumers.

Owns four rows of the action table (``ROWS``, merged into
``dashboard.views.actions.ACTIONS``), each one service call of ``queue_core.control``
(pause, resume) or ``queue_core.admin`` (retire, retire-idle) with what it answers, and
the dry run of Retire idle consumers (``idle_dry_run``, its page at
``dashboard:idle-consumers``, one of ``PATTERNS``, and its answer for a terminal or a
script, the row's ``remote_dry_run``). The buttons, ``manage.py ackboard``
and the JSON API all run them through the same runner (permission, form, guard, call,
audit row, answer):

- **pause** (``dashboard.pause_group``): a reason, and an optional auto-resume (minutes
  from now, or a UTC time); its state before is the pause it replaces;
- **resume** (``dashboard.pause_group``): removes the pause (409 when it was not paused);
- **retire** (``dashboard.retire_consumer``): hands one consumer's pending entries to
  another consumer ("move") or makes them due for reclaim ("reclaim"), then deletes it;
  refused (409, with the service's reason) while it has a live heartbeat, or when it
  still holds entries;
- **retire-idle** (``dashboard.retire_consumer``): deletes the consumers its dry run
  listed that are still idle, hold nothing and have no live heartbeat; the audit row
  names those retired and those kept.

It never writes to Redis itself (the services do) and never renders a page but the dry
run's. Costs: a pause or resume reads the pause before (one GET) then writes it (one
SET or GETDEL, one PUBLISH); a retire is the group header read (one round trip) plus the
retire script's runs; the dry run is XINFO CONSUMERS and one HGETALL.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import URLPattern, URLResolver, path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from dashboard.access.permissions import may_act
from dashboard.display.durations import human_ms
from dashboard.insight.fleet import pause_state, utc_text
from dashboard.runtime.connection import get_redis
from dashboard.views.action_cli import GROUP, STREAM, Arg, Cli, Options, option, reason, yes
from dashboard.views.action_runner import (
    ActionResult,
    BadRequest,
    check_group,
    check_stream,
    form_data,
)
from dashboard.views.action_table import Action, Call, Remote
from dashboard.views.answer import Answer, refusal
from dashboard.views.forms import (
    IdleDryRunForm,
    PauseForm,
    ResumeForm,
    RetireForm,
    RetireIdleForm,
    Target,
)
from dashboard.views.htmx import HtmxHttpRequest
from queue_core import admin, clock, control
from queue_core.connection import Client
from queue_core.types import ActionRefused, ConsumerInfo

#: Names listed at most in one answer's message (the audit row's state has them all).
NAMES_IN_MESSAGE = 20


def _plural(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_IN_MESSAGE])
    more = len(names) - NAMES_IN_MESSAGE
    return shown + (f" and {more} more" if more > 0 else "")


# --- pause and resume ---------------------------------------------------------------------


def _pause_before(call: Call) -> dict[str, Any]:
    """The pause in force before (one GET), for the audit row."""
    pause = control.pause_read(
        client=call.client, stream=call.req.stream, group=call.req.group, now_ms=clock.now_ms()
    )
    return pause_state(pause)


def _pause(call: Call) -> ActionResult:
    now = clock.now_ms()
    minutes = call.data["resume_minutes"]
    until: int | None = call.data["resume_at"]
    if minutes is not None:
        until = now + minutes * 60_000
    elif until is not None and until <= now:
        raise ValueError(f"resume_at ({utc_text(until)}) has passed: give a time to come")
    pause = control.pause_set(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        by=call.operator,
        reason=call.data["reason"],
        until_ms=until,
        now_ms=now,
    )
    message = (
        f"Paused {call.req.group}: its Ackboard workers stop reading within a second and "
        "finish what they hold; the group page shows each one's confirmation."
    )
    if pause.until_ms is not None:
        message += f" It resumes by itself at {utc_text(pause.until_ms)}."
    return ActionResult(
        "ok", message, reported={"pause_at_ms": pause.at_ms, "pause_until_ms": pause.until_ms}
    )


def _resume(call: Call) -> ActionResult:
    removed = control.pause_clear(client=call.client, stream=call.req.stream, group=call.req.group)
    if removed is None:
        return ActionResult(
            "refused", f"{call.req.group} is not paused. Nothing was changed.", status=409
        )
    return ActionResult(
        "ok",
        f"Resumed {call.req.group} (paused by {removed.by}: {removed.reason}). Its workers "
        "start reading again within a second.",
    )


# --- retire -------------------------------------------------------------------------------


def _retire(call: Call) -> ActionResult:
    to = call.data["to"] or None
    retired = admin.consumer_retire(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        consumer=call.consumer,
        to_consumer=to,
        now_ms=clock.now_ms(),
    )
    reported = {"moved": retired.moved, "to": retired.to, "deleted": retired.deleted}
    if retired.refused is not None:
        message = retired.message or f"{call.consumer} was not retired ({retired.refused})."
        if retired.moved:
            message += f" ({_plural(retired.moved, 'entry', 'entries')} were moved first.)"
        reported["refused"] = retired.refused
        return ActionResult("refused", message, status=409, reported=reported)
    moved = _plural(retired.moved, "pending entry", "pending entries")
    if to is None:
        how = (
            f"made its {moved} due for reclaim (held by {admin.PARKING_CONSUMER} until a "
            "worker's next sweep)"
        )
    else:
        how = f"handed its {moved} to {to}"
    return ActionResult(
        "ok", f"Retired consumer {call.consumer}: {how}, and deleted it.", reported=reported
    )


def idle_dry_run(*, client: Client, stream: str, group: str, idle_ms: int) -> list[ConsumerInfo]:
    """The consumers Retire idle would retire now: idle at least ``idle_ms``, holding
    nothing, no live heartbeat (``admin.idle_consumers_find``: XINFO CONSUMERS and one
    HGETALL). Changes nothing and is not audited."""
    return admin.idle_consumers_find(
        client=client, stream=stream, group=group, idle_ms=idle_ms, now_ms=clock.now_ms()
    )


def _retire_idle(call: Call) -> ActionResult:
    names: list[str] = call.data["names"]
    idle_ms = call.data["idle"]
    deleted = admin.idle_consumers_retire(
        client=call.client,
        stream=call.req.stream,
        group=call.req.group,
        names=names,
        idle_ms=idle_ms,
        now_ms=clock.now_ms(),
    )
    gone = set(deleted)
    kept = [n for n in names if n not in gone]
    reported = {"retired": deleted, "kept": kept, "idle_ms": idle_ms}
    if not deleted:
        return ActionResult(
            "refused",
            f"None of the {_plural(len(names), 'consumer')} could be retired: each read again, "
            "holds entries or has a live heartbeat since the dry run. Nothing was changed.",
            status=409,
            reported=reported,
        )
    message = f"Retired {_plural(len(deleted), 'idle consumer')}: {_names(deleted)}."
    if kept:
        message += f" Kept {len(kept)} that changed since the dry run: {_names(kept)}."
    return ActionResult("ok", message, reported=reported)


def _retire_idle_dry_run(remote: Remote) -> Answer:
    """For a terminal or a script: which consumers Retire idle would retire now (XINFO
    CONSUMERS and one HGETALL); the confirmation must name them (``names``). Changes
    nothing, audits nothing."""
    stream, group, fields = remote.stream, remote.group, remote.fields
    form = IdleDryRunForm(dict(fields), target=Target(stream=stream, group=group))
    try:
        check_stream(stream)
        check_group(group)
        form.is_valid()
        idle_ms = form_data(form)["idle"]
        found = idle_dry_run(client=get_redis(), stream=stream, group=group, idle_ms=idle_ms)
    except BadRequest as exc:
        return refusal(exc.status, str(exc))
    except ActionRefused as exc:  # no such group
        return refusal(404, str(exc))
    names = [c.name for c in found]
    whose = f"{len(names)} consumer{'' if len(names) == 1 else 's'} of {group}"
    message = (
        f"Dry run: {whose} idle at least {human_ms(idle_ms)}, holding nothing, without a live "
        f"heartbeat{': ' + ', '.join(names) if names else ''}. Nothing was changed."
    )
    payload = {
        "ok": True,
        "dry_run": True,
        "action": "retire-idle",
        "stream": stream,
        "group": group,
        "idle": str(fields.get("idle", "")).strip(),
        "idle_ms_at_least": idle_ms,
        "count": len(names),
        "names": names,
        "idle_ms": {c.name: c.idle_ms for c in found},
        "message": message,
    }
    return Answer(200, payload)


def _retire_idle_hint(payload: Mapping[str, Any], options: Options) -> str:
    if not payload["names"]:
        return ""
    names = " ".join(shlex.quote(n) for n in payload["names"])
    return f" To act, run again with --yes --idle {shlex.quote(payload['idle'])} --names {names}."


_PAUSE_CLI = Cli(
    "pause a consumer group (reason required)",
    (
        STREAM,
        GROUP,
        reason("Why (required; workers and pages show it)."),
        option("--resume-minutes", "Resume by itself after N minutes.", exclusive="optional"),
        option("--resume-at", "Resume by itself at this UTC time.", exclusive="optional"),
    ),
)
_RETIRE_CLI = Cli(
    "retire a consumer (--to CONSUMER or --reclaim)",
    (
        STREAM,
        GROUP,
        Arg(("consumer",), target="consumer"),
        option("--to", "Hand its pending entries to this consumer.", exclusive="required"),
        Arg(
            ("--reclaim",),
            {"action": "store_true", "help": "Make its pending entries due for reclaim."},
            fields=lambda on: {"mode": "reclaim" if on else "move"},
            exclusive="required",
        ),
        reason(),
    ),
)
_RETIRE_IDLE_CLI = Cli(
    "retire idle consumers that hold nothing (dry run unless --yes)",
    (
        STREAM,
        GROUP,
        Arg(
            ("--idle",),
            {"required": True, "help": "Idle at least this long: 90s, 30m, 2h, 1d."},
            field="idle",
        ),
        yes("Retire the consumers named by --names."),
        Arg(
            ("--names",),
            {"nargs": "+", "default": [], "metavar": "CONSUMER", "help": "As the dry run printed."},
            fields=lambda names: {"names": list(names)},
        ),
        reason(),
    ),
    hint=_retire_idle_hint,
)

#: The fleet controls share one permission per kind of power: pausing a group, retiring
#: consumers.
ROWS: tuple[Action, ...] = (
    Action(
        "pause", "group", PauseForm, _pause, before=_pause_before,
        permission="dashboard.pause_group",
        explain=(
            "Pause makes every Ackboard worker of {group} stop reading and sweeping within a "
            "second; each finishes what it holds and confirms in its heartbeat. Consumers that "
            "are not Ackboard workers cannot be paused. New entries wait in the stream."
        ),
        cli=_PAUSE_CLI,
    ),
    Action(
        "resume", "group", ResumeForm, _resume, before=_pause_before,
        permission="dashboard.pause_group",
        explain="Resume lets the workers of {group} read again within a second.",
        cli=Cli("resume a paused consumer group", (STREAM, GROUP, reason())),
    ),
    Action(
        "retire", "consumer", RetireForm, _retire,
        permission="dashboard.retire_consumer",
        explain=(
            "Retire hands the consumer's pending entries to another consumer (they keep their "
            "idle time) or makes them due for the workers' next reclaim sweep, then deletes the "
            "consumer. A consumer with a live heartbeat, or one that still holds entries, is "
            "never deleted."
        ),
        cli=_RETIRE_CLI,
    ),
    Action(
        "retire-idle", "group", RetireIdleForm, _retire_idle,
        permission="dashboard.retire_consumer",
        explain=(
            "Retire idle consumers deletes consumers of {group} idle at least that long that "
            "hold nothing and have no live heartbeat, each checked again as it is deleted."
        ),
        cli=_RETIRE_IDLE_CLI,
        remote_dry_run=_retire_idle_dry_run,
    ),
)  # fmt: skip


# --- the dry run's page -------------------------------------------------------------------


@require_GET
@never_cache
@login_required
def idle_consumers(request: HtmxHttpRequest, stream: str, group: str) -> HttpResponse:
    """The dry run of Retire idle consumers (``?idle=30m``): the consumers it would
    retire, and the form that retires exactly those. For htmx, only that part (it lands
    in the dialog); without JavaScript, a page of its own. Needs the permission to act."""
    if not may_act(request.user, "retire-idle", stream):
        raise PermissionDenied("You do not have permission to retire-idle.")
    context: dict[str, Any] = {"stream": stream, "group": group}
    status = 200
    try:
        check_stream(stream)
        check_group(group)
        form = IdleDryRunForm(request.GET, target=Target(stream=stream, group=group))
        form.is_valid()
        idle_ms = form_data(form)["idle"]
        found = idle_dry_run(client=get_redis(), stream=stream, group=group, idle_ms=idle_ms)
        context.update(idle=request.GET.get("idle", "").strip(), idle_ms=idle_ms, found=found)
    except BadRequest as exc:
        context["problem"] = str(exc)
        status = exc.status
    except ActionRefused as exc:  # no such group (XINFO CONSUMERS: NOGROUP)
        context["problem"] = str(exc)
        status = 404
    template = "dashboard/_retire_idle.html"
    if not request.htmx:
        template = "dashboard/retire_idle.html"
    return render(request, template, context, status=status)


def _patterns() -> list[URLPattern | URLResolver]:
    return [
        path(
            "streams/<name:stream>/groups/<name:group>/idle-consumers/",
            idle_consumers,
            name="idle-consumers",
        ),
    ]


def __getattr__(name: str) -> list[URLPattern | URLResolver]:
    """``PATTERNS``, this module's routes, built when ``dashboard/urls.py`` reads them:
    ``path()`` checks its converters when built, and ``urls.py`` registers ``name``
    after importing the views (which import this module)."""
    if name == "PATTERNS":
        return _patterns()
    raise AttributeError(name)
