"""How an action's declaration puts it on the command line (``manage.py ackboard``).

Owns ``Cli``, a row's subcommand (its help, its arguments, the hint a dry run prints),
``Arg``, one argument and the form field it fills, and the arguments several rows share.
``dashboard.management.table.action_subcommand`` turns a row's ``Cli`` into the parser
and the fields it posts, through ``dashboard.views.remote`` as the JSON API does, so a
subcommand is data in its row's declaration, never code of its own.

Pure data: it never parses, touches Redis, SQL or a request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: The parsed command line (argparse's dest names: ``--resume-minutes`` is "resume_minutes").
Options = Mapping[str, Any]
#: A dry run's JSON payload and the command line: the hint appended to its message.
Hint = Callable[[Mapping[str, Any], Options], str]


@dataclass(frozen=True)
class Arg:
    """One argument, added as ``add_argument(*flags, **kwargs)``, and what it posts.

    ``target`` names what it aims at ("stream", "group", "consumer", or "id": one answer
    per id given) instead of posting a field. ``field`` is the form field that gets its
    value as parsed; ``tick`` posts "1" or "" for a switch; ``fields`` (instead) turns the
    value into several fields. ``on_yes`` posts it only with ``--yes`` (a dry run never
    sees it). Arguments with the same ``exclusive`` ("optional" or "required") form one
    mutually exclusive group, required or not.
    """

    flags: tuple[str, ...]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    target: str = ""
    field: str = ""
    tick: bool = False
    fields: Callable[[Any], Mapping[str, Any]] | None = None
    on_yes: bool = False
    exclusive: str = ""

    @property
    def dest(self) -> str:
        """argparse's name for it: the long flag without dashes, or the positional."""
        if "dest" in self.kwargs:
            return str(self.kwargs["dest"])
        return self.flags[-1].lstrip("-").replace("-", "_")

    def posts(self, value: Any) -> Mapping[str, Any]:
        """The form fields this argument posts for its parsed ``value``."""
        if self.fields is not None:
            return self.fields(value)
        if self.tick:
            return {self.field: "1" if value else ""}
        return {self.field: value} if self.field else {}


@dataclass(frozen=True)
class Cli:
    """A row's subcommand: its word is the action's name. ``typed_name`` ("group" or
    "stream") posts that target's name as ``confirm_name``: the typed name guards a click
    on the wrong page, and here the command line names it. ``hint`` follows a dry run's
    message: what to run to act as it showed."""

    help: str
    args: tuple[Arg, ...]
    typed_name: str = ""
    hint: Hint | None = None


def option(flag: str, help: str = "", *, exclusive: str = "") -> Arg:
    """An option posting its text to the field of its name (``--seen-idle-ms``:
    ``seen_idle_ms``), "" when not given."""
    kwargs = {"default": "", "help": help} if help else {"default": ""}
    name = flag.lstrip("-").replace("-", "_")
    return Arg((flag,), kwargs, field=name, exclusive=exclusive)


def reason(help: str = "Audited (optional).") -> Arg:
    return option("--reason", help)


def yes(help: str) -> Arg:
    """``--yes``: act, rather than the dry run (it posts ``confirm``)."""
    return Arg(("--yes",), {"action": "store_true", "help": help}, field="confirm", tick=True)


STREAM = Arg(("stream",), target="stream")
GROUP = Arg(("group",), target="group")
