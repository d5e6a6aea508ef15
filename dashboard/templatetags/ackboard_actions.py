"""Template helpers for the operator-action includes, which the page views do not feed.

``{% entry_audit_events stream entry_id as events %}`` runs one indexed SQL query (see
``dashboard.access.audit.audit_for_entry``); ``{% operator_consumer %}`` is Claim's default
target; ``{% row_urls %}`` the pending table's URL prefixes; ``{% confirmdialog %}`` is
the one confirm dialog; ``{% action_explain %}`` is
what each action does, in one line, from its row of the action table (``Action.explain``),
the one place that says it. Nothing here touches Redis or writes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django import template
from django.conf import settings
from django.template.base import Parser, Token, token_kwargs
from django.template.exceptions import TemplateSyntaxError
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from dashboard.access.audit import audit_for_entry
from dashboard.models import AuditEvent

register = template.Library()


@register.simple_tag
def entry_audit_events(stream: str, entry_id: str, limit: int = 50) -> list[AuditEvent]:
    """The newest ``limit`` audit rows that touched ``entry_id`` of ``stream``."""
    if not stream or not entry_id:
        return []
    return audit_for_entry(stream=stream, entry_id=str(entry_id), limit=limit)


@register.simple_tag
def operator_consumer() -> str:
    """The consumer Claim hands entries to unless the operator names another."""
    return str(settings.ACKBOARD_OPERATOR_CONSUMER)


@dataclass(frozen=True, slots=True)
class RowUrls:
    """URL prefixes of one group's pending rows: ``entry`` + id + "/" is an entry's page,
    ``action`` + id + "/retry/" (…) one of its actions."""

    entry: str
    action: str


_ANY_ID = "0-0"


@register.simple_tag
def row_urls(stream: str, group: str) -> RowUrls:
    """The pending table's URL prefixes: two ``reverse`` calls per table, not several per
    row (each costs about 20 µs, and the 50-row table used to make 250)."""
    entry = reverse("dashboard:entry-detail", args=[stream, _ANY_ID])
    action = reverse("dashboard:entry-action", args=[stream, group, _ANY_ID, "retry"])
    entry_tail, action_tail = f"{_ANY_ID}/", f"{_ANY_ID}/retry/"
    assert entry.endswith(entry_tail) and action.endswith(action_tail), (entry, action)
    return RowUrls(entry=entry[: -len(entry_tail)], action=action[: -len(action_tail)])


def explanations() -> Mapping[str, str]:
    """What each action does, in one line: next to its button, in its dialog or its
    confirm question. Each row of the action table declares its own (``Action.explain``),
    so the pages and the dialogs never disagree; "retry-due" is Retry's for a row already
    due. Placeholders: {group} and, for Retry, {retry_idle} (ACKBOARD_RETRY_IDLE_MS, in
    seconds). Read from the table at each use (fifteen rows: a few µs)."""
    from dashboard.views.actions import ACTIONS  # here: loading the tags never loads views
    from dashboard.views.entry_actions import RETRY_DUE

    return {**{name: row.explain for name, row in ACTIONS.items()}, "retry-due": RETRY_DUE}


def __getattr__(name: str) -> Mapping[str, str]:
    """``EXPLAIN``: ``explanations()``, for ``from … import``."""
    if name == "EXPLAIN":
        return explanations()
    raise AttributeError(name)


def _explanation(action: str) -> str:
    if action == "retry-due":
        from dashboard.views.entry_actions import RETRY_DUE

        return RETRY_DUE
    from dashboard.views.actions import ACTIONS

    return ACTIONS[action].explain


@register.simple_tag
def action_explain(action: str, row: Any = None, group: str = "") -> str:
    """The one line that says what ``action`` does (``EXPLAIN``), for ``row`` of ``group``.

    Retry of a pending ``row`` already idle at least ``ACKBOARD_RETRY_IDLE_MS`` says it
    is already due, which is why such a Retry changes nothing visible. Plain text: the
    template escapes it.
    """
    retry_idle_ms = int(settings.ACKBOARD_RETRY_IDLE_MS)
    key = "retry-due" if action == "retry" and retry_due(row) else action
    group = group or str(getattr(row, "group", "") or "its group")
    return _explanation(key).format(group=group, retry_idle=_seconds(retry_idle_ms))


@register.simple_tag
def retry_due(row: Any) -> bool:
    """Whether a Retry of pending ``row`` would change nothing: it is already due."""
    return bool(getattr(row, "idle_ms", 0) >= int(settings.ACKBOARD_RETRY_IDLE_MS))


@register.simple_tag
def retry_idle_ms() -> int:
    """``ACKBOARD_RETRY_IDLE_MS``: a row idle at least this long is already due."""
    return int(settings.ACKBOARD_RETRY_IDLE_MS)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:g} s"


#: The one confirm dialog: the button that opens it, and the <dialog> whose form holds the
#: tag's body before its submit and Cancel buttons. No inline script (the CSP forbids it):
#: ackboard.js opens the dialog after a [data-open-dialog] button and closes it from
#: [data-close-dialog] and after its form's request. A shared dialog (``id`` given,
#: ``opener=""``) has no button of its own: row_actions.js opens it for the row whose
#: button was pressed, and fills it from that row.
_OPENER = '<button type="button" class="{opener}" data-open-dialog>{label}</button>\n'
_DIALOG = (
    '<dialog class="confirm"{id_attr} aria-label="{title}">\n'
    '  <form method="post" action="{url}" hx-post="{url}" hx-swap="none">\n'
    "    {body}\n"
    '    <div class="actions"><button type="submit" class="{submit}">{label}</button> '
    '<button type="button" class="btn" data-close-dialog>Cancel</button></div>\n'
    "  </form>\n"
    "</dialog>"
)
_DIALOG_ARGS = ("label", "opener", "submit", "title", "url")
_DIALOG_OPTIONAL = ("id",)


class ConfirmDialogNode(template.Node):
    def __init__(self, nodelist: template.NodeList, kwargs: dict[str, Any]) -> None:
        self.nodelist = nodelist
        self.kwargs = kwargs

    def render(self, context: template.Context) -> str:
        values = {name: expr.resolve(context) for name, expr in self.kwargs.items()}
        body = self.nodelist.render(context)  # already escaped by its own template
        dialog_id = values.pop("id", "")
        id_attr = format_html(' id="{}"', dialog_id) if dialog_id else ""
        opener = format_html(_OPENER, **values) if values["opener"] else ""
        return opener + format_html(_DIALOG, body=mark_safe(body), id_attr=id_attr, **values)  # noqa: S308


@register.tag("confirmdialog")
def confirm_dialog(parser: Parser, token: Token) -> ConfirmDialogNode:
    """``{% confirmdialog label=… opener=… submit=… title=… url=… [id=…] %}…``.

    Closed by ``{% endconfirmdialog %}``.

    Every action that asks before it acts (Claim, Dead-letter, Acknowledge, Purge) uses
    it, so the dialog's markup has one home. A block tag, not an include: an
    ``{% include %}`` per dialog cost the entry page's actions about 0.5 ms each. The group
    page renders one shared dialog per action (``id``, ``opener=""``), not one per row.
    The body (hidden fields, text, inputs) renders in the caller's context.
    """
    bits = token.split_contents()
    kwargs = token_kwargs(bits[1:], parser)
    names = set(kwargs)
    if not set(_DIALOG_ARGS) <= names <= set(_DIALOG_ARGS + _DIALOG_OPTIONAL) or len(
        bits
    ) - 1 != len(names):
        raise TemplateSyntaxError(
            f"confirmdialog takes exactly {', '.join(_DIALOG_ARGS)} (and optionally id)"
        )
    nodelist = parser.parse(("endconfirmdialog",))
    parser.delete_first_token()
    return ConfirmDialogNode(nodelist, kwargs)
