"""Group administration's subcommands of ``manage.py ackboard``: create-group,
delete-group, reset-position and trim.

Owns their command lines (``SUBCOMMANDS``, rows of ``dashboard.management.table.Subcommand``,
appended to the command's own table) and the hint a dry run prints: what to run to act
as it showed. Each one runs as the named user through the buttons' own path: the
confirmed actions through ``dashboard.views.remote.action_answer`` (permission, form,
guard, service, audit row with the channel "cli"), the dry runs of reset-position and
trim through ``dashboard.views.admin_dry_runs.DRY_RUNS`` (nothing changed, nothing
audited but a denial). It parses and words; it never talks to Redis or SQL itself.

- ``create-group STREAM GROUP [--position start|end|ID|TIME]`` (default: end);
- ``delete-group STREAM GROUP [--acknowledge N --reason TEXT]``: refused while entries
  are pending unless N, the count you acknowledge, is still the count;
- ``reset-position STREAM GROUP POSITION``: a dry run; ``--yes --expected-before-id ID``
  (both printed by the dry run) resets;
- ``trim STREAM MINID``: a dry run; ``--yes`` trims, ``--force`` past the floor.
"""

from __future__ import annotations

from argparse import ArgumentParser

from django.contrib.auth.models import User

from dashboard.management.table import Options, Subcommand, single
from dashboard.views.admin_dry_runs import DRY_RUNS
from dashboard.views.remote import Answer, action_answer

POSITION_HELP = (
    "start, end, an id (1700000000000-0), a time in UTC (2026-12-01T10:00:00Z) or a time "
    "before now (-15m)"
)


def _reason(p: ArgumentParser) -> None:
    p.add_argument("--reason", default="", help="Audited.")


def _create_arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("group", help="The new group's name.")
    p.add_argument("--position", default="end", help=f"Where it starts: {POSITION_HELP}.")
    _reason(p)


def _create(user: User, options: Options) -> Answer:
    fields = {"name": options["group"], "position": options["position"]}
    return action_answer(
        user=user,
        action="create-group",
        stream=options["stream"],
        fields={**fields, "reason": options["reason"]},
        channel="cli",
    )


def _delete_arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("group")
    p.add_argument(
        "--acknowledge",
        default="",
        metavar="N",
        help="Drop its N pending entries (N as you saw it; needs --reason).",
    )
    _reason(p)


def _delete(user: User, options: Options) -> Answer:
    acknowledged = options["acknowledge"]
    fields = {
        # The typed name guards a click on the wrong page; here the command names it.
        "confirm_name": options["group"],
        "expected_pending": acknowledged or "0",
        "acknowledge": "1" if acknowledged else "",
        "reason": options["reason"],
    }
    return action_answer(
        user=user,
        action="delete-group",
        stream=options["stream"],
        group=options["group"],
        fields=fields,
        channel="cli",
    )


def _reset_arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("group")
    p.add_argument("position", help=POSITION_HELP)
    p.add_argument("--yes", action="store_true", help="Reset, as the dry run showed it.")
    p.add_argument(
        "--expected-before-id", default="", help="The position before the dry run printed."
    )
    _reason(p)


def _reset(user: User, options: Options) -> Answer:
    stream, group = options["stream"], options["group"]
    fields = {"position": options["position"], "reason": options["reason"]}
    if not options["yes"]:
        status, payload = DRY_RUNS["reset-position"](
            user=user, stream=stream, group=group, fields=fields, channel="cli"
        )
        if status == 200:
            payload["message"] += (
                f" To act, run: reset-position {stream} {group} {payload['position']} --yes "
                f"--expected-before-id {payload['expected_before_id']}"
            )
        return Answer(status, payload)
    fields.update(confirm="1", expected_before_id=options["expected_before_id"])
    answer = action_answer(
        user=user,
        action="reset-position",
        stream=stream,
        group=group,
        fields=fields,
        channel="cli",
    )
    return answer


def _trim_arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("minid", help="Delete entries older than this id, or this time in UTC.")
    p.add_argument("--yes", action="store_true", help="Trim, as the dry run showed it.")
    p.add_argument(
        "--force", action="store_true", help="Even past the floor (entries a group needs)."
    )
    _reason(p)


def _trim(user: User, options: Options) -> Answer:
    stream = options["stream"]
    fields = {"minid": options["minid"], "reason": options["reason"]}
    if not options["yes"]:
        status, payload = DRY_RUNS["trim"](
            user=user, stream=stream, group="", fields=fields, channel="cli"
        )
        if status == 200:
            force = " --force" if payload["past_floor"] else ""
            payload["message"] += f" To act, run: trim {stream} {payload['minid']} --yes{force}"
        return Answer(status, payload)
    fields["confirm"] = "1"
    if options["force"]:
        # As for delete-group: the command names the stream, so it is the typed name.
        fields.update(force="1", confirm_name=stream)
    return action_answer(user=user, action="trim", stream=stream, fields=fields, channel="cli")


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("create-group", "create a consumer group", _create_arguments, single(_create)),
    Subcommand(
        "delete-group",
        "delete a consumer group (refused while entries are pending unless acknowledged)",
        _delete_arguments,
        single(_delete),
    ),
    Subcommand(
        "reset-position",
        "reset a group's position (dry run unless --yes)",
        _reset_arguments,
        single(_reset),
    ),
    Subcommand(
        "trim", "trim a stream to MINID (dry run unless --yes)", _trim_arguments, single(_trim)
    ),
)
