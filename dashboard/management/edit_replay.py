"""Edit & replay's subcommand of ``manage.py ackboard`` (a row of ``SUBCOMMANDS``).

``edit-replay STREAM DLQ_ID [--set NAME=TEXT]… [--set-json NAME=JSON]… [--drop NAME]…
[--force] [--reason TEXT]``: the dead letter's payload fields with those changes (every
other field kept, byte for byte) replayed for its origin group, as the editor's Replay
button does (``dashboard.views.edit_replay``: the same rules, permission, 400s and audit
row with the diff, channel "cli"). It parses and words only.
"""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError

from django.contrib.auth.models import User

from dashboard.management.table import Options, Subcommand, single
from dashboard.views.edit_replay import FieldChanges
from dashboard.views.remote import Answer, edit_replay_answer


def pair(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` as (name, value), for argparse (the value may hold "=")."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ArgumentTypeError(f"{text[:80]!r} is not NAME=VALUE")
    return name, value


def _arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("dlq_id", help="The dead letter's id (on the dead-letter page).")
    p.add_argument("--set", type=pair, action="append", default=[], metavar="NAME=TEXT",
                   help="Set (or add) a field to this text.")  # fmt: skip
    p.add_argument("--set-json", type=pair, action="append", default=[], metavar="NAME=JSON",
                   help="Set (or add) a field to this JSON document (checked).")  # fmt: skip
    p.add_argument("--drop", action="append", default=[], metavar="NAME",
                   help="Remove this field.")  # fmt: skip
    p.add_argument("--force", action="store_true",
                   help="Replay again while an earlier edit still awaits success.")  # fmt: skip
    p.add_argument("--reason", default="", help="Audited (optional).")


def _edit_replay(user: User, options: Options) -> Answer:
    changes = FieldChanges(
        set=dict(options["set"]), set_json=dict(options["set_json"]), drop=options["drop"]
    )
    fields = {"reason": options["reason"], "force": "1" if options["force"] else ""}
    return edit_replay_answer(user=user, stream=options["stream"], dlq_id=options["dlq_id"],
                              changes=changes, fields=fields, channel="cli")  # fmt: skip


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "edit-replay",
        "replay a dead letter with fields changed (kept until the new entry succeeds)",
        _arguments,
        single(_edit_replay),
    ),
)
