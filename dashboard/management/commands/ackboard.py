"""``manage.py ackboard <action> … --user NAME``: every operator action from a terminal.

Retry, claim, dead-letter, acknowledge, replay, delete, purge, bulk, pause, resume,
retire and retire-idle (and group administration's) run as the named user, through
``dashboard.views.remote`` into the buttons' own runner: that user's permissions are
checked exactly as a button's POST is, the same guards and services run, and the audit
row names the user with the channel "cli". So an on-call engineer can script a fix and
it is still audited under their name. ``token issue|revoke|list``
manages API tokens (``dashboard.access.api_tokens``).

Each subcommand is a row of ``SUBCOMMANDS`` (``dashboard.management.table.Subcommand``: its
word, help, arguments and steps); group administration's rows come from
``dashboard.management.group_admin``. A new action's subcommand is one row.

Output is one line per result (``--json``: one JSON object per line). Exit status:
0 done (or a dry run), 1 refused or changed since (409), 2 bad input (400), 3 unknown
or inactive user, or no permission (403), 4 unknown stream, group or entry (404),
5 Redis unavailable (503), 6 database error. Errors are one line, never a traceback.
This module parses and prints; it never talks to Redis or writes audit rows itself.
"""

from __future__ import annotations

import json
import shlex
from argparse import ArgumentParser
from collections.abc import Callable
from functools import partial
from typing import Any

import redis
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from dashboard.access.api_tokens import token_issue, token_revoke
from dashboard.management import group_admin as admin_cli
from dashboard.management import redrive as redrive_cli
from dashboard.management.table import Options, Step, Subcommand, single
from dashboard.models import ApiToken
from dashboard.runtime.middleware import redis_problem
from dashboard.views.remote import Answer, action_answer, bulk_answer, refusal
from queue_core.errors import invalid_id

#: The exit status for each answer's HTTP status.
EXIT = {200: 0, 409: 1, 400: 2, 401: 3, 403: 3, 404: 4, 503: 5}
DATABASE_EXIT = 6

#: Actions on pending entries: STREAM GROUP ID [ID …].
ENTRY_ACTIONS = ("retry", "claim", "dead-letter", "acknowledge")
#: Actions on dead-lettered entries: STREAM DLQ_ID [DLQ_ID …].
DEAD_LETTER_ACTIONS = ("replay", "delete")
BULK_ACTIONS = ("retry", "dead-letter", "acknowledge")


def _exit(answer: Answer) -> int:
    return EXIT.get(answer.status, 1)


# --- the subcommands --------------------------------------------------------------------


def _entry_arguments(name: str) -> Callable[[ArgumentParser], None]:
    def add(p: ArgumentParser) -> None:
        p.add_argument("stream")
        p.add_argument("group")
        p.add_argument("ids", nargs="+", metavar="ID")
        p.add_argument("--reason", default="", help="Audited; required to acknowledge.")
        if name == "claim":
            p.add_argument("--consumer", default="", help="The new owner.")
            p.add_argument("--seen-idle-ms", default="", help="Guard (default: now).")
            p.add_argument("--seen-deliveries", default="")
        if name in ("claim", "dead-letter"):
            p.add_argument("--seen-consumer", default="", help="The owner you expect.")

    return add


def _dead_letter_arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("ids", nargs="+", metavar="DLQ_ID")


def _per_id(name: str) -> Callable[[User, Options], list[Step]]:
    """One answer per id given (an entry's or a dead letter's)."""

    def one(user: User, options: Options, target_id: str) -> Answer:
        fields = {"reason": options.get("reason", "")}
        for key in ("consumer", "seen_idle_ms", "seen_deliveries", "seen_consumer"):
            if options.get(key):
                fields[key] = options[key]
        return action_answer(
            user=user,
            action=name,
            stream=options["stream"],
            group=options.get("group", ""),
            target_id=target_id,
            fields=fields,
            channel="cli",
        )

    def steps(user: User, options: Options) -> list[Step]:
        return [partial(one, user, options, target) for target in options["ids"]]

    return steps


def _purge_arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("--yes", action="store_true", help="Purge, as the dry run showed it.")
    p.add_argument("--expected-length", default="", help="The length the dry run printed.")
    p.add_argument("--newest-id", default="", help="The newest id the dry run printed.")


def _purge(user: User, options: Options) -> Answer:
    fields = {"confirm": "1" if options["yes"] else ""}
    fields["expected_length"] = options["expected_length"]
    fields["newest_id"] = options["newest_id"]
    answer = action_answer(
        user=user, action="purge", stream=options["stream"], fields=fields, channel="cli"
    )
    if answer.ok and answer.payload.get("dry_run"):
        payload = answer.payload
        hint = f" To act, run again with --yes --expected-length {payload['expected_length']}"
        if payload["newest_id"]:
            hint += f" --newest-id {payload['newest_id']}"
        payload["message"] += hint + "."
    return answer


def _bulk_arguments(p: ArgumentParser) -> None:
    p.add_argument("action", choices=BULK_ACTIONS)
    p.add_argument("stream")
    p.add_argument("group")
    p.add_argument("--ids", nargs="+", default=None, metavar="ID", help="These entries.")
    p.add_argument("--consumer", default="", help="Filter: this consumer's entries.")
    p.add_argument("--min-idle-ms", default="", help="Filter: idle at least this long.")
    p.add_argument("--snapshot-id", default="", help="The snapshot the dry run printed.")
    p.add_argument("--yes", action="store_true", help="Act on the first capped step.")
    p.add_argument("--continue", dest="cursor", default="", help="Act from this cursor.")
    p.add_argument("--done-before", default="", help="Progress so far (for the totals).")
    p.add_argument("--skipped-before", default="")
    p.add_argument("--reason", default="", help="Audited; required to acknowledge.")


def _bulk(user: User, options: Options) -> Answer:
    fields: dict[str, str | list[str]] = {
        "snapshot_id": options["snapshot_id"],
        "reason": options["reason"],
        "confirm": "1" if options["yes"] or options["cursor"] else "",
        "cursor": options["cursor"],
        "done_before": options["done_before"],
        "skipped_before": options["skipped_before"],
    }
    if options["ids"] is not None:
        fields["ids"] = list(options["ids"])
    else:
        fields.update(
            scope="filter", consumer=options["consumer"], min_idle_ms=options["min_idle_ms"]
        )
    answer = bulk_answer(
        user=user,
        action=options["action"],
        stream=options["stream"],
        group=options["group"],
        fields=fields,
        channel="cli",
    )
    payload = answer.payload
    if answer.ok and payload.get("dry_run") and payload["count"]:
        payload["message"] += (
            f" To act, run again with --yes --snapshot-id {payload['snapshot_id']}."
        )
    elif answer.ok and payload.get("dry_run") is False and not payload["complete"]:
        payload["message"] += (
            f" Continue with --continue {payload['next_cursor']} --snapshot-id "
            f"{payload['snapshot_id']} --done-before {payload['done_total']} "
            f"--skipped-before {payload['skipped_total']}."
        )
    return answer


def _group_arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("group")


def _pause_arguments(p: ArgumentParser) -> None:
    _group_arguments(p)
    p.add_argument("--reason", default="", help="Why (required; workers and pages show it).")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--resume-minutes", default="", help="Resume by itself after N minutes.")
    when.add_argument("--resume-at", default="", help="Resume by itself at this UTC time.")


def _pause(user: User, options: Options) -> Answer:
    fields = {
        "reason": options["reason"],
        "resume_minutes": options["resume_minutes"],
        "resume_at": options["resume_at"],
    }
    return action_answer(
        user=user,
        action="pause",
        stream=options["stream"],
        group=options["group"],
        fields=fields,
        channel="cli",
    )


def _resume_arguments(p: ArgumentParser) -> None:
    _group_arguments(p)
    p.add_argument("--reason", default="", help="Audited (optional).")


def _resume(user: User, options: Options) -> Answer:
    return action_answer(
        user=user,
        action="resume",
        stream=options["stream"],
        group=options["group"],
        fields={"reason": options["reason"]},
        channel="cli",
    )


def _retire_arguments(p: ArgumentParser) -> None:
    _group_arguments(p)
    p.add_argument("consumer")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", default="", help="Hand its pending entries to this consumer.")
    where.add_argument(
        "--reclaim", action="store_true", help="Make its pending entries due for reclaim."
    )
    p.add_argument("--reason", default="", help="Audited (optional).")


def _retire(user: User, options: Options) -> Answer:
    fields = {
        "mode": "reclaim" if options["reclaim"] else "move",
        "to": options["to"],
        "reason": options["reason"],
    }
    return action_answer(
        user=user,
        action="retire",
        stream=options["stream"],
        group=options["group"],
        target_id=options["consumer"],
        fields=fields,
        channel="cli",
    )


def _retire_idle_arguments(p: ArgumentParser) -> None:
    _group_arguments(p)
    p.add_argument("--idle", required=True, help="Idle at least this long: 90s, 30m, 2h, 1d.")
    p.add_argument("--yes", action="store_true", help="Retire the consumers named by --names.")
    p.add_argument(
        "--names", nargs="+", default=[], metavar="CONSUMER", help="As the dry run printed."
    )
    p.add_argument("--reason", default="", help="Audited (optional).")


def _retire_idle(user: User, options: Options) -> Answer:
    fields: dict[str, str | list[str]] = {
        "idle": options["idle"],
        "confirm": "1" if options["yes"] else "",
        "names": list(options["names"]),
        "reason": options["reason"],
    }
    answer = action_answer(
        user=user,
        action="retire-idle",
        stream=options["stream"],
        group=options["group"],
        fields=fields,
        channel="cli",
    )
    payload = answer.payload
    if answer.ok and payload.get("dry_run") and payload["names"]:
        names = " ".join(shlex.quote(n) for n in payload["names"])
        payload["message"] += (
            f" To act, run again with --yes --idle {shlex.quote(payload['idle'])} --names {names}."
        )
    return answer


#: Every subcommand but ``token``: the entry and dead-letter actions, purge, bulk, then
#: the fleet's and group administration's (``dashboard.management.group_admin``).
SUBCOMMANDS: tuple[Subcommand, ...] = (
    *(
        Subcommand(name, f"{name} pending entries", _entry_arguments(name), _per_id(name))
        for name in ENTRY_ACTIONS
    ),
    *(
        Subcommand(name, f"{name} dead-lettered entries", _dead_letter_arguments, _per_id(name))
        for name in DEAD_LETTER_ACTIONS
    ),
    Subcommand(
        "purge",
        "empty a dead-letter stream (dry run unless --yes)",
        _purge_arguments,
        single(_purge),
    ),  # fmt: skip
    Subcommand(
        "bulk", "many pending entries (dry run unless --yes)", _bulk_arguments, single(_bulk)
    ),
    # Fleet control.
    Subcommand("pause", "pause a consumer group (reason required)", _pause_arguments,
               single(_pause)),
    Subcommand("resume", "resume a paused consumer group", _resume_arguments, single(_resume)),
    Subcommand(
        "retire", "retire a consumer (--to CONSUMER or --reclaim)", _retire_arguments,
        single(_retire),
    ),
    Subcommand(
        "retire-idle", "retire idle consumers that hold nothing (dry run unless --yes)",
        _retire_idle_arguments, single(_retire_idle),
    ),
    *admin_cli.SUBCOMMANDS,
    *redrive_cli.SUBCOMMANDS,  # redrive dead letters
)  # fmt: skip


class Command(BaseCommand):
    help = (
        "Run an operator action as a named user (audited under their name): "
        + ", ".join(row.name for row in SUBCOMMANDS)
        + "; or manage API tokens."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        common = ArgumentParser(add_help=False)
        common.add_argument("--user", required=True, help="Act as this user (required).")
        common.add_argument("--json", action="store_true", help="One JSON object per line.")
        sub = parser.add_subparsers(dest="command", required=True, metavar="ACTION")
        for row in SUBCOMMANDS:
            row.arguments(sub.add_parser(row.name, parents=[common], help=row.help))
        token = sub.add_parser("token", help="issue, revoke or list API tokens")
        verbs = token.add_subparsers(dest="verb", required=True, metavar="VERB")
        issue = verbs.add_parser("issue", help="issue a token (shown once)")
        issue.add_argument("--user", required=True)
        issue.add_argument("--name", required=True, help="What it is for.")
        issue.add_argument("--json", action="store_true")
        revoke = verbs.add_parser("revoke", help="revoke a token by its key id")
        revoke.add_argument("key_id")
        revoke.add_argument("--json", action="store_true")
        listing = verbs.add_parser("list", help="list tokens (never their secrets)")
        listing.add_argument("--user", default="")
        listing.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["command"] == "token":
                self._token(options)
            else:
                self._act(options)
        except DatabaseError as exc:
            raise CommandError(f"database error: {exc}", returncode=DATABASE_EXIT) from None

    # --- actions --------------------------------------------------------------------------

    def _act(self, options: dict[str, Any]) -> None:
        user = User.objects.filter(username=options["user"]).first()
        if user is None or not user.is_active:
            raise CommandError(f"no active user {options['user']!r}", returncode=3)
        row = next(row for row in SUBCOMMANDS if row.name == options["command"])
        answers = [self._call(step) for step in row.steps(user, options)]
        self._report(answers, as_json=options["json"])

    def _call(self, run: Step) -> Answer:
        """One answer, with Redis's failures as answers too (never a traceback)."""
        try:
            answer: Answer = run()
        except redis.ResponseError as exc:
            if invalid_id(exc):
                return refusal(400, f"Redis rejected an id in that request: {exc}")
            return refusal(503, redis_problem(exc))
        except redis.RedisError as exc:
            return refusal(503, redis_problem(exc))
        return answer

    def _report(self, answers: list[Answer], *, as_json: bool) -> None:
        """One line per answer; a failure ends the command with its exit status."""
        failed = [a for a in answers if not a.ok]
        for answer in answers:
            text = json.dumps(answer.payload, default=str) if as_json else answer.line
            if as_json or answer.ok or len(answers) > 1:
                (self.stdout if answer.ok or as_json else self.stderr).write(text)
        if not failed:
            return
        worst = max(failed, key=lambda a: (a.status != 409, a.status))
        if len(answers) == 1:
            raise CommandError(failed[0].line, returncode=_exit(failed[0]))
        raise CommandError(f"{len(failed)} of {len(answers)} not done", returncode=_exit(worst))

    # --- tokens ---------------------------------------------------------------------------

    def _token(self, options: dict[str, Any]) -> None:
        verb, as_json = options["verb"], options["json"]
        if verb == "issue":
            user = User.objects.filter(username=options["user"]).first()
            if user is None or not user.is_active:
                raise CommandError(f"no active user {options['user']!r}", returncode=3)
            row, token = token_issue(user=user, name=options["name"])
            line = (
                f"Token {row.key_id} ({row.name}) for {user.get_username()}: {token} "
                "(shown once: store it now)"
            )
            issued = {"key_id": row.key_id, "name": row.name, "user": user.get_username()}
            self._write({**issued, "token": token}, line, as_json)
        elif verb == "revoke":
            revoked = token_revoke(key_id=options["key_id"])
            if revoked is None:
                raise CommandError(f"no token {options['key_id']!r}", returncode=4)
            line = f"Token {revoked.key_id} ({revoked.name}) of {revoked.user} is revoked."
            self._write({"key_id": revoked.key_id, "revoked": True}, line, as_json)
        else:
            rows = ApiToken.objects.select_related("user")
            if options["user"]:
                rows = rows.filter(user__username=options["user"])
            for t in rows:
                state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "live"
                used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
                data: dict[str, Any] = {
                    "key_id": t.key_id,
                    "name": t.name,
                    "user": t.user.get_username(),
                    "created": t.created_at.isoformat(),
                    "last_used": t.last_used_at.isoformat() if t.last_used_at else None,
                    "revoked": t.revoked_at.isoformat() if t.revoked_at else None,
                }
                line = f"{t.key_id}  {t.user.get_username()}  {t.name!r}  used {used}  {state}"
                self._write(data, line, as_json)

    def _write(self, data: dict[str, Any], line: str, as_json: bool) -> None:
        self.stdout.write(json.dumps(data) if as_json else line)
