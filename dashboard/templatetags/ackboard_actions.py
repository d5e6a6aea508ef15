"""Template helpers for the operator-action includes, which the page views do not feed.

``{% entry_audit_events stream entry_id as events %}`` runs one indexed SQL query (see
``dashboard.audit.audit_for_entry``); ``{% operator_consumer %}`` is Claim's default
target; ``{% confirmdialog %}`` is the one confirm dialog. Nothing here touches Redis or
writes anything.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings
from django.template.base import Parser, Token, token_kwargs
from django.template.exceptions import TemplateSyntaxError
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from dashboard.audit import audit_for_entry
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


#: The one confirm dialog: the button that opens it, and the <dialog> whose form holds the
#: tag's body before its submit and Cancel buttons. No inline script (the CSP forbids it):
#: ackboard.js opens the dialog after a [data-open-dialog] button and closes it from
#: [data-close-dialog] and after its form's request.
_DIALOG = (
    '<button type="button" class="{opener}" data-open-dialog>{label}</button>\n'
    '<dialog class="confirm" aria-label="{title}">\n'
    '  <form method="post" action="{url}" hx-post="{url}" hx-swap="none">\n'
    "    {body}\n"
    '    <div class="actions"><button type="submit" class="{submit}">{label}</button> '
    '<button type="button" class="btn" data-close-dialog>Cancel</button></div>\n'
    "  </form>\n"
    "</dialog>"
)
_DIALOG_ARGS = ("label", "opener", "submit", "title", "url")


class ConfirmDialogNode(template.Node):
    def __init__(self, nodelist: template.NodeList, kwargs: dict[str, Any]) -> None:
        self.nodelist = nodelist
        self.kwargs = kwargs

    def render(self, context: template.Context) -> str:
        values = {name: expr.resolve(context) for name, expr in self.kwargs.items()}
        body = self.nodelist.render(context)  # already escaped by its own template
        return format_html(_DIALOG, body=mark_safe(body), **values)  # noqa: S308


@register.tag("confirmdialog")
def confirm_dialog(parser: Parser, token: Token) -> ConfirmDialogNode:
    """``{% confirmdialog label=… opener=… submit=… title=… url=… %}…{% endconfirmdialog %}``.

    Every action that asks before it acts (Claim, Dead-letter, Acknowledge, Purge) uses
    it, so the dialog's markup has one home. A block tag, not an include: the pending
    table renders three per row, and an ``{% include %}`` per dialog cost the 50-row
    group page about 25 ms (``benchmarks.dashboard_scale``). The body (hidden fields,
    text, inputs) renders in the caller's context.
    """
    bits = token.split_contents()
    kwargs = token_kwargs(bits[1:], parser)
    if set(kwargs) != set(_DIALOG_ARGS) or len(bits) - 1 != len(_DIALOG_ARGS):
        raise TemplateSyntaxError(f"confirmdialog takes exactly {', '.join(_DIALOG_ARGS)}")
    nodelist = parser.parse(("endconfirmdialog",))
    parser.delete_first_token()
    return ConfirmDialogNode(nodelist, kwargs)
