"""The row type of the action table, shared by every module that adds rows to it.

Owns ``Action`` (one row of ``dashboard.views.actions.ACTIONS``), ``Call`` (what a row's
``run`` and ``before`` get), ``KINDS``, what a row may act on, and ``target_request``,
how a "group", "consumer" or "stream" row parses its request (the action views and the
group-administration dry runs share it), ``Button``, a row's button, and ``Remote``, what
a row's hooks for a terminal or a script get. It lives apart from the views so that the
modules holding rows (``dashboard.views.entry_actions``, ``dashboard.views.fleet_actions``,
``dashboard.views.admin_actions``) import it without importing the views: no cycle,
and adding an action is one row in one module, whose tuple ``ROWS`` ``actions.py``
merges into ``ACTIONS``.

It never touches Redis or SQL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dashboard.views.action_cli import Cli
from dashboard.views.action_runner import ActionRequest, ActionResult, Operator, action_request
from dashboard.views.answer import Answer
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
#: - "stream": a stream (``streams/<s>/do/<action>/``): Create group, Trim, Produce;
#: - "entry": one entry of a stream, pending or not, in no group in particular
#:   (``streams/<s>/entries/<id>/do/<action>/``): Duplicate.
KINDS = ("pending", "dead-letter", "dead-letters", "group", "consumer", "stream", "entry")
#: The kinds whose form is a ``TargetForm`` (it is told what it acts on).
TARGET_KINDS = ("group", "consumer", "stream")
#: The kinds whose button is derived from the row (``Action.button``); a "dead-letters"
#: row (Purge) writes its own, on the dead-letter page.
BUTTON_KINDS = ("pending", "dead-letter", "group", "consumer", "stream", "entry")
#: What a row's permission may be: one of this app's (``dashboard.access.grants`` creates
#: it after ``migrate``); anything else would be a permission nothing creates.
PERMISSION = re.compile(r"dashboard\.[a-z][a-z0-9_]{0,99}")
BUTTON_STYLES = ("", "primary", "danger")
REASONS = ("", "optional", "required")


@dataclass(frozen=True)
class Button:
    """A row's button, which its kind puts on the page without a template of its own
    (``dashboard.templatetags.ackboard_buttons``): a "pending" row's in each pending-table
    row's Actions menu and on the entry page, a "dead-letter" row's in each dead letter's
    menu, a "group" row's on the group page, a "consumer" row's in each consumer's row,
    a "stream" row's on the stream page, an "entry" row's on the entry page. It posts
    the fields its kind's own buttons post (``place``, ``next``, and for a pending entry
    the owner shown as ``seen_consumer``).

    ``ask``: a confirm dialog first, saying the row's explanation (a consumer's button
    always asks: its row has no form of its own). ``reason``: a Reason field in that
    dialog, "optional" or "required" (it implies ``ask``). ``due``: a due-time field pair
    in that dialog, "Due at (UTC)" or "in" a duration, posted as ``due_at``/``due_in``
    (Retry later's; it implies ``ask``).
    """

    label: str
    #: "" (a plain button), "primary" or "danger".
    style: str = ""
    ask: bool = False
    reason: str = ""
    due: bool = False

    def __post_init__(self) -> None:
        if self.style not in BUTTON_STYLES:
            raise ValueError(f"button {self.label!r}: style is one of {BUTTON_STYLES}")
        if self.reason not in REASONS:
            raise ValueError(f"button {self.label!r}: reason is one of {REASONS}")

    def asks(self, on: str) -> bool:
        """Whether it opens a dialog before it posts, on a row of kind ``on``."""
        return self.ask or bool(self.reason) or self.due or on == "consumer"


@dataclass(frozen=True)
class Remote:
    """What a row's hooks for ``manage.py ackboard`` and the JSON API get
    (``Action.remote_dry_run``, ``Action.remote_fields``): who asks, the target, the
    fields the request posts (as its button would) and the channel ("cli" or "api")."""

    user: Operator
    stream: str
    group: str
    fields: Mapping[str, Any]
    channel: str


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
    about it is derived from (its route, permission check and row, audit row,
    explanation, button, CLI subcommand and API action, with their dry runs)."""

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
    #: The ``dashboard.<codename>`` it needs (``dashboard.access.permissions`` maps every
    #: action to it). Several actions may share one. A new codename needs no migration:
    #: ``dashboard.access.grants`` creates it after ``migrate``, named from the rows that
    #: need it, and grants it to the operators' role.
    permission: str = field(kw_only=True)
    #: What it does, in one line, next to its button, in its dialog or its confirm
    #: question (``{% action_explain %}``). Placeholders: {group}, {retry_idle}.
    explain: str = field(kw_only=True)
    #: Its subcommand of ``manage.py ackboard`` (None: none). Every row is an API action
    #: (``/api/v1/actions/<name>``), whose body names the target its kind needs.
    cli: Cli | None = field(default=None, kw_only=True)
    #: Its button, derived onto its kind's place (``Button``). None: its page's template
    #: writes it (the actions whose dialogs or dry runs have fields of their own).
    button: Button | None = field(default=None, kw_only=True)
    #: For a terminal or a script (``dashboard.views.remote``), a request without
    #: ``confirm`` is this dry run's answer instead, for a user who may act: what a
    #: confirmation must name, as its page shows it before its button posts. Changes
    #: nothing; a denied attempt is audited by the runner, as every refusal is.
    remote_dry_run: Callable[[Remote], Answer] | None = field(default=None, kw_only=True)
    #: For a terminal or a script, fields its request names already, added before the
    #: call (Purge's typed stream name: the request names the stream).
    remote_fields: Callable[[Remote], Mapping[str, str]] | None = field(default=None, kw_only=True)
    #: For a terminal or a script on a "pending" row, the guard fields a page shows and a
    #: terminal has not seen, from the entry the action's own state read found (Claim's
    #: compare-and-set: owner, idle time, deliveries); given the posted fields and that
    #: entry, it returns the fields to fill where the request left them blank.
    remote_guard: Callable[[Mapping[str, Any], PendingEntry | None], Mapping[str, str]] | None = (
        field(default=None, kw_only=True)
    )

    def __post_init__(self) -> None:
        if self.on not in KINDS:
            raise ValueError(f"action {self.name!r}: unknown kind {self.on!r}")
        if not PERMISSION.fullmatch(self.permission):
            raise ValueError(
                f"action {self.name!r}: permission {self.permission!r} is not "
                "'dashboard.<codename>' (a-z, 0-9, _)"
            )
        if self.button is not None and self.on not in BUTTON_KINDS:
            raise ValueError(f"action {self.name!r}: a {self.on!r} row writes its own button")
        if self.remote_guard is not None and self.on != "pending":
            raise ValueError(f"action {self.name!r}: only a pending row has a remote guard")
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
