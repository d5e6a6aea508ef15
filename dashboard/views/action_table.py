"""The row type of the action table, shared by every module that adds rows to it.

Owns ``Action`` (one row of ``dashboard.views.actions.ACTIONS``), ``Call`` (what a row's
``run`` and ``before`` get), ``KINDS``, what a row may act on, and ``target_request``,
how a "group", "consumer" or "stream" row parses its request (the action views and the
group-administration dry runs share it). It lives apart from the views so that the
modules holding rows (``dashboard.views.entry_actions``, ``dashboard.views.fleet_actions``,
``dashboard.views.admin_actions``) import it without importing the views: no cycle,
and adding an action is one row in one module, whose tuple ``ROWS`` ``actions.py``
merges into ``ACTIONS``.

It never touches Redis or SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dashboard.views.action_cli import Cli
from dashboard.views.action_runner import ActionRequest, ActionResult, action_request
from dashboard.views.forms import ActionForm, Target, TargetForm
from dashboard.views.htmx import HtmxHttpRequest
from queue_core.connection import Client
from queue_core.types import PendingEntry

#: What a row acts on, which picks its route, its audit fields and its state-before read
#: (``actions._prepare``):
#: - "pending": one pending entry of a group (``…/groups/<g>/entries/<id>/<action>/``);
#: - "dead-letter": one dead-lettered entry (``…/dlq/<id>/<action>/``);
#: - "dead-letters": the whole dead-letter stream (Purge);
#: - "group": a consumer group (``…/groups/<g>/do/<action>/``): Pause, Resume, Retire
#:   idle consumers, Delete group, Reset position;
#: - "consumer": one consumer of a group (``…/groups/<g>/consumers/<c>/<action>/``): Retire;
#: - "stream": a stream (``streams/<s>/do/<action>/``): Create group, Trim.
KINDS = ("pending", "dead-letter", "dead-letters", "group", "consumer", "stream")
#: The kinds whose form is a ``TargetForm`` (it is told what it acts on).
TARGET_KINDS = ("group", "consumer", "stream")


@dataclass(frozen=True)
class Call:
    """What a row's ``run`` (and ``before``) gets: the request, its form's cleaned values,
    the operator, Redis, the target: the entry or dead letter id, or the consumer's
    name for a "consumer" row ("" for the others), and for a "pending" row the entry as
    the state read found it (``seen``, read once per action; None for other kinds)."""

    req: ActionRequest
    data: Mapping[str, Any]
    operator: str
    client: Client
    target: str = ""
    seen: PendingEntry | None = None

    @property
    def entry_id(self) -> str:
        return self.req.ids[0]

    @property
    def consumer(self) -> str:
        return self.target


@dataclass(frozen=True)
class Action:
    """One operator action: a row of ``ACTIONS``, the one declaration everything else
    about it is derived from (its route, permission check, audit row, explanation, CLI
    subcommand and API action)."""

    #: The URL slug, the audit row's action, the CLI subcommand and the API's action.
    name: str
    #: What it acts on: one of ``KINDS``.
    on: str
    #: Parses its POST. For a "group", "consumer" or "stream" row, a ``TargetForm``.
    form: type[ActionForm]
    #: One service call, and what it answers (its message, new ids, state it reported).
    run: Callable[[Call], ActionResult]
    #: Extra state before, for the audit row, read after the kind's own checks (the stream
    #: and group exist, the consumer is in the group) and merged into theirs. ``data`` holds
    #: the form's fields that cleaned (a refusal comes later, from ``form_data``) and
    #: ``operator`` is "". It may raise ``BadRequest`` (400/404) or ``ActionRefused``
    #: (409): the attempt is then refused and audited, nothing called.
    before: Callable[[Call], dict[str, Any]] | None = None
    #: The ``app_label.codename`` it needs (``dashboard.access.permissions`` maps every
    #: action to it). A new codename is also declared on ``AuditEvent.Meta.permissions``
    #: with its migration; several actions may share one.
    permission: str = field(kw_only=True)
    #: What it does, in one line, next to its button, in its dialog or its confirm
    #: question (``{% action_explain %}``). Placeholders: {group}, {retry_idle}.
    explain: str = field(kw_only=True)
    #: Its subcommand of ``manage.py ackboard`` (None: none). Every row is an API action
    #: (``/api/v1/actions/<name>``), whose body names the target its kind needs.
    cli: Cli | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.on not in KINDS:
            raise ValueError(f"action {self.name!r}: unknown kind {self.on!r}")
        if self.on in TARGET_KINDS and not issubclass(self.form, TargetForm):
            raise TypeError(f"action {self.name!r}: a {self.on!r} row's form is a TargetForm")

    def make_form(self, data: Mapping[str, Any], target: Target) -> ActionForm:
        """The row's form over ``data``; a ``TargetForm`` is told its target."""
        if issubclass(self.form, TargetForm):
            return self.form(data, target=target)
        return self.form(data)


def target_request(
    request: HtmxHttpRequest | None,
    row: Action,
    data: Mapping[str, Any],
    *,
    stream: str,
    group: str,
    consumer: str,
    channel: str,
) -> tuple[ActionForm, ActionRequest, Target]:
    """A "group", "consumer" or "stream" row's form over ``data``, its audit fields and
    its target. The audit row names the stream and (but for a stream's action) the group;
    a consumer's name is in its state before. Its answer reloads the page: ``place`` is
    the kind, never a table row."""
    target = Target(
        stream=stream,
        group=group if row.on != "stream" else "",
        consumer=consumer if row.on == "consumer" else "",
    )
    form = row.make_form(data, target)
    req = action_request(
        request,
        form,
        action=row.name,
        stream=stream,
        group=target.group,
        ids=[],
        default_place=row.on,
        channel=channel,
    )
    req.place = row.on
    return form, req, target
