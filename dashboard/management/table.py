"""The subcommand table of ``manage.py ackboard``: one row per subcommand.

Owns ``Subcommand`` (its word, its help, its arguments and what it runs) and ``Options``.
A row's ``steps`` turns the parsed command line into one thunk per answer (one per id
for the entry actions), each calling ``dashboard.views.remote`` as the JSON API does;
the command (``dashboard/management/commands/ackboard.py``) runs each, turns a Redis
failure into an answer, and prints one line per answer with its exit status. Every
subcommand gets ``--user`` (required) and ``--json`` from the command.

It lives apart from the command so that the modules adding rows
(``dashboard.management.group_admin`` for group administration) import it without importing the
command. It never talks to Redis or SQL itself.
"""

from __future__ import annotations

from argparse import ArgumentParser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User

from dashboard.views.remote import Answer

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
