"""``manage.py ackboard <action> … --user NAME``: every operator action from a terminal.

Retry, claim, dead-letter, acknowledge, replay, delete, purge, bulk, pause, resume,
retire and retire-idle (and group administration's) run as the named user, through
``dashboard.views.remote`` into the buttons' own runner: that user's permissions are
checked exactly as a button's POST is, the same guards and services run, and the audit
row names the user with the channel "cli". So an on-call engineer can script a fix and
it is still audited under their name. ``token issue|revoke|list``
manages API tokens (``dashboard.access.api_tokens``).

Each subcommand is a row of ``subcommands()`` (``dashboard.management.table.Subcommand``: its
word, help, arguments and steps). An action's row is derived from its declaration
(``Action.cli``: its arguments and the form fields they post,
``dashboard.management.table.action_subcommand``), so a new action's subcommand is part
of its declaration; bulk's and redrive's rows are their own.

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
from typing import Any

import redis
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from dashboard.access.api_tokens import token_issue, token_revoke
from dashboard.management import edit_replay as edit_replay_cli
from dashboard.management import produce as produce_cli
from dashboard.management import redrive as redrive_cli
from dashboard.management.table import Options, Step, Subcommand, action_subcommand, single
from dashboard.models import ApiToken
from dashboard.runtime.middleware import redis_problem
from dashboard.views.actions import ACTIONS
from dashboard.views.bulk import BULK_ACTIONS
from dashboard.views.remote import Answer, bulk_answer, refusal
from queue_core.errors import invalid_id

#: The exit status for each answer's HTTP status.
EXIT = {200: 0, 409: 1, 400: 2, 401: 3, 403: 3, 404: 4, 503: 5}
DATABASE_EXIT = 6


def _exit(answer: Answer) -> int:
    return EXIT.get(answer.status, 1)


# --- the subcommands --------------------------------------------------------------------


# Bulk stays one subcommand with a handler of its own, not a row per action: its action is
# an argument (one of bulk's own table, ``BULK_ACTIONS``) and its arguments are the bulk
# scope's (ids or a filter, snapshot, cursor), the same for every bulk action.
def _bulk_arguments(p: ArgumentParser) -> None:
    p.add_argument("action", choices=tuple(BULK_ACTIONS))
    p.add_argument("stream")
    p.add_argument("group")
    p.add_argument("--ids", nargs="+", default=None, metavar="ID", help="These entries.")
    p.add_argument("--consumer", default="", help="Filter: this consumer's entries.")
    p.add_argument("--min-idle-ms", default="", help="Filter: idle at least this long.")
    p.add_argument(
        "--fingerprint",
        default="",
        help="Filter: entries whose last failure has this cause (16 hex digits, as the "
        "Failures page's by-cause view shows).",
    )
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
            scope="filter",
            consumer=options["consumer"],
            min_idle_ms=options["min_idle_ms"],
            fingerprint=options["fingerprint"],
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
    scope = _filter_flags(options)
    if answer.ok and payload.get("dry_run") and payload["count"]:
        payload["message"] += (
            f" To act, run again with{scope} --yes --snapshot-id {payload['snapshot_id']}."
        )
    elif answer.ok and payload.get("dry_run") is False and not payload["complete"]:
        payload["message"] += (
            f" Continue with{scope} --continue {payload['next_cursor']} --snapshot-id "
            f"{payload['snapshot_id']} --done-before {payload['done_total']} "
            f"--skipped-before {payload['skipped_total']}."
        )
    return answer


def _filter_flags(options: Options) -> str:
    """The filter the command was given, repeated in its hints: the next step must name
    the same scope (" --consumer w1 --fingerprint 3f…", or "")."""
    if options["ids"] is not None:
        return ""
    given = [
        f" --{flag} {shlex.quote(str(options[dest]))}"
        for flag, dest in (
            ("consumer", "consumer"),
            ("min-idle-ms", "min_idle_ms"),
            ("fingerprint", "fingerprint"),
        )
        if options[dest]
    ]
    return "".join(given)


#: The kinds whose subcommands come before bulk's in the help.
_BEFORE_BULK = ("pending", "dead-letter", "dead-letters")
_BULK = Subcommand(
    "bulk", "many pending entries (dry run unless --yes)", _bulk_arguments, single(_bulk)
)


def subcommands() -> tuple[Subcommand, ...]:
    """Every subcommand but ``token``: the actions on entries and dead letters, bulk, the
    other actions (the fleet's and group administration's), then redrive's. The actions'
    own are derived from their declarations (``Action.cli``), from the table as it is."""
    rows = [action_subcommand(row) for row in ACTIONS.values() if row.cli is not None]
    return (
        *(sub for sub in rows if ACTIONS[sub.name].on in _BEFORE_BULK),
        *edit_replay_cli.SUBCOMMANDS,  # edit & replay a dead letter
        _BULK,
        *(sub for sub in rows if ACTIONS[sub.name].on not in _BEFORE_BULK),
        *produce_cli.SUBCOMMANDS,  # produce an entry (duplicate is a row's)
        *redrive_cli.SUBCOMMANDS,  # redrive dead letters
    )


class Command(BaseCommand):
    @property
    def help(self) -> str:  # type: ignore[override]
        """The subcommands of the table as it is."""
        return (
            "Run an operator action as a named user (audited under their name): "
            + ", ".join(row.name for row in subcommands())
            + "; or manage API tokens."
        )

    def add_arguments(self, parser: ArgumentParser) -> None:
        common = ArgumentParser(add_help=False)
        common.add_argument("--user", required=True, help="Act as this user (required).")
        common.add_argument("--json", action="store_true", help="One JSON object per line.")
        sub = parser.add_subparsers(dest="command", required=True, metavar="ACTION")
        for row in subcommands():
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
        row = next(row for row in subcommands() if row.name == options["command"])
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
