"""Produce's subcommand of ``manage.py ackboard`` (a row of ``SUBCOMMANDS``).

``produce STREAM [--set NAME=TEXT]… [--set-json NAME=JSON]… [--create] [--yes]
[--reason TEXT]``: without ``--yes``, the dry run (the fields parsed and checked, the
stream checked, nothing changed); with it, the entry added as the Produce page's
confirm does (``dashboard.views.produce``: the same rows, rules, permission, 400s and
audit row, channel "cli"). ``duplicate`` needs no code here: its row declares its
subcommand. It parses and words only.
"""

from __future__ import annotations

from argparse import ArgumentParser

from django.contrib.auth.models import User

from dashboard.management.edit_replay import pair
from dashboard.management.table import Options, Subcommand, single
from dashboard.views.edit_replay import FieldChanges
from dashboard.views.produce import produce_rows
from dashboard.views.remote import Answer, action_answer


def _arguments(p: ArgumentParser) -> None:
    p.add_argument("stream")
    p.add_argument("--set", type=pair, action="append", default=[], metavar="NAME=TEXT",
                   help="A field of this text.")  # fmt: skip
    p.add_argument("--set-json", type=pair, action="append", default=[], metavar="NAME=JSON",
                   help="A field of this JSON document (checked, stored compact).")  # fmt: skip
    p.add_argument("--create", action="store_true",
                   help="Create the stream if it does not exist (refused otherwise).")  # fmt: skip
    p.add_argument("--yes", action="store_true", help="Add it, as the dry run showed it.")
    p.add_argument("--reason", default="", help="Audited (optional).")


def _produce(user: User, options: Options) -> Answer:
    changes = FieldChanges(set=dict(options["set"]), set_json=dict(options["set_json"]), drop=())
    fields: dict[str, str | list[str]] = {
        **produce_rows(changes),
        "reason": options["reason"],
        "create": "1" if options["create"] else "",
        "confirm": "1" if options["yes"] else "",
    }
    answer = action_answer(
        user=user, action="produce", stream=options["stream"], fields=fields, channel="cli"
    )
    if answer.ok and answer.payload.get("dry_run"):
        answer.payload["message"] += " To add it, run again with --yes."
    return answer


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "produce",
        "add an entry to a stream (dry run unless --yes; a missing stream needs --create)",
        _arguments,
        single(_produce),
    ),
)
