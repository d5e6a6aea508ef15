"""The subcommand table of ``manage.py ackboard``: one row per subcommand.

Owns ``Subcommand`` (its word, its help, its arguments and what it runs), ``Options``,
and ``action_subcommand``, which derives an action's row from its declaration
(``Action.cli``, ``dashboard.views.action_cli``): the arguments it adds, the form fields
they post, one answer per id given, the dry run unless ``--yes`` and the hint it prints.
A row's ``steps`` turns the parsed command line into one thunk per answer, each calling
``dashboard.views.remote`` as the JSON API does; the command
(``dashboard/management/commands/ackboard.py``) runs each, turns a Redis failure into
an answer, and prints one line per answer with its exit status. Every subcommand gets
``--user`` (required) and ``--json`` from the command.

It lives apart from the command so that the modules adding rows (``dashboard.redrive.cli``)
import it without importing the command. It never talks to Redis or SQL itself.
"""

from __future__ import annotations

from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.contrib.auth.models import User

from dashboard.views.action_cli import Cli
from dashboard.views.action_table import Action
from dashboard.views.remote import Answer, action_answer

#: The parsed command line (argparse's dest names: ``--resume-minutes`` is "resume_minutes").
Options = dict[str, Any]
#: One answer to compute: the command catches a Redis error it raises.
Step = Callable[[], Answer]


@dataclass(frozen=True)
class Subcommand:
    """One subcommand of ``manage.py ackboard``."""

    name: str
    help: str
    #: Adds its positional arguments and options (not ``--user``/``--json``).
    arguments: Callable[[ArgumentParser], None]
    #: What it runs as ``user``: one step per answer.
    steps: Callable[[User, Options], list[Step]]


def single(run: Callable[[User, Options], Answer]) -> Callable[[User, Options], list[Step]]:
    """``steps`` for a subcommand that answers once."""

    def steps(user: User, options: Options) -> list[Step]:
        return [lambda: run(user, options)]

    return steps


def _arguments(cli: Cli) -> Callable[[ArgumentParser], None]:
    def add(p: ArgumentParser) -> None:
        groups: dict[str, Any] = {}
        for arg in cli.args:
            into: Any = p
            if arg.exclusive:
                if arg.exclusive not in groups:
                    required = arg.exclusive == "required"
                    groups[arg.exclusive] = p.add_mutually_exclusive_group(required=required)
                into = groups[arg.exclusive]
            into.add_argument(*arg.flags, **arg.kwargs)

    return add


def _answer(row: Action, cli: Cli, user: User, options: Options, target_id: str) -> Answer:
    """One answer: the fields the arguments post, then the action, or its dry run
    (without ``--yes``: ``--yes`` posts ``confirm``)."""
    confirmed = bool(options.get("yes"))
    targets = {arg.target: options[arg.dest] for arg in cli.args if arg.target}
    fields: dict[str, Any] = {}
    for arg in cli.args:
        if not arg.target and (confirmed or not arg.on_yes):
            fields.update(arg.posts(options[arg.dest]))
    if cli.typed_name:
        fields["confirm_name"] = targets[cli.typed_name]
    answer = action_answer(
        user=user,
        action=row.name,
        stream=targets["stream"],
        group=targets.get("group", ""),
        target_id=target_id,
        fields=fields,
        channel="cli",
    )
    if cli.hint is not None and answer.ok and answer.payload.get("dry_run"):
        answer.payload["message"] += cli.hint(answer.payload, options)
    return answer


def action_subcommand(row: Action) -> Subcommand:
    """The subcommand of an action that has one (``row.cli``): one answer per id given
    (an entry's or a dead letter's), else one."""
    cli = row.cli
    assert cli is not None, row.name

    aims = {arg.target: arg.dest for arg in cli.args if arg.target}

    def steps(user: User, options: Options) -> list[Step]:
        if "id" in aims:
            return [partial(_answer, row, cli, user, options, i) for i in options[aims["id"]]]
        consumer = options[aims["consumer"]] if "consumer" in aims else ""
        return [partial(_answer, row, cli, user, options, consumer)]

    return Subcommand(row.name, cli.help, _arguments(cli), steps)
